package fdkind

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSymlinkRoundTrip: an O_PATH|O_NOFOLLOW fd of a symbolic link comes
// back as one of the same link; a link pointing elsewhere since is
// refused.
func TestSymlinkRoundTrip(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "l")
	if err := os.Symlink("target", link); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(link, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	f, nf := roundTrip(t, fd)
	if f.Kind != "symlink" || f.Target != "target" {
		t.Fatalf("described %s -> %q", f.Kind, f.Target)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(nf.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Errorf("rebuilt fd is not the link: %o %v", st.Mode, err)
	}
	os.Remove(link)
	os.Symlink("elsewhere", link)
	k, _ := Lookup(f.Kind)
	if _, err := k.Open(restoreEnv{newTestEnv(t)}, f, Where{}); err == nil {
		t.Error("a link pointing elsewhere was reopened")
	}
}
