package e2e

import (
	"path/filepath"
	"testing"
)

// TestStoppedChildren checks children stopped by SIGSTOP, SIGTSTP, SIGTTIN
// and SIGTTOU (one of them with two threads), two of whose stops the parent
// has collected and two not: after two dumps with --leave-running, and
// after each of two dump+restore cycles, the victim checks from inside that
// each is stopped, the uncollected stops are reported with their own
// signal and the collected ones not again, and no SIGCHLD came; at the end
// every child goes on after SIGCONT.
func TestStoppedChildren(t *testing.T) {
	e := setup(t)
	v := e.startVictim(t, "tree_stopped")
	v.check(t)
	for i := 1; i <= 2; i++ {
		e.dump(t, v.pid, filepath.Join(t.TempDir(), "img"), "--leave-running")
		v.waitNewTicks(t, 2)
		v.check(t)
	}
	for cycle := 1; cycle <= 2; cycle++ {
		img := filepath.Join(t.TempDir(), "img")
		e.dumpKill(t, v, img)
		e.restore(t, v, img)
		v.check(t)
	}
	e.bye(t, v)
}
