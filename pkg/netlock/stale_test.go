package netlock

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"testing"
)

// TestHolding: a lock table (dropping, or queueing the peers' packets) is
// found holding the connections it stops: one of its connections (either
// direction), and any connection on the local address and port of one of
// its listeners; not others.
func TestHolding(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("nftables needs root")
	}
	ap := netip.MustParseAddrPort
	locked := []Conn{
		{Local: ap("192.0.2.1:40001"), Remote: ap("192.0.2.2:50001")},
		{Local: ap("192.0.2.1:40002")}, // a listener
		{Local: ap("[2001:db8::1]:40003"), Remote: ap("[2001:db8::2]:50003")},
		{Local: ap("0.0.0.0:40004")}, // a listener on every address
	}
	for _, queued := range []bool{false, true} {
		t.Run(fmt.Sprintf("queued=%v", queued), func(t *testing.T) { testHolding(t, locked, queued) })
	}
}

func testHolding(t *testing.T, locked []Conn, queued bool) {
	ap := netip.MustParseAddrPort
	take := func() (*Lock, error) { return Take("holding-test", locked, -1) }
	if queued {
		take = func() (*Lock, error) { return TakeQueued("holding-test", locked, -1, QueueBase) }
	}
	l, err := take()
	if err != nil {
		t.Fatal(err)
	}
	defer Release(l.Table, -1)
	tests := []struct {
		name string
		conn Conn
		held bool
	}{
		{"locked connection", locked[0], true},
		{"locked connection, seen from its peer", Conn{Local: locked[0].Remote, Remote: locked[0].Local}, true},
		{"IPv6 locked connection", locked[2], true},
		{"the listener again", locked[1], true},
		{"a connection accepted on the listener's port", Conn{Local: ap("192.0.2.1:40002"), Remote: ap("192.0.2.9:1234")}, true},
		{"any address on a port locked for all", Conn{Local: ap("192.0.2.7:40004")}, true},
		{"another port", Conn{Local: ap("192.0.2.1:40009"), Remote: ap("192.0.2.2:50001")}, false},
		{"the listener's port on another address", Conn{Local: ap("192.0.2.5:40002")}, false},
		{"another peer", Conn{Local: ap("192.0.2.1:40001"), Remote: ap("192.0.2.3:50001")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, held, ok, err := Holding([]Conn{tt.conn}, -1)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.held || (ok && (table != l.Table || held != tt.conn)) {
				t.Errorf("Holding(%v) = %q, %v, %v; want held %v by %s", tt.conn, table, held, ok, tt.held, l.Table)
			}
		})
	}
}

// TestInProgress: a lock whose dump root or restoring ckpt-redo still
// exists is at work, not stale.
func TestInProgress(t *testing.T) {
	me := strconv.Itoa(os.Getpid())
	tests := []struct {
		name string
		want bool
	}{
		{TablePrefix + me + "-123", true},
		{TablePrefix + "redo-" + me, true},
		{TablePrefix + "4194304-1", false}, // above PID_MAX_LIMIT: no such process
		{TablePrefix + "holding-test", false},
	}
	for _, tt := range tests {
		if got := inProgress(tt.name); got != tt.want {
			t.Errorf("inProgress(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
