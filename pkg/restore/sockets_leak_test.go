package restore_test

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/restore"
	"golang.org/x/sys/unix"
)

// TestRestoreSocketsNoLeak restores the victim "sockets" (UNIX pairs with
// queues, files in flight, a listener with connections accepted and
// waiting, a UDP socket) in-process: the restored process's own check
// passes, and the restore closed every fd it made or took on the way (the
// sockets it rebuilt, the ends of pairs whose peers were closed, the
// temporary senders and listeners): this process holds the same fds before
// the build and after the release.
func TestRestoreSocketsNoLeak(t *testing.T) {
	testenv.RequireRoot(t)
	r := testenv.StartReaper(t)
	v := testenv.StartVictim(t, r, "sockets")
	dir := dumpKill(t, r, v)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := testenv.OpenFDs(t)
	rs, err := build(t, dir, restore.Options{})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if err := rs.Release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	after := testenv.OpenFDs(t)
	ended := false
	t.Cleanup(func() {
		if !ended {
			killSession(v.PID)
			reapWait(t, v.PID)
		}
	})
	if !slices.Equal(before, after) {
		t.Errorf("fds of this process before the restore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
	v.WaitTicks(t, 2)
	v.Check(t)
	if err := unix.Kill(v.PID, unix.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	ws := reapWait(t, v.PID)
	ended = true
	if !ws.Exited() || ws.ExitStatus() != 0 {
		t.Errorf("restored sockets: wait status %v, want exit 0", ws)
	}
}
