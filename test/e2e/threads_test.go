package e2e

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/internal/testenv"
)

func init() {
	// The tick lines of the victims of this file and events_test.go, for
	// checkLogFile.
	tickFormat["mthreads"] = regexp.MustCompile(`^tick \d+$`)
	tickFormat["gocounter"] = regexp.MustCompile(`^tick \d+ threads=\d+$`)
	tickFormat["evloop"] = regexp.MustCompile(`^tick \d+ exp=\d+$`)
}

// buildGoVictim builds the Go victim testdata/victims/NAME of the
// repository with `go build` into a temporary directory and returns the
// binary's path.
func buildGoVictim(t *testing.T, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", out, "./testdata/victims/"+name)
	cmd.Dir = testenv.RepoRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/victims/%s: %v\n%s", name, err, b)
	}
	return out
}

// task is what the tests compare of one thread, seen from outside.
type task struct {
	comm   string
	sigBlk string // SigBlk of /proc/PID/task/TID/status
	sigPnd string // SigPnd: signals pending for this thread only
}

// tasks returns the threads of pid by TID.
func tasks(pid int) map[int]task {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	m := map[int]task{}
	for _, ent := range ents {
		tid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		dir := fmt.Sprintf("/proc/%d/task/%d/", pid, tid)
		tk := task{comm: strings.TrimSuffix(readFile(dir+"comm"), "\n")}
		for _, l := range strings.Split(readFile(dir+"status"), "\n") {
			if v, ok := strings.CutPrefix(l, "SigBlk:"); ok {
				tk.sigBlk = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(l, "SigPnd:"); ok {
				tk.sigPnd = strings.TrimSpace(v)
			}
		}
		m[tid] = tk
	}
	return m
}

// stableTasks waits until the threads of pid stay the same for 150 ms and
// returns them.
func stableTasks(t *testing.T, pid int) map[int]task {
	t.Helper()
	deadline := time.Now().Add(wait)
	prev, since := tasks(pid), time.Now()
	for {
		time.Sleep(25 * time.Millisecond)
		cur := tasks(pid)
		if !sameTIDs(cur, prev) {
			prev, since = cur, time.Now()
		} else if time.Since(since) >= 150*time.Millisecond {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: its threads keep changing: %s", pid, fmtTasks(cur))
		}
	}
}

func sameTIDs(a, b map[int]task) bool {
	if len(a) != len(b) {
		return false
	}
	for tid := range a {
		if _, ok := b[tid]; !ok {
			return false
		}
	}
	return true
}

func fmtTasks(m map[int]task) string {
	var tids []int
	for tid := range m {
		tids = append(tids, tid)
	}
	sort.Ints(tids)
	var s []string
	for _, tid := range tids {
		s = append(s, fmt.Sprintf("%d(%s blk=%s pnd=%s)", tid, m[tid].comm, m[tid].sigBlk, m[tid].sigPnd))
	}
	return strings.Join(s, " ")
}

// compareTasks reports every difference between the threads before a dump
// and after the restore: TIDs, names, blocked and pending signals.
// compareTasks checks that every thread from before the dump is back, as it
// was. With growing, threads started after the restore are fine: the Go
// runtime starts one whenever it needs another M.
func compareTasks(t *testing.T, pid int, before, after map[int]task, growing bool) {
	t.Helper()
	bad := false
	for tid, b := range before {
		a, ok := after[tid]
		switch {
		case !ok:
			t.Errorf("restored pid %d: thread %d (%s) is missing", pid, tid, b.comm)
			bad = true
		case a.comm != b.comm:
			t.Errorf("restored pid %d: thread %d is named %q, want %q", pid, tid, a.comm, b.comm)
			bad = true
		case a.sigBlk != b.sigBlk:
			t.Errorf("restored pid %d: thread %d (%s) blocks %s, want %s", pid, tid, b.comm, a.sigBlk, b.sigBlk)
			bad = true
		case a.sigPnd != b.sigPnd:
			t.Errorf("restored pid %d: thread %d (%s) has pending %s, want %s", pid, tid, b.comm, a.sigPnd, b.sigPnd)
			bad = true
		}
	}
	for tid, a := range after {
		if _, ok := before[tid]; !ok && !growing {
			t.Errorf("restored pid %d: thread %d (%s) was not there before the dump", pid, tid, a.comm)
			bad = true
		}
	}
	if bad {
		t.Logf("before the dump: %s", fmtTasks(before))
		t.Logf("after the restore: %s", fmtTasks(after))
	}
}

// imageProcess is the part of `ckpt show --json` about one process's
// threads and files.
type imageProcess struct {
	PID     int `json:"pid"`
	Threads []struct {
		TID       int    `json:"tid"`
		Comm      string `json:"comm"`
		State     string `json:"state"`
		InSyscall int64  `json:"in_syscall"`
	} `json:"threads"`
	Files []struct {
		Kind string `json:"kind"`
	} `json:"files"`
}

// showProcess runs `ckpt show --json img` and returns process pid's part.
func (e *env) showProcess(t *testing.T, img string, pid int) imageProcess {
	t.Helper()
	res := e.runCkpt(t, nil, "show", "--json", img)
	if res.code != 0 {
		t.Fatalf("ckpt show --json %s: %v", img, res)
	}
	var s struct {
		Processes []imageProcess `json:"processes"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &s); err != nil {
		t.Fatalf("ckpt show --json: %v", err)
	}
	for _, p := range s.Processes {
		if p.PID == pid {
			return p
		}
	}
	t.Fatalf("ckpt show --json %s: no process %d", img, pid)
	return imageProcess{}
}

// TestThreads runs multi-threaded victims through two dump+restore cycles:
// mthreads (C, pthreads: workers computing in bursts, threads blocked in
// pthread_cond_wait, read on a pipe, nanosleep and epoll_wait, each with
// its own name, signal mask and TLS) and gocounter (Go, GOMAXPROCS 4, many
// goroutines). Each restore must bring back the same PID and exactly the
// same threads (TIDs, names, blocked and pending signals), none of them
// left traced or stopped; the victim's own check (every thread answers and
// verifies itself) must pass after every cycle, and it must exit 0 on
// SIGUSR2 (mthreads first cancels and joins all its threads).
func TestThreads(t *testing.T) {
	e := setup(t)
	testenv.BuildVictim(t, "mthreads")
	tests := []struct {
		name    string
		threads int  // at least
		growing bool // may start threads after the restore
		argv    func(t *testing.T, v *victim) []string
	}{
		{"mthreads", 10, false, func(t *testing.T, v *victim) []string {
			return testenv.VictimArgv(t, "mthreads", v.log)
		}},
		{"gocounter", 5, true, func(t *testing.T, v *victim) []string {
			return []string{buildGoVictim(t, "gocounter"), v.log}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			v := &victim{name: tc.name, dir: dir, log: filepath.Join(dir, "log"), stderr: filepath.Join(dir, "stderr")}
			e.startArgv(t, v, tc.argv(t, v))
			v.waitTick(t, 5)
			v.check(t) // the victim's own check holds before any dump
			for cycle := 1; cycle <= 2; cycle++ {
				before := stableTasks(t, v.pid)
				if len(before) < tc.threads {
					t.Fatalf("cycle %d: %d threads before the dump, want at least %d: %s",
						cycle, len(before), tc.threads, fmtTasks(before))
				}
				img := filepath.Join(t.TempDir(), "img")
				tick := lastTick(v.lines())
				e.dumpKill(t, v, img)

				// The image has every thread, with its name.
				p := e.showProcess(t, img, v.pid)
				inImage := map[int]string{}
				var desc []string
				for _, th := range p.Threads {
					inImage[th.TID] = th.Comm
					desc = append(desc, fmt.Sprintf("%d(%s %s syscall %d)", th.TID, th.Comm, th.State, th.InSyscall))
				}
				t.Logf("cycle %d: threads in the image: %s", cycle, strings.Join(desc, " "))
				for tid, b := range before {
					if c, ok := inImage[tid]; !ok || c != b.comm {
						t.Errorf("cycle %d: the image has thread %d as %q (present %v), want %q",
							cycle, tid, c, ok, b.comm)
					}
				}
				if len(inImage) != len(before) {
					t.Errorf("cycle %d: the image has %d threads, want the %d there before the dump: %v",
						cycle, len(inImage), len(before), inImage)
				}

				e.restore(t, v, img)
				if lastTick(v.lines()) <= tick {
					t.Fatalf("cycle %d: no tick after restore", cycle)
				}
				compareTasks(t, v.pid, before, tasks(v.pid), tc.growing)
				for tid := range tasks(v.pid) {
					status := fmt.Sprintf("/proc/%d/task/%d/status", v.pid, tid)
					st := strings.TrimSpace(readFileField(status, "State"))
					tp := strings.TrimSpace(readFileField(status, "TracerPid"))
					if tp != "0" || strings.HasPrefix(st, "t") || strings.HasPrefix(st, "T") {
						t.Errorf("cycle %d: restored thread %d: TracerPid %s, state %s", cycle, tid, tp, st)
					}
				}
				v.check(t)
				if t.Failed() {
					t.FailNow()
				}
			}
			v.waitNewTicks(t, 3)
			lines := e.bye(t, v)
			testenv.CheckTicks(t, lines)
			checkLogFile(t, v, 3)
		})
	}
}

// tgsigqueue queues sig to thread tid of pid with rt_tgsigqueueinfo,
// si_code SI_QUEUE and value val.
func tgsigqueue(pid, tid int, sig syscall.Signal, val int) error {
	var si [sys.SigInfoSize]byte
	binary.LittleEndian.PutUint32(si[0:], uint32(sig))
	binary.LittleEndian.PutUint32(si[8:], ^uint32(0)) // si_code SI_QUEUE (-1)
	binary.LittleEndian.PutUint32(si[16:], uint32(os.Getpid()))
	binary.LittleEndian.PutUint32(si[24:], uint32(val))
	return sys.RtTgsigqueueinfo(sys.PID(pid), sys.TID(tid), sig, &si)
}

// TestThreadPendingSignals leaves signals pending on single threads of
// mthreads, each blocked by its thread only (SIGHUP on the main thread,
// SIGRTMIN+i = 34+i on thread mt-work1, mt-condw, mt-epoll): sent with
// tgkill (si_code SI_TKILL) or with rt_tgsigqueueinfo (SI_QUEUE). After
// two dump+restore cycles each must still be pending on its thread only
// (SigPnd of /proc/PID/task/TID/status), and the process must work on
// (were a mask lost, the signal would kill it).
func TestThreadPendingSignals(t *testing.T) {
	e := setup(t)
	testenv.BuildVictim(t, "mthreads")
	sigs := map[string]syscall.Signal{"mthreads": syscall.SIGHUP, "mt-work1": 34 + 1, "mt-condw": 34 + 4, "mt-epoll": 34 + 8}
	for _, how := range []string{"tgkill", "rt_tgsigqueueinfo"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			v := e.startVictim(t, "mthreads")
			v.waitTick(t, 5)
			ts := tasks(v.pid)
			for name, sig := range sigs {
				found := false
				for tid, tk := range ts {
					if tk.comm != name {
						continue
					}
					found = true
					var err error
					if how == "tgkill" {
						err = syscall.Tgkill(v.pid, tid, sig)
					} else {
						err = tgsigqueue(v.pid, tid, sig, 1000+int(sig))
					}
					if err != nil {
						t.Fatalf("%s %d %d %d: %v", how, v.pid, tid, sig, err)
					}
					if p := readFileField(fmt.Sprintf("/proc/%d/task/%d/status", v.pid, tid), "SigPnd"); !sigBit(strings.TrimSpace(p), sig) {
						t.Fatalf("thread %d (%s): SigPnd %s has no signal %d after %s", tid, name, p, sig, how)
					}
				}
				if !found {
					t.Fatalf("pid %d has no thread %s: %s", v.pid, name, fmtTasks(ts))
				}
			}
			v.check(t)
			for cycle := 1; cycle <= 2; cycle++ {
				before := stableTasks(t, v.pid)
				img := filepath.Join(t.TempDir(), "img")
				e.dumpKill(t, v, img)
				e.restore(t, v, img)
				compareTasks(t, v.pid, before, tasks(v.pid), false)
				v.check(t)
				if t.Failed() {
					t.FailNow()
				}
			}
			lines := e.bye(t, v)
			testenv.CheckTicks(t, lines)
			checkLogFile(t, v, 3)
		})
	}
}

// readFileField returns field name of a "Name:\tvalue" file (status).
func readFileField(path, name string) string {
	for _, l := range strings.Split(readFile(path), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return v
		}
	}
	return ""
}

// kindsOf returns the sorted kinds of an image process's files.
func kindsOf(p imageProcess) []string {
	var k []string
	for _, f := range p.Files {
		k = append(k, f.Kind)
	}
	slices.Sort(k)
	return slices.Compact(k)
}
