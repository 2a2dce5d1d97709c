package fdkind

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// A connection made through a name records peer credentials at each end
// (SO_PEERCRED, SO_PEERPIDFD, SO_PEERGROUPS): the accepted end those of
// the process that called connect(), the connecting end those of the
// process that called listen() on the listener (which a listener shows
// of itself too). So the restore makes such connections with the sockets
// in ckpt-redo but the listen() and connect() calls injected into those
// processes, with their effective ids and groups of then, once every
// process exists (RestoreEnv.BeforeBuild); each holder takes its end
// from ckpt-redo (installFrom). A process that had exited at the dump is
// held by a short-lived child of the socket's holder that makes the call
// (Target.HoldPIDIn); the dump refuses such a socket whose credentials
// name a process that exists outside the dump (or a zombie of it).

// namedCredCheck keeps in s the SO_PEERCRED of a UNIX listener or of a
// stream or seqpacket socket connected through a name (ckpt's copy our),
// or refuses one that names a process outside the dump.
func namedCredCheck(env DumpEnv, our int, s *image.Socket) error {
	if s.PeerCred != nil || s.External {
		return nil
	}
	if s.Type == unix.SOCK_DGRAM && !s.PeerClosed {
		return nil // connect() records nothing; a pair's are PeerCred
	}
	if s.State != sockets.StateListen && s.AcceptOf == 0 && s.Peer == 0 && !s.PeerClosed {
		return nil
	}
	c, err := readPeerCred(our)
	if err != nil {
		return fmt.Errorf("UNIX socket %d: %w", s.Ino, err)
	}
	if c.PID == 0 {
		return nil
	}
	if _, err := os.Stat(proc.Path(c.PID)); err == nil && !env.Sockets().Member(c.PID) {
		// A process that has exited is held by a helper at restore;
		// one that exists outside the dump (or a zombie) cannot be.
		what := "its connection was made through the name " + s.Local + " by"
		if s.State == sockets.StateListen {
			what = "listener " + s.Local + " made listening by"
		}
		return fmt.Errorf("UNIX socket %d: %s process %d (SO_PEERCRED), which is outside the dump or a zombie: "+
			"its peer credentials could not be made again: %w", s.Ino, what, c.PID, ErrUnsupported)
	}
	s.Creds = c
	return nil
}

// connectorOf keeps, on a client waiting in a listener's accept queue or
// a stream connected to a socket outside the dump (--external), held by
// the process pid, that process and its effective ids and groups as the
// one that connected: the kernel keeps the connector only in the socket
// at the other end, which the dump does not reach.
func connectorOf(env DumpEnv, pid sys.PID, s *image.Socket) error {
	if s.AcceptOf == 0 && !(s.External && s.Type != unix.SOCK_DGRAM) || !env.Sockets().Member(pid) || s.Connector != nil {
		return nil
	}
	st, err := proc.ReadStatus(pid)
	if err != nil {
		return fmt.Errorf("UNIX socket %d: %w", s.Ino, err)
	}
	// st.TGID: pid may be a live thread's TID, where the process's
	// leader has exited (the dump reads its /proc files there).
	c := &image.PeerCred{PID: st.TGID, UID: uint32(st.UID[1]), GID: uint32(st.GID[1])}
	for _, g := range st.Groups {
		c.Groups = append(c.Groups, uint32(g))
	}
	s.Connector = c
	return nil
}

// readPeerCred reads SO_PEERCRED and SO_PEERGROUPS of a socket.
func readPeerCred(our int) (*image.PeerCred, error) {
	uc, err := unix.GetsockoptUcred(our, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	c := &image.PeerCred{PID: sys.PID(uc.Pid), UID: uc.Uid, GID: uc.Gid}
	if c.PID == 0 {
		return c, nil
	}
	if c.Groups, err = peerGroups(our); err != nil {
		return nil, err
	}
	return c, nil
}

// connecting is how the connections of the sockets with credentials are
// made again: in the processes of the tree, or, for a process that had
// exited at the dump, in a short-lived child of the process near that
// holds its PID meanwhile.
func connecting(target func(sys.PID) (Target, bool), near sys.PID, listenCred, connectCred *image.PeerCred, backlog int) sockets.Connecting {
	in := func(cred *image.PeerCred, fn func(Target) error) error {
		if t, ok := target(cred.PID); ok {
			return fn(t)
		}
		t, ok := target(near)
		if !ok {
			return fmt.Errorf("no process to hold PID %d: %w", cred.PID, image.ErrCorrupt)
		}
		return t.HoldPIDIn(cred.PID, fn)
	}
	var how sockets.Connecting
	if listenCred != nil {
		how.Listen = func(lfd int) error {
			return in(listenCred, func(t Target) error { return listenIn(t, listenCred, lfd, backlog) })
		}
	}
	if connectCred != nil {
		how.Connect = func(fd int, name string) error {
			return in(connectCred, func(t Target) error { return connectIn(t, connectCred, fd, name) })
		}
	}
	return how
}

// asCred runs fn in the process t (still root) with the effective ids
// and groups of cred; its own are put back. Its fsuid stays root: the
// calls must not fail on the permissions of the files ckpt-redo made.
func asCred(t Target, cred *image.PeerCred, fn func() error) error {
	const keep = ^uint64(0) // -1: unchanged
	restoreGroups, err := setGroupsIn(t, cred.Groups)
	if err != nil {
		return err
	}
	defer restoreGroups()
	if cred.UID == 0 && cred.GID == 0 {
		return fn()
	}
	if _, err := t.Call("setresgid", unix.SYS_SETRESGID, keep, uint64(cred.GID), keep); err != nil {
		return err
	}
	_, err = t.Call("setresuid", unix.SYS_SETRESUID, keep, uint64(cred.UID), keep)
	if err == nil {
		t.Call("setfsuid", unix.SYS_SETFSUID, 0)
		t.Call("setfsgid", unix.SYS_SETFSGID, 0)
		err = fn()
	}
	// Back to root: uid first (the saved uid is 0), then gid.
	if _, err2 := t.Call("setresuid", unix.SYS_SETRESUID, keep, 0, keep); err == nil {
		err = err2
	}
	if _, err2 := t.Call("setresgid", unix.SYS_SETRESGID, keep, 0, keep); err == nil {
		err = err2
	}
	return err
}

// takeIn has the process t take ckpt-redo's fd (pidfd_getfd); it returns
// the fd's number there, which the caller closes.
func takeIn(t Target, fd int) (uint64, error) {
	pidfd, err := t.Call("pidfd_open ckpt-redo", unix.SYS_PIDFD_OPEN, uint64(os.Getpid()), 0)
	if err != nil {
		return 0, err
	}
	got, err := t.Call("pidfd_getfd", unix.SYS_PIDFD_GETFD, pidfd, uint64(fd), 0)
	t.Call("close", unix.SYS_CLOSE, pidfd)
	return got, err
}

// listenIn has the process t call listen() on ckpt-redo's listener lfd
// with the ids of cred: the listener records them, and copies them to
// the clients that connect afterwards.
func listenIn(t Target, cred *image.PeerCred, lfd, backlog int) error {
	got, err := takeIn(t, lfd)
	if err != nil {
		return err
	}
	defer t.Call("close", unix.SYS_CLOSE, got)
	return asCred(t, cred, func() error {
		_, err := t.Call("listen", unix.SYS_LISTEN, got, uint64(max(backlog, 1)))
		return err
	})
}

// connectIn has the process t connect ckpt-redo's socket fd to the UNIX
// name with the ids of cred: the accepted end records them.
func connectIn(t Target, cred *image.PeerCred, fd int, name string) error {
	got, err := takeIn(t, fd)
	if err != nil {
		return err
	}
	defer t.Call("close", unix.SYS_CLOSE, got)
	sa := sockaddrUnix(name)
	return asCred(t, cred, func() error {
		addr, err := t.Scratch(sa)
		if err != nil {
			return err
		}
		_, err = t.Call("connect to "+name, unix.SYS_CONNECT, got, addr, uint64(len(sa)))
		return err
	})
}

// sockaddrUnix is the struct sockaddr_un of a name ("@..." abstract).
func sockaddrUnix(name string) []byte {
	b := make([]byte, 2, 2+len(name)+1)
	binary.LittleEndian.PutUint16(b, unix.AF_UNIX)
	if name != "" && name[0] == '@' {
		b = append(b, 0)
		return append(b, name[1:]...)
	}
	b = append(b, name...)
	return append(b, 0)
}

// openClosedIn rebuilds a socket whose peer was closed with its peer
// credentials: once every process exists, a socket pair made in the
// process they name (or in a short-lived child holding its PID), with its
// ids then; the other end is closed once the queue is refilled.
func openClosedIn(env RestoreEnv, s *image.Socket, at Where, q []sockets.UnixMsg) (Desc, error) {
	v, err := env.Once(unixClosedKey(s.Ino), func() (any, error) { return map[uint32]*os.File{}, nil })
	if err != nil {
		return Desc{}, err
	}
	ends := v.(map[uint32]*os.File)
	env.BeforeBuild(func(target func(sys.PID) (Target, bool)) error {
		build := func(t Target) error {
			a, b, err := socketpairIn(t, s.Type, s.Creds)
			if err != nil {
				return err
			}
			fill, err := sockets.ClosedPeer(a, b, s, q) // b is fill's now
			if err != nil {
				return err
			}
			ends[s.Ino] = a.File("unix")
			env.Keep(ends[s.Ino])
			return fillLater(env, at, fill, queue{s, q})
		}
		var err error
		if t, ok := target(s.Creds.PID); ok {
			err = build(t)
		} else if t, ok := target(at.PID); ok {
			err = t.HoldPIDIn(s.Creds.PID, build)
		} else {
			err = fmt.Errorf("no process to hold PID %d: %w", s.Creds.PID, image.ErrCorrupt)
		}
		if err != nil {
			return fmt.Errorf("UNIX socket %d (its peer closed) made by process %d: %w", s.Ino, s.Creds.PID, err)
		}
		return settleEnds(env, ends)
	})
	return endIn(ends, s.Ino), nil
}

// unixClosedKey names the map holding a socket whose peer was closed,
// made in a BeforeBuild step, by its inode.
type unixClosedKey uint32

// settleEnds gives ends made in a BeforeBuild step what openFile gives
// the others: flags, position, owner.
func settleEnds(env RestoreEnv, ends map[uint32]*os.File) error {
	for ino, of := range ends {
		f := env.Sockets().Peer(ino)
		if f == nil {
			continue
		}
		if err := Settle(f, of); err != nil {
			return err
		}
		if err := SetOwner(f, of); err != nil {
			return err
		}
		if s := f.Socket; s != nil && s.File != nil && s.File.Gone {
			// A gone name is removed again once every socket that
			// connects to it by name is built (as openUnix does).
			fd := int(of.Fd())
			env.Sockets().Finally(func() error { return sockets.ForgetName(fd, s) })
		}
	}
	return nil
}

// endIn is the Desc of an end made in a BeforeBuild step: its holders
// take it from ckpt-redo.
func endIn(ends map[uint32]*os.File, ino uint32) Desc {
	return Desc{InTarget: func(t Target, fd sys.TargetFD, cloexec bool) error {
		end := ends[ino]
		if end == nil {
			return fmt.Errorf("UNIX socket %d was not made", ino)
		}
		return installFrom(t, end, fd, cloexec)
	}}
}
