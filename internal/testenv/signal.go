package testenv

import (
	"os"
	"syscall"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
)

// Signal sends sig to pid if it is a process of this test binary's tree
// (its child, or a descendant: victims under a reaper, restored trees) not
// reaped yet; otherwise it returns an error wrapping sys.ErrNotThatProcess
// and signals nobody. Test packages run in parallel with PIDs wrapping
// within minutes, and restores take chosen PIDs: a kill by the number of
// a process that has ended may hit another package's process. Processes
// under a Reaper are better signalled with Reaper.Signal, which knows them
// apart from the other tests' of the same binary.
func Signal(pid int, sig syscall.Signal) error {
	self := sys.PID(os.Getpid())
	return sys.SignalIf(sys.PID(pid), sig, func(p sys.PID) bool { return p != self && sys.DescendantOf(p, self) })
}

// MustSignal is Reaper.Signal that fails the test if pid is gone.
func (r *Reaper) MustSignal(t testing.TB, pid int, sig syscall.Signal) {
	t.Helper()
	if !r.Signal(t, pid, sig) {
		t.Fatalf("signal %d to pid %d: the process has ended (reaped), or is not under the reaper", sig, pid)
	}
}
