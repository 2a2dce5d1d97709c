package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
)

// Reaper is a running `ckpt-reaper serve`: a child subreaper that starts
// victims as its children and reports the exit of every process it reaps,
// including orphans reparented to it (a restored process whose restorer
// has exited, for instance).
type Reaper struct {
	t       testing.TB
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  lockedBuffer
	replies chan string   // reaper's answers to requests, in order
	done    chan struct{} // closed when the reaper's stdout ends
	reqMu   sync.Mutex    // one request at a time
	close   sync.Once

	mu      sync.Mutex
	exits   map[int][]report // reported, not yet taken by WaitExit/Poll
	seq     int              // exit reports read so far
	changed chan struct{}    // closed (and replaced) when exits grows
}

// report is an exit report, numbered in the order the reaper made them.
type report struct {
	es  ExitStatus
	seq int
}

// RunOpts are the options of Reaper.Run. Empty Stdout/Stderr mean
// /dev/null; files are created if needed and appended to. Empty Dir means
// the reaper's directory; nil Env means the reaper's environment.
type RunOpts struct {
	Stdout, Stderr string
	Dir            string
	// Setsid starts the process in a new session. It is the default now:
	// a process whose session or process group is led from outside the
	// dump is refused by ckpt dump unless --shell-job.
	Setsid bool
	// InheritSession keeps the process in the reaper's session and
	// process group (those of the test).
	InheritSession bool
	Env            []string
}

// ExitStatus is how a reaped process ended.
type ExitStatus struct {
	Pid    int
	Code   int // exit status, if Signal is 0
	Signal int // signal that killed it, 0 if it exited
}

// String says how the process ended.
func (e ExitStatus) String() string {
	if e.Signal != 0 {
		return fmt.Sprintf("pid %d killed by signal %d", e.Pid, e.Signal)
	}
	return fmt.Sprintf("pid %d exited with code %d", e.Pid, e.Code)
}

// StartReaper builds and starts `ckpt-reaper serve`. t.Cleanup closes it:
// every process still under it is SIGKILLed and reaped.
func StartReaper(t testing.TB) *Reaper {
	t.Helper()
	r := &Reaper{
		t:       t,
		cmd:     exec.Command(ReaperBinary(t), "serve"),
		replies: make(chan string, 16),
		done:    make(chan struct{}),
		exits:   make(map[int][]report),
		changed: make(chan struct{}),
	}
	var err error
	if r.stdin, err = r.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.Stderr = &r.stderr
	// The reaper leads a session of its own: a process run with
	// InheritSession is then in a session whose leader is alive and
	// outside any dump, whatever the session the tests were started in
	// (its leader may be gone, and its PID reused, on a CI machine).
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("starting ckpt-reaper: %v", err)
	}
	go r.read(stdout)
	t.Cleanup(r.Close)
	return r
}

// Pid returns the reaper's pid: the parent of its children and orphans.
func (r *Reaper) Pid() int { return r.cmd.Process.Pid }

// read dispatches the reaper's output lines until it ends. A "pid P"
// reply to run drops the reports of P queued so far: they are of earlier
// processes that had the PID (PIDs wrap within minutes here), never of
// the one just started, whose exit the reaper reports after this line.
func (r *Reaper) read(stdout io.Reader) {
	defer close(r.done)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		r.mu.Lock()
		if es, ok := parseExit(line); ok {
			r.seq++
			r.exits[es.Pid] = append(r.exits[es.Pid], report{es, r.seq})
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimPrefix(line, "pid ")); err == nil && strings.HasPrefix(line, "pid ") {
			r.dropLocked(pid, r.seq)
		}
		r.mu.Unlock()
		r.replies <- line
	}
}

// dropLocked forgets the reports of pid numbered up to seq: those of
// processes that had the PID before the one now meant.
func (r *Reaper) dropLocked(pid, seq int) {
	q := r.exits[pid]
	i := 0
	for i < len(q) && q[i].seq <= seq {
		i++
	}
	if i == len(q) {
		delete(r.exits, pid)
	} else {
		r.exits[pid] = q[i:]
	}
}

// observe drops the reports of pid made before pid was seen in /proc as a
// process under the reaper not reaped yet: they are of earlier processes
// with that PID. Without this, a test waiting for a process would take the
// report of another one long gone (a victim's child, killed by a dump and
// reaped by the reaper, that nobody waited for), as if its own process had
// died: "killed by signal 9" for a process that was never signalled.
func (r *Reaper) observe(pid int) {
	r.mu.Lock()
	seq := r.seq
	r.mu.Unlock()
	// Reports up to seq were made before the check below: if pid is then
	// one of ours not reaped, they cannot be of that process.
	if pid == r.Pid() || !sys.DescendantOf(sys.PID(pid), sys.PID(r.Pid())) {
		return
	}
	r.mu.Lock()
	r.dropLocked(pid, seq)
	r.mu.Unlock()
}

// Alive tells whether pid is a process under the reaper not reaped yet,
// and if it is, forgets the exit reports of earlier processes with its
// PID: WaitExit and Poll then take this process's. A harness calls it when
// a process it did not start with Run appears (a restored one).
func (r *Reaper) Alive(pid int) bool {
	r.observe(pid)
	return pid != r.Pid() && sys.DescendantOf(sys.PID(pid), sys.PID(r.Pid()))
}

// parseExit parses "exit PID code=N" or "exit PID signal=N".
func parseExit(line string) (ExitStatus, bool) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "exit" {
		return ExitStatus{}, false
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil {
		return ExitStatus{}, false
	}
	k, v, _ := strings.Cut(f[2], "=")
	n, err := strconv.Atoi(v)
	if err != nil {
		return ExitStatus{}, false
	}
	switch k {
	case "code":
		return ExitStatus{Pid: pid, Code: n}, true
	case "signal":
		return ExitStatus{Pid: pid, Signal: n}, true
	}
	return ExitStatus{}, false
}

// request sends one request line and returns the reply.
func (r *Reaper) request(t testing.TB, line string) string {
	t.Helper()
	r.reqMu.Lock()
	defer r.reqMu.Unlock()
	if _, err := io.WriteString(r.stdin, line+"\n"); err != nil {
		t.Fatalf("ckpt-reaper: writing request: %v; stderr:\n%s", err, r.stderr.String())
	}
	select {
	case rep := <-r.replies:
		if msg, ok := strings.CutPrefix(rep, "error "); ok {
			t.Fatalf("ckpt-reaper: %s: %s", line, msg)
		}
		return rep
	case <-r.done:
		t.Fatalf("ckpt-reaper exited during request %s; stderr:\n%s", line, r.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("ckpt-reaper: no reply to %s in 30s", line)
	}
	panic("unreachable")
}

// Run starts argv as a child of the reaper and returns its pid.
// argv[0] is looked up in the reaper's $PATH if it has no slash.
func (r *Reaper) Run(t testing.TB, opts RunOpts, argv ...string) int {
	t.Helper()
	req, err := json.Marshal(map[string]any{
		"cmd": "run", "argv": argv, "stdout": opts.Stdout, "stderr": opts.Stderr,
		"cwd": opts.Dir, "setsid": opts.Setsid || !opts.InheritSession, "env": opts.Env,
	})
	if err != nil {
		t.Fatal(err)
	}
	rep := r.request(t, string(req))
	pid, err := strconv.Atoi(strings.TrimPrefix(rep, "pid "))
	if !strings.HasPrefix(rep, "pid ") || err != nil {
		t.Fatalf("ckpt-reaper: unexpected reply %q to run", rep)
	}
	return pid
}

// KillAll SIGKILLs every process under the reaper and returns once all of
// them are reaped (their exits are reported as usual).
func (r *Reaper) KillAll(t testing.TB) {
	t.Helper()
	if rep := r.request(t, "kill-all"); rep != "ok" {
		t.Fatalf("ckpt-reaper: unexpected reply %q to kill-all", rep)
	}
}

// Signal sends sig to pid through the reaper, if pid is a process under
// the reaper (a child, or a descendant of one: a restored tree's members)
// not reaped yet, and tells whether it was. A process that has ended is not
// signalled: its PID may be another process's by now (another test
// package's, running in parallel), which a kill by number would hit. A
// negative pid is the process group led by the reaper's child -pid (a
// victim started in a session of its own), signalled while that child is
// not reaped.
func (r *Reaper) Signal(t testing.TB, pid int, sig syscall.Signal) bool {
	t.Helper()
	r.mu.Lock()
	before := r.seq
	r.mu.Unlock()
	switch rep := r.request(t, fmt.Sprintf("signal %d %d", pid, int(sig))); rep {
	case "ok":
		// The process was there, not reaped, when it was signalled, after
		// the reports made before the request: those of its PID are of
		// earlier processes. (Its own may come before the answer.)
		if pid > 0 {
			r.mu.Lock()
			r.dropLocked(pid, before)
			r.mu.Unlock()
		}
		return true
	case "gone":
		return false
	default:
		t.Fatalf("ckpt-reaper: unexpected reply %q to signal", rep)
	}
	panic("unreachable")
}

// Sync returns once the reaper has reported the exit of every process it
// has reaped so far: after a process is gone from /proc, Poll finds its
// exit report if the reaper reaped it (and never will if someone else did).
func (r *Reaper) Sync(t testing.TB) {
	t.Helper()
	if rep := r.request(t, "sync"); rep != "ok" {
		t.Fatalf("ckpt-reaper: unexpected reply %q to sync", rep)
	}
}

// Poll takes the oldest exit report for pid not yet taken, if any, among
// those of the last process with that PID the reaper was seen to have: a
// report made before pid was last seen alive under the reaper (Run, Signal,
// Alive, Poll, WaitExit) is of an earlier process and is dropped.
func (r *Reaper) Poll(pid int) (ExitStatus, bool) {
	r.observe(pid)
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.exits[pid]
	if len(q) == 0 {
		return ExitStatus{}, false
	}
	if len(q) == 1 {
		delete(r.exits, pid)
	} else {
		r.exits[pid] = q[1:]
	}
	return q[0].es, true
}

// WaitExit waits for the reaper to report the exit of pid and takes that
// report (a PID reused later, e.g. by a restore, gets its own report). It
// fails the test if none comes within timeout. A report that came earlier,
// even before pid was known to the test, is found too, unless the process
// was seen alive under the reaper after it (see Poll): that report is of
// an earlier process with the same PID.
func (r *Reaper) WaitExit(t testing.TB, pid int, timeout time.Duration) ExitStatus {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		if es, ok := r.Poll(pid); ok {
			return es
		}
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("ckpt-reaper: pid %d did not exit within %v", pid, timeout)
		case <-r.done:
			if es, ok := r.Poll(pid); ok {
				return es
			}
			t.Fatalf("ckpt-reaper exited before pid %d did; stderr:\n%s", pid, r.stderr.String())
		}
	}
}

// Close ends the reaper: it SIGKILLs and reaps everything under it, then
// exits. StartReaper registers Close with t.Cleanup; calling it earlier is
// fine, and later calls do nothing.
func (r *Reaper) Close() {
	r.close.Do(func() {
		t := r.t
		r.stdin.Close() // EOF: the reaper kills all and exits 0
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			r.cmd.Process.Kill()
			t.Errorf("ckpt-reaper did not exit 30s after EOF; killed it")
		}
		if err := r.cmd.Wait(); err != nil {
			t.Errorf("ckpt-reaper: %v; stderr:\n%s", err, r.stderr.String())
		} else if s := r.stderr.String(); s != "" {
			t.Logf("ckpt-reaper stderr:\n%s", s)
		}
	})
}

// lockedBuffer is a bytes.Buffer safe for concurrent Write and String.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
