package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ckpt/ckpt/internal/testenv"
	"golang.org/x/sys/unix"
)

// startFidelity starts a case of the fidelity suite (testdata/fidelity)
// and waits for its "ready" line.
func (e *env) startFidelity(t *testing.T, src string, args ...string) *victim {
	t.Helper()
	fid := filepath.Join(testenv.RepoRoot(t), "testdata", "fidelity")
	bin := compileC(t, filepath.Join("..", "..", "..", "testdata", "fidelity", src), "-I", fid)
	dir := t.TempDir()
	v := &victim{name: strings.TrimSuffix(src, ".c"), dir: dir, log: filepath.Join(dir, "log"), stderr: filepath.Join(dir, "stderr")}
	v.pid = e.r.Run(t, testenv.RunOpts{Stderr: v.stderr, Dir: dir}, append([]string{bin, v.log}, args...)...)
	v.waitLine(t, func(l string) bool { return l == "ready" })
	return v
}

// TestGhostSparse: a deleted 1 GiB shared memory file holding 12 KiB of
// data costs about that much in the image (its holes are not stored);
// --ghost-limit bounds the data stored, and a dump over it is refused by
// name and leaves the process running.
func TestGhostSparse(t *testing.T) {
	e := setup(t)
	v := e.startFidelity(t, "fd_shm.c")
	defer e.killAndReap(t, v)
	img := filepath.Join(t.TempDir(), "img")
	e.dump(t, v.pid, img, "--leave-running")
	st, err := os.Stat(filepath.Join(img, "image.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	// The process's own pages are some 100 KiB; the 1 GiB file adds 12 KiB.
	if st.Size() > 1<<20 {
		t.Errorf("image of a process with a sparse 1 GiB deleted file is %d bytes", st.Size())
	}
	t.Logf("image with a 1 GiB sparse deleted file (12 KiB of data): %d bytes", st.Size())
	bad := filepath.Join(t.TempDir(), "img")
	args := []string{"dump", "--ghost-limit", "4096", "--dir", bad, strconv.Itoa(v.pid)}
	res := e.runCkpt(t, nil, args...)
	if res.code == 0 {
		t.Fatalf("ckpt %s succeeded, want it refused", strings.Join(args, " "))
	}
	for _, want := range []string{"process " + strconv.Itoa(v.pid), "holds 12288 bytes of data", "--ghost-limit"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("ckpt %s: stderr %q, want it to say %q", strings.Join(args, " "), res.stderr, want)
		}
	}
	noImage(t, bad)
	if tp, st := statusField(v.pid, "TracerPid"), procState(v.pid); tp != "0" || (st != "S" && st != "R") {
		t.Errorf("after the refused dump: TracerPid %s, state %q; want untraced and running", tp, st)
	}
	e.dump(t, v.pid, filepath.Join(t.TempDir(), "img"), "--leave-running", "--ghost-limit", "12288")
}

// fidelityVerdict sends SIGTERM to a fidelity case and waits for its
// verdict, which must be PASS.
func (e *env) fidelityVerdict(t *testing.T, v *victim) {
	t.Helper()
	from := len(v.lines())
	e.r.MustSignal(t, v.pid, syscall.SIGTERM)
	es := e.r.WaitExit(t, v.pid, wait)
	lines := v.lines()[from:]
	if len(lines) == 0 || lines[len(lines)-1] != "PASS" || es.Code != 0 || es.Signal != 0 {
		t.Errorf("%s: %v, verdict %q; stderr %q", v.name, es, lines, readFile(v.stderr))
	}
}

// TestLockTakenMeanwhile: a file lock someone else took between the dump
// and the restore fails the restore, naming the holder and the lock, and
// leaves nothing behind; once it is released the same image restores and
// the process holds all its locks again. An flock lock is taken on the
// rebuilt description by ckpt-redo, a POSIX lock by the restored process
// itself.
func TestLockTakenMeanwhile(t *testing.T) {
	e := setup(t)
	for _, tc := range []struct {
		name, file string
		take       func(fd int) error
		want       string
	}{
		{"flock", "b.dat", func(fd int) error { return unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB) }, "flock write lock"},
		{"posix", "a.dat", func(fd int) error {
			return unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_RDLCK, Start: 5, Len: 1})
		}, "posix write lock on bytes 0-9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			v := e.startFidelity(t, "fd_locks.c", dir)
			img := filepath.Join(t.TempDir(), "img")
			e.dumpKill(t, v, img)
			f, err := os.OpenFile(filepath.Join(dir, tc.file), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := tc.take(int(f.Fd())); err != nil {
				t.Fatalf("take the lock: %v", err)
			}
			res := e.runRedo(t, nil, img)
			if res.code == 0 {
				t.Fatalf("ckpt-redo succeeded although %s is locked by the test", tc.file)
			}
			for _, want := range []string{tc.want, "taken by someone else since the dump", "held now by", tc.file} {
				if !strings.Contains(res.stderr, want) {
					t.Errorf("ckpt-redo: stderr %q, want it to say %q", res.stderr, want)
				}
			}
			t.Logf("refused: %s", res.stderr)
			e.expectGone(t, v.pid, "after the failed restore")
			f.Close() // releases the test's lock
			if res := e.runRedo(t, nil, img); res.code != 0 {
				t.Fatalf("ckpt-redo once the lock is free: %v", res)
			}
			e.fidelityVerdict(t, v)
		})
	}
}

// TestFIFOOpenOutside: a FIFO that a process outside the dump also has
// open keeps its buffered bytes through the dump; the restore joins the
// same FIFO by its path and does not put them back a second time.
func TestFIFOOpenOutside(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	v := e.startFidelity(t, "fd_fifo.c", dir)
	// The test holds rd.fifo open too (read-write: it neither blocks
	// nor reads anything).
	outside, err := os.OpenFile(filepath.Join(dir, "rd.fifo"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, v, img)
	if res := e.runRedo(t, nil, img); res.code != 0 {
		t.Fatalf("ckpt-redo: %v", res)
	}
	e.fidelityVerdict(t, v)
}
