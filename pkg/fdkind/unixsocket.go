package fdkind

import (
	"errors"
	"fmt"
	"os"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// UNIX sockets share the image kind "socket" with inet sockets (the
// kind inetSocket dispatches to the functions here by family).

// describeUnix saves a UNIX socket connected to another socket of the
// dump (a socketpair, or the two ends of a connection), with the messages
// in its receive queue, or a bound or listening one. Other UNIX sockets
// are refused for now.
func describeUnix(env DumpEnv, our int, ino uint64, f *image.File) error {
	se := env.Sockets()
	all, err := se.UnixSockets()
	if err != nil {
		return err
	}
	u, ok := all[uint32(ino)]
	switch {
	case !ok:
		return fmt.Errorf("UNIX socket %d not found by sock_diag: %w", ino, ErrUnsupported)
	case u.State == sockets.UnixListenState && u.Pending > 0:
		return fmt.Errorf("UNIX socket %s with %d connections not accepted yet: %w", u.Name, u.Pending, sockets.ErrAcceptQueue)
	case u.Peer == 0 && u.State != sockets.StateEstablished:
		// Bound, listening, or neither: rebuilt from its name.
	case u.Peer == 0 || !se.InTree(u.Peer):
		return fmt.Errorf("UNIX socket connected to a process outside the dump (peer socket %d): %w", u.Peer, ErrUnsupported)
	}
	var msgs [][]byte
	if u.State != sockets.UnixListenState {
		msgs, err = sockets.PeekUnixQueue(our, u.Type)
	}
	if err != nil {
		if errors.Is(err, sockets.ErrState) {
			return fmt.Errorf("UNIX socket: %v: %w", err, ErrUnsupported)
		}
		return fmt.Errorf("UNIX socket: %w", err)
	}
	s := &image.Socket{Family: unix.AF_UNIX, Type: u.Type, Ino: uint32(ino), Peer: u.Peer, Local: u.Name}
	if u.State == sockets.UnixListenState {
		s.State, s.Backlog = sockets.StateListen, u.Backlog
	}
	for _, m := range msgs {
		s.RecvMsgs = append(s.RecvMsgs, env.AddData(m))
	}
	f.Socket = s
	return nil
}

// unixPairKey names a rebuilt pair of connected UNIX sockets by their
// inodes, lower first.
type unixPairKey [2]uint32

// openUnix rebuilds a UNIX socket; a connected pair is built once, both
// ends at once with their queued messages.
func openUnix(env RestoreEnv, f *image.File) (Desc, error) {
	s := f.Socket
	msgs := func(ids []int) ([][]byte, error) {
		var out [][]byte
		for _, id := range ids {
			b, err := env.Data(id)
			if err != nil {
				return nil, fmt.Errorf("UNIX socket queue: %w", err)
			}
			out = append(out, b)
		}
		return out, nil
	}
	if s.Peer == 0 {
		q, err := msgs(s.RecvMsgs)
		if err != nil {
			return Desc{}, err
		}
		fd, err := sockets.OpenUnix(s.Type, s.Local, s.State == sockets.StateListen, s.Backlog, q)
		if err != nil {
			return Desc{}, fmt.Errorf("UNIX socket %s: %w", s.Local, err)
		}
		return Desc{File: os.NewFile(uintptr(fd), "unix")}, nil
	}
	key := unixPairKey{min(s.Ino, s.Peer), max(s.Ino, s.Peer)}
	v, err := env.Once(key, func() (any, error) {
		peer := env.Sockets().Peer(s.Peer)
		if peer == nil || peer.Socket == nil || peer.Socket.Peer != s.Ino || peer.Socket.Type != s.Type {
			return nil, fmt.Errorf("UNIX socket %d: its peer %d is not in the image: %w", s.Ino, s.Peer, image.ErrCorrupt)
		}
		mine, err := msgs(s.RecvMsgs)
		if err != nil {
			return nil, err
		}
		theirs, err := msgs(peer.Socket.RecvMsgs)
		if err != nil {
			return nil, err
		}
		a, b, err := sockets.UnixPair(s.Type, mine, theirs)
		if err != nil {
			return nil, fmt.Errorf("UNIX socket pair: %w", err)
		}
		ends := map[uint32]*os.File{s.Ino: os.NewFile(uintptr(a), "unix"), s.Peer: os.NewFile(uintptr(b), "unix")}
		for _, e := range ends {
			env.Keep(e)
		}
		return ends, nil
	})
	if err != nil {
		return Desc{}, err
	}
	d, err := dupFile(v.(map[uint32]*os.File)[s.Ino])
	return Desc{File: d}, err
}
