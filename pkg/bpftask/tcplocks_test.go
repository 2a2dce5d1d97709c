package bpftask

import (
	"errors"
	"testing"
	"time"
)

// openTCP opens the TCP readers for a test (skipped where the kernel
// cannot run them), closed when it ends.
func openTCP(tb testing.TB) *TCPReader {
	tb.Helper()
	r, err := OpenTCP(nil)
	if errors.Is(err, ErrTCPUnavailable) {
		tb.Skipf("reader: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Close)
	return r
}

// TestTCPVerify runs the TCP lock reader's own check (sockets bound to a
// port, to port 0, to an address only, not bound, then connected) and
// measures one read of the namespace's TCP sockets.
func TestTCPVerify(t *testing.T) {
	open := time.Now()
	r := openTCP(t)
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

// TestSockStateVerify runs the socket state reader's own check (sockets
// connecting, connected, disconnecting, new) and measures one read.
func TestSockStateVerify(t *testing.T) {
	r := openTCP(t)
	verify := time.Now()
	if err := r.VerifySockState(); err != nil {
		t.Fatal(err)
	}
	t.Logf("verify %v", time.Since(verify))
	start := time.Now()
	if _, err := r.SockState(0); err != nil {
		t.Fatal(err)
	}
	t.Logf("one read: %v", time.Since(start))
}

// BenchmarkOpenTCP measures what the dump pays to load the TCP readers
// (both programs, one collection) and check them.
func BenchmarkOpenTCP(b *testing.B) {
	for b.Loop() {
		r, err := OpenTCP(nil)
		if errors.Is(err, ErrTCPUnavailable) {
			b.Skipf("reader: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Verify(); err != nil {
			b.Fatal(err)
		}
		if err := r.VerifySockState(); err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
}

// BenchmarkSockState measures one read of a socket's state.
func BenchmarkSockState(b *testing.B) {
	r := openTCP(b)
	for b.Loop() {
		if _, err := r.SockState(0); err != nil {
			b.Fatal(err)
		}
	}
}
