package e2e

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
)

// startTreeSession starts the tree_session victim: its starter leads a new
// session and exits at once, leaving the tree's root in a session and group
// without a leader. It returns the victim (the root) and the ids of its
// start line.
func (e *env) startTreeSession(t *testing.T) (*victim, map[string]int) {
	t.Helper()
	testenv.BuildVictim(t, "tree_session")
	dir := t.TempDir()
	v := &victim{name: "tree_session", dir: dir, log: filepath.Join(dir, "log"), stderr: filepath.Join(dir, "stderr")}
	starter := e.r.Run(t, testenv.RunOpts{Stderr: v.stderr, Dir: dir}, testenv.VictimArgv(t, v.name, v.log)...)
	if es := e.r.WaitExit(t, starter, wait); es != (testenv.ExitStatus{Pid: starter}) {
		t.Fatalf("tree_session starter: %v; stderr %q", es, readFile(v.stderr))
	}
	start := v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "start ") })
	ids := map[string]int{}
	for _, f := range strings.Fields(start)[1:] {
		k, val, _ := strings.Cut(f, "=")
		ids[k], _ = strconv.Atoi(val)
	}
	if ids["sid"] != starter || ids["pid"] == 0 || ids["k"] == 0 || ids["l"] == 0 || ids["z"] == 0 || ids["g1"] == 0 || ids["s"] == 0 || ids["e"] == 0 {
		t.Fatalf("start line %q: want sid=%d (the starter) and every id", start, starter)
	}
	v.pid = ids["pid"]
	v.waitTick(t, 1)
	v.comm, v.exe = comm(v.pid), exeOf(v.pid)
	return v, ids
}

// redoInPTY runs ckpt-redo IMG inside a pseudo-terminal session made by
// script(1) under the reaper, as from `ssh -t` or tmux: the session's
// terminal hangs up when ckpt-redo, its leader, exits. It returns what the
// session printed (the tty, then ckpt-redo's JSON result).
func (e *env) redoInPTY(t *testing.T, img string) string {
	t.Helper()
	d := t.TempDir()
	out, errf := filepath.Join(d, "out"), filepath.Join(d, "err")
	pid := e.r.Run(t, testenv.RunOpts{Stdout: out, Stderr: errf},
		"script", "-qec", "tty; exec "+e.redo()+" --json "+img, "/dev/null")
	if es := e.r.WaitExit(t, pid, 30*time.Second); es != (testenv.ExitStatus{Pid: pid}) {
		t.Fatalf("script -c ckpt-redo: %v; output %q; stderr %q", es, readFile(out), readFile(errf))
	}
	s := readFile(out)
	if !strings.HasPrefix(s, "/dev/pts/") {
		t.Fatalf("ckpt-redo did not run on a pseudo-terminal: output %q", s)
	}
	return s
}

// TestSessionUnderPTY restores a tree whose session and groups are led by
// processes that are gone (the session's, and a group's), in the tree, and
// a zombie, with a child left in the session its parent left (forked
// before the parent's setsid), from a pseudo-terminal session that hangs up right after. The
// tree is first dumped twice with --leave-running (it must go on exactly as
// before), then dumped and restored twice: the restored processes keep
// their sessions and groups (from the outside and from the inside: getsid,
// getpgid), survive the hang-up of ckpt-redo's terminal (SIGHUP is not
// blocked), and are not left in ckpt-redo's session.
func TestSessionUnderPTY(t *testing.T) {
	e := setup(t)
	testenv.LockPtys(t) // script(1) opens a pty
	v, ids := e.startTreeSession(t)
	before := treeSnapshot(v.pid)
	if len(before) != 6 {
		t.Fatalf("tree_session: %d processes, want 6:%s", len(before), fmtTree(before))
	}
	for i := 1; i <= 2; i++ {
		e.dump(t, v.pid, filepath.Join(t.TempDir(), "img"), "--leave-running")
		compareTree(t, "after a dump with --leave-running", before, treeSnapshot(v.pid), nil)
		v.waitNewTicks(t, 2)
	}
	for cycle := 1; cycle <= 2; cycle++ {
		img := filepath.Join(t.TempDir(), "img")
		pids := make([]int, 0, len(before))
		for pid := range before {
			pids = append(pids, pid)
		}
		e.dumpKill(t, v, img)
		e.waitTreeGone(t, "after the dump", pids)
		out := e.redoInPTY(t, img)
		if !strings.Contains(out, `"pid": `+strconv.Itoa(v.pid)+",") {
			t.Errorf("ckpt-redo output %q: want pid %d", out, v.pid)
		}
		after := treeSnapshot(v.pid)
		compareTree(t, "after the restore", before, after, nil)
		if root := after[v.pid]; root.sid != ids["sid"] || root.pgid != ids["sid"] || root.ppid != e.r.Pid() {
			t.Errorf("restored root %v: want sid and pgid %d, parent the reaper %d", root, ids["sid"], e.r.Pid())
		}
		if t.Failed() {
			t.FailNow()
		}
		v.waitNewTicks(t, 5) // the terminal has hung up: still alive
		v.check(t)
		// The first check reaped the zombie.
		delete(before, ids["z"])
	}
	e.bye(t, v)
}
