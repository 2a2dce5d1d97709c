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

// TestDeadLeaderStoppedRefused checks the refusal of a stopped process
// whose leader thread has exited (the fidelity case proc_deadleader,
// stopped by SIGSTOP once ready): the dump fails naming the process, the
// dead leader and why, writes no image, and leaves the process as it was:
// its leader a zombie thread, its other threads stopped and untraced.
// After SIGCONT and SIGTERM the case checks its own state and says PASS.
func TestDeadLeaderStoppedRefused(t *testing.T) {
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

	img := filepath.Join(t.TempDir(), "img")
	res := e.runCkpt(t, nil, "dump", "--dir", img, strconv.Itoa(pid))
	want := fmt.Sprintf("process %d: thread %d: the leader has exited and the process is stopped (by SIGSTOP)", pid, pid)
	if res.code == 0 || !strings.Contains(res.stderr, want) {
		t.Fatalf("ckpt dump of a stopped process whose leader exited: %v; want it refused saying %q", res, want)
	}
	noImage(t, img)
	if st := procState(pid); !strings.HasPrefix(st, "Z") {
		t.Errorf("after the refused dump: the leader is in state %q, want Z", st)
	}
	for _, tid := range live {
		path := fmt.Sprintf("/proc/%d/task/%d/status", pid, tid)
		st, tp := field(readFile(path), "State"), field(readFile(path), "TracerPid")
		if !strings.HasPrefix(st, "T") || tp != "0" {
			t.Errorf("after the refused dump: thread %d state %q, TracerPid %q; want stopped and untraced", tid, st, tp)
		}
	}
	e.r.Signal(t, pid, syscall.SIGCONT)
	e.r.Signal(t, pid, syscall.SIGTERM)
	got := testenv.WaitForLine(t, log, func(l string) bool { return l == "PASS" || strings.HasPrefix(l, "FAIL") }, wait)
	if got != "PASS" {
		t.Fatalf("after the refused dump: %s", got)
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
