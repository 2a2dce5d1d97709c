package bpftask

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Verify checks the reader on loopback connections of the caller's
// network namespace that it makes itself: one whose port was bound
// explicitly before connect (SOCK_BINDPORT_LOCK), one bound with port 0
// before connect and one bound to its address only
// (IP_BIND_ADDRESS_NO_PORT), which the kernel marks SOCK_BINDADDR_LOCK
// alone (__inet_bind sets the port lock only for a port asked for), and
// one connected without bind (neither). It
// fails with ErrTCPMismatch if what it reads differs.
func (r *TCPReader) Verify() error {
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("verify TCP lock reader: %w", err)
	}
	defer unix.Close(lfd)
	lo := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	if err := unix.Bind(lfd, lo); err != nil {
		return fmt.Errorf("verify TCP lock reader: bind: %w", err)
	}
	if err := unix.Listen(lfd, 8); err != nil {
		return fmt.Errorf("verify TCP lock reader: listen: %w", err)
	}
	sa, err := unix.Getsockname(lfd)
	if err != nil {
		return fmt.Errorf("verify TCP lock reader: %w", err)
	}
	cases := []struct {
		name string
		prep func(fd int) error
		want uint8
	}{
		{"bound to a port", func(fd int) error {
			// A port of the kernel's choosing, then bound by number.
			t, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(t)
			if err := unix.Bind(t, lo); err != nil {
				return err
			}
			ta, err := unix.Getsockname(t)
			if err != nil {
				return err
			}
			unix.Close(t)
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
				return err
			}
			return unix.Bind(fd, ta)
		}, LockBindAddr | LockBindPort},
		{"bound to port 0", func(fd int) error { return unix.Bind(fd, lo) }, LockBindAddr},
		{"not bound", func(int) error { return nil }, 0},
		{"bound to its address only", func(fd int) error {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1); err != nil {
				return err
			}
			return unix.Bind(fd, lo)
		}, LockBindAddr},
	}
	cookies := make([]uint64, len(cases))
	for i, c := range cases {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("verify TCP lock reader: %w", err)
		}
		defer unix.Close(fd)
		if err := c.prep(fd); err != nil {
			return fmt.Errorf("verify TCP lock reader: socket %s: %w", c.name, err)
		}
		if err := unix.Connect(fd, sa); err != nil {
			return fmt.Errorf("verify TCP lock reader: socket %s: connect: %w", c.name, err)
		}
		if cookies[i], err = Cookie(fd); err != nil {
			return fmt.Errorf("verify TCP lock reader: socket %s: %w", c.name, err)
		}
	}
	locks, err := r.Locks()
	if err != nil {
		return fmt.Errorf("verify TCP lock reader: %w", err)
	}
	for i, c := range cases {
		got, ok := locks[cookies[i]]
		// Other bits (SOCK_CONNECT_BIND, the buffer locks) vary by
		// kernel: only the bind locks are compared.
		if !ok || got&(LockBindAddr|LockBindPort) != c.want {
			return fmt.Errorf("socket %s: read sk_userlocks %#x (found %v), want %#x: %w", c.name, got, ok, c.want, ErrTCPMismatch)
		}
	}
	return nil
}

// Cookie is the socket cookie of fd (SO_COOKIE), which gives the socket
// one if it had none.
func Cookie(fd int) (uint64, error) {
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("SO_COOKIE: %w", err)
	}
	return c, nil
}
