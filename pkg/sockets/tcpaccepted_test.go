package sockets_test

import (
	"net/netip"
	"os"
	"testing"

	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// TestTCPAcceptedPort rebuilds connections accepted from a listener still
// open on a port of ip_local_port_range (the restore binds it: the
// listener holds it, connect would not choose it): the same address and
// port, bytes go both ways, and the listener still accepts.
//
// Not compared: once reset, the original gives the port back (sock_diag
// does not list it as bound) while the rebuilt one, bound with the port,
// keeps it (SOCK_BINDPORT_LOCK); nothing but an accept puts a socket in a
// listener's port without that lock.
func TestTCPAcceptedPort(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TCP_REPAIR needs root (CAP_NET_ADMIN)")
	}
	for _, c := range []struct {
		name string
		f    closedFamily
	}{
		{"tcp4", closedFamily{dom: unix.AF_INET, lo: netip.MustParseAddr("127.0.0.1")}},
		{"tcp6", closedFamily{dom: unix.AF_INET6, lo: netip.IPv6Loopback()}},
		{"mapped", closedFamily{dom: unix.AF_INET6, lo: netip.MustParseAddr("::ffff:127.0.0.1"), mapped: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Sockets closed here, each once.
			sock := func() int {
				fd, err := unix.Socket(c.f.dom, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				must(t, err)
				if c.f.dom == unix.AF_INET6 {
					must(t, unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0))
				}
				return fd
			}
			ln := sock()
			defer unix.Close(ln)
			// Port 0: the kernel takes one of ip_local_port_range.
			must(t, unix.Bind(ln, sockets.Sockaddr(netip.AddrPortFrom(c.f.lo, 0))))
			must(t, unix.Listen(ln, 4))
			lsa, err := unix.Getsockname(ln)
			must(t, err)
			accept := func() (cli, srv int) {
				cli = sock()
				must(t, unix.Connect(cli, lsa))
				srv, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
				must(t, err)
				return cli, srv
			}
			cli, srv := accept()
			la, err := unix.Getsockname(srv)
			must(t, err)
			local := sockets.AddrPort(la)

			st, recvQ, sendQ, err := sockets.DumpTCP(srv)
			must(t, err)
			unix.Close(srv) // in repair mode: silent
			nsock, err := sockets.RestoreTCP(st, recvQ, sendQ)
			must(t, err)
			defer nsock.Close()
			nfd := nsock.Int()
			must(t, sockets.Resume(nfd, st, sendQ))
			if na, err := unix.Getsockname(nfd); err != nil || sockets.AddrPort(na) != local {
				t.Fatalf("rebuilt on %v, want %s", sockets.AddrPort(na), local)
			}
			echo(t, nfd, cli)

			unix.Close(cli)
			c3, s3 := accept()
			unix.Close(c3)
			unix.Close(s3)
		})
	}
}

// echo checks that bytes go both ways between a and b.
func echo(t *testing.T, a, b int) {
	t.Helper()
	for _, p := range [][2]int{{a, b}, {b, a}} {
		if _, err := unix.Write(p[0], []byte("ping")); err != nil {
			t.Fatalf("write: %v", err)
		}
		buf := make([]byte, 4)
		n, err := unix.Read(p[1], buf)
		if err != nil || string(buf[:n]) != "ping" {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
	}
}
