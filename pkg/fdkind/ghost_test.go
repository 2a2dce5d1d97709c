package fdkind

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// TestGhostSparse: a deleted 1 GiB file with two 4 KiB runs of data is
// saved as those 8 KiB and comes back with its size, holes, content, mode
// and name.
func TestGhostSparse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparse")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o604)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	for i := range page {
		page[i] = 'x'
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 1 << 29} {
		if _, err := f.WriteAt(page, off); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(path)
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	ref := StatRef(path, &st)
	data, err := ReadGhost("/proc/self/fd/"+itoa(int(f.Fd())), &ref, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != 8192 || len(ref.Extents) != 2 || ref.Extents[1] != (image.Extent{Off: 1 << 29, Len: 4096}) {
		t.Fatalf("%d bytes, extents %+v", len(data), ref.Extents)
	}
	if _, err := ReadGhost("/proc/self/fd/"+itoa(int(f.Fd())), &ref, 4096); err == nil {
		t.Fatal("over the limit accepted")
	}
	env := newTestEnv(t)
	ref.Deleted, ref.DataID = true, env.AddData(data)
	g, err := OpenRef(restoreEnv{env}, &ref, unix.O_RDONLY, false)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var gst unix.Stat_t
	if err := unix.Fstat(int(g.Fd()), &gst); err != nil {
		t.Fatal(err)
	}
	if gst.Size != 1<<30 || gst.Blocks*512 > 64<<10 || gst.Mode&0o7777 != 0o604 || gst.Nlink != 0 {
		t.Errorf("rebuilt: size %d, %d bytes allocated, mode %o, %d links", gst.Size, gst.Blocks*512, gst.Mode&0o7777, gst.Nlink)
	}
	b := make([]byte, 1)
	if _, err := g.ReadAt(b, 1<<29+4095); err != nil || b[0] != 'x' {
		t.Errorf("byte at 512 MiB: %q %v", b, err)
	}
	if link, _ := os.Readlink("/proc/self/fd/" + itoa(int(g.Fd()))); link != path+" (deleted)" {
		t.Errorf("rebuilt file links to %q", link)
	}
}
