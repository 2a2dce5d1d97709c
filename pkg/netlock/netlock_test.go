package netlock

import (
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"
)

// TestLockDropsBothDirections locks a live loopback connection: while locked
// nothing gets through in either direction, and nothing is reset; once
// released, the data held back arrives.
func TestLockDropsBothDirections(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("nftables needs root")
	}
	for _, tt := range []struct{ network, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		t.Run(tt.network, func(t *testing.T) { testLock(t, tt.network, tt.addr) })
	}
}

func testLock(t *testing.T, network, addr string) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn := Conn{Local: netip.MustParseAddrPort(c.LocalAddr().String()), Remote: netip.MustParseAddrPort(c.RemoteAddr().String())}
	l, err := Take("test", []Conn{conn}, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer Release(l.Table, -1)
	if ts, _ := Tables(); !slices.Contains(ts, l.Table) {
		t.Fatalf("lock table %s not installed: %v", l.Table, ts)
	}
	for _, dir := range []struct {
		name     string
		from, to net.Conn
	}{{"client to server", c, s}, {"server to client", s, c}} {
		if _, err := dir.from.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		dir.to.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if n, err := dir.to.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("%s: data got through the lock (%d, %v)", dir.name, n, err)
		}
	}
	if err := Release(l.Table, -1); err != nil {
		t.Fatal(err)
	}
	if ts, _ := Tables(); slices.Contains(ts, l.Table) {
		t.Fatalf("lock table %s still there after release", l.Table)
	}
	for _, to := range []net.Conn{s, c} {
		to.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := to.Read(make([]byte, 1)); err != nil {
			t.Fatalf("after release, the retransmitted byte did not arrive: %v", err)
		}
	}
	if err := Release(l.Table, -1); err != nil {
		t.Fatalf("releasing twice: %v", err)
	}
}
