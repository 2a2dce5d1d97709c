package bpftask

import (
	"errors"
	"testing"
	"time"
)

// TestTCPVerify runs the TCP lock reader's own check (sockets bound to a
// port, to port 0, to an address only, not bound, then connected) and
// measures one read of the namespace's TCP sockets.
func TestTCPVerify(t *testing.T) {
	open := time.Now()
	r, err := OpenTCP()
	if errors.Is(err, ErrTCPUnavailable) {
		t.Skipf("reader: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	loaded := time.Since(open)
	verify := time.Now()
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	t.Logf("load %v, verify %v", loaded, time.Since(verify))
	start := time.Now()
	locks, err := r.Locks()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one read: %d sockets in %v", len(locks), time.Since(start))
}
