package sockets

import (
	"fmt"
	"slices"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// ErrExternalPeer means a UNIX socket is connected to a socket of a
// process outside the dump (or waits in the accept queue of such a
// listener). DescribeExternal saves it when the user allows it (ckpt
// dump --external).
var ErrExternalPeer = fmt.Errorf("%w: connected to a process outside the dump", ErrState)

// DescribeExternal saves a UNIX socket connected to a socket outside the
// dump, as CRIU's --ext-unix-sk: its type, name, options and shutdown
// state, and the name of its peer (for a connection waiting in an outside
// listener's queue, the listener's), to connect to again at restore
// (OpenExternal). The outside peer sees the old connection end (it reads
// what was sent before, then end of file) and a new one come. Data the
// peer sent that the socket did not read yet cannot be put back into a
// new connection: it is refused by name.
func DescribeExternal(fd int, ino uint32, all map[uint32]UnixInfo) (*image.Socket, error) {
	u, ok := all[ino]
	if !ok {
		return nil, fmt.Errorf("UNIX socket %d not found by sock_diag: %w", ino, ErrState)
	}
	s := &image.Socket{Family: unix.AF_UNIX, Type: u.Type, Ino: ino, Local: u.Name, Shutdown: u.Shutdown,
		State: StateEstablished, External: true}
	if u.Peer != 0 {
		s.ExternalPeer = all[u.Peer].Name
	} else {
		for _, o := range all {
			if slices.Contains(o.Icons, ino) {
				s.ExternalPeer = o.Name
			}
		}
	}
	if u.Type != unix.SOCK_DGRAM && !listening(all, s.ExternalPeer, u.Type) {
		// A stream connects again only to a listener: this is the
		// accepted end, or its peer's listener is gone.
		s.ExternalPeer = ""
	}
	if s.ExternalPeer == "" && u.Peer == 0 {
		return nil, fmt.Errorf("UNIX socket %d connected outside the dump to no socket sock_diag knows: %w", ino, ErrState)
	}
	if n, err := sys.IoctlInt(fd, unix.SIOCINQ); err != nil || n > 0 {
		return nil, fmt.Errorf("UNIX socket %d connected to %q outside the dump with %d bytes it sent unread: they cannot be put back into a new connection: %w", ino, s.ExternalPeer, n, ErrState)
	}
	var err error
	if s.Options, err = readOptions(fd, unix.AF_UNIX, u.Type, 0, false, false, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// OpenExternal rebuilds a UNIX socket that was connected outside the
// dump: a new socket with its options and name, connected again to its
// peer's name (a stream or seqpacket socket to the listener its peer was
// accepted from), with its shutdown state. A peer without a name (an
// accepted connection's client, a socketpair end) cannot be found again:
// ckpt-redo --inherit-fd must give it.
//
// how, if its Connect is set, connects from a process of the tree.
func OpenExternal(s *image.Socket, how Connecting) (*sys.FD, error) {
	if s.ExternalPeer == "" {
		return nil, fmt.Errorf("connected to an unnamed socket outside the dump: %w", ErrState)
	}
	sock, err := sys.Socket(unix.AF_UNIX, s.Type|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer sock.Close()
	fd := sock.Int()
	err = setOptions(fd, s.Options, early, nil)
	if err == nil && s.Local != "" {
		err = bindName(fd, s)
	}
	if err == nil {
		if err = how.connect(fd, s.ExternalPeer); err != nil {
			err = fmt.Errorf("connect to %s outside the dump: %w", s.ExternalPeer, err)
		}
	}
	if err == nil {
		err = finishUnix(fd, s)
	}
	if err != nil {
		return nil, err
	}
	return sock.Move(), nil
}

// listening says whether a listener of type typ is bound to name.
func listening(all map[uint32]UnixInfo, name string, typ int) bool {
	for _, o := range all {
		if name != "" && o.State == UnixListenState && o.Name == name && o.Type == typ {
			return true
		}
	}
	return false
}
