package fdkind

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// TestInotifyRoundTrip: watches come back with the same descriptors
// (gaps included), masks and files, and no stray event is queued. A file
// whose name ends with " (deleted)" is found by its name: whether it was
// removed comes from its inode, not from the text of a link.
func TestInotifyRoundTrip(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b (deleted)")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	add := func(p string, mask uint32) int {
		wd, err := unix.InotifyAddWatch(fd, p, mask)
		if err != nil {
			t.Fatal(err)
		}
		return wd
	}
	add(dir, unix.IN_CREATE|unix.IN_DELETE)
	gone := add(a, unix.IN_MODIFY)
	add(b, unix.IN_CLOSE_WRITE|unix.IN_ONESHOT)
	unix.InotifyRmWatch(fd, uint32(gone))
	// Read the IN_IGNORED of the removed watch: the queue is empty.
	buf := make([]byte, 4096)
	if _, err := unix.Read(fd, buf); err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	f := describeOwn(t, env, fd)
	if len(f.Event.Watches) != 2 || f.Event.Watches[0].WD != 1 || f.Event.Watches[1].WD != 3 || f.Event.Watches[1].Path != b {
		t.Fatalf("watches %+v", f.Event.Watches)
	}
	nf := reopen(t, env, f)
	env.runSteps(t) // the watches are added once every file is open
	old, err := proc.ReadFDInfo(sys.Getpid(), sys.TargetFD(fd))
	if err != nil {
		t.Fatal(err)
	}
	got, err := proc.ReadFDInfo(sys.Getpid(), sys.TargetFD(int(nf.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Inotify) != len(old.Inotify) {
		t.Fatalf("watches %+v, want %+v", got.Inotify, old.Inotify)
	}
	for i := range old.Inotify {
		if got.Inotify[i] != old.Inotify[i] {
			t.Errorf("watch %+v, want %+v", got.Inotify[i], old.Inotify[i])
		}
	}
	if n, _ := unix.IoctlGetInt(int(nf.Fd()), unix.TIOCINQ); n != 0 {
		t.Errorf("%d bytes of events queued after the restore", n)
	}
	// Still watching: creating a file in dir is seen under wd 1.
	if err := os.WriteFile(filepath.Join(dir, "c"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := unix.Read(int(nf.Fd()), buf)
	if err != nil || n < 16 || int32(uint32(buf[0])|uint32(buf[1])<<8) != 1 {
		t.Errorf("event %x, %v; want one for wd 1", buf[:max(n, 0)], err)
	}
}

// TestInotifyPendingRefused: an instance with events not read yet is
// refused (they cannot be put back).
func TestInotifyPendingRefused(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	src := &Source{PID: sys.Getpid(), FD: sys.TargetFD(fd), Copy: fd}
	src.Link, _ = os.Readlink(src.Path())
	unix.Stat(src.Path(), &src.Stat)
	src.Info, _ = proc.ReadFDInfo(sys.Getpid(), sys.TargetFD(fd))
	if _, err := Describe(env, src, fd); err == nil {
		t.Fatal("an inotify instance with a queued event was described")
	}
}
