package fdkind

import (
	"fmt"
	"os"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// testEnv is a dump and a restore environment inside the test process:
// the tests describe fds of their own process and rebuild them there.
type testEnv struct {
	data map[int][]byte
	once map[any]any
	kept []*os.File
	// steps are the BeforeBuild steps asked for (runSteps runs them).
	steps []func(func(sys.PID) (Target, bool)) error
	// otherBoot makes the restore side act as on another machine.
	otherBoot bool
}

func newTestEnv(t *testing.T) *testEnv {
	e := &testEnv{data: map[int][]byte{}, once: map[any]any{}}
	t.Cleanup(func() {
		for _, f := range e.kept {
			f.Close()
		}
	})
	return e
}

func (e *testEnv) AddData(b []byte) int { e.data[len(e.data)+1] = b; return len(e.data) }

func (e *testEnv) Ghost(path string, st *unix.Stat_t, ref *image.FileRef) error {
	b, err := ReadGhost(path, ref, 1<<30)
	if err != nil {
		return err
	}
	ref.Deleted, ref.DataID = true, e.AddData(b)
	return nil
}

func (e *testEnv) Socket(pid sys.PID, fd sys.TargetFD) (int, bool) { return 0, false }
func (e *testEnv) Sockets() SocketDumpEnv                          { return nil }
func (e *testEnv) InDump(pid sys.PID) bool                         { return false }
func (e *testEnv) InFlight(int) (image.InFlight, error) {
	return image.InFlight{}, fmt.Errorf("in flight: %w", ErrUnsupported)
}
func (e *testEnv) ShellJob() bool                 { return false }
func (e *testEnv) SameBoot() bool                 { return !e.otherBoot }
func (e *testEnv) Stdio() (*os.File, bool, error) { return nil, false, nil }
func (e *testEnv) Keep(f *os.File)                { e.kept = append(e.kept, f) }

func (e *testEnv) Data(id int) ([]byte, error) {
	b, ok := e.data[id]
	if !ok {
		return nil, fmt.Errorf("no data %d", id)
	}
	return b, nil
}

func (e *testEnv) Once(key any, build func() (any, error)) (any, error) {
	if v, ok := e.once[key]; ok {
		return v, nil
	}
	v, err := build()
	if err == nil {
		e.once[key] = v
	}
	return v, err
}

// restoreEnv adapts testEnv to RestoreEnv (whose Sockets differs).
type restoreEnv struct{ *testEnv }

func (r restoreEnv) Sockets() SocketRestoreEnv { return nil }

// BeforeBuild keeps the step for runSteps: no process is built here.
func (r restoreEnv) BeforeBuild(fn func(func(sys.PID) (Target, bool)) error) {
	r.steps = append(r.steps, fn)
}

// runSteps runs the BeforeBuild steps, those they ask for too, with no
// process to target.
func (e *testEnv) runSteps(t *testing.T) {
	t.Helper()
	none := func(sys.PID) (Target, bool) { return nil, false }
	for i := 0; i < len(e.steps); i++ {
		if err := e.steps[i](none); err != nil {
			t.Fatal(err)
		}
	}
	e.steps = nil
}
func (r restoreEnv) File(id int) (*os.File, error) {
	return nil, fmt.Errorf("file %d: %w", id, image.ErrCorrupt)
}

// describeOwn describes fd of the test process as the dump would.
func describeOwn(t *testing.T, env *testEnv, fd int) *image.File {
	t.Helper()
	src := &Source{PID: sys.Getpid(), FD: sys.TargetFD(fd)}
	var err error
	if src.Link, err = os.Readlink(src.Path()); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(src.Path(), &src.Stat); err != nil {
		t.Fatal(err)
	}
	if src.Info, err = proc.ReadFDInfo(sys.Getpid(), sys.TargetFD(fd)); err != nil {
		t.Fatal(err)
	}
	f, err := Describe(env, src, fd)
	if err != nil {
		t.Fatalf("describe fd %d (%s): %v", fd, src.Link, err)
	}
	return f
}

// reopen rebuilds a description as the restore would, in the test
// process, and returns the new fd.
func reopen(t *testing.T, env *testEnv, f *image.File) *os.File {
	t.Helper()
	k, err := Lookup(f.Kind)
	if err != nil {
		t.Fatal(err)
	}
	d, err := k.Open(restoreEnv{env}, f, Where{PID: sys.Getpid(), FD: 100})
	if err != nil {
		t.Fatalf("open %s: %v", f.Kind, err)
	}
	if d.File == nil {
		t.Fatalf("open %s: no file", f.Kind)
	}
	t.Cleanup(func() { d.File.Close() })
	if err := Settle(f, d.File); err != nil {
		t.Fatalf("settle %s: %v", f.Kind, err)
	}
	if err := SetOwner(f, d.File); err != nil {
		t.Fatalf("owner %s: %v", f.Kind, err)
	}
	return d.File
}

// getfl is F_GETFL of fd, masked to the flags that must come back.
func getfl(t *testing.T, fd uintptr) int {
	t.Helper()
	fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fl & checkedFlags
}

// fdinfo returns one field of the fdinfo of one of our fds.
func fdinfo(t *testing.T, fd uintptr, key string) string {
	t.Helper()
	fi, err := proc.ReadFDInfo(sys.Getpid(), sys.TargetFD(int(fd)))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Extra[key]
}

// roundTrip describes fd and rebuilds it, checks the status flags came
// back, and returns the description and the new file.
func roundTrip(t *testing.T, fd int) (*image.File, *os.File) {
	t.Helper()
	env := newTestEnv(t)
	f := describeOwn(t, env, fd)
	nf := reopen(t, env, f)
	env.runSteps(t) // what the restore does once every file is open
	if got, want := getfl(t, nf.Fd()), getfl(t, uintptr(fd)); got != want {
		t.Fatalf("%s: flags %#o, want %#o", f.Kind, got, want)
	}
	return f, nf
}

func itoa(n int) string { return fmt.Sprint(n) }
