package fdkind

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// TestNSFileRoundTrip: an open /proc/self/ns/TYPE file of ckpt's own
// namespaces comes back as a file of the same namespace (same nsfs inode),
// with its flags; one of another namespace is refused by name.
func TestNSFileRoundTrip(t *testing.T) {
	for _, typ := range []string{"net", "uts", "pid", "mnt"} {
		t.Run(typ, func(t *testing.T) {
			fd, err := unix.Open("/proc/self/ns/"+typ, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Skipf("open /proc/self/ns/%s: %v", typ, err)
			}
			defer unix.Close(fd)
			f, nf := roundTrip(t, fd)
			var old, got unix.Stat_t
			if err := unix.Fstat(fd, &old); err != nil {
				t.Fatal(err)
			}
			if err := unix.Fstat(int(nf.Fd()), &got); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("%s:[%d]", typ, old.Ino)
			if f.Kind != image.FileNS || f.Ref.Path != want || got.Ino != old.Ino || got.Dev != old.Dev {
				t.Errorf("described %s %q, rebuilt inode %d; want %s %q, inode %d", f.Kind, f.Ref.Path, got.Ino, image.FileNS, want, old.Ino)
			}
			if s := nsFile().Show(f); s != "namespace "+want {
				t.Errorf("show: %q", s)
			}
		})
	}
	t.Run("another namespace", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root")
		}
		// A child in a network namespace of its own; we open its
		// namespace (unsharing a thread of ours could move the whole test
		// process if Go ran it on the main thread).
		child := exec.Command("unshare", "--net", "sleep", "60")
		if err := child.Start(); err != nil {
			t.Skipf("unshare --net: %v", err)
		}
		defer func() { child.Process.Kill(); child.Wait() }()
		var own unix.Stat_t
		if err := unix.Stat("/proc/self/ns/net", &own); err != nil {
			t.Fatal(err)
		}
		path := fmt.Sprintf("/proc/%d/ns/net", child.Process.Pid)
		fd := -1
		for deadline := time.Now().Add(10 * time.Second); fd < 0; time.Sleep(5 * time.Millisecond) {
			var st unix.Stat_t
			if unix.Stat(path, &st) == nil && st.Ino != own.Ino {
				var err error
				if fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
					t.Fatal(err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never left our network namespace", path)
			}
		}
		defer unix.Close(fd)
		env := newTestEnv(t)
		src := &Source{PID: sys.Getpid(), FD: sys.TargetFD(fd)}
		var err error
		if src.Link, err = os.Readlink(src.Path()); err != nil {
			t.Fatal(err)
		}
		if err := unix.Stat(src.Path(), &src.Stat); err != nil {
			t.Fatal(err)
		}
		_, err = Describe(env, src, -1)
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "namespace other than ckpt's") {
			t.Errorf("describe %s: %v; want it refused as another namespace", src.Link, err)
		}
	})
}
