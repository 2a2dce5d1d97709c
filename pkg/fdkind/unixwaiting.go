package fdkind

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/bpftask"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// A connection waiting in a UNIX listener's accept queue has a server
// end the kernel made at connect() (no file yet), whose receive queue
// holds what the client sent and which keeps the connecting process's
// credentials; nothing but accept() reaches it. The dump reads it from
// the kernel (bpftask.UnixReader, through SocketDumpEnv.Waiting): who
// connected, and what the client sent (with credentials and files in
// flight) if it did, or was closed since; the restore connects again
// from the rebuilt client (or, for a closed one, from a temporary socket
// in the connecting process, closed afterwards) and sends the pieces
// again with their credentials and files.

// WaitingConns reads the connections waiting in the accept queue of the
// UNIX listener lino (name its name, icons its clients as sock_diag lists
// them, 0 for a closed one) and refuses by name what cannot be restored:
// a reader that cannot run or read them, a closed client that was bound
// to a relative path name, a pending error, a connection made by a
// process that exists outside the dump, a file in flight that no process
// of the dump holds.
func WaitingConns(se SocketDumpEnv, lino uint32, name string, icons []uint32) ([]bpftask.UnixConn, error) {
	conns, err := se.Waiting(lino)
	if err != nil {
		return nil, fmt.Errorf("UNIX listener %s: the connections waiting in its accept queue (a client sent data or was closed) cannot be read: %w", name, err)
	}
	clients := make([]uint32, len(conns))
	for i, c := range conns {
		clients[i] = c.Client
	}
	if !slices.Equal(clients, icons) {
		return nil, fmt.Errorf("UNIX listener %s: its accept queue holds the clients %v, sock_diag says %v: %w", name, clients, icons, bpftask.ErrUnixChanged)
	}
	for i, c := range conns {
		what := fmt.Sprintf("UNIX listener %s: connection %d waiting in its accept queue", name, i+1)
		switch {
		case c.Client == 0 && c.ClientName != "" && c.ClientName[0] != '/' && c.ClientName[0] != '@':
			return nil, fmt.Errorf("%s: its client, bound to the relative name %q, was closed: that name, which the accepted end gives as its peer's, is not bound again", what, c.ClientName)
		case c.Err != 0:
			return nil, fmt.Errorf("%s: error %d pending", what, c.Err)
		case c.Peer.PID == 0:
			return nil, fmt.Errorf("%s: no connecting process known", what)
		}
		if _, err := os.Stat(proc.Path(sys.PID(c.Peer.PID))); err == nil && !se.Member(sys.PID(c.Peer.PID)) {
			return nil, fmt.Errorf("%s: made by process %d (SO_PEERCRED), which is outside the dump or a zombie: its peer credentials could not be made again", what, c.Peer.PID)
		}
		for j, m := range c.Msgs {
			for k, hs := range m.Files {
				if !slices.ContainsFunc(hs, func(h bpftask.FileHolder) bool { return se.Member(sys.PID(h.PID)) }) {
					return nil, fmt.Errorf("%s: piece %d: file %d in flight (SCM_RIGHTS) held by no process of the dump: it cannot be read back from a connection not accepted yet", what, j+1, k+1)
				}
			}
		}
	}
	return conns, nil
}

// describeWaiting saves, on a listener, the connections waiting in its
// queue whose client was closed (Orphans), and on a waiting client of
// the dump the connector the server end's SO_PEERCRED names and, if it
// sent data, what the server end holds (Waiting). Without the reader
// (unavailable, or its check failed), a client that sent nothing is
// still saved, the process holding it taken for the connector.
func describeWaiting(env DumpEnv, our int, s *image.Socket, all map[uint32]sockets.UnixInfo) error {
	se := env.Sockets()
	switch {
	case s.State == sockets.StateListen && slices.Contains(s.AcceptQueue, 0):
		conns, err := WaitingConns(se, s.Ino, s.Local, s.AcceptQueue)
		if err != nil {
			return fmt.Errorf("%w: %w", err, ErrUnsupported)
		}
		for i, c := range conns {
			if c.Client == 0 {
				w, err := saveWaiting(env, c)
				if err != nil {
					return fmt.Errorf("UNIX listener %s: connection %d waiting in its accept queue (its client closed): %w", s.Local, i+1, err)
				}
				s.Orphans = append(s.Orphans, *w)
			}
		}
	case s.AcceptOf != 0:
		out, err := sys.IoctlInt(our, unix.SIOCOUTQ)
		if err != nil {
			return fmt.Errorf("UNIX socket %d: SIOCOUTQ: %w", s.Ino, err)
		}
		l := all[s.AcceptOf]
		conns, err := WaitingConns(se, s.AcceptOf, l.Name, l.Icons)
		if out == 0 && (errors.Is(err, bpftask.ErrUnixUnavailable) || errors.Is(err, bpftask.ErrUnixMismatch)) {
			// Nothing sent, and no reader: the process holding the
			// client is taken for the one that connected (connectorOf).
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", err, ErrUnsupported)
		}
		for _, c := range conns {
			if c.Client == s.Ino {
				w, err := saveWaiting(env, c)
				if err != nil {
					return fmt.Errorf("UNIX socket %d waiting in the accept queue of %s: %w", s.Ino, l.Name, err)
				}
				if out > 0 {
					s.Waiting = w
				}
				s.Connector = w.Connector
				return nil
			}
		}
		return fmt.Errorf("UNIX socket %d not found in the accept queue of %s: %w", s.Ino, l.Name, bpftask.ErrUnixChanged)
	}
	return nil
}

// saveWaiting stores the pieces of a waiting connection, each file in
// flight described through a process of the dump that holds the same
// open file description (ckpt's copy of its fd); one that none holds is
// refused: nothing but accept() reaches it.
func saveWaiting(env DumpEnv, c bpftask.UnixConn) (*image.Waiting, error) {
	w := &image.Waiting{Connector: &image.PeerCred{PID: sys.PID(c.Peer.PID), UID: c.Peer.UID, GID: c.Peer.GID, Groups: c.Peer.Groups},
		Name: c.ClientName}
	rights := false
	for _, m := range c.Msgs {
		rights = rights || len(m.Files) > 0
	}
	for i, m := range c.Msgs {
		w.Msgs = append(w.Msgs, env.AddData(m.Data))
		w.Creds = append(w.Creds, image.PeerCred{PID: sys.PID(m.PID), UID: m.UID, GID: m.GID})
		if !rights {
			continue
		}
		var fl []image.InFlight
		for k, hs := range m.Files {
			r, err := heldInFlight(env, hs)
			if err != nil {
				return nil, fmt.Errorf("piece %d, file %d in flight (SCM_RIGHTS): %w", i+1, k+1, err)
			}
			fl = append(fl, r)
		}
		w.Rights = append(w.Rights, fl)
	}
	return w, nil
}

// heldInFlight describes a file in flight in a waiting connection
// through a process of the dump that holds it (hs: its holders).
func heldInFlight(env DumpEnv, hs []bpftask.FileHolder) (image.InFlight, error) {
	for _, h := range hs {
		if !env.Sockets().Member(sys.PID(h.PID)) {
			continue
		}
		pidfd, err := sys.PidfdOpen(sys.PID(h.PID), 0)
		if err != nil {
			return image.InFlight{}, fmt.Errorf("process %d: %w", h.PID, err)
		}
		fd, err := sys.PidfdGetfd(pidfd, sys.TargetFD(h.FD))
		pidfd.Close()
		if err != nil {
			return image.InFlight{}, fmt.Errorf("process %d fd %d: %w", h.PID, h.FD, err)
		}
		defer fd.Close()
		return env.InFlight(fd.Int())
	}
	return image.InFlight{}, fmt.Errorf("held by no process of the dump (held by %v): it cannot be read back from a connection not accepted yet: %w", hs, ErrUnsupported)
}

// waitingMsgs are the pieces to send again into a waiting connection.
func waitingMsgs(env RestoreEnv, w *image.Waiting) ([]sockets.UnixMsg, error) {
	var out []sockets.UnixMsg
	for i, id := range w.Msgs {
		b, err := env.Data(id)
		if err != nil {
			return nil, fmt.Errorf("UNIX connection waiting in an accept queue: %w", err)
		}
		m := sockets.UnixMsg{Data: b}
		if i < len(w.Creds) && w.Creds[i].PID != 0 {
			c := w.Creds[i]
			m.Cred = &unix.Ucred{Pid: int32(c.PID), Uid: c.UID, Gid: c.GID}
		}
		out = append(out, m)
	}
	return out, nil
}

// connectWaiting rebuilds a client whose connection waited in the accept
// queue of the listener lfd: connected again, and with the data it had
// sent sent again once every process exists.
func connectWaiting(env RestoreEnv, at Where, s *image.Socket, lfd int, listener string, how sockets.Connecting) (*sys.FD, error) {
	if s.Waiting == nil {
		return sockets.ConnectUnix(s, lfd, listener, how)
	}
	q, err := waitingMsgs(env, s.Waiting)
	if err != nil {
		return nil, err
	}
	sock, fill, err := sockets.ConnectUnixSent(s, lfd, listener, how, q)
	if err != nil {
		return nil, err
	}
	if err := fillLater(env, at, fill, waitingQueue(s.Type, s.Ino, s.Waiting, q)); err != nil {
		sock.Close()
		return nil, err
	}
	return sock, nil
}

// openOrphan rebuilds a connection waiting in the accept queue of the
// listener l (lfd) whose client was closed: a temporary socket connects
// from the process its SO_PEERCRED names (target), sends the pieces
// again once every process exists, and is closed.
func openOrphan(env RestoreEnv, at Where, l *image.Socket, lfd int, w *image.Waiting, target func(sys.PID) (Target, bool)) error {
	if target == nil || w.Connector == nil {
		return fmt.Errorf("UNIX listener %s: a connection waiting in its accept queue whose client was closed, without the process that connected: %w", l.Local, image.ErrCorrupt)
	}
	q, err := waitingMsgs(env, w)
	if err != nil {
		return err
	}
	fill, err := sockets.ConnectUnixClosed(l.Type, w.Name, lfd, sockets.ReachName(l), connecting(target, at.PID, nil, w.Connector, l.Backlog), q)
	if err != nil {
		return fmt.Errorf("UNIX listener %s: a connection waiting in its accept queue whose client was closed: %w", l.Local, err)
	}
	return fillLater(env, at, fill, waitingQueue(l.Type, l.Ino, w, q))
}

// waitingQueue is the queue fillLater fills for a waiting connection: its
// files in flight are found once every process exists (RecvRights of a
// stand-in for the server end, which has no image of its own).
func waitingQueue(typ int, ino uint32, w *image.Waiting, q []sockets.UnixMsg) queue {
	return queue{&image.Socket{Family: unix.AF_UNIX, Type: typ, Ino: ino, RecvRights: w.Rights}, q}
}
