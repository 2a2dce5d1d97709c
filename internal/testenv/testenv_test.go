package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReaperReportsExits runs shells under one reaper and checks that the
// exit of each shell and of each orphan it leaves behind (reparented to the
// reaper) is reported, with the right status.
func TestReaperReportsExits(t *testing.T) {
	RequireRoot(t)
	r := StartReaper(t)
	tests := []struct {
		name       string
		script     string // gets the orphan's pid file as $1 when orphan >= 0
		code       int    // the shell's exit code
		orphanCode int    // the orphan's exit code, or -1 if it has none
	}{
		{"plain exit", "sleep 0.1; exit 3", 3, -1},
		{"orphan", `(sleep 0.2; exit 5) & echo $! > "$1"; exit 0`, 0, 5},
		{"orphan outlives", `(sleep 0.3; exit 9) & echo $! > "$1"; exit 7`, 7, 9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "orphan.pid")
			start := time.Now()
			pid := r.Run(t, RunOpts{}, "/bin/sh", "-c", tc.script, "sh", pidFile)
			if got := r.WaitExit(t, pid, 10*time.Second); got != (ExitStatus{Pid: pid, Code: tc.code}) {
				t.Errorf("shell: got %v, want code %d", got, tc.code)
			}
			if tc.orphanCode < 0 {
				if d := time.Since(start); d < 100*time.Millisecond {
					t.Errorf("shell reported after %v, before its sleep 0.1 ended", d)
				}
				return
			}
			b, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			orphan, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			// Until it exits, the orphan must be the reaper's child.
			if ppid, err := parentOf(orphan); err == nil && ppid != r.Pid() {
				t.Errorf("orphan %d has parent %d, want the reaper %d", orphan, ppid, r.Pid())
			}
			if got := r.WaitExit(t, orphan, 10*time.Second); got != (ExitStatus{Pid: orphan, Code: tc.orphanCode}) {
				t.Errorf("orphan: got %v, want code %d", got, tc.orphanCode)
			}
		})
	}
	// Each exit is reported exactly once.
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.exits) != 0 {
		t.Errorf("unexpected exit reports left: %v", r.exits)
	}
}

// TestReaperKillAll checks kill-all, signal statuses and the run options.
func TestReaperKillAll(t *testing.T) {
	RequireRoot(t)
	r := StartReaper(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	pid := r.Run(t, RunOpts{Stdout: out, Dir: dir, Setsid: true, Env: []string{"X=42"}},
		"/bin/sh", "-c", `echo "$X $(pwd)"; sleep 0.2 & exec sleep 100`)
	line := WaitForLine(t, out, func(string) bool { return true }, 5*time.Second)
	if want := "42 " + dir; line != want {
		t.Errorf("output %q, want %q", line, want)
	}
	if sid, err := sessionOf(pid); err != nil || sid != pid {
		t.Errorf("session of %d is %d (%v), want its own", pid, sid, err)
	}
	r.KillAll(t)
	if got, ok := r.Poll(pid); !ok || got.Signal != int(syscall.SIGKILL) {
		t.Errorf("after kill-all: got %v, %v; want killed by SIGKILL", got, ok)
	}
	if _, err := os.Stat(fmt.Sprint("/proc/", pid)); err == nil {
		t.Errorf("pid %d still exists after kill-all", pid)
	}
}

// TestReaperSync checks that once a process the reaper reaped is gone
// from /proc, its exit report is there after Sync, without waiting.
func TestReaperSync(t *testing.T) {
	RequireRoot(t)
	r := StartReaper(t)
	for i := 0; i < 20; i++ {
		pid := r.Run(t, RunOpts{}, "/bin/sh", "-c", "exit 4")
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(fmt.Sprint("/proc/", pid)); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still exists after 10s", pid)
			}
			time.Sleep(time.Millisecond)
		}
		r.Sync(t)
		if got, ok := r.Poll(pid); !ok || got != (ExitStatus{Pid: pid, Code: 4}) {
			t.Fatalf("round %d: after sync: %v, %v; want pid %d exited with code 4", i, got, ok, pid)
		}
	}
}

// TestVictims builds every victim and runs it through the protocol once:
// ticks, a check on SIGUSR1, bye and exit 0 on SIGUSR2.
func TestVictims(t *testing.T) {
	RequireRoot(t)
	r := StartReaper(t)
	tests := []struct {
		name string
		args []string // after LOG; "DIR/" is replaced by a temporary directory
	}{
		{"static_counter", nil},
		{"dynamic_counter", nil},
		{"filemap", []string{"DIR/data"}},
		{"vector", nil},
		{"pyheap", []string{"16"}},
		{"sockets", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			log := filepath.Join(dir, "log")
			args := []string{log}
			for _, a := range tc.args {
				args = append(args, strings.Replace(a, "DIR/", dir+"/", 1))
			}
			pid := r.Run(t, RunOpts{Stderr: filepath.Join(dir, "stderr")}, VictimArgv(t, tc.name, args...)...)
			WaitForLine(t, log, func(l string) bool { return strings.HasPrefix(l+" ", "tick 3 ") }, 20*time.Second)
			r.MustSignal(t, pid, syscall.SIGUSR1)
			WaitForLine(t, log, func(l string) bool { return strings.HasPrefix(l, "check ") }, 20*time.Second)
			r.MustSignal(t, pid, syscall.SIGUSR2)
			if es := r.WaitExit(t, pid, 20*time.Second); es != (ExitStatus{Pid: pid}) {
				t.Errorf("%v, want exit code 0; stderr: %q", es, ReadLines(filepath.Join(dir, "stderr")))
			}
			lines := ReadLines(log)
			if want := fmt.Sprintf("start pid=%d", pid); len(lines) == 0 || !strings.HasPrefix(lines[0], want) {
				t.Errorf("log starts with %q, want %q", lines[:min(1, len(lines))], want)
			}
			last := CheckTicks(t, lines)
			if want := fmt.Sprintf("bye %d", last); lines[len(lines)-1] != want {
				t.Errorf("log ends with %q, want %q", lines[len(lines)-1], want)
			}
		})
	}
}

func TestCheckTicks(t *testing.T) {
	tests := []struct {
		name   string
		lines  []string
		last   int
		errors int
	}{
		{"good", []string{"start pid=1", "tick 1", "tick 2 x=3", "check ok 2", "tick 3", "bye 3"}, 3, 0},
		{"empty", nil, 0, 0},
		{"gap", []string{"tick 1", "tick 3"}, 3, 1},
		{"repeat", []string{"tick 1", "tick 2", "tick 2"}, 2, 1},
		{"not from 1", []string{"tick 2"}, 2, 1},
		{"fail", []string{"tick 1", "check FAIL heap"}, 1, 1},
		{"bad number", []string{"tick x"}, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordTB{TB: t}
			if got := CheckTicks(rec, tc.lines); got != tc.last {
				t.Errorf("last tick %d, want %d", got, tc.last)
			}
			if len(rec.errors) != tc.errors {
				t.Errorf("got errors %q, want %d", rec.errors, tc.errors)
			}
		})
	}
}

func TestReadLines(t *testing.T) {
	f := filepath.Join(t.TempDir(), "log")
	if got := ReadLines(f); got != nil {
		t.Errorf("missing file: got %q", got)
	}
	os.WriteFile(f, []byte("a\n\nb\npartial"), 0o644)
	if got := ReadLines(f); strings.Join(got, "|") != "a||b" {
		t.Errorf("got %q, want a, empty, b", got)
	}
}

// recordTB records Errorf calls instead of failing.
type recordTB struct {
	testing.TB
	errors []string
}

func (r *recordTB) Helper() {}
func (r *recordTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// statField returns field n (1-based, as in proc(5)) of /proc/PID/stat.
func statField(pid, n int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // f[0] is field 3
	return strconv.Atoi(f[n-3])
}

func parentOf(pid int) (int, error)  { return statField(pid, 4) }
func sessionOf(pid int) (int, error) { return statField(pid, 6) }

// atPIDSource is a program that makes a child with the PID it is given
// (clone3 set_tid), as a restore does: the child pauses (and dies with
// it); the program prints "ready", and at the end of its stdin SIGTERMs
// the child, waits for it and prints how it ended. With a second argument
// it pauses for ever instead, leaving its child to whoever ends it.
const atPIDSource = `#define _GNU_SOURCE
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
	pid_t want = atoi(argv[1]);
	struct clone_args a;
	memset(&a, 0, sizeof a);
	a.exit_signal = SIGCHLD;
	a.set_tid = (uintptr_t)&want;
	a.set_tid_size = 1;
	long c = syscall(SYS_clone3, &a, sizeof a);
	if (c < 0) { perror("clone3"); return 1; }
	if (c == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (;;) pause();
	}
	printf("ready\n");
	fflush(stdout);
	if (argc > 2)
		for (;;)
			pause();
	char b[64];
	while (read(0, b, sizeof b) > 0)
		;
	kill(c, SIGTERM); /* our child, not reaped yet */
	int st;
	waitpid(c, &st, 0);
	printf(WIFSIGNALED(st) ? "signal %d\n" : "code %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	return 0;
}
`

// TestReaperSignalGone: a victim that has ended is not signalled through
// the reaper, even when its PID has been taken by another process
// meanwhile (here at once, with clone3 set_tid, as a restore of another
// test takes a PID); a kill by number would hit that process.
func TestReaperSignalGone(t *testing.T) {
	RequireRoot(t)
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "atpid.c"), filepath.Join(dir, "atpid")
	if err := os.WriteFile(src, []byte(atPIDSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-Wall", "-Werror", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	r := StartReaper(t)
	alive := r.Run(t, RunOpts{}, "sleep", "100")
	pid := r.Run(t, RunOpts{}, "/bin/sh", "-c", "exit 0")
	if es := r.WaitExit(t, pid, 10*time.Second); es != (ExitStatus{Pid: pid}) {
		t.Fatalf("%v, want exit code 0", es)
	}
	stranger := exec.Command(bin, strconv.Itoa(pid))
	out, err := stranger.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := stranger.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	defer stranger.Wait()
	defer stranger.Process.Kill() // our child, not reaped before Wait: its PID is its own
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("atpid %d: %q, %v", pid, lines.Text(), lines.Err())
	}
	if r.Signal(t, pid, syscall.SIGKILL) {
		t.Errorf("the reaper signalled PID %d, reaped already and now another process's", pid)
	}
	if !r.Signal(t, alive, syscall.SIGKILL) {
		t.Errorf("the reaper did not signal its child %d", alive)
	}
	if es := r.WaitExit(t, alive, 10*time.Second); es.Signal != int(syscall.SIGKILL) {
		t.Errorf("%v, want killed by SIGKILL", es)
	}
	in.Close()
	if !lines.Scan() || lines.Text() != "signal 15" {
		t.Errorf("the process that took PID %d: %q, want killed by its parent's SIGTERM (15)", pid, lines.Text())
	}
}

// TestReaperSignalTree: a process further down the reaper's tree (a
// child's child) is signalled through the reaper, and so is the process
// group a child of the reaper leads.
func TestReaperSignalTree(t *testing.T) {
	RequireRoot(t)
	r := StartReaper(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	sh := r.Run(t, RunOpts{}, "/bin/sh", "-c", `sleep 100 & echo $! > `+pidFile+`.tmp && mv `+pidFile+`.tmp `+pidFile+`; wait $!; exit $?`)
	var grandchild int
	for deadline := time.Now().Add(10 * time.Second); grandchild == 0; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil {
			grandchild, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid file from the shell")
		}
	}
	if !r.Signal(t, grandchild, syscall.SIGKILL) {
		t.Fatalf("the reaper did not signal %d, a child of its child %d", grandchild, sh)
	}
	if es := r.WaitExit(t, sh, 10*time.Second); es != (ExitStatus{Pid: sh, Code: 128 + int(syscall.SIGKILL)}) {
		t.Errorf("%v, want the shell to exit with code 137 (its child killed by SIGKILL)", es)
	}
	if r.Signal(t, grandchild, syscall.SIGKILL) {
		t.Errorf("the reaper signalled %d, reaped by its parent", grandchild)
	}
	// A group led by a child (in a session of its own): every member gets it.
	leader := r.Run(t, RunOpts{}, "/bin/sh", "-c", "sleep 100 & sleep 100 & wait")
	for deadline := time.Now().Add(10 * time.Second); len(groupMembers(leader)) < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("group %d: members %v, want the shell and two sleeps", leader, groupMembers(leader))
		}
	}
	if !r.Signal(t, -leader, syscall.SIGTERM) {
		t.Fatalf("the reaper did not signal the group of its child %d", leader)
	}
	if es := r.WaitExit(t, leader, 10*time.Second); es.Signal != int(syscall.SIGTERM) {
		t.Errorf("%v, want killed by SIGTERM", es)
	}
	r.Sync(t)
	for deadline := time.Now().Add(10 * time.Second); len(groupMembers(leader)) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("group %d: members %v left after SIGTERM", leader, groupMembers(leader))
		}
	}
	if r.Signal(t, -leader, syscall.SIGTERM) {
		t.Errorf("the reaper signalled group %d, whose leader it has reaped", leader)
	}
}

// groupMembers lists the live processes of process group pgid.
func groupMembers(pgid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		zombie := strings.Contains(string(b), ") Z ")
		if g, err := statField(pid, 5); err == nil && g == pgid && !zombie {
			out = append(out, pid)
		}
	}
	return out
}

// TestReaperStaleReport: the exit report of a process nobody waited for
// (a victim's child, killed and reaped by the reaper) is not taken for the
// report of a later process with the same PID. Here the PID is taken at
// once (clone3 set_tid, as a restore does); in the suites PIDs wrap within
// minutes, and the fidelity harness took such reports for its programs'
// ("killed by signal 9" for programs and ckpt-redo runs nobody signalled).
func TestReaperStaleReport(t *testing.T) {
	RequireRoot(t)
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "atpid.c"), filepath.Join(dir, "atpid")
	if err := os.WriteFile(src, []byte(atPIDSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-Wall", "-Werror", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	r := StartReaper(t)
	pidFile := filepath.Join(dir, "pid")
	sh := r.Run(t, RunOpts{}, "/bin/sh", "-c", "sleep 100 & echo $! > "+pidFile+".tmp && mv "+pidFile+".tmp "+pidFile)
	if es := r.WaitExit(t, sh, 10*time.Second); es != (ExitStatus{Pid: sh}) {
		t.Fatalf("shell: %v", es)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	orphan, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// The orphan sleep, now the reaper's, is killed and reaped: its report
	// stays, nobody takes it.
	r.MustSignal(t, orphan, syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", orphan)); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not reaped 10 s after SIGKILL", orphan)
		}
	}
	r.Sync(t)
	// A new process under the reaper takes the PID.
	out := filepath.Join(dir, "out")
	holder := r.Run(t, RunOpts{Stdout: out, Stderr: out}, bin, strconv.Itoa(orphan), "stay")
	WaitForLine(t, out, func(l string) bool { return l == "ready" || strings.HasPrefix(l, "clone3") }, 10*time.Second)
	if l := ReadLines(out); len(l) == 0 || l[0] != "ready" {
		t.Skipf("pid %d taken by another process before clone3: %q", orphan, l)
	}
	if es, ok := r.Poll(orphan); ok {
		t.Fatalf("Poll(%d) while a new process has the PID: %v, the report of the one before", orphan, es)
	}
	// The new one ends (SIGTERM; its parent, killed, leaves it to the
	// reaper): its own report is the one WaitExit takes.
	r.MustSignal(t, orphan, syscall.SIGTERM)
	r.MustSignal(t, holder, syscall.SIGKILL)
	if es := r.WaitExit(t, orphan, 10*time.Second); es.Signal != int(syscall.SIGTERM) {
		t.Errorf("WaitExit(%d): %v, want the new process's report: killed by SIGTERM", orphan, es)
	}
	r.WaitExit(t, holder, 10*time.Second)
}
