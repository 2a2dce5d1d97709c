package bpftask

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// VerifySockState checks SockState on loopback sockets of the caller's
// network namespace that it makes itself, one in each state it tells
// apart: a non-blocking connect completed but never called again
// (SS_CONNECTING, in state ESTABLISHED), the same connected again (the
// second connect() returns 0: SS_CONNECTED), a blocking connect
// (SS_CONNECTED), a non-blocking connect refused, then shut down
// (SS_DISCONNECTING, in state CLOSE) and a new socket (SS_UNCONNECTED).
// It fails with ErrTCPMismatch if what it reads differs.
func (r *TCPReader) VerifySockState() error {
	fail := func(what string, err error) error {
		return fmt.Errorf("verify socket state reader: %s: %w", what, err)
	}
	newSock := func() (int, error) {
		return unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	}
	lo := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	lfd, err := newSock()
	if err != nil {
		return fail("socket", err)
	}
	defer unix.Close(lfd)
	if err := unix.Bind(lfd, lo); err != nil {
		return fail("bind", err)
	}
	if err := unix.Listen(lfd, 8); err != nil {
		return fail("listen", err)
	}
	listening, err := unix.Getsockname(lfd)
	if err != nil {
		return fail("getsockname", err)
	}
	// A port bound but not listening refuses connections.
	cfd, err := newSock()
	if err != nil {
		return fail("socket", err)
	}
	defer unix.Close(cfd)
	if err := unix.Bind(cfd, lo); err != nil {
		return fail("bind", err)
	}
	refusing, err := unix.Getsockname(cfd)
	if err != nil {
		return fail("getsockname", err)
	}
	nonBlocking := func(fd int, to unix.Sockaddr, want uint8) error {
		if err := unix.SetNonblock(fd, true); err != nil {
			return err
		}
		if err := unix.Connect(fd, to); err != unix.EINPROGRESS {
			return fmt.Errorf("non-blocking connect: %v, want EINPROGRESS", err)
		}
		return waitTCPState(fd, want)
	}
	cases := []struct {
		name string
		make func(fd int) error
		want uint8
	}{
		{"connected by a non-blocking connect", func(fd int) error {
			return nonBlocking(fd, listening, tcpEstablished)
		}, SockConnecting},
		{"connected by a non-blocking connect, then connect() again", func(fd int) error {
			if err := nonBlocking(fd, listening, tcpEstablished); err != nil {
				return err
			}
			return unix.Connect(fd, listening)
		}, SockConnected},
		{"connected by a blocking connect", func(fd int) error { return unix.Connect(fd, listening) }, SockConnected},
		{"refused after a non-blocking connect, then shut down", func(fd int) error {
			if err := nonBlocking(fd, refusing, tcpClose); err != nil {
				return err
			}
			if err := unix.Shutdown(fd, unix.SHUT_RDWR); err != unix.ENOTCONN {
				return fmt.Errorf("shutdown: %v, want ENOTCONN", err)
			}
			return nil
		}, SockDisconnecting},
		{"new", func(int) error { return nil }, SockUnconnected},
	}
	fds := make([]int, len(cases))
	for i, c := range cases {
		fd, err := newSock()
		if err != nil {
			return fail("socket", err)
		}
		defer unix.Close(fd)
		if err := c.make(fd); err != nil {
			return fail("socket "+c.name, err)
		}
		fds[i] = fd
	}
	states, err := r.sockStates()
	if err != nil {
		return fail("read", err)
	}
	for i, c := range cases {
		if got, ok := states[fds[i]]; !ok || got != c.want {
			return fmt.Errorf("socket %s: read socket state %d (found %v), want %d: %w", c.name, got, ok, c.want, ErrTCPMismatch)
		}
	}
	return nil
}

// TCP states (tcp_info) the verification waits for.
const (
	tcpEstablished = 1
	tcpClose       = 7
)

// waitTCPState waits (3 s at most) until the TCP socket fd is in state
// want.
func waitTCPState(fd int, want uint8) error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return fmt.Errorf("TCP_INFO: %w", err)
		}
		if info.State == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("TCP state %d, want %d", info.State, want)
		}
		time.Sleep(time.Millisecond)
	}
}
