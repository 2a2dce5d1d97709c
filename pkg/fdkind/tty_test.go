package fdkind

import (
	"errors"
	"testing"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// TestTTYNeedsShellJob: a terminal from outside the dump is not reopened
// silently: without --shell-job or --stdio the restore says what to do.
func TestTTYNeedsShellJob(t *testing.T) {
	f := &image.File{Kind: image.FileTTY, Rdev: unix.Mkdev(136, 3), Ref: image.FileRef{Path: "/dev/pts/3"}}
	k, _ := Lookup(f.Kind)
	_, err := k.Open(restoreEnv{newTestEnv(t)}, f, Where{PID: 1, FD: 0})
	if !errors.Is(err, ErrExternal) {
		t.Fatalf("%v, want ErrExternal", err)
	}
	if got := Show(f); got != "/dev/pts/3 (device 136:3)" {
		t.Errorf("Show: %q", got)
	}
	if !isTTY(unix.Mkdev(136, 0)) || !isTTY(unix.Mkdev(4, 1)) || isTTY(unix.Mkdev(1, 3)) {
		t.Error("isTTY")
	}
}
