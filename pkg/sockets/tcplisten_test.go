package sockets_test

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// TestListenerHalfOpen checks that a listener with a connection whose
// handshake TCP_DEFER_ACCEPT holds back (a request socket in SYN_RECV, in
// no accept queue) is refused as one with connections waiting, and
// described again once the connection is accepted.
func TestListenerHalfOpen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("sock_diag needs root")
	}
	for _, c := range []struct{ name, bind, connect string }{
		{"tcp4", "127.0.0.1", "127.0.0.1"},
		{"wildcard", "0.0.0.0", "127.0.0.1"},
		{"tcp6", "::1", "::1"},
		{"dual_stack", "::", "127.0.0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := closedFamily{dom: unix.AF_INET, lo: netip.MustParseAddr(c.bind)}
			if netip.MustParseAddr(c.bind).Is6() {
				f = closedFamily{dom: unix.AF_INET6, lo: netip.MustParseAddr(c.bind), mapped: c.name == "dual_stack"}
			}
			ln := f.socket(t)
			must(t, unix.SetsockoptInt(ln, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, 30))
			must(t, unix.Bind(ln, sockets.Sockaddr(netip.AddrPortFrom(f.lo, 0))))
			must(t, unix.Listen(ln, 4))
			la, err := unix.Getsockname(ln)
			must(t, err)
			if _, err := sockets.Describe(ln); err != nil {
				t.Fatalf("Describe with no connection: %v", err)
			}
			to := netip.AddrPortFrom(netip.MustParseAddr(c.connect), sockets.AddrPort(la).Port())
			cf := closedFamily{dom: unix.AF_INET, lo: to.Addr()}
			if to.Addr().Is6() {
				cf = closedFamily{dom: unix.AF_INET6, lo: to.Addr()}
			}
			cli := cf.socket(t)
			must(t, unix.Connect(cli, sockets.Sockaddr(to)))
			_, err = sockets.Describe(ln)
			if !errors.Is(err, sockets.ErrAcceptQueue) || !strings.Contains(err.Error(), "1 connections half-open") {
				t.Fatalf("Describe with a deferred connection: %v, want ErrAcceptQueue naming 1 half-open", err)
			}
			send(t, cli, []byte("x"))
			var srv int
			waitFor(t, "the connection accepted", func() bool {
				srv, _, err = unix.Accept4(ln, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
				return err == nil
			})
			unix.Close(srv)
			if _, err := sockets.Describe(ln); err != nil {
				t.Fatalf("Describe once accepted: %v", err)
			}
		})
	}
}
