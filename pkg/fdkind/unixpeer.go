package fdkind

import (
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// SO_PEERCRED of a pair of connected UNIX sockets is fixed when the pair
// is made: socketpair() gives both ends the process that called it and
// its effective ids. A pair ckpt-redo made would show ckpt-redo. So an
// unnamed pair is made by the process that made it at the dump (by a
// short-lived child holding its PID if it had exited; the dump refuses a
// pair whose maker is alive outside the tree, or a zombie of it), with
// its effective ids of then, once every process exists and before any is built
// (RestoreEnv.BeforeBuild); ckpt-redo takes both ends (pidfd_getfd),
// fills their queues and options, and each process that holds an end
// takes it back from ckpt-redo at its fd (installFrom).

// peerCredCheck reads SO_PEERCRED of an unnamed pair's end (ckpt's copy
// our) at dump and keeps it in s, or refuses a pair made by a process
// outside the dump.
//
// A datagram pair one end of which has a name is a socketpair() bound
// since if it has SO_PEERCRED (zdtm scm06), and is made so again (bound
// once made); else (connect() records nothing) two sockets connected to
// each other through their names, made so again.
func peerCredCheck(env DumpEnv, our int, s *image.Socket, peerName string) error {
	named := s.Local != "" || peerName != ""
	if s.Peer == 0 || named && s.Type != unix.SOCK_DGRAM {
		return nil
	}
	uc, err := unix.GetsockoptUcred(our, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return fmt.Errorf("UNIX socket %d: SO_PEERCRED: %w", s.Ino, err)
	}
	if uc.Pid <= 0 && named {
		return nil
	}
	if uc.Pid <= 0 {
		return fmt.Errorf("UNIX socket %d: a socket pair without SO_PEERCRED: %w", s.Ino, ErrUnsupported)
	}
	if _, err := os.Stat(proc.Path(sys.PID(uc.Pid))); err == nil && !env.Sockets().Member(sys.PID(uc.Pid)) {
		// One that has exited is held by a helper at restore.
		return fmt.Errorf("UNIX socket %d: a socket pair made by process %d, which is outside the dump or a zombie: its SO_PEERCRED (pid, uid, gid) "+
			"could not be made again: %w", s.Ino, uc.Pid, ErrUnsupported)
	}
	s.PeerCred = &image.PeerCred{PID: sys.PID(uc.Pid), UID: uc.Uid, GID: uc.Gid}
	if s.PeerCred.Groups, err = peerGroups(our); err != nil {
		return fmt.Errorf("UNIX socket %d: %w", s.Ino, err)
	}
	return nil
}

// peerGroups reads SO_PEERGROUPS of a socket.
func peerGroups(our int) ([]uint32, error) {
	buf := make([]byte, 4*65536)
	n, err := sys.Getsockopt(our, unix.SOL_SOCKET, unix.SO_PEERGROUPS, unsafe.Pointer(&buf[0]), uintptr(len(buf)))
	if err != nil {
		return nil, fmt.Errorf("SO_PEERGROUPS: %w", err)
	}
	var out []uint32
	for i := 0; i+4 <= int(n); i += 4 {
		out = append(out, binary.LittleEndian.Uint32(buf[i:]))
	}
	return out, nil
}

// credPairKey names an unnamed UNIX pair made in the process that made
// it at the dump.
type credPairKey unixPairKey

// openCredPair rebuilds an end of an unnamed pair with its SO_PEERCRED:
// the pair is made in BeforeBuild, the end taken by its processes at
// their fds.
func openCredPair(env RestoreEnv, f *image.File, at Where, msgs func(*image.Socket) ([]sockets.UnixMsg, error)) (Desc, error) {
	s := f.Socket
	key := credPairKey{min(s.Ino, s.Peer), max(s.Ino, s.Peer)}
	v, err := env.Once(key, func() (any, error) {
		pf := env.Sockets().Peer(s.Peer)
		if pf == nil || pf.Socket == nil || pf.Socket.Peer != s.Ino || pf.Socket.Type != s.Type {
			return nil, fmt.Errorf("UNIX socket %d: its peer %d is not in the image: %w", s.Ino, s.Peer, image.ErrCorrupt)
		}
		qa, err := msgs(s)
		if err != nil {
			return nil, err
		}
		qb, err := msgs(pf.Socket)
		if err != nil {
			return nil, err
		}
		ends := map[uint32]*os.File{}
		env.BeforeBuild(func(target func(sys.PID) (Target, bool)) error {
			cred := s.PeerCred
			var a, b *sys.FD
			pair := func(t Target) (err error) {
				a, b, err = socketpairIn(t, s.Type, cred)
				return err
			}
			var err error
			if t, ok := target(cred.PID); ok {
				err = pair(t)
			} else if t, ok := target(at.PID); ok {
				// Made by a process that had exited: a child of
				// the holder takes its PID for the call.
				err = t.HoldPIDIn(cred.PID, pair)
			} else {
				err = fmt.Errorf("no process to hold PID %d: %w", cred.PID, image.ErrCorrupt)
			}
			if err != nil {
				a.Close() // made before the holder failed, if at all
				b.Close()
				return fmt.Errorf("UNIX socket pair %d-%d in process %d: %w", s.Ino, s.Peer, cred.PID, err)
			}
			raw := [2]int{a.Int(), b.Int()}
			fa, fb := a.File("unix"), b.File("unix")
			env.Keep(fa)
			env.Keep(fb)
			ends[s.Ino], ends[s.Peer] = fa, fb
			if err := sockets.BindPairNames(raw, s, pf.Socket); err != nil {
				return fmt.Errorf("UNIX socket pair %d-%d: %w", s.Ino, s.Peer, err)
			}
			for _, e := range []struct {
				fd int
				s  *image.Socket
			}{{raw[0], s}, {raw[1], pf.Socket}} {
				if e.s.File != nil && e.s.File.Gone {
					env.Sockets().Finally(func() error { return sockets.ForgetName(e.fd, e.s) })
				}
			}
			fill, err := sockets.FinishPair(raw, s, pf.Socket, qa, qb)
			if err != nil {
				return fmt.Errorf("UNIX socket pair: %w", err)
			}
			if err := fillLater(env, at, fill, queue{s, qa}, queue{pf.Socket, qb}); err != nil {
				return fmt.Errorf("UNIX socket pair: %w", err)
			}
			for _, e := range []struct {
				f  *image.File
				of *os.File
			}{{f, fa}, {pf, fb}} {
				if err := Settle(e.f, e.of); err != nil {
					return err
				}
				if err := SetOwner(e.f, e.of); err != nil {
					return err
				}
			}
			return nil
		})
		return ends, nil
	})
	if err != nil {
		return Desc{}, err
	}
	ends := v.(map[uint32]*os.File)
	return Desc{InTarget: func(t Target, fd sys.TargetFD, cloexec bool) error {
		end := ends[s.Ino]
		if end == nil {
			return fmt.Errorf("UNIX socket %d: its pair was not made", s.Ino)
		}
		return installFrom(t, end, fd, cloexec)
	}}, nil
}

// socketpairIn makes a pair of UNIX sockets of type typ in the process t
// with the effective ids of cred, and returns ckpt-redo's copies of both
// ends (the process's own are closed). The process is still root: its
// effective ids are set for the call and put back.
func socketpairIn(t Target, typ int, cred *image.PeerCred) (*sys.FD, *sys.FD, error) {
	const keep = ^uint64(0) // -1: unchanged
	restoreGroups, err := setGroupsIn(t, cred.Groups)
	if err != nil {
		return nil, nil, err
	}
	defer restoreGroups()
	ids := cred.UID != 0 || cred.GID != 0
	if ids {
		if _, err := t.Call("setresgid", unix.SYS_SETRESGID, keep, uint64(cred.GID), keep); err != nil {
			return nil, nil, err
		}
		if _, err := t.Call("setresuid", unix.SYS_SETRESUID, keep, uint64(cred.UID), keep); err != nil {
			return nil, nil, err
		}
	}
	addr, err := t.Scratch(make([]byte, 8))
	if err == nil {
		// SO_PEERGROUPS reads the groups when the pair is made.
		_, err = t.Call("socketpair", unix.SYS_SOCKETPAIR, unix.AF_UNIX, uint64(typ|unix.SOCK_CLOEXEC), 0, addr)
	}
	if ids {
		// Back to root: uid first (the saved uid is 0), then gid.
		if _, err2 := t.Call("setresuid", unix.SYS_SETRESUID, keep, 0, keep); err == nil {
			err = err2
		}
		if _, err2 := t.Call("setresgid", unix.SYS_SETRESGID, keep, 0, keep); err == nil {
			err = err2
		}
	}
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, 8)
	if n, err := unix.ProcessVMReadv(int(t.PID()), []unix.Iovec{{Base: &buf[0], Len: 8}}, []unix.RemoteIovec{{Base: uintptr(addr), Len: 8}}, 0); err != nil || n != 8 {
		return nil, nil, fmt.Errorf("read the pair's fds: %d bytes, %v", n, err)
	}
	theirs := [2]int{int(binary.LittleEndian.Uint32(buf)), int(binary.LittleEndian.Uint32(buf[4:]))}
	defer func() {
		for _, fd := range theirs {
			t.Call("close", unix.SYS_CLOSE, uint64(fd))
		}
	}()
	pidfd, err := sys.PidfdOpen(t.PID(), 0)
	if err != nil {
		return nil, nil, err
	}
	defer pidfd.Close()
	var ours [2]*sys.FD // closed on error, released on success
	defer func() {
		ours[0].Close()
		ours[1].Close()
	}()
	for i, fd := range theirs {
		if ours[i], err = sys.PidfdGetfd(pidfd, sys.TargetFD(fd)); err != nil {
			return nil, nil, err
		}
	}
	return ours[0].Move(), ours[1].Move(), nil
}

// installFrom has the process t take ckpt-redo's file f at fd
// (pidfd_getfd from ckpt-redo, then dup3).
func installFrom(t Target, f *os.File, fd sys.TargetFD, cloexec bool) error {
	pidfd, err := t.Call("pidfd_open ckpt-redo", unix.SYS_PIDFD_OPEN, uint64(os.Getpid()), 0)
	if err != nil {
		return err
	}
	got, err := t.Call("pidfd_getfd", unix.SYS_PIDFD_GETFD, pidfd, uint64(f.Fd()), 0)
	t.Call("close", unix.SYS_CLOSE, pidfd)
	if err != nil {
		return err
	}
	if sys.TargetFD(got) == fd {
		if !cloexec {
			_, err = t.Call("fcntl F_SETFD", unix.SYS_FCNTL, got, unix.F_SETFD, 0)
		}
		return err
	}
	flags := uint64(0)
	if cloexec {
		flags = unix.O_CLOEXEC
	}
	_, err = t.Call(fmt.Sprintf("dup3 fd %d", fd), unix.SYS_DUP3, got, uint64(fd), flags)
	t.Call("close", unix.SYS_CLOSE, got)
	return err
}

// setGroupsIn sets the supplementary groups of the process t (still
// root) to groups for the making of a pair; undo puts its own back.
func setGroupsIn(t Target, groups []uint32) (undo func(), err error) {
	const most = 8192 // what the scratch memory holds
	addr, err := t.Scratch(make([]byte, 4*most))
	if err != nil {
		return nil, err
	}
	n, err := t.Call("getgroups", unix.SYS_GETGROUPS, most, addr)
	if err != nil {
		return nil, err
	}
	own := make([]byte, 4*n)
	if n > 0 {
		if got, err := unix.ProcessVMReadv(int(t.PID()), []unix.Iovec{{Base: &own[0], Len: uint64(len(own))}}, []unix.RemoteIovec{{Base: uintptr(addr), Len: len(own)}}, 0); err != nil || got != len(own) {
			return nil, fmt.Errorf("read the process's groups: %d bytes, %v", got, err)
		}
	}
	set := func(b []byte, count int) error {
		a, err := t.Scratch(append(b, 0, 0, 0, 0))
		if err != nil {
			return err
		}
		_, err = t.Call("setgroups", unix.SYS_SETGROUPS, uint64(count), a)
		return err
	}
	want := make([]byte, 4*len(groups))
	for i, g := range groups {
		binary.LittleEndian.PutUint32(want[4*i:], g)
	}
	if err := set(want, len(groups)); err != nil {
		return nil, err
	}
	return func() { set(own, int(n)) }, nil
}
