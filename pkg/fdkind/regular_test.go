package fdkind

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRegularRoundTrip: a file opened with flags that open and F_SETFL
// give, at an offset, comes back the same.
func TestRegularRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("0123456789"), 0o640); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags int
	}{
		{"read-only", unix.O_RDONLY},
		{"append nonblock", unix.O_WRONLY | unix.O_APPEND | unix.O_NONBLOCK},
		{"rdwr noatime", unix.O_RDWR | unix.O_NOATIME},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd, err := unix.Open(path, tc.flags|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			if _, err := unix.Seek(fd, 4, 0); err != nil {
				t.Fatal(err)
			}
			f, nf := roundTrip(t, fd)
			if f.Ref.Path != path || f.Pos != 4 {
				t.Errorf("described %s at %d", f.Ref.Path, f.Pos)
			}
			if pos, _ := unix.Seek(int(nf.Fd()), 0, 1); pos != 4 {
				t.Errorf("restored at %d", pos)
			}
		})
	}
}

// TestDeletedRoundTrip: a deleted file comes back with its content as an
// unnamed file, and two descriptions of it share that file.
func TestDeletedRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gone")
	if err := os.WriteFile(path, []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	os.Remove(path)
	env := newTestEnv(t)
	f := describeOwn(t, env, fd)
	if !f.Ref.Deleted {
		t.Fatal("not seen deleted")
	}
	a, b := reopen(t, env, f), reopen(t, env, f)
	if _, err := a.WriteAt([]byte("C"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := b.ReadAt(buf, 0); err != nil || string(buf) != "Content" {
		t.Fatalf("second description reads %q, %v", buf, err)
	}
}
