package bpftask

import (
	"errors"
	"testing"
	"time"
)

// TestUnixVerify runs the UNIX accept queue reader's own check: what it
// reads of connections waiting in a listener's queue (a client with
// other ids and groups that sent pieces, one with credentials of its
// choosing, and a client that sent and closed) is what was sent and
// what SO_PEERCRED says once they are accepted; paged pieces too.
func TestUnixVerify(t *testing.T) {
	r, err := OpenUnix()
	if errors.Is(err, ErrUnixUnavailable) {
		t.Skipf("reader: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start := time.Now()
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	t.Logf("verified in %v, paged pieces readable: %v", time.Since(start), r.pagedOK)
	if !r.pagedOK {
		t.Error("paged pieces not readable on this kernel")
	}
}
