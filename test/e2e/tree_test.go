package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
)

// treeProc is one process of a tree as /proc shows it.
type treeProc struct {
	pid, ppid, pgid, sid int
	state, comm          string
}

func (p treeProc) String() string {
	return fmt.Sprintf("%d(%s ppid=%d pgid=%d sid=%d state=%s)", p.pid, p.comm, p.ppid, p.pgid, p.sid, p.state)
}

// treeSnapshot walks /proc/PID/task/*/children from root, recursively, and
// returns every process found, by pid. Zombie children are listed too.
func treeSnapshot(root int) map[int]treeProc {
	out := map[int]treeProc{}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		f := stat(pid)
		if len(f) < 4 {
			continue // gone meanwhile
		}
		p := treeProc{pid: pid, state: f[0], comm: comm(pid)}
		p.ppid, _ = strconv.Atoi(f[1])
		p.pgid, _ = strconv.Atoi(f[2])
		p.sid, _ = strconv.Atoi(f[3])
		out[pid] = p
		kids, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, k := range kids {
			for _, s := range strings.Fields(readFile(k)) {
				if n, err := strconv.Atoi(s); err == nil {
					queue = append(queue, n)
				}
			}
		}
	}
	return out
}

func fmtTree(m map[int]treeProc) string {
	pids := make([]int, 0, len(m))
	for pid := range m {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	var b strings.Builder
	for _, pid := range pids {
		fmt.Fprintf(&b, "\n  %v", m[pid])
	}
	return b.String()
}

// compareTree checks that every process of before exists in after with the
// same ppid, pgid, sid and comm (only the pids listed in only, if not nil),
// and untraced unless it is a zombie. States are checked by the caller.
func compareTree(t *testing.T, why string, before, after map[int]treeProc, only []int) {
	t.Helper()
	bad := false
	for pid, b := range before {
		if only != nil && !slices.Contains(only, pid) {
			continue
		}
		a, ok := after[pid]
		switch {
		case !ok:
			t.Errorf("%s: process %v is missing", why, b)
			bad = true
		case a.ppid != b.ppid || a.pgid != b.pgid || a.sid != b.sid || a.comm != b.comm:
			t.Errorf("%s: process %v, want %v", why, a, b)
			bad = true
		case a.state != "Z":
			if tp := statusField(pid, "TracerPid"); tp != "0" {
				t.Errorf("%s: process %v has TracerPid %s, want 0", why, a, tp)
				bad = true
			}
		}
	}
	if only == nil {
		for pid, a := range after {
			if _, ok := before[pid]; !ok {
				t.Errorf("%s: extra process %v", why, a)
				bad = true
			}
		}
	}
	if bad {
		t.Logf("%s: before:%s\nafter:%s", why, fmtTree(before), fmtTree(after))
	}
}

// waitTreeGone waits until none of pids exists any more (the reaper reaps
// the members of a killed tree as they get reparented to it), then takes
// the reaper's exit reports of them.
func (e *env) waitTreeGone(t *testing.T, why string, pids []int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		var left []string
		for _, pid := range pids {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				left = append(left, fmt.Sprintf("%d (%s, state %s, parent %d)", pid, comm(pid), procState(pid), ppid(pid)))
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: processes still there after %v: %s", why, wait, strings.Join(left, ", "))
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.r.Sync(t) // the reaper's exit lines for them have arrived
	for _, pid := range pids {
		for {
			if _, ok := e.r.Poll(pid); !ok {
				break
			}
		}
	}
}

// treeRoles parses the start line of the tree victim.
func treeRoles(t *testing.T, start string) map[string]int {
	t.Helper()
	roles := map[string]int{}
	for _, f := range strings.Fields(start)[1:] {
		k, v, _ := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("bad start line %q", start)
		}
		roles[k] = n
	}
	for _, k := range []string{"pid", "producer", "consumer", "grandchild", "zombie", "stopped"} {
		if _, ok := roles[k]; !ok || roles[k] < 0 || (roles[k] == 0 && k != "zombie") {
			t.Fatalf("start line %q has no %s", start, k)
		}
	}
	return roles
}

var (
	treeLine = regexp.MustCompile(`^(start pid=\d+ producer=\d+ consumer=\d+ grandchild=\d+ zombie=\d+ stopped=\d+|tick \d+ seq=\d+|got \d+|check ok \d+|bye \d+)$`)
	treeSeq  = regexp.MustCompile(`^tick \d+ seq=(\d+)$`)
	treeGot  = regexp.MustCompile(`^got (\d+)$`)
)

// lastSeq returns the consumer's last record in the last tick line.
func lastSeq(lines []string) int {
	for i := len(lines) - 1; i >= 0; i-- {
		if m := treeSeq.FindStringSubmatch(lines[i]); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	return 0
}

// lastGot returns the number of the last "got N" line, 0 if none.
func lastGot(lines []string) int {
	for i := len(lines) - 1; i >= 0; i-- {
		if m := treeGot.FindStringSubmatch(lines[i]); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	return 0
}

// TestTree runs the tree victim (root, producer and consumer joined by a
// pipe, the consumer's grandchild in its own process group, a zombie, a
// stopped child, a shared anonymous page and a log shared by root and
// consumer through one open file description) through two dump+restore
// cycles, with and without a session of its own, and (to show whether the
// rest works when zombies don't) without the zombie. Each restore must give
// back the same processes with the same pid, ppid, pgid, sid, the zombie a
// zombie and the stopped child stopped; the pipeline must go on with no
// record lost or repeated, and the root's checks must pass.
func TestTree(t *testing.T) {
	e := setup(t)
	testenv.BuildVictim(t, "tree") // once, before the parallel subtests
	for _, tc := range []struct {
		name           string
		setsid, zombie bool
	}{
		{"setsid", true, true},
		{"inherited_session", false, true},
		{"setsid_nozombie", true, false},
	} {
		setsid := tc.setsid
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			v := &victim{name: "tree", dir: dir, log: filepath.Join(dir, "log"), stderr: filepath.Join(dir, "stderr")}
			argv := testenv.VictimArgv(t, "tree", v.log)
			if !tc.zombie {
				argv = append(argv, "nozombie")
			}
			v.pid = e.r.Run(t, testenv.RunOpts{Stderr: v.stderr, Dir: dir, InheritSession: !setsid}, argv...)
			start := v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "start ") })
			roles := treeRoles(t, start)
			if roles["pid"] != v.pid {
				t.Fatalf("start line %q, want pid %d", start, v.pid)
			}
			v.waitTick(t, 1)
			v.comm, v.exe = comm(v.pid), exeOf(v.pid)
			v.cmd = readFile(fmt.Sprintf("/proc/%d/cmdline", v.pid))
			v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "got ") })

			for cycle := 1; cycle <= 2; cycle++ {
				why := fmt.Sprintf("cycle %d", cycle)
				v.waitNewTicks(t, 3)
				before := treeSnapshot(v.pid)
				// The zombie is reaped by the first check.
				want := []string{"pid", "producer", "consumer", "grandchild", "stopped"}
				if tc.zombie && cycle == 1 {
					want = append(want, "zombie")
				}
				if len(before) != len(want) {
					t.Fatalf("%s: before the dump the tree has %d processes, want %d (%v):%s", why, len(before), len(want), want, fmtTree(before))
				}
				for _, r := range want {
					if _, ok := before[roles[r]]; !ok {
						t.Fatalf("%s: before the dump the %s %d is not in the tree:%s", why, r, roles[r], fmtTree(before))
					}
				}
				checkTreeShape(t, why+", before the dump", e, roles, before, setsid, tc.zombie && cycle == 1)
				seq0, got0 := lastSeq(v.lines()), lastGot(v.lines())

				img := filepath.Join(t.TempDir(), "img")
				if setsid {
					e.dumpKill(t, v, img)
				} else {
					// The session and group are the test's: refused by
					// name, the tree going on untouched, unless
					// --shell-job (and ckpt-redo runs in the test's
					// session too).
					res := e.runCkpt(t, nil, "dump", "--dir", img, strconv.Itoa(v.pid))
					want := fmt.Sprintf("process %d: session ", v.pid)
					if res.code == 0 || !strings.Contains(res.stderr, want) || !strings.Contains(res.stderr, "outside the dump; use --shell-job") {
						t.Fatalf("%s: dump without --shell-job: %v; want a refusal naming %q", why, res, want)
					}
					compareTree(t, why+": after the refused dump", before, treeSnapshot(v.pid), nil)
					v.waitNewTicks(t, 2)
					e.dump(t, v.pid, img, "--shell-job")
					if es := e.r.WaitExit(t, v.pid, wait); es.Signal != int(syscall.SIGKILL) {
						t.Fatalf("%s: after dump: %v, want killed by SIGKILL", why, es)
					}
				}
				e.checkTreeImage(t, why, img, before, roles["zombie"], v.log)
				pids := make([]int, 0, len(before))
				for pid := range before {
					pids = append(pids, pid)
				}
				e.waitTreeGone(t, why+": after the dump", pids)
				e.restore(t, v, img)
				after := treeSnapshot(v.pid)
				compareTree(t, why+": after the restore", before, after, nil)
				checkTreeShape(t, why+", after the restore", e, roles, after, setsid, tc.zombie && cycle == 1)
				if t.Failed() {
					t.FailNow()
				}

				// The pipeline goes on: the consumer gets new records and
				// writes new "got" lines.
				v.waitLine(t, func(l string) bool {
					m := treeSeq.FindStringSubmatch(l)
					n := 0
					if m != nil {
						n, _ = strconv.Atoi(m[1])
					}
					return n > seq0+20
				})
				v.waitLine(t, func(l string) bool {
					m := treeGot.FindStringSubmatch(l)
					n := 0
					if m != nil {
						n, _ = strconv.Atoi(m[1])
					}
					return n > got0
				})
				v.check(t)
			}
			lines := e.bye(t, v)
			testenv.CheckTicks(t, lines)
			checkTreeLog(t, v, lines, 2)
		})
	}
}

// treeImageProc is the part of `ckpt show --json` about one process that
// the tree tests look at.
type treeImageProc struct {
	PID        int  `json:"pid"`
	PPID       int  `json:"ppid"`
	PGID       int  `json:"pgid"`
	SID        int  `json:"sid"`
	Zombie     bool `json:"zombie"`
	ExitStatus int  `json:"exit_status"`
	Files      []struct {
		ID   int    `json:"id"`
		Kind string `json:"kind"`
		Ref  struct {
			Path string `json:"path"`
		} `json:"ref"`
		Pipe *struct {
			Write    bool `json:"write"`
			External bool `json:"external"`
			DataID   int  `json:"data_id"`
		} `json:"pipe"`
	} `json:"files"`
	FDs []struct {
		FD   int `json:"fd"`
		File int `json:"file"`
	} `json:"fds"`
}

// checkTreeImage checks the image of the tree victim with `ckpt show
// --json`: the processes of the tree before the dump with their ids, the
// zombie with its exit status, the log as one open file description used
// by every live process, and the pipe with buffered bytes.
func (e *env) checkTreeImage(t *testing.T, why, img string, before map[int]treeProc, zombie int, log string) {
	t.Helper()
	res := e.runCkpt(t, nil, "show", "--json", img)
	if res.code != 0 {
		t.Fatalf("%s: ckpt show --json %s: %v", why, img, res)
	}
	var s struct {
		Processes []treeImageProc `json:"processes"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &s); err != nil {
		t.Fatalf("%s: ckpt show --json: %v", why, err)
	}
	seen := map[int]bool{}
	logFiles := map[int]bool{}
	pipeData := false
	for _, p := range s.Processes {
		seen[p.PID] = true
		b, ok := before[p.PID]
		if !ok {
			t.Errorf("%s: image: process %d was not in the tree:%s", why, p.PID, fmtTree(before))
			continue
		}
		if p.PPID != b.ppid || p.PGID != b.pgid || p.SID != b.sid {
			t.Errorf("%s: image: process %d ppid %d pgid %d sid %d, want %v", why, p.PID, p.PPID, p.PGID, p.SID, b)
		}
		if p.Zombie != (p.PID == zombie && b.state == "Z") {
			t.Errorf("%s: image: process %v: zombie %v", why, b, p.Zombie)
		}
		if p.Zombie && p.ExitStatus != 42<<8 {
			t.Errorf("%s: image: zombie %d: exit status %#x, want %#x (exit 42)", why, p.PID, p.ExitStatus, 42<<8)
		}
		for _, f := range p.Files {
			if f.Ref.Path == log {
				logFiles[f.ID] = true
			}
			if f.Kind == "pipe" && f.Pipe != nil && !f.Pipe.External && f.Pipe.DataID != 0 {
				pipeData = true
			}
		}
	}
	for pid, b := range before {
		if !seen[pid] {
			t.Errorf("%s: image: no process %v", why, b)
		}
	}
	if len(logFiles) != 1 {
		t.Errorf("%s: image: %d open files of the log %s, want 1 shared by all: %v", why, len(logFiles), log, logFiles)
	}
	for _, p := range s.Processes {
		if p.Zombie {
			continue
		}
		has := false
		for _, fd := range p.FDs {
			has = has || logFiles[fd.File]
		}
		if !has {
			t.Errorf("%s: image: process %d has no fd of the shared log file", why, p.PID)
		}
	}
	if !pipeData {
		t.Errorf("%s: image: no pipe inside the tree with buffered data (the consumer leaves 4 records in it)", why)
	}
}

// imageTree lists the processes of an image (`ckpt show --json`), for
// failure messages.
func (e *env) imageTree(t *testing.T, img string) string {
	t.Helper()
	res := e.runCkpt(t, nil, "show", "--json", img)
	var s struct {
		Processes []struct {
			treeImageProc
			Comm string `json:"comm"`
		} `json:"processes"`
	}
	if res.code != 0 || json.Unmarshal([]byte(res.stdout), &s) != nil {
		return fmt.Sprintf(" (ckpt show --json: %v)", res)
	}
	var b strings.Builder
	for _, p := range s.Processes {
		fmt.Fprintf(&b, "\n  %d(%s ppid=%d pgid=%d sid=%d", p.PID, p.Comm, p.PPID, p.PGID, p.SID)
		if p.Zombie {
			fmt.Fprintf(&b, " zombie, wait status %#x", p.ExitStatus)
		}
		b.WriteString(")")
	}
	return b.String()
}

// checkTreeShape checks the process groups, sessions and states of the
// tree victim's processes.
func checkTreeShape(t *testing.T, why string, e *env, roles map[string]int, m map[int]treeProc, setsid, zombie bool) {
	t.Helper()
	root := m[roles["pid"]]
	if root.ppid != e.r.Pid() {
		t.Errorf("%s: root %v: parent is not the reaper %d", why, root, e.r.Pid())
	}
	if setsid && (root.sid != root.pid || root.pgid != root.pid) {
		t.Errorf("%s: root %v: want a session and process group leader", why, root)
	}
	if !setsid && (root.sid == root.pid || root.pgid == root.pid) {
		t.Errorf("%s: root %v: want the reaper's session and group", why, root)
	}
	for _, r := range []string{"producer", "consumer", "grandchild", "stopped", "zombie"} {
		p, ok := m[roles[r]]
		if !ok {
			continue // checked by the callers
		}
		wantPPID, wantPGID := root.pid, root.pgid
		if r == "grandchild" {
			wantPPID, wantPGID = roles["consumer"], p.pid
		}
		if p.ppid != wantPPID || p.pgid != wantPGID || p.sid != root.sid {
			t.Errorf("%s: %s %v: want ppid %d pgid %d sid %d", why, r, p, wantPPID, wantPGID, root.sid)
		}
		switch wantState := map[string]string{"stopped": "T", "zombie": "Z"}[r]; {
		case wantState != "" && p.state != wantState:
			t.Errorf("%s: %s %v: want state %s", why, r, p, wantState)
		case wantState == "" && !strings.Contains("SRD", p.state):
			t.Errorf("%s: %s %v: want state S, R or D", why, r, p)
		}
	}
	if _, ok := m[roles["zombie"]]; roles["zombie"] != 0 && ok != zombie {
		t.Errorf("%s: zombie %d in the tree: %v, want %v", why, roles["zombie"], ok, zombie)
	}
}

// checkTreeLog checks the whole log of the tree victim: every line well
// formed (no torn or overwritten line), one start line, wantChecks check
// lines, the consumer's record in tick lines never going back, and its
// "got N" lines 100, 200, 300, ... with no gap and no repeat.
func checkTreeLog(t *testing.T, v *victim, lines []string, wantChecks int) {
	t.Helper()
	b, _ := os.ReadFile(v.log)
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Errorf("log does not end with a newline")
	}
	starts, checks, seq, got := 0, 0, 0, 0
	for i, l := range lines {
		if !treeLine.MatchString(l) {
			t.Errorf("log line %d is malformed (overwritten or torn?): %q", i+1, l)
			continue
		}
		switch {
		case strings.HasPrefix(l, "start "):
			starts++
		case strings.HasPrefix(l, "check "):
			checks++
		}
		if m := treeSeq.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			if n < seq {
				t.Errorf("log line %d: %q: the consumer's record went back from %d", i+1, l, seq)
			}
			seq = n
		}
		if m := treeGot.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			if n != got+100 {
				t.Errorf("log line %d: %q follows got %d, want got %d", i+1, l, got, got+100)
			}
			got = n
		}
	}
	if starts != 1 {
		t.Errorf("%d start lines, want 1", starts)
	}
	if checks != wantChecks {
		t.Errorf("%d check lines, want %d", checks, wantChecks)
	}
	if got < 300 {
		t.Errorf("last got line is %d, want at least 300", got)
	}
	if s := readFile(v.stderr); s != "" {
		t.Errorf("stderr is not empty: %q", s)
	}
	if t.Failed() {
		t.Logf("log:\n%s", strings.Join(lines, "\n"))
	}
}

// checkCount checks that file holds the lines 1, 2, ..., N and returns N.
func checkCount(t *testing.T, file string) int {
	t.Helper()
	lines := testenv.ReadLines(file)
	for i, l := range lines {
		if l != strconv.Itoa(i+1) {
			t.Fatalf("%s: line %d is %q, want %d (lines %d..%d: %q)", file, i+1, l, i+1,
				max(0, i-3)+1, min(len(lines), i+4), lines[max(0, i-3):min(len(lines), i+4)])
		}
	}
	return len(lines)
}

// waitCount waits until file holds at least n lines.
func waitCount(t *testing.T, file string, n int, why string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for len(testenv.ReadLines(file)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s has %d lines after %v, want %d", why, file, len(testenv.ReadLines(file)), wait, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTreeShellPipeline dumps and restores a real shell pipeline twice:
// bash, its subshell counting into a pipe (forking a sleep for every
// number) and cat copying the pipe into a file. The file must count 1..N
// with no gap or repeat and keep growing after each restore.
func TestTreeShellPipeline(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	out, errf := filepath.Join(dir, "out"), filepath.Join(dir, "stderr")
	script := "i=0; while :; do i=$((i+1)); echo $i; sleep 0.01; done | cat > " + out
	root := e.r.Run(t, testenv.RunOpts{Stderr: errf, Dir: dir}, "/bin/bash", "-c", script)
	waitCount(t, out, 20, "at start")

	// The stable members: bash, the counting subshell (bash) and cat; the
	// sleeps come and go.
	var stable []int
	deadline := time.Now().Add(wait)
	for {
		m := treeSnapshot(root)
		stable = stable[:0]
		for pid, p := range m {
			if pid == root || (p.ppid == root && (p.comm == "bash" || p.comm == "cat")) {
				stable = append(stable, pid)
			}
		}
		if len(stable) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pipeline's tree is not bash, bash, cat:%s", fmtTree(m))
		}
		time.Sleep(10 * time.Millisecond)
	}
	comm0, exe0 := comm(root), exeOf(root)

	for cycle := 1; cycle <= 2; cycle++ {
		why := fmt.Sprintf("cycle %d", cycle)
		before := treeSnapshot(root)
		img := filepath.Join(t.TempDir(), "img")
		e.dump(t, root, img)
		if es := e.r.WaitExit(t, root, wait); es.Signal != int(syscall.SIGKILL) {
			t.Fatalf("%s: after the dump: bash %v, want killed by SIGKILL", why, es)
		}
		var pids []int
		for pid := range before {
			pids = append(pids, pid)
		}
		e.waitTreeGone(t, why+": after the dump", pids)
		n := checkCount(t, out)

		res := e.runRedo(t, nil, img)
		if res.code != 0 {
			t.Fatalf("%s: ckpt-redo %s: %v; the image holds:%s", why, img, res, e.imageTree(t, img))
		}
		if c, x := comm(root), exeOf(root); c != comm0 || x != exe0 {
			t.Errorf("%s: restored pid %d: comm %q exe %q, want %q %q", why, root, c, x, comm0, exe0)
		}
		after := treeSnapshot(root)
		compareTree(t, why+": after the restore", before, after, stable)
		if pp := ppid(root); pp != e.r.Pid() {
			t.Errorf("%s: restored bash %d: parent %d, want the reaper %d", why, root, pp, e.r.Pid())
		}
		if t.Failed() {
			t.FailNow()
		}
		waitCount(t, out, n+30, why+": after the restore")
		checkCount(t, out)
	}
	e.r.KillAll(t)
	if n := checkCount(t, out); n < 80 {
		t.Errorf("%s has %d lines, want at least 80", out, n)
	}
	if s := readFile(errf); s != "" {
		t.Errorf("bash's stderr is not empty: %q", s)
	}
}

// TestTreeUnsupportedFD dumps a tree one of whose members (a child of the
// root) holds a UNIX socket connected to a process outside the dump (this
// test), which cannot be restored: the dump must fail naming that process,
// the fd and "socket", write no image, and leave every member running,
// untraced.
func TestTreeUnsupportedFD(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	errf := filepath.Join(dir, "stderr")
	outside, err := net.Listen("unix", filepath.Join(dir, "outside.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	script := `python3 -c 'import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); time.sleep(100)' ` +
		filepath.Join(dir, "outside.sock") + ` & wait`
	root := e.r.Run(t, testenv.RunOpts{Stderr: errf, Dir: dir}, "/bin/bash", "-c", script)

	// Wait for python3 and its socket, listening (state 0A in
	// /proc/net/tcp).
	py, sockFD := 0, -1
	deadline := time.Now().Add(wait)
	for {
		for pid, p := range treeSnapshot(root) {
			if pid != root && p.comm == "python3" {
				py = pid
			}
		}
		if py != 0 {
			ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", py))
			for _, ent := range ents {
				l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", py, ent.Name()))
				if strings.HasPrefix(l, "socket:[") {
					sockFD, _ = strconv.Atoi(ent.Name())
				}
			}
		}
		if sockFD >= 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no python3 child with a listening socket under bash %d:%s", root, fmtTree(treeSnapshot(root)))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// python3 has connected once its connection is in the listener's queue.
	outside.(*net.UnixListener).SetDeadline(time.Now().Add(wait))
	if c, err := outside.Accept(); err != nil {
		t.Fatalf("python3 did not connect: %v", err)
	} else {
		defer c.Close()
	}
	before := treeSnapshot(root)

	img := filepath.Join(t.TempDir(), "img")
	res := e.runCkpt(t, nil, "dump", "--dir", img, strconv.Itoa(root))
	if res.code == 0 {
		t.Fatalf("ckpt dump of a tree with a UNIX socket: %v, want a failure", res)
	}
	msg := res.stderr
	if !regexp.MustCompile(`\b`+strconv.Itoa(py)+`\b`).MatchString(msg) ||
		!regexp.MustCompile(`\bfd `+strconv.Itoa(sockFD)+`\b`).MatchString(msg) ||
		!strings.Contains(msg, "socket") {
		t.Errorf("ckpt dump: %v; want an error naming process %d (python3), fd %d and \"socket\"", res, py, sockFD)
	}
	noImage(t, img)

	// Every member goes on as before, untraced and not stopped.
	time.Sleep(200 * time.Millisecond) // deliberately: a member the failed dump broke would stop or die meanwhile
	after := treeSnapshot(root)
	compareTree(t, "after the failed dump", before, after, nil)
	for pid, p := range after {
		if !strings.Contains("SRD", p.state) {
			t.Errorf("after the failed dump: %v: want state S, R or D", p)
		}
		if tp := statusField(pid, "TracerPid"); tp != "0" {
			t.Errorf("after the failed dump: %v: TracerPid %s", p, tp)
		}
	}
	if es, ok := e.r.Poll(root); ok {
		t.Errorf("after the failed dump: bash %v", es)
	}
	// bash still waits for python3: when python3 dies, bash exits.
	e.r.MustSignal(t, py, syscall.SIGTERM)
	if es := e.r.WaitExit(t, root, wait); es != (testenv.ExitStatus{Pid: root}) {
		t.Errorf("bash %v after its python3 child got SIGTERM, want exit code 0 (wait returns the exit of a background job)", es)
	}
}

// TestUnixSocketPairs restores stream and datagram socketpairs between a
// parent and its child, with data queued in both directions, twice: every
// line and datagram arrives once, in order, with its boundaries.
func TestUnixSocketPairs(t *testing.T) {
	e := setup(t)
	v := e.startLogged(t, "unixpair", func(log string) []string {
		return []string{"python3", script(t, "unixpair.py"), log}
	})
	v.waitProgress(t, "child ok ", 20)
	for i := 0; i < 2; i++ {
		img := filepath.Join(t.TempDir(), "img")
		e.dumpKill(t, v, img)
		child, parent := v.progress(t, "child ok "), v.progress(t, "parent ok ")
		res := e.runRedo(t, nil, img)
		if res.code != 0 {
			t.Fatalf("cycle %d: ckpt-redo: %v", i, res)
		}
		v.waitProgress(t, "child ok ", child+40)
		v.waitProgress(t, "parent ok ", parent+40)
	}
	v.progress(t, "") // no FAIL line
	e.killAndReap(t, v)
}

// TestUnixListeners restores listening UNIX sockets, one on a path and one
// on an abstract name: new clients connect to both after each restore, and
// the server's client count goes on.
func TestUnixListeners(t *testing.T) {
	e := setup(t)
	path := filepath.Join(t.TempDir(), "sock")
	name := fmt.Sprintf("ckpt-test-%d", time.Now().UnixNano())
	v := e.startLogged(t, "unixlisten", func(log string) []string {
		return []string{"python3", script(t, "unixlisten.py"), log, path, name}
	})
	n := 0
	hello := func(addr string) {
		t.Helper()
		c, err := net.DialTimeout("unix", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connect to %q: %v", addr, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		k, err := c.Read(buf)
		n++
		if want := fmt.Sprintf("hello %d\n", n); err != nil || string(buf[:k]) != want {
			t.Fatalf("from %q: %q (%v), want %q", addr, buf[:k], err, want)
		}
		// The server's end closed too: a connection whose peer (the
		// test, outside the dump) closed names it, and is refused.
		v.waitLine(t, func(l string) bool { return l == fmt.Sprintf("closed %d", n) })
	}
	hello(path)
	hello("@" + name)
	for i := 0; i < 2; i++ {
		img := filepath.Join(t.TempDir(), "img")
		e.dumpKill(t, v, img)
		if res := e.runRedo(t, nil, img); res.code != 0 {
			t.Fatalf("cycle %d: ckpt-redo: %v", i, res)
		}
		hello(path)
		hello("@" + name)
	}
	e.killAndReap(t, v)
}

// TestTCPInsideTree restores a TCP connection whose both ends belong to the
// dumped tree (a parent and the child that connected to it), twice.
func TestTCPInsideTree(t *testing.T) {
	e := setup(t)
	v := e.startLogged(t, "tcppair", func(log string) []string {
		return []string{"python3", script(t, "tcppair.py"), log}
	})
	v.waitProgress(t, "parent ok ", 20)
	for i := 0; i < 2; i++ {
		img := filepath.Join(t.TempDir(), "img")
		e.dumpKill(t, v, img)
		p, c := v.progress(t, "parent ok "), v.progress(t, "child ok ")
		if res := e.runRedo(t, nil, img); res.code != 0 {
			t.Fatalf("cycle %d: ckpt-redo: %v", i, res)
		}
		v.waitProgress(t, "parent ok ", p+40)
		v.waitProgress(t, "child ok ", c+40)
	}
	v.progress(t, "")
	e.killAndReap(t, v)
}
