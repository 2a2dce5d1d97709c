package sockets_test

import (
	"errors"
	"net/netip"
	"os"
	"testing"

	"github.com/ckpt/ckpt/pkg/bpftask"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// TestTCPPortBound checks that a rebuilt connection keeps its port once
// it ends exactly when the original would: the program had bound the
// port (SOCK_BINDPORT_LOCK, read with bpftask.TCPReader), even one of
// ip_local_port_range, which the range guess alone takes as chosen by
// connect. Each case is run on an original connection (the truth) and on
// one dumped and rebuilt, both reset by their peer; then the
// ephemeral-range port is rebuilt without the flag, as a dump without
// the reader saves it, to show what the guess gives.
func TestTCPPortBound(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TCP_REPAIR needs root (CAP_NET_ADMIN)")
	}
	r, err := bpftask.OpenTCP(nil)
	if errors.Is(err, bpftask.ErrTCPUnavailable) {
		t.Skipf("reader: %v", err)
	}
	must(t, err)
	defer r.Close()
	must(t, r.Verify())
	lo := netip.MustParseAddr("127.0.0.1")
	ephemeralPort := func(t *testing.T) netip.AddrPort {
		// A port of ip_local_port_range, free: the kernel's choice.
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		must(t, err)
		defer unix.Close(fd)
		must(t, unix.Bind(fd, sockets.Sockaddr(netip.AddrPortFrom(lo, 0))))
		sa, err := unix.Getsockname(fd)
		must(t, err)
		return sockets.AddrPort(sa)
	}
	cases := []struct {
		name string
		prep func(t *testing.T, fd int)
		kept bool
	}{
		{"ephemeral_port_bound", func(t *testing.T, fd int) {
			must(t, unix.Bind(fd, sockets.Sockaddr(ephemeralPort(t))))
		}, true},
		{"bind_port_0", func(t *testing.T, fd int) {
			must(t, unix.Bind(fd, sockets.Sockaddr(netip.AddrPortFrom(lo, 0))))
		}, false},
		{"connect_chosen", func(*testing.T, int) {}, false},
	}
	connect := func(t *testing.T, prep func(*testing.T, int)) (cli, srv int) {
		t.Helper()
		ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		must(t, err)
		defer unix.Close(ln)
		must(t, unix.Bind(ln, sockets.Sockaddr(netip.AddrPortFrom(lo, 0))))
		must(t, unix.Listen(ln, 1))
		la, err := unix.Getsockname(ln)
		must(t, err)
		cli, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		must(t, err)
		prep(t, cli)
		must(t, unix.Connect(cli, la))
		srv, _, err = unix.Accept4(ln, unix.SOCK_CLOEXEC)
		must(t, err)
		t.Cleanup(func() { unix.Close(cli); unix.Close(srv) })
		return cli, srv
	}
	// portFree resets fd's connection from srv and says whether fd gave
	// its port back.
	portFree := func(t *testing.T, fd, srv int) bool {
		t.Helper()
		reset(t, fd, srv)
		unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		s, err := sockets.Describe(fd)
		must(t, err)
		return s.PortFree
	}
	// rebuilt dumps cli's connection (with the reader's flag if read),
	// rebuilds it and says whether it gives its port back once reset.
	rebuilt := func(t *testing.T, cli, srv int, read bool) bool {
		t.Helper()
		var bound *bool
		if read {
			locks, err := r.Locks()
			must(t, err)
			c, err := bpftask.Cookie(cli)
			must(t, err)
			l, ok := locks[c]
			if !ok {
				t.Fatalf("socket cookie %d not read", c)
			}
			b := l&bpftask.LockBindPort != 0
			bound = &b
		}
		st, recvQ, sendQ, err := sockets.DumpTCP(cli)
		must(t, err)
		st.PortBound = bound
		unix.Close(cli) // in repair mode: silent
		nsock, err := sockets.RestoreTCP(st, recvQ, sendQ)
		must(t, err)
		t.Cleanup(func() { nsock.Close() })
		must(t, sockets.Resume(nsock.Int(), st, sendQ))
		return portFree(t, nsock.Int(), srv)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cli, srv := connect(t, c.prep)
			if free := portFree(t, cli, srv); free == c.kept {
				t.Fatalf("original: port given back %v, the test expects kept %v", free, c.kept)
			}
			cli, srv = connect(t, c.prep)
			if free := rebuilt(t, cli, srv, true); free == c.kept {
				t.Errorf("rebuilt: port given back %v, the original's kept %v", free, c.kept)
			}
		})
	}
	t.Run("guess_without_reader", func(t *testing.T) {
		cli, srv := connect(t, cases[0].prep)
		if !rebuilt(t, cli, srv, false) {
			t.Errorf("an ephemeral-range port rebuilt without the flag is kept: the guess changed, update the inventory row")
		}
	})
}
