package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt/ckpt/internal/testenv"
)

func init() {
	tickFormat["miscstate"] = regexp.MustCompile(`^tick \d+ alrm=\d+ rt=\d+$`)
}

// procSnapshot is what the test compares of a process before and after a
// dump and restore, besides what the process checks itself.
type procSnapshot map[string]string

// statusFields are the /proc/PID/status fields that must survive a restore.
var statusFields = []string{
	"Uid", "Gid", "Groups", "Umask", "NoNewPrivs", "Seccomp", "Seccomp_filters",
	"SigBlk", "SigIgn", "SigCgt", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
}

func snapshot(t *testing.T, pid int) procSnapshot {
	t.Helper()
	s := procSnapshot{}
	for _, f := range statusFields {
		s["status "+f] = statusField(pid, f)
	}
	// While a signal handler runs, its signal is blocked too: what is
	// blocked all along is what every reading has.
	blk := ^uint64(0)
	for i := 0; i < 8; i++ {
		m, err := strconv.ParseUint(statusField(pid, "SigBlk"), 16, 64)
		if err != nil {
			t.Fatalf("pid %d: SigBlk: %v", pid, err)
		}
		blk &= m
	}
	s["status SigBlk"] = fmt.Sprintf("%016x", blk)
	s["limits"] = readFile(fmt.Sprintf("/proc/%d/limits", pid))
	s["personality"] = strings.TrimSpace(readFile(fmt.Sprintf("/proc/%d/personality", pid)))
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		t.Fatalf("pid %d: cwd: %v", pid, err)
	}
	s["cwd"] = cwd
	for k, v := range s {
		if v == "" {
			t.Fatalf("pid %d: %s is empty", pid, k)
		}
	}
	return s
}

func compareSnapshots(t *testing.T, what string, before, after procSnapshot) {
	t.Helper()
	for k, b := range before {
		if a := after[k]; a != b {
			t.Errorf("%s: %s is %q, want %q as before the dump", what, k, a, b)
		}
	}
}

// TestProcessState dumps and restores (twice) miscstate, a process with
// interval timers, a POSIX timer, a parent-death signal, a umask, a working
// directory, rlimits, a personality, no_new_privs and a seccomp filter, an
// alternate signal stack and nobody's credentials: it checks all of it
// itself after each restore, and /proc must show the same as before.
func TestProcessState(t *testing.T) {
	e := setup(t)
	// The victim ends up as nobody in cwd: a directory anybody may use.
	cwd := filepath.Join(t.TempDir(), "cwd")
	if err := os.Mkdir(cwd, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cwd, 0o777); err != nil { // despite the umask
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(cwd), 0o755)
	v := e.startVictim(t, "miscstate", cwd)
	v.waitTick(t, 3)
	v.check(t) // the victim's own check holds before any dump
	before := snapshot(t, v.pid)
	if before["cwd"] != cwd || before["status Uid"] != "65534\t65534\t65534\t65534" ||
		before["status Seccomp"] != "2" || before["status Umask"] != "0027" {
		t.Fatalf("miscstate did not set itself up: %v", before)
	}
	checks := 1
	for cycle := 1; cycle <= 2; cycle++ {
		img := filepath.Join(t.TempDir(), "img")
		e.dumpKill(t, v, img)
		e.restore(t, v, img)
		v.check(t)
		checks++
		compareSnapshots(t, fmt.Sprintf("cycle %d: after restore", cycle), before, snapshot(t, v.pid))
	}
	lines := e.bye(t, v)
	testenv.CheckTicks(t, lines)
	checkLogFile(t, v, checks)
}

// TestExternalPipe dumps a process whose stdout is a pipe to a process
// outside the dump (the test): the restore must refuse it, naming the fd
// and how to get past it, and leave nothing behind; with --stdio
// /dev/null it restores, with /dev/null as stdout.
func TestExternalPipe(t *testing.T) {
	e := setup(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	dir := t.TempDir()
	v := &victim{name: "static_counter", dir: dir, log: filepath.Join(dir, "log"), stderr: filepath.Join(dir, "stderr")}
	// The reaper opens the victim's stdout through /proc: the pipe's
	// write end, whose read end stays with the test.
	v.pid = e.r.Run(t, testenv.RunOpts{Stdout: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), pw.Fd()), Stderr: v.stderr, Dir: dir},
		testenv.VictimArgv(t, v.name, v.log)...)
	pw.Close()
	v.waitTick(t, 1)
	v.comm, v.exe = comm(v.pid), exeOf(v.pid)
	v.cmd = readFile(fmt.Sprintf("/proc/%d/cmdline", v.pid))
	ino := func() string {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", v.pid))
		return l
	}
	var st1 = ino()
	if !strings.HasPrefix(st1, "pipe:[") {
		t.Fatalf("victim's stdout is %q, want a pipe", st1)
	}
	v.waitTick(t, 3)
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, v, img)
	h := fileHash(t, filepath.Join(img, "image.ckpt"))

	res := e.runRedo(t, nil, img)
	if res.code <= 0 {
		t.Fatalf("ckpt-redo of a process with stdout %s to the test: %v, want a non-zero exit code", st1, res)
	}
	for _, want := range []string{"fd 1", "pipe", "--inherit-fd", "--stdio"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("ckpt-redo: stderr %q, want it to say %q", res.stderr, want)
		}
	}
	e.expectGone(t, v.pid, "after the refused restore")
	e.waitNoChildren(t, "after the refused restore")
	if got := fileHash(t, filepath.Join(img, "image.ckpt")); got != h {
		t.Errorf("the refused restore changed the image")
	}

	res = e.runRedo(t, nil, "--stdio", "/dev/null", img)
	if res.code != 0 {
		t.Fatalf("ckpt-redo --stdio /dev/null: %v; victim log ends with:\n%s", res, tail(v.lines(), 5))
	}
	var rr redoResult
	if err := json.Unmarshal([]byte(res.stdout), &rr); err != nil || rr.PID != v.pid {
		t.Errorf("ckpt-redo --json: pid %d (%v) in %q, want %d", rr.PID, err, res.stdout, v.pid)
	}
	if c := comm(v.pid); c != v.comm {
		t.Fatalf("restored pid %d: comm %q, want %q", v.pid, c, v.comm)
	}
	if pp := ppid(v.pid); pp != e.r.Pid() {
		t.Errorf("restored pid %d: parent %d, want the reaper %d", v.pid, pp, e.r.Pid())
	}
	if got := ino(); got != "/dev/null" {
		t.Errorf("restored with --stdio /dev/null: stdout is %q, want /dev/null", got)
	}
	if got, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/2", v.pid)); got != v.stderr {
		t.Errorf("restored with --stdio /dev/null: stderr is %q, want the file %s as before", got, v.stderr)
	}
	v.waitNewTicks(t, 3)
	v.check(t)
	lines := e.bye(t, v)
	testenv.CheckTicks(t, lines)
	checkLogFile(t, v, 1)
}

// TestGhostLimit dumps ghost (a deleted file of 12388 bytes held open and
// mapped) with --ghost-limit 100: the dump must be refused, saying the
// file's size and the option, with no image, and the victim must go on
// untouched.
func TestGhostLimit(t *testing.T) {
	e := setup(t)
	bin := compileC(t, "ghost.c")
	const size = 3*4096 + 100 // SIZE of ghost.c
	dir := t.TempDir()
	v := &victim{name: "ghost", dir: dir, log: filepath.Join(dir, "log"), stderr: filepath.Join(dir, "stderr")}
	e.startArgv(t, v, []string{bin, v.log, dir})
	v.waitTick(t, 3)
	img := filepath.Join(t.TempDir(), "img")
	args := []string{"dump", "--ghost-limit", "100", "--dir", img, strconv.Itoa(v.pid)}
	res := e.runCkpt(t, nil, args...)
	if res.code <= 0 {
		t.Fatalf("ckpt %s: %v, want a non-zero exit code", strings.Join(args, " "), res)
	}
	for _, want := range []string{strconv.Itoa(size), "--ghost-limit"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("ckpt %s: stderr %q, want it to say %q", strings.Join(args, " "), res.stderr, want)
		}
	}
	noImage(t, img)
	if _, err := os.Stat(filepath.Join(img, "image.ckpt.partial")); err == nil {
		t.Errorf("the refused dump left image.ckpt.partial behind")
	}
	e.expectAlive(t, v, "after the refused dump")
	if tp := statusField(v.pid, "TracerPid"); tp != "0" {
		t.Errorf("TracerPid %s after the refused dump, want 0", tp)
	}
	if st := procState(v.pid); st != "S" && st != "R" {
		t.Errorf("state %q after the refused dump, want S or R", st)
	}
	v.check(t)
	lines := e.bye(t, v)
	testenv.CheckTicks(t, lines)
	checkLogFile(t, v, 1)
}

// TestOwnProcFiles restores a process that keeps a directory and a file of
// its own /proc open: they cannot be opened before the process exists, so
// the process opens them itself once rebuilt, and they describe it, not
// ckpt-redo.
func TestOwnProcFiles(t *testing.T) {
	e := setup(t)
	v := e.startLogged(t, "ownproc", func(log string) []string {
		return []string{"python3", script(t, "ownproc.py"), log}
	})
	v.waitProgress(t, "ok ", 5)
	for i := 0; i < 2; i++ {
		img := filepath.Join(t.TempDir(), "img")
		e.dumpKill(t, v, img)
		n := v.progress(t, "ok ")
		if res := e.runRedo(t, nil, img); res.code != 0 {
			t.Fatalf("cycle %d: ckpt-redo: %v", i, res)
		}
		v.waitProgress(t, "ok ", n+10)
	}
	e.killAndReap(t, v)
}

// TestParityLocalDirs protects the images of three processes (one
// directory per "node") with `ckpt parity encode`, loses one directory
// entirely, rebuilds it with `ckpt parity recover` byte-identical (image
// and parity share), and restores all three: the rebuilt one carries on
// like the others.
func TestParityLocalDirs(t *testing.T) {
	e := setup(t)
	root := t.TempDir()
	var victims []*victim
	var dirs []string
	for i, name := range []string{"static_counter", "dynamic_counter", "vector"} {
		v := e.startVictim(t, name)
		v.waitNewTicks(t, 3)
		dir := filepath.Join(root, fmt.Sprintf("node%d", i))
		e.dumpKill(t, v, dir)
		victims = append(victims, v)
		dirs = append(dirs, dir)
	}
	if res := e.runCkpt(t, nil, append([]string{"parity", "encode", "--json", "--block-size", "65536"}, dirs...)...); res.code != 0 {
		t.Fatalf("ckpt parity encode: %v", res)
	}
	lost := dirs[1]
	want := map[string]string{}
	for _, f := range []string{"image.ckpt", "parity.ckpt"} {
		want[f] = fileHash(t, filepath.Join(lost, f))
	}
	if err := os.RemoveAll(lost); err != nil {
		t.Fatal(err)
	}
	if res := e.runCkpt(t, nil, "parity", "recover", "--lost", lost, dirs[0], dirs[2]); res.code != 0 {
		t.Fatalf("ckpt parity recover: %v", res)
	}
	for f, h := range want {
		if got := fileHash(t, filepath.Join(lost, f)); got != h {
			t.Fatalf("rebuilt %s differs from the lost one", f)
		}
	}
	for i, v := range victims {
		e.restore(t, v, dirs[i])
		v.check(t)
	}
	for _, v := range victims {
		e.bye(t, v)
	}
}
