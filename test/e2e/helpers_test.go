package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
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

// wait is the generous timeout for anything the tests wait for.
const wait = 10 * time.Second

// env is what every end-to-end test needs: the built commands and a reaper
// under which victims and restored processes run.
type env struct {
	bin string // directory holding ckpt, ckpt-redo, ckpt-reaper
	r   *testenv.Reaper
}

// setup checks for root, builds the commands (once per test binary) and
// starts a reaper that t.Cleanup closes (killing everything under it).
func setup(t *testing.T) *env {
	t.Helper()
	testenv.RequireRoot(t)
	return &env{bin: testenv.BuildBinaries(t), r: testenv.StartReaper(t)}
}

func (e *env) ckpt() string { return filepath.Join(e.bin, "ckpt") }
func (e *env) redo() string { return filepath.Join(e.bin, "ckpt-redo") }

// victim is a process started under the reaper that writes a progress log.
type victim struct {
	name   string
	pid    int
	dir    string // private temporary directory
	log    string // the victim's progress log
	stderr string // its stderr file
	comm   string // /proc/PID/comm at start
	exe    string // /proc/PID/exe at start
	cmd    string // /proc/PID/cmdline at start
}

// startVictim starts testdata victim name with argv LOG args... ("DIR/" at
// the start of an arg is replaced by the victim's temporary directory) and
// waits for its start line and its first tick.
func (e *env) startVictim(t *testing.T, name string, args ...string) *victim {
	t.Helper()
	dir := t.TempDir()
	v := &victim{name: name, dir: dir, log: filepath.Join(dir, "log"), stderr: filepath.Join(dir, "stderr")}
	argv := []string{v.log}
	for _, a := range args {
		if rest, ok := strings.CutPrefix(a, "DIR/"); ok {
			a = filepath.Join(dir, rest)
		}
		argv = append(argv, a)
	}
	return e.startArgv(t, v, testenv.VictimArgv(t, name, argv...))
}

// startArgv runs argv for v under the reaper and waits for its first tick.
func (e *env) startArgv(t *testing.T, v *victim, argv []string) *victim {
	t.Helper()
	v.pid = e.r.Run(t, testenv.RunOpts{Stderr: v.stderr, Dir: v.dir}, argv...)
	start := v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "start ") })
	if want := fmt.Sprintf("start pid=%d", v.pid); start != want && !strings.HasPrefix(start, want+" ") {
		t.Fatalf("%s: start line %q, want pid %d", v.name, start, v.pid)
	}
	v.waitTick(t, 1)
	v.comm, v.exe = comm(v.pid), exeOf(v.pid)
	v.cmd = readFile(fmt.Sprintf("/proc/%d/cmdline", v.pid))
	if v.comm == "" || v.exe == "" {
		t.Fatalf("%s: pid %d has no comm/exe: %q %q", v.name, v.pid, v.comm, v.exe)
	}
	return v
}

// lines returns the complete lines of the log.
func (v *victim) lines() []string { return testenv.ReadLines(v.log) }

// waitLine waits for a log line satisfying pred and returns it.
func (v *victim) waitLine(t *testing.T, pred func(string) bool) string {
	t.Helper()
	return testenv.WaitForLine(t, v.log, pred, wait)
}

// waitTick waits until the log holds a tick line numbered n or more.
func (v *victim) waitTick(t *testing.T, n int) int {
	t.Helper()
	l := v.waitLine(t, func(l string) bool { k, ok := tickOf(l); return ok && k >= n })
	k, _ := tickOf(l)
	return k
}

// waitNewTicks waits for n tick lines after the last one in the log now,
// and fails if the log gets a FAIL line meanwhile.
func (v *victim) waitNewTicks(t *testing.T, n int) {
	t.Helper()
	from := len(v.lines())
	deadline := time.Now().Add(wait)
	for {
		lines := v.lines()
		got := 0
		for _, l := range lines[min(from, len(lines)):] {
			if strings.Contains(l, "FAIL") {
				t.Fatalf("%s (pid %d): %s", v.name, v.pid, l)
			}
			if _, ok := tickOf(l); ok {
				got++
			}
		}
		if got >= n {
			return
		}
		if st := procState(v.pid); st == "gone" || st == "Z" {
			t.Fatalf("%s (pid %d): the process is %s after %d new tick lines (want %d); log ends with:\n%s",
				v.name, v.pid, map[string]string{"gone": "gone", "Z": "a zombie"}[st], got, n, tail(v.lines(), 8))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d): %d new tick lines in %v, want %d; process state %q; log ends with:\n%s",
				v.name, v.pid, got, wait, n, procState(v.pid), tail(lines, 8))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lastTick returns the number of the last tick line in lines, 0 if none.
func lastTick(lines []string) int {
	for i := len(lines) - 1; i >= 0; i-- {
		if n, ok := tickOf(lines[i]); ok {
			return n
		}
	}
	return 0
}

// tickOf parses "tick N ...".
func tickOf(l string) (int, bool) {
	f := strings.Fields(l)
	if len(f) < 2 || f[0] != "tick" {
		return 0, false
	}
	n, err := strconv.Atoi(f[1])
	return n, err == nil
}

// check sends SIGUSR1 and waits for the check line: it must be "check ok".
func (v *victim) check(t *testing.T) {
	t.Helper()
	from := len(v.lines())
	// Not by number: a victim that has ended may have left its PID to a
	// process of another test package (testenv.Signal).
	if err := testenv.Signal(v.pid, syscall.SIGUSR1); err != nil {
		t.Fatalf("%s: kill -USR1 %d: %v", v.name, v.pid, err)
	}
	deadline := time.Now().Add(wait)
	for {
		lines := v.lines()
		for _, l := range lines[min(from, len(lines)):] {
			if strings.HasPrefix(l, "check ok ") {
				return
			}
			if strings.HasPrefix(l, "check ") {
				t.Fatalf("%s (pid %d): after SIGUSR1: %s", v.name, v.pid, l)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d): no check line %v after SIGUSR1; process state %q; log ends with:\n%s",
				v.name, v.pid, wait, procState(v.pid), tail(lines, 8))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// bye sends SIGUSR2 and waits for the reaper to report exit code 0; the log
// must end with "bye N", N the last tick. It returns the log's lines.
func (e *env) bye(t *testing.T, v *victim) []string {
	t.Helper()
	e.r.MustSignal(t, v.pid, syscall.SIGUSR2)
	if es := e.r.WaitExit(t, v.pid, wait); es != (testenv.ExitStatus{Pid: v.pid}) {
		t.Errorf("%s: %v after SIGUSR2, want exit code 0; stderr %q; log ends with:\n%s",
			v.name, es, readFile(v.stderr), tail(v.lines(), 8))
	}
	lines := v.lines()
	if want := fmt.Sprintf("bye %d", lastTick(lines)); len(lines) == 0 || lines[len(lines)-1] != want {
		t.Errorf("%s: log ends with %q, want %q", v.name, tail(lines, 1), want)
	}
	return lines
}

// expectAlive checks that the victim goes on: three new ticks, and no
// exit reported by the reaper meanwhile.
func (e *env) expectAlive(t *testing.T, v *victim, why string) {
	t.Helper()
	from := len(v.lines())
	deadline := time.Now().Add(wait)
	for {
		if es, ok := e.r.Poll(v.pid); ok {
			t.Fatalf("%s: the victim %s (%v); its log ends with:\n%s", why, v.name, es, tail(v.lines(), 5))
		}
		lines := v.lines()
		got := 0
		for _, l := range lines[min(from, len(lines)):] {
			if strings.Contains(l, "FAIL") {
				t.Fatalf("%s: %s (pid %d): %s", why, v.name, v.pid, l)
			}
			if _, ok := tickOf(l); ok {
				got++
			}
		}
		if got >= 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s (pid %d): %d new tick lines in %v, want 3; process state %q, TracerPid %q; log ends with:\n%s",
				why, v.name, v.pid, got, wait, procState(v.pid), statusField(v.pid, "TracerPid"), tail(lines, 5))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killAndReap SIGKILLs the victim and takes the reaper's report of it. It
// is signalled through the reaper, never by number: one that has ended
// already may have left its PID to a process of another test package.
func (e *env) killAndReap(t *testing.T, v *victim) {
	t.Helper()
	e.r.Signal(t, v.pid, syscall.SIGKILL)
	if es := e.r.WaitExit(t, v.pid, wait); es.Signal != int(syscall.SIGKILL) {
		t.Fatalf("%s: %v, want killed by SIGKILL", v.name, es)
	}
}

// result is how a command run by the test ended.
type result struct {
	code   int // exit code, or -1 if killed by a signal
	signal int
	stdout string
	stderr string
}

func (r result) String() string {
	how := fmt.Sprintf("exit code %d", r.code)
	if r.signal != 0 {
		how = fmt.Sprintf("killed by signal %d", r.signal)
	}
	return fmt.Sprintf("%s; stdout %q; stderr %q", how, r.stdout, r.stderr)
}

// runCkpt runs BIN/ckpt args directly (ckpt never becomes anybody's parent),
// with extra environment variables.
func (e *env) runCkpt(t *testing.T, extraEnv []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(e.ckpt(), args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			res.code, res.signal = -1, int(ws.Signal())
		} else {
			res.code = ws.ExitStatus()
		}
	default:
		t.Fatalf("ckpt %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// dumpResult is the part of `ckpt dump --json` the tests look at.
type dumpResult struct {
	PID       int   `json:"pid"`
	Pages     int64 `json:"pages"`
	ZeroPages int64 `json:"zero_pages"`
	Bytes     int64 `json:"bytes"`
	FrozenNs  int64 `json:"frozen_ns"`
	Killed    bool  `json:"killed"`
}

// dump runs `ckpt dump --json --dir dir [flags] pid`; it must succeed.
func (e *env) dump(t *testing.T, pid int, dir string, flags ...string) dumpResult {
	t.Helper()
	args := append(append([]string{"dump", "--json", "--dir", dir}, flags...), strconv.Itoa(pid))
	res := e.runCkpt(t, nil, args...)
	if res.code != 0 {
		t.Fatalf("ckpt %s: %v", strings.Join(args, " "), res)
	}
	var dr dumpResult
	if err := json.Unmarshal([]byte(res.stdout), &dr); err != nil {
		t.Fatalf("ckpt dump --json: %v in %q", err, res.stdout)
	}
	if dr.PID != pid || dr.Pages <= 0 || dr.Bytes <= 0 || dr.FrozenNs <= 0 {
		t.Errorf("ckpt dump --json: implausible result %+v for pid %d", dr, pid)
	}
	return dr
}

// dumpKill dumps the victim (killing it) and takes the reaper's report of
// its death, so that its PID is free again.
func (e *env) dumpKill(t *testing.T, v *victim, dir string) dumpResult {
	t.Helper()
	dr := e.dump(t, v.pid, dir)
	if !dr.Killed {
		t.Errorf("ckpt dump: result says killed=false without --leave-running")
	}
	if es := e.r.WaitExit(t, v.pid, wait); es.Signal != int(syscall.SIGKILL) {
		t.Fatalf("%s: after dump: %v, want killed by SIGKILL", v.name, es)
	}
	return dr
}

// redoResult is the part of `ckpt-redo --json` the tests look at.
type redoResult struct {
	PID   int   `json:"pid"`
	Pages int64 `json:"pages"`
}

// runRedo runs `ckpt-redo --json args...` through the reaper (so that the
// restored process becomes the reaper's child), with extra environment
// variables, and waits for it to end.
func (e *env) runRedo(t *testing.T, extraEnv []string, args ...string) result {
	t.Helper()
	d := t.TempDir()
	out, errf := filepath.Join(d, "redo.out"), filepath.Join(d, "redo.err")
	var envv []string
	if extraEnv != nil {
		envv = append(os.Environ(), extraEnv...)
	}
	argv := append([]string{e.redo(), "--json"}, args...)
	pid := e.r.Run(t, testenv.RunOpts{Stdout: out, Stderr: errf, Env: envv, InheritSession: true}, argv...)
	es := e.r.WaitExit(t, pid, 30*time.Second)
	res := result{code: es.Code, signal: es.Signal, stdout: readFile(out), stderr: readFile(errf)}
	if es.Signal != 0 {
		res.code = -1
	}
	return res
}

// restore restores the victim from dir; it must succeed, give back the same
// PID, comm, exe and cmdline, with the reaper as parent, and tick again.
func (e *env) restore(t *testing.T, v *victim, dir string) {
	t.Helper()
	res := e.runRedo(t, nil, dir)
	if res.code != 0 {
		t.Fatalf("ckpt-redo %s: %v; victim log ends with:\n%s", dir, res, tail(v.lines(), 5))
	}
	var rr redoResult
	if err := json.Unmarshal([]byte(res.stdout), &rr); err != nil {
		t.Fatalf("ckpt-redo --json: %v in %q", err, res.stdout)
	}
	if rr.PID != v.pid {
		t.Errorf("ckpt-redo --json: pid %d, want the old pid %d", rr.PID, v.pid)
	}
	// Forgets the reports of earlier processes with the PID (see Alive).
	e.r.Alive(v.pid)
	if c := comm(v.pid); c != v.comm {
		t.Errorf("restored pid %d: comm %q, want %q", v.pid, c, v.comm)
	}
	if x := exeOf(v.pid); x != v.exe {
		t.Errorf("restored pid %d: /proc/PID/exe %q, want %q", v.pid, x, v.exe)
	}
	if c := readFile(fmt.Sprintf("/proc/%d/cmdline", v.pid)); c != v.cmd {
		t.Errorf("restored pid %d: cmdline %q, want %q", v.pid, c, v.cmd)
	}
	if pp := ppid(v.pid); pp != e.r.Pid() {
		t.Errorf("restored pid %d: parent %d, want the reaper %d", v.pid, pp, e.r.Pid())
	}
	v.waitNewTicks(t, 3)
}

// expectGone waits (up to a second) until no process has pid, then takes
// any exit report the reaper makes for it (a half-built process killed
// under it), so that a later WaitExit sees only the next process's exit.
func (e *env) expectGone(t *testing.T, pid int, why string) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: pid %d still exists a second later: state %q comm %q parent %d",
				why, pid, procState(pid), comm(pid), ppid(pid))
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Once the pid is gone it has been reaped: after a sync, the reaper's
	// exit line for it (if the reaper reaped it) has arrived.
	e.r.Sync(t)
	for {
		if _, ok := e.r.Poll(pid); !ok {
			return
		}
	}
}

// waitNoChildren waits (up to a second) until the reaper has no child
// left: nothing a failed restore started (helper, half-built process)
// may survive it.
func (e *env) waitNoChildren(t *testing.T, why string) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		var kids []string
		ents, _ := os.ReadDir("/proc")
		for _, ent := range ents {
			pid, err := strconv.Atoi(ent.Name())
			if err == nil && ppid(pid) == e.r.Pid() {
				kids = append(kids, fmt.Sprintf("%d (%s, state %s)", pid, comm(pid), procState(pid)))
			}
		}
		if len(kids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: processes left under the reaper: %s", why, strings.Join(kids, ", "))
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// noImage checks that dir holds no committed image.
func noImage(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "image.ckpt")); err == nil {
		t.Errorf("%s: image.ckpt exists, want none", dir)
	}
}

// fileHash returns the sha256 of a file's bytes.
func fileHash(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// copyImage copies dir/image.ckpt into a new directory, transformed by fn.
func copyImage(t *testing.T, dir string, fn func([]byte) []byte) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "image.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "image.ckpt"), fn(bytes.Clone(b)), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// statusField returns a field of /proc/PID/status.
func statusField(pid int, name string) string {
	for _, l := range strings.Split(readFile(fmt.Sprintf("/proc/%d/status", pid)), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// sigBit reports whether a hex signal mask of /proc/PID/status has sig.
func sigBit(mask string, sig syscall.Signal) bool {
	m, err := strconv.ParseUint(mask, 16, 64)
	return err == nil && m&(1<<(uint(sig)-1)) != 0
}

func comm(pid int) string {
	return strings.TrimSuffix(readFile(fmt.Sprintf("/proc/%d/comm", pid)), "\n")
}

func exeOf(pid int) string {
	s, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return s
}

// stat returns the fields of /proc/PID/stat after the comm (f[0] is the
// state, field 3 of proc(5)).
func stat(pid int) []string {
	s := readFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

func procState(pid int) string {
	if f := stat(pid); len(f) > 0 {
		return f[0]
	}
	return "gone"
}

func ppid(pid int) int {
	if f := stat(pid); len(f) > 1 {
		n, _ := strconv.Atoi(f[1])
		return n
	}
	return -1
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func tail(lines []string, n int) string {
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// freePID returns a PID no process has, from the top of the range.
func freePID(t *testing.T) int {
	t.Helper()
	for pid := 32000; pid > 1000; pid-- {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			return pid
		}
	}
	t.Fatal("no free pid")
	return 0
}

// compileC compiles a C file of test/e2e/testdata with the victims' header
// directory on the include path, into a temporary directory.
func compileC(t *testing.T, src string, flags ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), ".c"))
	args := append([]string{"-Wall", "-Werror", "-O1", "-g", "-I", testenv.VictimsDir(t)}, flags...)
	args = append(args, "-o", out, filepath.Join("testdata", src))
	if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// runRedoArgv runs a ckpt-redo command line (e.g. inside `ip netns exec`)
// under the reaper.
func (e *env) runRedoArgv(t *testing.T, argv []string) result {
	t.Helper()
	d := t.TempDir()
	out, errf := filepath.Join(d, "redo.out"), filepath.Join(d, "redo.err")
	pid := e.r.Run(t, testenv.RunOpts{Stdout: out, Stderr: errf, InheritSession: true}, argv...)
	es := e.r.WaitExit(t, pid, 30*time.Second)
	res := result{code: es.Code, signal: es.Signal, stdout: readFile(out), stderr: readFile(errf)}
	if es.Signal != 0 {
		res.code = -1
	}
	return res
}

// startLogged runs the command argv(log) under the reaper as victim name,
// with a fresh directory, log and stderr, and waits for its "start " line.
// It is for victims that are not testdata/victims programs (python scripts
// of test/e2e/testdata, commands run inside a network namespace).
func (e *env) startLogged(t *testing.T, name string, argv func(log string) []string) *victim {
	t.Helper()
	dir := t.TempDir()
	v := &victim{name: name, dir: dir, log: filepath.Join(dir, "log"), stderr: filepath.Join(dir, "stderr")}
	v.pid = e.r.Run(t, testenv.RunOpts{Stderr: v.stderr, Dir: dir}, argv(v.log)...)
	v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "start ") })
	v.comm = comm(v.pid)
	return v
}

// waitSockets waits until process pid holds at least n socket fds (what
// says: a server has accepted its clients).
func waitSockets(t *testing.T, pid, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		got := 0
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, ent := range ents {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, ent.Name())); strings.HasPrefix(l, "socket:[") {
				got++
			}
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: %d sockets after %v, want %d (%s)", pid, got, wait, n, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// script is the path of a test/e2e/testdata script.
func script(t *testing.T, name string) string {
	return filepath.Join(testenv.RepoRoot(t), "test", "e2e", "testdata", name)
}

// progress returns N of the last "PREFIX N" line of the victim's log, and
// fails the test on any line that says FAIL.
func (v *victim) progress(t *testing.T, prefix string) int {
	t.Helper()
	n := 0
	for _, l := range v.lines() {
		if strings.Contains(l, "FAIL") {
			t.Fatalf("%s: %s", v.name, l)
		}
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			n, _ = strconv.Atoi(rest)
		}
	}
	return n
}

// waitProgress waits for a "PREFIX N" line with N past than, and returns N.
func (v *victim) waitProgress(t *testing.T, prefix string, than int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n := v.progress(t, prefix); n > than {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q line past %d; log ends:\n%s", v.name, prefix, than, tail(v.lines(), 5))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
