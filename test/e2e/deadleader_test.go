package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
)

// TestDeadLeaderStopped checks a stopped process whose leader thread has
// exited (the fidelity case proc_deadleader, stopped by SIGSTOP once
// ready): after two dumps with --leave-running, and after a dump and a
// restore, it is as it was: its leader a zombie thread, its other threads
// stopped and untraced. After SIGCONT and SIGTERM the case checks its own
// state and says PASS.
func TestDeadLeaderStopped(t *testing.T) {
	e := setup(t)
	srcDir := filepath.Join(testenv.RepoRoot(t), "testdata", "fidelity")
	bin := filepath.Join(t.TempDir(), "proc_deadleader")
	if b, err := exec.Command("gcc", "-Wall", "-Werror", "-O1", "-g", "-pthread", "-I", srcDir,
		"-o", bin, filepath.Join(srcDir, "proc_deadleader.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	pid := e.r.Run(t, testenv.RunOpts{Stderr: filepath.Join(dir, "stderr"), Dir: dir}, bin, log)
	testenv.WaitForLine(t, log, func(l string) bool { return l == "ready" || strings.HasPrefix(l, "FAIL") }, wait)
	live := liveThreads(t, pid)
	e.r.Signal(t, pid, syscall.SIGSTOP)
	waitThreadStates(t, pid, live, "T")
	stopped := func(why string) {
		t.Helper()
		if st := procState(pid); !strings.HasPrefix(st, "Z") {
			t.Errorf("%s: the leader is in state %q, want Z", why, st)
		}
		waitThreadStates(t, pid, live, "T")
		for _, tid := range live {
			if tp := field(readFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid)), "TracerPid"); tp != "0" {
				t.Errorf("%s: thread %d TracerPid %q, want untraced", why, tid, tp)
			}
		}
	}
	for i := 1; i <= 2; i++ {
		e.dump(t, pid, filepath.Join(t.TempDir(), "img"), "--leave-running")
		stopped(fmt.Sprintf("after dump %d --leave-running", i))
	}
	img := filepath.Join(t.TempDir(), "img")
	e.dump(t, pid, img)
	if es := e.r.WaitExit(t, pid, wait); es.Signal != int(syscall.SIGKILL) {
		t.Fatalf("after the dump: %v, want killed by SIGKILL", es)
	}
	if res := e.runRedo(t, nil, img); res.code != 0 {
		t.Fatalf("ckpt-redo: %v", res)
	}
	e.r.Alive(pid)
	stopped("after the restore")
	e.r.Signal(t, pid, syscall.SIGCONT)
	e.r.Signal(t, pid, syscall.SIGTERM)
	got := testenv.WaitForLine(t, log, func(l string) bool { return l == "PASS" || strings.HasPrefix(l, "FAIL") }, wait)
	if got != "PASS" {
		t.Fatalf("after the restore: %s", got)
	}
	if es := e.r.WaitExit(t, pid, wait); es.Code != 0 || es.Signal != 0 {
		t.Fatalf("proc_deadleader: %v, want exit code 0", es)
	}
}

// liveThreads lists the threads of pid other than its leader.
func liveThreads(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid != pid {
			out = append(out, tid)
		}
	}
	if len(out) == 0 {
		t.Fatalf("process %d has no thread but its leader", pid)
	}
	return out
}

// waitThreadStates waits until every thread in tids of pid is in a state
// starting with prefix.
func waitThreadStates(t *testing.T, pid int, tids []int, prefix string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		done := true
		for _, tid := range tids {
			if !strings.HasPrefix(field(readFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid)), "State"), prefix) {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads %v of %d not in state %s within %v", tids, pid, prefix, wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// field returns the value of key in a /proc status text.
func field(status, key string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
