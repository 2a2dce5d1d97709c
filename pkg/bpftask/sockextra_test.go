package bpftask

import (
	"errors"
	"testing"
	"time"
)

// TestSockVerify runs the socket state reader's own check (memberships
// with source filters, IPv4 and IPv6; a reuseport group's program; a
// saved SYN) and reports what loading and reading cost.
func TestSockVerify(t *testing.T) {
	start := time.Now()
	r, err := OpenSock()
	if errors.Is(err, ErrSockUnavailable) {
		t.Skipf("reader: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	loaded := time.Since(start)
	start = time.Now()
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded in %v, verified in %v", loaded, time.Since(start))
}
