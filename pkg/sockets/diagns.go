package sockets

import (
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// diagSocket opens a NETLINK_SOCK_DIAG socket in the network namespace of
// the socket of (ckpt's own for of < 0). sock_diag answers for the
// namespace its socket was made in, and a dumped process may live in
// another namespace than ckpt: asked in ckpt's, sock_diag would not know
// its sockets (and a look-up that finds nothing would say, wrongly, that
// a listener has no half-open connection or a socket no TCP-MD5 key).
// A socket made in another namespace is made on a thread that enters it
// (sys.InNetns); the socket keeps its namespace.
func diagSocket(of int) (*sys.FD, error) {
	open := func() (*sys.FD, error) {
		return sys.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	}
	if of < 0 {
		return open()
	}
	nsfd, err := unix.IoctlRetInt(of, unix.SIOCGSKNS)
	if err != nil {
		return nil, fmt.Errorf("network namespace of socket (SIOCGSKNS): %w", err)
	}
	ns, err := sys.NewFD(nsfd)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	var theirs, ours unix.Stat_t
	if err := unix.Fstat(ns.Int(), &theirs); err != nil {
		return nil, fmt.Errorf("fstat network namespace: %w", err)
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &ours); err != nil {
		return nil, fmt.Errorf("stat own network namespace: %w", err)
	}
	if theirs.Ino == ours.Ino && theirs.Dev == ours.Dev {
		return open()
	}
	var fd *sys.FD
	err = sys.InNetns(ns.Int(), func() error {
		fd, err = open()
		return err
	})
	return fd, err
}
