package fdkind

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// fanotifyLines are the "fanotify ..." lines of an fd's fdinfo, sorted.
func fanotifyLines(t *testing.T, fd int) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "fanotify ") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	sort.Strings(out)
	return out
}

// TestFanotifyRoundTrip: a notification group with inode marks (one with
// an ignored mask that survives modification), a mount mark and a file
// system mark comes back with the same flags, event flags and marks.
func TestFanotifyRoundTrip(t *testing.T) {
	dir := t.TempDir()
	file, quiet := filepath.Join(dir, "f"), filepath.Join(dir, "q")
	for _, p := range []string{file, quiet} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		t.Skipf("fanotify_init: %v", err)
	}
	defer unix.Close(fd)
	for _, m := range []struct {
		flags uint
		mask  uint64
		path  string
	}{
		{unix.FAN_MARK_ADD, unix.FAN_MODIFY | unix.FAN_CLOSE_WRITE, file},
		{unix.FAN_MARK_ADD | unix.FAN_MARK_IGNORED_MASK | unix.FAN_MARK_IGNORED_SURV_MODIFY, unix.FAN_MODIFY, quiet},
		{unix.FAN_MARK_ADD | unix.FAN_MARK_MOUNT, unix.FAN_OPEN_EXEC, "/dev/shm"},
		{unix.FAN_MARK_ADD | unix.FAN_MARK_FILESYSTEM, unix.FAN_OPEN_EXEC, "/dev/shm"},
		{unix.FAN_MARK_ADD, unix.FAN_CLOSE_NOWRITE | unix.FAN_ONDIR | unix.FAN_EVENT_ON_CHILD, dir},
	} {
		if err := unix.FanotifyMark(fd, m.flags, m.mask, unix.AT_FDCWD, m.path); err != nil {
			t.Fatalf("fanotify_mark %#x %#x %s: %v", m.flags, m.mask, m.path, err)
		}
	}
	want := fanotifyLines(t, fd)
	f, nf := roundTrip(t, fd)
	if got := fanotifyLines(t, int(nf.Fd())); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("restored group:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := Show(f); !strings.Contains(s, "group flags 0x3") || !strings.Contains(s, "5 marks") || !strings.Contains(s, "mount /dev/shm") {
		t.Errorf("show: %q", s)
	}
	// An event queued and not read is refused.
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	src := &Source{PID: sys.Getpid(), FD: sys.TargetFD(fd), Link: "anon_inode:[fanotify]", Copy: fd}
	k, _ := Lookup("fanotify")
	err = k.Describe(env, src, &image.File{})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "bytes of events not read yet") {
		t.Errorf("group with an event queued: %v", err)
	}
}
