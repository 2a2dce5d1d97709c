package restore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/dump"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/restore"
	"golang.org/x/sys/unix"
)

// TestMain makes the test binary a child subreaper: a process restored
// in-process is forked from a helper that dies at the end of the build, and
// the restored root then becomes this binary's child, reaped by reapWait.
func TestMain(m *testing.M) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "PR_SET_CHILD_SUBREAPER:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// dumpKill dumps v into a new image directory and kills it, waiting until
// its PID is free again.
func dumpKill(t *testing.T, r *testenv.Reaper, v *testenv.Victim) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "img")
	sink, err := image.CreateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	_, err = dump.Run(sys.PID(v.PID), sink, dump.Options{})
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatalf("dump %d: %v", v.PID, err)
	}
	r.WaitExit(t, v.PID, 10*time.Second)
	waitFree(t, dir)
	return dir
}

// waitFree waits until every PID and TID of the image in dir is free: the
// reaper reaps the killed processes of a tree one by one.
func waitFree(t *testing.T, dir string) {
	t.Helper()
	f, err := image.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := image.ReadMeta(f)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range m.Processes {
		ids := []int{int(p.PID)}
		for _, th := range p.Threads {
			ids = append(ids, int(th.TID))
		}
		for _, id := range ids {
			for {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", id)); os.IsNotExist(err) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("pid %d of the killed %d is still there after 10s", id, p.PID)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
}

// build restores the image in dir and holds it stopped.
func build(t *testing.T, dir string, opts restore.Options) (*restore.Restored, error) {
	t.Helper()
	f, err := image.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return restore.Build(f, opts)
}

// reapWait waits for the restored root pid (this binary's child now) to
// exit, so that its PID is free for the next test.
func reapWait(t *testing.T, pid int) unix.WaitStatus {
	t.Helper()
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("wait4 %d: %v", pid, err)
		}
		return ws
	}
}

// TestRestore restores victims of every kind in-process, checks that each
// goes on from where it was (ticks continue, its own check passes), then
// ends it.
func TestRestore(t *testing.T) {
	testenv.RequireRoot(t)
	r := testenv.StartReaper(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"static_counter", nil},
		{"dynamic_counter", nil},
		{"miscstate", nil},
		{"mthreads", nil},
		{"filemap", []string{"DIR/data"}},
		{"tree", []string{"nozombie"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.name == "miscstate" {
				// It ends up as nobody in its working directory: one
				// anybody may use, as in the e2e test.
				cwd := filepath.Join(t.TempDir(), "cwd")
				if err := os.Mkdir(cwd, 0o777); err != nil {
					t.Fatal(err)
				}
				args = []string{cwd}
			}
			v := testenv.StartVictim(t, r, tc.name, args...)
			v.WaitTicks(t, 1)
			dir := dumpKill(t, r, v)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			rs, err := build(t, dir, restore.Options{})
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			if rs.PID != sys.PID(v.PID) || rs.Processes == 0 || rs.Threads == 0 {
				t.Errorf("result %+v: want pid %d", rs.Result, v.PID)
			}
			if err := rs.Release(); err != nil {
				t.Fatalf("release: %v", err)
			}
			// A failing check must not leave the restored tree running:
			// it is this binary's child, and nobody else would end it.
			ended := false
			t.Cleanup(func() {
				if !ended {
					killSession(v.PID)
					reapWait(t, v.PID)
				}
			})
			v.WaitTicks(t, 2)
			v.Check(t)
			if err := unix.Kill(v.PID, unix.SIGUSR2); err != nil {
				t.Fatal(err)
			}
			ws := reapWait(t, v.PID)
			ended = true
			if !ws.Exited() || ws.ExitStatus() != 0 {
				t.Errorf("restored %s: wait status %v, want exit 0", tc.name, ws)
			}
			testenv.CheckTicks(t, testenv.ReadLines(v.Log))
		})
	}
}

// TestRestoreKill builds an image and discards it before the release:
// nothing is left, and the same image restores afterwards.
func TestRestoreKill(t *testing.T) {
	testenv.RequireRoot(t)
	r := testenv.StartReaper(t)
	v := testenv.StartVictim(t, r, "static_counter")
	dir := dumpKill(t, r, v)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rs, err := build(t, dir, restore.Options{})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	rs.Kill()
	reapWait(t, v.PID)
	rs, err = build(t, dir, restore.Options{})
	if err != nil {
		t.Fatalf("second restore: %v", err)
	}
	if err := rs.Release(); err != nil {
		t.Fatal(err)
	}
	v.WaitTicks(t, 2)
	v.Check(t)
	unix.Kill(v.PID, unix.SIGKILL)
	reapWait(t, v.PID)
}

// TestRestoreErrors: an image whose PID is taken, and images that are
// truncated or corrupt, are refused with an error that says why, and
// nothing is left behind.
func TestRestoreErrors(t *testing.T) {
	testenv.RequireRoot(t)
	r := testenv.StartReaper(t)
	v := testenv.StartVictim(t, r, "static_counter")
	dir := filepath.Join(t.TempDir(), "img")
	sink, err := image.CreateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, err := dump.Run(sys.PID(v.PID), sink, dump.Options{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	// The victim still runs: its PID is taken.
	if _, err := build(t, dir, restore.Options{}); err == nil || !strings.Contains(err.Error(), fmt.Sprint(v.PID)) {
		t.Errorf("restore over a live PID: %v, want an error naming pid %d", err, v.PID)
	}
	whole, err := os.ReadFile(filepath.Join(dir, "image.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	r.MustSignal(t, v.PID, unix.SIGKILL)
	r.WaitExit(t, v.PID, 10*time.Second)
	for _, tc := range []struct {
		name string
		data []byte
		want string // in the error
	}{
		{"empty", nil, "not a ckpt image"},
		{"truncated header", whole[:8], "not a ckpt image"},
		{"truncated", whole[:len(whole)/2], "truncated"},
		{"corrupt", func() []byte {
			b := append([]byte(nil), whole...)
			b[len(b)/3] ^= 0x40
			return b
		}(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "img")
			if err := os.Mkdir(bad, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(bad, "image.ckpt"), tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			// A subtest runs on its own goroutine: the tracer must be
			// one OS thread.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			_, err := build(t, bad, restore.Options{})
			if err == nil {
				t.Fatal("restore succeeded")
			}
			reapIfCreated(t, v.PID)
			switch {
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("restore: %v: does not say %q", err, tc.want)
			case tc.want == "" && !errors.Is(err, image.ErrCorrupt):
				t.Errorf("restore: %v: not an image.ErrCorrupt", err)
			}
		})
	}
}

// reapIfCreated reaps pid if a failed restore had created it (it is then
// this binary's child, killed): the PID must be free afterwards.
func reapIfCreated(t *testing.T, pid int) {
	t.Helper()
	var ws unix.WaitStatus
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := unix.Wait4(pid, &ws, unix.WALL|unix.WNOHANG, nil)
		if err == unix.ECHILD || got == pid {
			return
		}
		if err != nil && err != unix.EINTR {
			t.Fatalf("wait4 %d: %v", pid, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d left by a failed restore is still there after 10s", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killSession SIGKILLs every process of session sid (a victim and its
// children: the reaper starts each victim in a session of its own).
func killSession(sid int) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// Through a pidfd, checked after it is open: a member that has
		// ended meanwhile may have left its PID to another process.
		sys.SignalIf(sys.PID(pid), unix.SIGKILL, func(p sys.PID) bool {
			s, err := unix.Getsid(int(p))
			return err == nil && s == sid
		})
	}
}
