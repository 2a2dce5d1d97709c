package testenv

import (
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// PtyLockPath is the lock file of LockPtys.
const PtyLockPath = "/tmp/ckpt-test-ptys.lock"

// LockPtys holds, until the test ends, the machine-wide lock of the tests
// that open pseudo-terminals. The kernel gives a new pty the lowest free
// index, and a restored pty needs its old index back: a test that dumps a
// pty and restores it holds the lock from before the pty exists until the
// restore is done, so that no other test (of another package running at
// the same time) takes the index in between; every test that opens ptys
// takes it too. Take it once per test (two holds in one process wait for
// each other).
func LockPtys(t testing.TB) {
	t.Helper()
	HoldPtys(t)
}

// HoldPtys takes the lock of LockPtys and returns the function that
// releases it (at the latest when the test ends; calling it again does
// nothing), for a long test whose ptys need their indexes kept in some
// phases only: from before it creates them until they exist, and from a
// dump that kills their holder until its restore is done (an MPI job run
// by Open MPI, whose mpirun gives every rank a pty).
func HoldPtys(t testing.TB) (release func()) {
	t.Helper()
	f, err := os.OpenFile(PtyLockPath, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o666)
	if err != nil {
		t.Fatalf("pty lock: %v", err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			t.Fatalf("pty lock %s: %v", PtyLockPath, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var once sync.Once
	release = func() { once.Do(func() { f.Close() }) }
	t.Cleanup(release)
	return release
}
