package fdkind

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// TestFIFORoundTrip: a FIFO open read-only non-blocking and write-only,
// with data in it, and a deleted one: each description is rebuilt with
// its flags, the data is there once, and was not consumed by the dump.
func TestFIFORoundTrip(t *testing.T) {
	dir := t.TempDir()
	path, gone := filepath.Join(dir, "f"), filepath.Join(dir, "gone")
	for _, p := range []string{path, gone} {
		if err := unix.Mkfifo(p, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	rd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rd)
	wr, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(wr)
	if _, err := unix.Write(wr, []byte("queued")); err != nil {
		t.Fatal(err)
	}
	rw, err := unix.Open(gone, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rw)
	os.Remove(gone)
	env := newTestEnv(t)
	fr, fw, fg := describeOwn(t, env, rd), describeOwn(t, env, wr), describeOwn(t, env, rw)
	fr.ID, fw.ID, fg.ID = 1, 2, 3
	held := []Held{{PID: sys.Getpid(), FD: sys.TargetFD(rd), File: fr}, {PID: sys.Getpid(), FD: sys.TargetFD(wr), File: fw}, {PID: sys.Getpid(), FD: sys.TargetFD(rw), File: fg}}
	if err := fifoData(env, held); err != nil {
		t.Fatal(err)
	}
	if fr.Pipe.DataID == 0 || fr.Pipe.DataID != fw.Pipe.DataID || !fg.Ref.Deleted || fr.Ref.Deleted {
		t.Fatalf("described %+v %+v %+v", fr.Pipe, fw.Pipe, fg.Ref)
	}
	buf := make([]byte, 16)
	if n, err := unix.Read(rd, buf); err != nil || string(buf[:n]) != "queued" {
		t.Fatalf("the dump consumed the data: %q %v", buf[:max(n, 0)], err)
	}
	// The FIFO is empty now; the rebuilt descriptions refill it once.
	nr := reopen(t, env, fr)
	nw := reopen(t, env, fw)
	if got := getfl(t, nr.Fd()); got != unix.O_RDONLY|unix.O_NONBLOCK {
		t.Errorf("read end flags %#o", got)
	}
	if got := getfl(t, nw.Fd()); got != unix.O_WRONLY {
		t.Errorf("write end flags %#o", got)
	}
	if n, err := unix.Read(int(nr.Fd()), buf); err != nil || string(buf[:n]) != "queued" {
		t.Errorf("rebuilt FIFO holds %q, %v", buf[:max(n, 0)], err)
	}
	ng := reopen(t, env, fg)
	link, _ := os.Readlink("/proc/self/fd/" + itoa(int(ng.Fd())))
	if link != gone+" (deleted)" {
		t.Errorf("deleted FIFO links to %q", link)
	}
}
