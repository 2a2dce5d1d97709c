package fdkind

import (
	"errors"
	"fmt"
	"os"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// Messages queued in a UNIX socket carry files in flight (SCM_RIGHTS) and
// their sender's credentials (SCM_CREDENTIALS). At the dump each file in
// flight is described like an fd of the tree (DumpEnv.InFlight: the same
// File when the tree has it open, a socket by its inode). At the restore
// the sockets are made first and their queues filled last (fillLater),
// once every process exists (credentials name them) and every socket
// pair is made (files in flight may be any of them, the receiving socket
// itself too): each message is sent again with ckpt-redo's copies of its
// files and with its sender's credentials.

// saveQueue puts the messages of a UNIX socket into s: bytes, senders,
// credentials and files in flight. It closes ckpt's copies of the files.
func saveQueue(env DumpEnv, s *image.Socket, msgs []sockets.UnixMsg) error {
	defer sockets.CloseRights(msgs)
	named, rights, creds := false, false, false
	for _, m := range msgs {
		named = named || m.From != ""
		rights = rights || len(m.Rights) > 0
		creds = creds || m.Cred != nil
	}
	for _, m := range msgs {
		s.RecvMsgs = append(s.RecvMsgs, env.AddData(m.Data))
		if named {
			s.RecvFrom = append(s.RecvFrom, m.From)
		}
		if creds {
			var c image.PeerCred
			if m.Cred != nil {
				c = image.PeerCred{PID: sys.PID(m.Cred.Pid), UID: m.Cred.Uid, GID: m.Cred.Gid}
			}
			s.RecvCreds = append(s.RecvCreds, c)
		}
		if !rights {
			continue
		}
		var fl []image.InFlight
		for _, fd := range m.Rights {
			r, err := env.InFlight(fd)
			if err != nil {
				return fmt.Errorf("UNIX socket %d: a file in flight in its queue (SCM_RIGHTS): %w", s.Ino, err)
			}
			fl = append(fl, r)
		}
		s.RecvRights = append(s.RecvRights, fl)
	}
	return nil
}

// queueOf is the queue of a UNIX socket to send again: bytes, senders and
// credentials; the files in flight are found by fillLater.
func queueOf(env RestoreEnv, s *image.Socket) ([]sockets.UnixMsg, error) {
	var out []sockets.UnixMsg
	for i, id := range s.RecvMsgs {
		b, err := env.Data(id)
		if err != nil {
			return nil, fmt.Errorf("UNIX socket queue: %w", err)
		}
		m := sockets.UnixMsg{Data: b}
		if i < len(s.RecvFrom) {
			m.From = s.RecvFrom[i]
		}
		if i < len(s.RecvCreds) && s.RecvCreds[i].PID != 0 {
			c := s.RecvCreds[i]
			m.Cred = &unix.Ucred{Pid: int32(c.PID), Uid: c.UID, Gid: c.GID}
		}
		out = append(out, m)
	}
	return out, nil
}

// queue is a socket's image and the messages to send to it again.
type queue struct {
	s    *image.Socket
	msgs []sockets.UnixMsg
}

// fillLater runs fill, which refills the queues qs of sockets just made:
// at once if they are empty, else once every process exists and every
// pair is made (after every BeforeBuild step the opening of the
// descriptions asked for), with their files in flight found then. at is
// the first fd of the socket: its process holds a PID for credentials
// naming a process that no longer exists.
func fillLater(env RestoreEnv, at Where, fill sockets.Fill, qs ...queue) error {
	empty, dgram := true, false
	for _, q := range qs {
		empty = empty && len(q.msgs) == 0
		dgram = dgram || q.s.Type == unix.SOCK_DGRAM
	}
	if empty && !dgram {
		// (A datagram socket is finished with the others: it may
		// have to send what another's queue holds first.)
		return fill(sockets.Refill{})
	}
	v, err := env.Once(unixFillsKey{}, func() (any, error) {
		l := &unixFills{}
		env.BeforeBuild(func(func(sys.PID) (Target, bool)) error {
			// Steps asked for now run after every step asked for
			// while the descriptions were opened (socket pairs made
			// in their processes).
			env.BeforeBuild(func(target func(sys.PID) (Target, bool)) error { return l.run(env, target) })
			return nil
		})
		return l, nil
	})
	if err != nil {
		return err
	}
	l := v.(*unixFills)
	l.fills = append(l.fills, pendingFill{at: at, fill: fill, qs: qs})
	return nil
}

// unixFillsKey names the restore's list of UNIX queues to fill.
type unixFillsKey struct{}

// unixFills are the UNIX queues to fill once every process exists.
type unixFills struct{ fills []pendingFill }

type pendingFill struct {
	at   Where
	fill sockets.Fill
	qs   []queue
}

func (l *unixFills) run(env RestoreEnv, target func(sys.PID) (Target, bool)) error {
	// The datagram sockets' late options and shutdown come once every
	// queue is filled (sockets.Refill).
	var later []func() error
	// Opening a file in flight may add fills: they run too.
	for k := 0; k < len(l.fills); k++ {
		p := l.fills[k]
		for _, q := range p.qs {
			for i := range q.msgs {
				if i >= len(q.s.RecvRights) {
					break
				}
				q.msgs[i].Rights = nil
				for _, r := range q.s.RecvRights[i] {
					f, err := inFlightFile(env, r)
					if err != nil {
						return fmt.Errorf("%v: UNIX socket %d: a file in flight in its queue: %w", p.at, q.s.Ino, err)
					}
					q.msgs[i].Rights = append(q.msgs[i].Rights, int(f.Fd()))
				}
			}
		}
		hold := func(pid int, fn func() error) error {
			t, ok := target(p.at.PID)
			if !ok {
				return fmt.Errorf("no process to hold PID %d", pid)
			}
			return t.HoldPID(sys.PID(pid), fn)
		}
		r := sockets.Refill{Hold: hold, Later: func(step func() error) {
			later = append(later, func() error {
				if err := step(); err != nil {
					return fmt.Errorf("%v: UNIX socket: %w", p.at, err)
				}
				return nil
			})
		}}
		if err := p.fill(r); err != nil {
			return fmt.Errorf("%v: UNIX socket queue: %w", p.at, err)
		}
	}
	for _, step := range later {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// inFlightFile is ckpt-redo's copy of a file in flight: a socket of a
// pair made in its process (taken then), or any description of the image,
// opened if no fd has it.
func inFlightFile(env RestoreEnv, r image.InFlight) (*os.File, error) {
	if r.Sock == 0 {
		return env.File(r.File)
	}
	f := env.Sockets().Peer(r.Sock)
	if f == nil || f.Socket == nil {
		return nil, fmt.Errorf("socket %d is not in the image: %w", r.Sock, image.ErrCorrupt)
	}
	// Sockets made in a BeforeBuild step (in the processes, for their
	// peer credentials) are ckpt-redo's in the map of their group.
	s := f.Socket
	var keys []any
	if s.Peer != 0 {
		keys = append(keys, credPairKey{min(s.Ino, s.Peer), max(s.Ino, s.Peer)}, unixPairKey{min(s.Ino, s.Peer), max(s.Ino, s.Peer)})
	}
	lino := listenerOf(env, s)
	if lino != 0 {
		keys = append(keys, unixListenerKey(lino))
	}
	if s.PeerClosed {
		keys = append(keys, unixClosedKey(s.Ino))
	}
	for _, k := range keys {
		v, err := env.Once(k, func() (any, error) { return nil, errNotMade })
		if err != nil {
			continue
		}
		if ends, ok := v.(map[uint32]*os.File); ok && ends[s.Ino] != nil {
			return ends[s.Ino], nil
		}
	}
	return env.File(f.ID)
}

// errNotMade: a group of sockets not made (yet).
var errNotMade = errors.New("not made")

// namedSender is ckpt-redo's copy of the rebuilt socket of type typ
// bound to name that is not an unconnected one (namedDgram finds those):
// one end of a pair, a client connected one way. A datagram it sent to an
// unconnected socket goes again from it, since it holds the name (a
// temporary socket could not bind it). It is called while the queues are
// filled, once every socket is made.
func namedSender(env RestoreEnv, name string, typ int) (int, bool) {
	for _, o := range env.Sockets().Named(name) {
		if s := o.Socket; s.Type == typ && s.State != sockets.StateListen && s.AcceptOf == 0 && s.AcceptedFrom == 0 {
			if f, err := inFlightFile(env, image.InFlight{Sock: s.Ino}); err == nil {
				return int(f.Fd()), true
			}
		}
	}
	return -1, false
}

// unixSender finds, for a datagram of type typ queued on an unconnected
// socket, the rebuilt socket of the dump that holds its sender's name
// (ckpt-redo's fd), which sends it again: a temporary socket could not
// bind that name.
func unixSender(env RestoreEnv, typ int) func(name string) (int, bool) {
	return func(name string) (int, bool) {
		o := namedDgram(env, name, typ)
		if o == nil {
			return namedSender(env, name, typ)
		}
		of, err := boundUnix(env, o)
		if err != nil {
			return -1, false
		}
		return int(of.Fd()), true
	}
}
