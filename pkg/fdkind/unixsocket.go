package fdkind

import (
	"errors"
	"fmt"
	"os"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/sockets"
)

// UNIX sockets share the image kind "socket" with inet sockets (the
// kind inetSocket dispatches to the functions here by family).

// describeUnix saves a UNIX socket (see sockets.DescribeUnix): bound,
// listening, unconnected, one end of a pair of the dump or of a connection
// whose peer was closed, with its queued messages and their senders.
// pid holds it (ckpt itself for a socket in flight).
func describeUnix(env DumpEnv, pid sys.PID, our int, ino uint64, f *image.File) error {
	se := env.Sockets()
	all, err := se.UnixSockets()
	if err != nil {
		return err
	}
	s, msgs, err := sockets.DescribeUnix(our, uint32(ino), all, se.InTree, se.Peeked, se.UnixPieces, true)
	if errors.Is(err, sockets.ErrExternalPeer) {
		if !se.ExternalUnix(uint32(ino)) {
			return fmt.Errorf("%w (ckpt dump --external unix:%d saves it, to connect again at restore): %w", err, ino, ErrUnsupported)
		}
		if s, err = sockets.DescribeExternal(our, uint32(ino), all); err != nil {
			return fmt.Errorf("UNIX socket: %w: %w", err, ErrUnsupported)
		}
		if err := connectorOf(env, pid, s); err != nil {
			return err
		}
		f.Socket = s
		return nil
	}
	if errors.Is(err, sockets.ErrState) {
		return fmt.Errorf("UNIX socket: %w: %w", err, ErrUnsupported)
	}
	if err != nil {
		return fmt.Errorf("UNIX socket: %w", err)
	}
	if err := peerCredCheck(env, our, s, all[s.Peer].Name); err != nil {
		sockets.CloseRights(msgs)
		return err
	}
	if err := sockets.DescribeSockFile(pid, s, all[uint32(ino)]); err != nil {
		sockets.CloseRights(msgs)
		if errors.Is(err, sockets.ErrState) {
			return fmt.Errorf("%w: %w", err, ErrUnsupported)
		}
		return fmt.Errorf("UNIX socket %s: %w", s.Local, err)
	}
	if err := namedCredCheck(env, our, s); err != nil {
		sockets.CloseRights(msgs)
		return err
	}
	if err := describeWaiting(env, our, s, all); err != nil {
		sockets.CloseRights(msgs)
		return err
	}
	if err := connectorOf(env, pid, s); err != nil {
		sockets.CloseRights(msgs)
		return err
	}
	if err := saveQueue(env, s, msgs); err != nil {
		return err
	}
	f.Socket = s
	return nil
}

// unixPairKey names a rebuilt pair of connected UNIX sockets by their
// inodes, lower first.
type unixPairKey [2]uint32

// openUnix rebuilds a UNIX socket; a connected pair is built once, both
// ends at once with their queued messages. One connected outside the dump
// (--external) connects again to its peer's name, unless ckpt-redo
// --inherit-fd gave it (then it is not opened here).
func openUnix(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	d, err := openUnixSocket(env, f, at)
	if err != nil || d.File == nil || f.Socket.File == nil || !f.Socket.File.Gone {
		return d, err
	}
	// A gone name is removed again once every socket that connects to it
	// by name is built.
	kept, err := dupFile(d.File)
	if err != nil {
		d.File.Close()
		return Desc{}, err
	}
	env.Keep(kept)
	s := f.Socket
	env.Sockets().Finally(func() error { return sockets.ForgetName(int(kept.Fd()), s) })
	return d, nil
}

// listenerOf returns the inode of the UNIX listener whose group s is
// rebuilt with (a listener, the connections it accepted and those waiting
// in its queue, and the clients of either), 0 if none.
func listenerOf(env RestoreEnv, s *image.Socket) uint32 {
	lino := s.AcceptOf | s.AcceptedFrom
	if lino == 0 && (len(s.AcceptQueue) > 0 || len(s.Accepted) > 0) {
		lino = s.Ino
	}
	if p := env.Sockets().Peer(s.Peer); lino == 0 && s.Peer != 0 && p != nil && p.Socket != nil {
		lino = p.Socket.AcceptedFrom
	}
	return lino
}

func openUnixSocket(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	s := f.Socket
	if s.External {
		return openExternal(env, s, at)
	}
	msgs := func(s *image.Socket) ([]sockets.UnixMsg, error) { return queueOf(env, s) }
	// A listener, the connections it accepted and those waiting in its
	// queue are rebuilt together.
	lino := listenerOf(env, s)
	if lino != 0 {
		if lf := env.Sockets().Peer(lino); lf != nil && lf.Socket != nil && lf.Socket.Creds != nil {
			return openListenerIn(env, s, at, lino, msgs)
		}
		v, err := env.Once(unixListenerKey(lino), func() (any, error) { return openAcceptQueue(env, at, lino, msgs, nil) })
		if err != nil {
			return Desc{}, err
		}
		d, err := dupFile(v.(map[uint32]*os.File)[s.Ino])
		return Desc{File: d}, err
	}
	// A named datagram socket and those connected to it one way are
	// rebuilt together, it first.
	if sino := s.ConnectedTo; sino != 0 || len(s.ConnectedFrom) > 0 {
		if sino == 0 {
			sino = s.Ino
		}
		v, err := env.Once(unixServerKey(sino), func() (any, error) { return openConnectedTo(env, at, sino, msgs) })
		if err != nil {
			return Desc{}, err
		}
		d, err := dupFile(v.(map[uint32]*os.File)[s.Ino])
		return Desc{File: d}, err
	}
	if s.Peer == 0 && !s.PeerClosed {
		// Unconnected: made and bound first, its queue filled after,
		// each message sent from its sender's own rebuilt socket when
		// that is one of the tree's (it holds the name: a temporary
		// socket could not bind it).
		f, err := boundUnix(env, s)
		if err != nil {
			return Desc{}, err
		}
		q, err := msgs(s)
		if err != nil {
			return Desc{}, err
		}
		fill := func(r sockets.Refill) error {
			if err := sockets.FillUnix(int(f.Fd()), s, q, unixSender(env, s.Type), r); err != nil {
				return fmt.Errorf("UNIX socket %s: %w", s.Local, err)
			}
			return nil
		}
		if err := fillLater(env, at, fill, queue{s, q}); err != nil {
			return Desc{}, err
		}
		if s.State == sockets.StateListen && s.Creds != nil {
			// The listener shows the process that called listen().
			env.BeforeBuild(func(target func(sys.PID) (Target, bool)) error {
				if err := connecting(target, at.PID, s.Creds, nil, s.Backlog).Listen(int(f.Fd())); err != nil {
					return fmt.Errorf("UNIX listener %s: %w", s.Local, err)
				}
				return nil
			})
		}
		d, err := dupFile(f)
		return Desc{File: d}, err
	}
	if s.Peer == 0 {
		q, err := msgs(s)
		if err != nil {
			return Desc{}, err
		}
		if s.PeerClosed && s.Creds != nil {
			return openClosedIn(env, s, at, q)
		}
		sock, fill, err := sockets.OpenUnix(s, q)
		if err != nil {
			return Desc{}, fmt.Errorf("UNIX socket %s: %w", s.Local, err)
		}
		f := sock.File("unix")
		if err := fillLater(env, at, fill, queue{s, q}); err != nil {
			f.Close()
			return Desc{}, err
		}
		return Desc{File: f}, nil
	}
	if s.PeerCred != nil {
		return openCredPair(env, f, at, msgs)
	}
	if p := env.Sockets().Peer(s.Peer); s.Creds != nil || p != nil && p.Socket != nil && p.Socket.Creds != nil {
		return openNamedPairIn(env, s, at, msgs)
	}
	key := unixPairKey{min(s.Ino, s.Peer), max(s.Ino, s.Peer)}
	v, err := env.Once(key, func() (any, error) {
		peer := env.Sockets().Peer(s.Peer)
		if peer == nil || peer.Socket == nil || peer.Socket.Peer != s.Ino || peer.Socket.Type != s.Type {
			return nil, fmt.Errorf("UNIX socket %d: its peer %d is not in the image: %w", s.Ino, s.Peer, image.ErrCorrupt)
		}
		mine, err := msgs(s)
		if err != nil {
			return nil, err
		}
		theirs, err := msgs(peer.Socket)
		if err != nil {
			return nil, err
		}
		a, b, fill, err := sockets.UnixPair(s, peer.Socket, mine, theirs, sockets.Connecting{})
		if err != nil {
			return nil, fmt.Errorf("UNIX socket pair: %w", err)
		}
		ends := map[uint32]*os.File{s.Ino: a.File("unix"), s.Peer: b.File("unix")}
		for _, e := range ends {
			env.Keep(e)
		}
		if err := fillLater(env, at, fill, queue{s, mine}, queue{peer.Socket, theirs}); err != nil {
			return nil, fmt.Errorf("UNIX socket pair: %w", err)
		}
		return ends, nil
	})
	if err != nil {
		return Desc{}, err
	}
	d, err := dupFile(v.(map[uint32]*os.File)[s.Ino])
	return Desc{File: d}, err
}

// unixBoundKey names an unconnected UNIX socket made and bound (its queue
// not filled yet), by its inode.
type unixBoundKey uint32

// boundUnix makes the unconnected socket s and binds it, once.
func boundUnix(env RestoreEnv, s *image.Socket) (*os.File, error) {
	v, err := env.Once(unixBoundKey(s.Ino), func() (any, error) {
		sock, err := sockets.OpenUnixBound(s)
		if err != nil {
			return nil, fmt.Errorf("UNIX socket %s: %w", s.Local, err)
		}
		f := sock.File("unix")
		env.Keep(f)
		return f, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*os.File), nil
}

// namedDgram finds the unconnected socket of the image bound to name, of
// type typ, that a queued message came from; nil if none.
func namedDgram(env RestoreEnv, name string, typ int) *image.Socket {
	for _, o := range env.Sockets().Named(name) {
		s := o.Socket
		if s.Type == typ && s.Peer == 0 && !s.PeerClosed && s.State != sockets.StateListen &&
			s.ConnectedTo == 0 && len(s.ConnectedFrom) == 0 && s.AcceptOf == 0 && s.AcceptedFrom == 0 {
			return s
		}
	}
	return nil
}

// unixListenerKey names a rebuilt UNIX listener with connections waiting
// in its accept queue, by its inode.
type unixListenerKey uint32

// openAcceptQueue rebuilds a UNIX listener and, in their order, the
// clients whose connections waited in its accept queue, connected to it
// again; it returns every socket by inode.
//
// target, if not nil, gives the processes in which the listener listens
// and the clients connect, for their peer credentials.
func openAcceptQueue(env RestoreEnv, at Where, lino uint32, msgs func(*image.Socket) ([]sockets.UnixMsg, error), target func(sys.PID) (Target, bool)) (map[uint32]*os.File, error) {
	se := env.Sockets()
	lf := se.Peer(lino)
	if lf == nil || lf.Socket == nil {
		return nil, fmt.Errorf("UNIX listener %d is not in the image: %w", lino, image.ErrCorrupt)
	}
	l := lf.Socket
	lsock, fill, err := sockets.OpenUnix(l, nil)
	if err == nil {
		defer lsock.Close() // if fill fails; handed over to ends otherwise
		err = fill(sockets.Refill{})
	}
	if err != nil {
		return nil, fmt.Errorf("UNIX socket %s: %w", l.Local, err)
	}
	fd := lsock.Int()
	ends := map[uint32]*os.File{lino: lsock.File("unix")}
	env.Keep(ends[lino])
	for _, sino := range l.Accepted {
		sf := se.Peer(sino)
		if sf == nil || sf.Socket == nil || sf.Socket.AcceptedFrom != lino {
			return nil, fmt.Errorf("UNIX socket %d accepted from %s is not in the image: %w", sino, l.Local, image.ErrCorrupt)
		}
		srv := sf.Socket
		var cli *image.Socket
		if !srv.PeerClosed {
			cf := se.Peer(srv.Peer)
			if cf == nil || cf.Socket == nil || cf.Socket.Peer != sino {
				return nil, fmt.Errorf("UNIX socket %d: its peer %d is not in the image: %w", sino, srv.Peer, image.ErrCorrupt)
			}
			cli = cf.Socket
		}
		qs, err := msgs(srv)
		if err != nil {
			return nil, err
		}
		var qc []sockets.UnixMsg
		if cli != nil {
			if qc, err = msgs(cli); err != nil {
				return nil, err
			}
		}
		var how sockets.Connecting
		if target != nil && cli != nil {
			how = connecting(target, at.PID, cli.Creds, srv.Creds, l.Backlog)
		} else if target != nil {
			how = connecting(target, at.PID, nil, srv.Creds, l.Backlog)
		}
		ssock, csock, fill, err := sockets.AcceptedPair(fd, sockets.ReachName(l), srv, cli, qs, qc, how)
		if err != nil {
			return nil, fmt.Errorf("UNIX connection accepted from %s: %w", l.Local, err)
		}
		ends[sino] = ssock.File("unix")
		env.Keep(ends[sino])
		if cli != nil {
			ends[srv.Peer] = csock.File("unix")
			env.Keep(ends[srv.Peer])
		}
		qq := []queue{{srv, qs}}
		if cli != nil {
			qq = append(qq, queue{cli, qc})
		}
		if err := fillLater(env, at, fill, qq...); err != nil {
			return nil, fmt.Errorf("UNIX connection accepted from %s: %w", l.Local, err)
		}
	}
	orphans := l.Orphans
	for _, c := range l.AcceptQueue {
		if c == 0 {
			// Its client was closed (unixwaiting.go).
			if len(orphans) == 0 {
				return nil, fmt.Errorf("UNIX listener %s: a connection whose client was closed is not in the image: %w", l.Local, image.ErrCorrupt)
			}
			if err := openOrphan(env, at, l, fd, &orphans[0], target); err != nil {
				return nil, err
			}
			orphans = orphans[1:]
			continue
		}
		cf := se.Peer(c)
		if cf == nil || cf.Socket == nil || cf.Socket.AcceptOf != lino {
			return nil, fmt.Errorf("UNIX socket %d waiting in the accept queue of %s is not in the image: %w", c, l.Local, image.ErrCorrupt)
		}
		var how sockets.Connecting
		if target != nil {
			how = connecting(target, at.PID, cf.Socket.Creds, cf.Socket.Connector, l.Backlog)
		}
		csock, err := connectWaiting(env, at, cf.Socket, fd, sockets.ReachName(l), how)
		if err != nil {
			return nil, fmt.Errorf("UNIX socket waiting in the accept queue of %s: %w", l.Local, err)
		}
		ends[c] = csock.File("unix")
		env.Keep(ends[c])
	}
	if target != nil && l.Creds != nil {
		// The listener shows its own listen() again.
		if err := connecting(target, at.PID, l.Creds, nil, l.Backlog).Listen(fd); err != nil {
			return nil, fmt.Errorf("UNIX listener %s: %w", l.Local, err)
		}
	}
	return ends, nil
}

// openListenerIn rebuilds a UNIX listener, the connections it accepted
// and those waiting in its queue with their peer credentials: once every
// process exists, listening and connecting in the processes their
// SO_PEERCRED names; each holder takes its end from ckpt-redo.
func openListenerIn(env RestoreEnv, s *image.Socket, at Where, lino uint32, msgs func(*image.Socket) ([]sockets.UnixMsg, error)) (Desc, error) {
	v, err := env.Once(unixListenerKey(lino), func() (any, error) {
		ends := map[uint32]*os.File{}
		env.BeforeBuild(func(target func(sys.PID) (Target, bool)) error {
			made, err := openAcceptQueue(env, at, lino, msgs, target)
			if err != nil {
				return err
			}
			for ino, f := range made {
				ends[ino] = f
			}
			return settleEnds(env, made)
		})
		return ends, nil
	})
	if err != nil {
		return Desc{}, err
	}
	return endIn(v.(map[uint32]*os.File), s.Ino), nil
}

// openNamedPairIn rebuilds a connected pair with a name whose listener is
// gone, with its peer credentials: once every process exists, through a
// temporary listener on the accepted end's name that listens in the
// process the other end's SO_PEERCRED names, the other end connecting
// from the process the accepted end's names.
func openNamedPairIn(env RestoreEnv, s *image.Socket, at Where, msgs func(*image.Socket) ([]sockets.UnixMsg, error)) (Desc, error) {
	key := unixPairKey{min(s.Ino, s.Peer), max(s.Ino, s.Peer)}
	v, err := env.Once(key, func() (any, error) {
		pf := env.Sockets().Peer(s.Peer)
		if pf == nil || pf.Socket == nil || pf.Socket.Peer != s.Ino || pf.Socket.Type != s.Type {
			return nil, fmt.Errorf("UNIX socket %d: its peer %d is not in the image: %w", s.Ino, s.Peer, image.ErrCorrupt)
		}
		p := pf.Socket
		mine, err := msgs(s)
		if err != nil {
			return nil, err
		}
		theirs, err := msgs(p)
		if err != nil {
			return nil, err
		}
		ends := map[uint32]*os.File{}
		env.BeforeBuild(func(target func(sys.PID) (Target, bool)) error {
			srv, cli := s, p // the accepted end bears the listener's name
			if s.Local == "" {
				srv, cli = p, s
			}
			a, b, fill, err := sockets.UnixPair(s, p, mine, theirs, connecting(target, at.PID, cli.Creds, srv.Creds, 1))
			if err != nil {
				return fmt.Errorf("UNIX socket pair %d-%d: %w", s.Ino, s.Peer, err)
			}
			ends[s.Ino], ends[s.Peer] = a.File("unix"), b.File("unix")
			env.Keep(ends[s.Ino])
			env.Keep(ends[s.Peer])
			if err := fillLater(env, at, fill, queue{s, mine}, queue{p, theirs}); err != nil {
				return fmt.Errorf("UNIX socket pair: %w", err)
			}
			return settleEnds(env, ends)
		})
		return ends, nil
	})
	if err != nil {
		return Desc{}, err
	}
	return endIn(v.(map[uint32]*os.File), s.Ino), nil
}

// unixServerKey names a rebuilt UNIX datagram socket that others were
// connected to one way, by its inode.
type unixServerKey uint32

// openConnectedTo rebuilds a named UNIX datagram socket and the sockets
// connected to it one way, connected again; it returns each by inode.
func openConnectedTo(env RestoreEnv, at Where, sino uint32, msgs func(*image.Socket) ([]sockets.UnixMsg, error)) (any, error) {
	se := env.Sockets()
	sf := se.Peer(sino)
	if sf == nil || sf.Socket == nil {
		return nil, fmt.Errorf("UNIX socket %d is not in the image: %w", sino, image.ErrCorrupt)
	}
	srv := sf.Socket
	q, err := msgs(srv)
	if err != nil {
		return nil, err
	}
	// Its messages from its clients go again from them (they hold their
	// names).
	ssock, err := sockets.OpenUnixBound(srv)
	if err != nil {
		return nil, fmt.Errorf("UNIX socket %s: %w", srv.Local, err)
	}
	fd := ssock.Int()
	fill := func(r sockets.Refill) error {
		return sockets.FillUnix(fd, srv, q, unixSender(env, srv.Type), r)
	}
	ends := map[uint32]*os.File{sino: ssock.File("unix")}
	env.Keep(ends[sino])
	if err := fillLater(env, at, fill, queue{srv, q}); err != nil {
		return nil, fmt.Errorf("UNIX socket %s: %w", srv.Local, err)
	}
	for _, c := range srv.ConnectedFrom {
		cf := se.Peer(c)
		if cf == nil || cf.Socket == nil || cf.Socket.ConnectedTo != sino {
			return nil, fmt.Errorf("UNIX socket %d connected to %s is not in the image: %w", c, srv.Local, image.ErrCorrupt)
		}
		cq, err := msgs(cf.Socket)
		if err != nil {
			return nil, err
		}
		csock, fill, err := sockets.ConnectDgram(cf.Socket, srv, fd, cq)
		if err != nil {
			return nil, fmt.Errorf("UNIX socket connected to %s: %w", srv.Local, err)
		}
		ends[c] = csock.File("unix")
		env.Keep(ends[c])
		if err := fillLater(env, at, fill, queue{cf.Socket, cq}); err != nil {
			return nil, fmt.Errorf("UNIX socket connected to %s: %w", srv.Local, err)
		}
	}
	return ends, nil
}

// openExternal rebuilds a UNIX socket that was connected to a socket
// outside the dump by connecting to that socket's name again.
//
// A stream or seqpacket socket connects from the process that held it at
// the dump (with its ids then), so that the peer's accepted end names it,
// once every process exists.
func openExternal(env RestoreEnv, s *image.Socket, at Where) (Desc, error) {
	if s.ExternalPeer == "" {
		return Desc{}, fmt.Errorf("UNIX socket %d was connected to an unnamed socket outside the dump, which cannot be found again; "+
			"pass --inherit-fd %d to give it this ckpt-redo's fd %d (a socket connected to that peer): %w", s.Ino, at.FD, at.FD, ErrExternal)
	}
	if s.Connector != nil {
		ends := map[uint32]*os.File{}
		env.BeforeBuild(func(target func(sys.PID) (Target, bool)) error {
			sock, err := sockets.OpenExternal(s, connecting(target, at.PID, nil, s.Connector, 0))
			if err != nil {
				return fmt.Errorf("UNIX socket %d: %w", s.Ino, err)
			}
			ends[s.Ino] = sock.File("unix")
			env.Keep(ends[s.Ino])
			return settleEnds(env, ends)
		})
		return endIn(ends, s.Ino), nil
	}
	sock, err := sockets.OpenExternal(s, sockets.Connecting{})
	if err != nil {
		return Desc{}, fmt.Errorf("UNIX socket %d: %w", s.Ino, err)
	}
	return Desc{File: sock.File("unix")}, nil
}
