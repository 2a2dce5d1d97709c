package dump_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/dump"
	"github.com/ckpt/ckpt/pkg/image"
)

// dumpDir dumps pid into a new image directory, as `ckpt dump --dir` does,
// and returns the directory.
func dumpDir(t *testing.T, pid int, opts dump.Options) (string, *dump.Result) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "img")
	sink, err := image.CreateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	res, err := dump.Run(sys.PID(pid), sink, opts)
	if err != nil {
		t.Fatalf("dump %d: %v", pid, err)
	}
	return dir, res
}

// TestDumpLeaveRunning dumps victims of every kind in-process with
// LeaveRunning: each goes on ticking and still checks itself, and the
// image reads back whole, with as many processes and threads as the
// result says.
func TestDumpLeaveRunning(t *testing.T) {
	testenv.RequireRoot(t)
	r := testenv.StartReaper(t)
	for _, tc := range []struct {
		name    string
		args    []string
		procs   int
		threads int // at least
	}{
		{"static_counter", nil, 1, 1},
		{"dynamic_counter", nil, 1, 1},
		{"miscstate", []string{"DIR/"}, 1, 1},
		{"mthreads", nil, 1, 10},
		{"filemap", []string{"DIR/data"}, 1, 1},
		{"tree", []string{"nozombie"}, 4, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := testenv.StartVictim(t, r, tc.name, tc.args...)
			var logged []string
			dir, res := dumpDir(t, v.PID, dump.Options{LeaveRunning: true, Log: func(f string, a ...any) {
				logged = append(logged, f)
			}})
			if res.Killed || res.PID != sys.PID(v.PID) || res.Processes < tc.procs || res.Threads < tc.threads || res.Pages == 0 {
				t.Errorf("result %+v: want pid %d, >= %d processes and %d threads, pages, not killed", res, v.PID, tc.procs, tc.threads)
			}
			f, err := image.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("image mode %v, want 0600", st.Mode().Perm())
			}
			procs, pages := readImage(t, f)
			if procs != res.Processes || pages == 0 {
				t.Errorf("image holds %d processes and %d page records; result says %d processes", procs, pages, res.Processes)
			}
			v.WaitTicks(t, 2)
			v.Check(t)
		})
	}
}

// TestDumpKill dumps a victim and kills it: the process is gone once Run
// returns, and the image is complete.
func TestDumpKill(t *testing.T) {
	testenv.RequireRoot(t)
	r := testenv.StartReaper(t)
	v := testenv.StartVictim(t, r, "static_counter")
	dir, res := dumpDir(t, v.PID, dump.Options{})
	if !res.Killed {
		t.Errorf("result %+v: not killed", res)
	}
	if es := r.WaitExit(t, v.PID, 10*time.Second); es.Signal != int(syscall.SIGKILL) {
		t.Errorf("victim: %v, want killed by SIGKILL", es)
	}
	if _, err := os.Stat(filepath.Join(dir, "image.ckpt")); err != nil {
		t.Error(err)
	}
}

// TestDumpErrors: a PID that does not exist, and a dump aborted after the
// freeze and before the commit (the two hooks a group checkpoint waits in):
// each fails with the error, and the victim goes on untouched.
func TestDumpErrors(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := dump.Run(1<<22, discard{}, dump.Options{}); err == nil {
		t.Error("dump of a PID above pid_max succeeded")
	}
	r := testenv.StartReaper(t)
	v := testenv.StartVictim(t, r, "dynamic_counter")
	errAbort := errors.New("aborted by the test")
	fail := func() error { return errAbort }
	for _, tc := range []struct {
		name string
		opts dump.Options
	}{
		{"after-freeze", dump.Options{AfterFreeze: fail}},
		{"before-commit", dump.Options{BeforeCommit: fail}},
		{"before-commit-leave-running", dump.Options{BeforeCommit: fail, LeaveRunning: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "img")
			sink, err := image.CreateDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			runtime.LockOSThread()
			_, err = dump.Run(sys.PID(v.PID), sink, tc.opts)
			runtime.UnlockOSThread()
			if !errors.Is(err, errAbort) {
				t.Errorf("dump: %v, want %v", err, errAbort)
			}
			if _, err := os.Stat(filepath.Join(dir, "image.ckpt")); err == nil {
				t.Error("an aborted dump left image.ckpt")
			}
			v.WaitTicks(t, 2)
			v.Check(t)
		})
	}
}

// readImage reads a whole image and counts its process and pages records.
func readImage(t *testing.T, f *os.File) (procs, pages int) {
	t.Helper()
	m, err := image.ReadMeta(f)
	if err != nil {
		t.Fatal(err)
	}
	pr := m.Pages()
	for {
		_, _, err := pr.Next()
		if err == io.EOF {
			return len(m.Processes), pages
		}
		if err != nil {
			t.Fatal(err)
		}
		pages++
	}
}

// discard is a sink that must never be written to.
type discard struct{}

func (discard) WriteHeader(*image.Header) error     { return errors.New("discard") }
func (discard) WriteProcess(*image.Process) error   { return errors.New("discard") }
func (discard) WriteFileData(int, []byte) error     { return errors.New("discard") }
func (discard) WritePrepared(*image.Prepared) error { return errors.New("discard") }
func (discard) Commit() error                       { return errors.New("discard") }
func (discard) Abort()                              {}
