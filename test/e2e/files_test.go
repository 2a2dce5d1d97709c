package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt/ckpt/internal/testenv"
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
