// Command ckpt-reaper is a tiny child subreaper for tests and demos.
//
// On these machines PID 1 never reaps zombies, so an orphan that dies keeps
// its PID forever and a later restore to that PID fails with EEXIST.
// ckpt-reaper makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER)
// so that every orphan below it is reparented to it, and it reaps them all
// with wait4(-1). It never uses os/exec: it starts children with
// syscall.ForkExec and is the only waiter in its process.
//
// # exec mode
//
//	ckpt-reaper exec -- CMD ARGS...
//
// Starts CMD (looked up in $PATH if it has no slash) with stdin, stdout and
// stderr inherited, reaps everything that gets reparented to it, and when
// CMD exits SIGKILLs and reaps every child it still has, then exits with
// CMD's exit code (128+N if CMD was killed by signal N). SIGTERM and SIGHUP
// sent to the reaper are forwarded to CMD; SIGINT and SIGQUIT are ignored by
// the reaper itself (a terminal sends them to CMD's process group anyway).
//
// # serve mode
//
//	ckpt-reaper serve
//
// A line protocol on stdin (requests) and stdout (replies and events), one
// line each. A request is either a JSON object (a line starting with "{") or
// words separated by single spaces (no quoting: use JSON for arguments with
// spaces):
//
//	run [--stdout FILE] [--stderr FILE] [--cwd DIR] [--setsid] ARGV...
//	{"cmd":"run","argv":["/bin/sh","-c","exit 3"],"stdout":"FILE","stderr":"FILE","cwd":"DIR","setsid":false,"env":["K=V"]}
//	kill-all
//	{"cmd":"kill-all"}
//	sync
//	{"cmd":"sync"}
//	signal PID SIG
//	{"cmd":"signal","pid":PID,"sig":SIG}
//
// run starts ARGV[0] (looked up in $PATH if it has no slash) as a child with
// stdin from /dev/null and stdout/stderr appended to the given files
// (created 0644 if missing; /dev/null if not given), in directory DIR,
// optionally in a new session, with the reaper's environment or, in JSON
// form, exactly "env" if it is present. The reply is
//
//	pid N
//
// kill-all SIGKILLs every child the reaper has (repeatedly, so that
// grandchildren reparented meanwhile die too), reaps them all and replies
//
//	ok
//
// signal sends signal number SIG to PID if it is a process under the
// reaper (a child, or a descendant of one) not reaped yet, and replies "ok",
// or "gone" if it is not (it has been reaped, or was never under the
// reaper: its PID may belong to another process by now, and a kill by
// number would hit that one). A negative PID is the process group led by
// the child -PID, signalled if that child is not reaped yet.
//
// sync reaps whatever has exited and replies
//
//	ok
//
// after the exit lines of every process reaped so far: once a process is
// gone from /proc (reaped), its exit line, if the reaper reaped it, comes
// before the reply to a later sync.
//
// A request that fails is answered with "error MESSAGE" (a single line).
// Requests are answered in order, one reply each.
//
// Every process the reaper reaps, whether it started it with run or it was
// reparented to it, is reported exactly once by an unsolicited line
//
//	exit PID code=N      (exited with status N)
//	exit PID signal=N    (killed by signal N)
//
// which may come between a request and its reply; the exit line of a process
// started by run never comes before its "pid" line. On EOF on stdin the
// reaper does kill-all (still reporting the exits) and exits 0.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ckpt/ckpt/internal/reap"
	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// reaper reaps children and reports them through onExit.
type reaper struct {
	// mu is held while reaping and while forking, so that a child whose exec
	// fails (which syscall.ForkExec reaps itself) is never reaped by us, and
	// so that the creator of a child learns its pid before anyone sees it die.
	mu     sync.Mutex
	onExit func(pid int, ws syscall.WaitStatus)
}

// reap collects every child that has exited, without blocking.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	reap.Exited(r.onExit)
}

// loop reaps on every SIGCHLD (and every 500 ms, in case one is missed).
// It never returns.
func (r *reaper) loop(sigchld <-chan os.Signal) {
	tick := time.NewTicker(500 * time.Millisecond)
	for {
		select {
		case <-sigchld:
		case <-tick.C:
		}
		r.reap()
	}
}

// start forks and execs argv; announce is called with the pid before any
// exit of that pid can be reported.
func (r *reaper) start(argv []string, attr *syscall.ProcAttr, announce func(pid int)) error {
	if len(argv) == 0 {
		return errors.New("empty argv")
	}
	path, err := lookPath(argv[0])
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return err
	}
	announce(pid)
	return nil
}

// killAll SIGKILLs and reaps children until none is left.
func (r *reaper) killAll() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		kids, err := r.killChildren()
		if err != nil || len(kids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("children %v still there after 10s", kids)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// killChildren reaps what has exited, then SIGKILLs every child left and
// returns their PIDs. Nothing is reaped between the listing and the kills
// (r.mu is held throughout, and only the reaper reaps its children): each
// PID is still a child of ours, alive or a zombie, never a number freed
// and taken again by some other process meanwhile.
func (r *reaper) killChildren() ([]int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reap.Exited(r.onExit)
	kids := children()
	for _, pid := range kids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
			return kids, fmt.Errorf("kill %d: %w", pid, err)
		}
	}
	return kids, nil
}

// signal sends sig to pid if it is a process under the reaper (a child
// or a descendant) that has not been reaped, and tells whether it was. A
// process that has been reaped is not signalled: its PID may belong to
// another process by now. A child is checked and signalled under r.mu,
// where nothing reaps it; a descendant further down (a restored tree's
// child, reaped by its own parent) through a pidfd opened before it is
// checked. A negative pid names the process group of a child of ours that
// leads it: while the child is not reaped its PID, hence its group, is
// not anybody else's.
func (r *reaper) signal(pid int, sig syscall.Signal) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	self := sys.PID(os.Getpid())
	if pid < 0 {
		if sys.ParentOf(sys.PID(-pid)) != self {
			return false, nil
		}
		if err := syscall.Kill(pid, sig); err != nil {
			return true, fmt.Errorf("kill %d: %w", pid, err)
		}
		return true, nil
	}
	if sys.ParentOf(sys.PID(pid)) == self {
		if err := syscall.Kill(pid, sig); err != nil {
			return true, fmt.Errorf("kill %d: %w", pid, err)
		}
		return true, nil
	}
	err := sys.SignalIf(sys.PID(pid), sig, func(p sys.PID) bool { return sys.DescendantOf(p, self) })
	if errors.Is(err, sys.ErrNotThatProcess) {
		return false, nil
	}
	return err == nil, err
}

// children lists the processes (zombies included) whose parent is us.
func children() []int {
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if sys.ParentOf(sys.PID(pid)) == sys.PID(self) {
			kids = append(kids, pid)
		}
	}
	return kids
}

// lookPath resolves a command name without a slash through $PATH.
func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in $PATH", name)
}

// status renders a wait status the way the protocol reports it.
func status(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal=" + strconv.Itoa(int(ws.Signal()))
	}
	return "code=" + strconv.Itoa(ws.ExitStatus())
}

func main() {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
	}
	// Children get stdin, stdout and stderr only: an fd leaked into the
	// reaper by whatever started it (a pipe to some other process) must not
	// end up in the programs it runs, which tests checkpoint.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		fatalf("close_range(CLOSE_RANGE_CLOEXEC): %v", err)
	}
	// Ask for SIGCHLD before any child exists. SIGPIPE is caught (not
	// ignored, which children would inherit) so that writing to a closed
	// stdout gives EPIPE instead of killing the reaper.
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)

	switch {
	case len(os.Args) >= 4 && os.Args[1] == "exec" && os.Args[2] == "--":
		execMode(os.Args[3:], sigchld)
	case len(os.Args) == 2 && os.Args[1] == "serve":
		serveMode(sigchld)
	default:
		fmt.Fprintln(os.Stderr, "usage: ckpt-reaper exec -- CMD ARGS...\n       ckpt-reaper serve")
		os.Exit(2)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ckpt-reaper: "+format+"\n", args...)
	os.Exit(1)
}

func execMode(argv []string, sigchld <-chan os.Signal) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT)

	cmdPid := 0
	done := make(chan syscall.WaitStatus, 1)
	r := &reaper{onExit: func(pid int, ws syscall.WaitStatus) {
		if pid == cmdPid {
			done <- ws
		}
	}}
	attr := &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}}
	if err := r.start(argv, attr, func(pid int) { cmdPid = pid }); err != nil {
		fatalf("%s: %v", argv[0], err)
	}
	go r.loop(sigchld)
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGTERM || sig == syscall.SIGHUP {
				r.signal(cmdPid, sig.(syscall.Signal))
			}
		case ws := <-done:
			if err := r.killAll(); err != nil {
				fmt.Fprintf(os.Stderr, "ckpt-reaper: %v\n", err)
			}
			if ws.Signaled() {
				os.Exit(128 + int(ws.Signal()))
			}
			os.Exit(ws.ExitStatus())
		}
	}
}

// request is one serve-mode request, in either syntax.
type request struct {
	Cmd    string   `json:"cmd"`
	Argv   []string `json:"argv"`
	Stdout string   `json:"stdout"`
	Stderr string   `json:"stderr"`
	Cwd    string   `json:"cwd"`
	Setsid bool     `json:"setsid"`
	Env    []string `json:"env"` // nil: inherit the reaper's environment
	PID    int      `json:"pid"` // signal's
	Sig    int      `json:"sig"` // signal's
}

// parseRequest parses one request line.
func parseRequest(line string) (request, error) {
	var req request
	if strings.HasPrefix(line, "{") {
		err := json.Unmarshal([]byte(line), &req)
		return req, err
	}
	words := strings.Split(line, " ")
	req.Cmd, words = words[0], words[1:]
	if req.Cmd == "signal" {
		if len(words) != 2 {
			return req, errors.New("signal takes a PID and a signal number")
		}
		var err1, err2 error
		req.PID, err1 = strconv.Atoi(words[0])
		req.Sig, err2 = strconv.Atoi(words[1])
		if err := errors.Join(err1, err2); err != nil {
			return req, fmt.Errorf("signal: %w", err)
		}
		return req, nil
	}
	if req.Cmd != "run" {
		if len(words) > 0 {
			return req, fmt.Errorf("%s takes no arguments", req.Cmd)
		}
		return req, nil
	}
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		opt := words[0]
		if opt == "--" {
			words = words[1:]
			break
		}
		if opt == "--setsid" {
			req.Setsid = true
			words = words[1:]
			continue
		}
		if len(words) < 2 {
			return req, fmt.Errorf("%s needs a value", opt)
		}
		switch opt {
		case "--stdout":
			req.Stdout = words[1]
		case "--stderr":
			req.Stderr = words[1]
		case "--cwd":
			req.Cwd = words[1]
		default:
			return req, fmt.Errorf("unknown option %s", opt)
		}
		words = words[2:]
	}
	req.Argv = words
	return req, nil
}

func serveMode(sigchld <-chan os.Signal) {
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...) // errors ignored: nobody to tell
	}
	r := &reaper{onExit: func(pid int, ws syscall.WaitStatus) {
		say("exit %d %s", pid, status(ws))
	}}
	go r.loop(sigchld)

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for in.Scan() {
		line := strings.TrimRight(in.Text(), "\r")
		if line == "" {
			continue
		}
		req, err := parseRequest(line)
		if err == nil {
			switch req.Cmd {
			case "run":
				err = run(r, req, func(pid int) { say("pid %d", pid) })
			case "sync":
				r.reap()
				say("ok")
			case "signal":
				var child bool
				if req.PID == 0 || req.PID == -1 || req.Sig <= 0 || req.Sig > 64 {
					err = fmt.Errorf("signal: bad pid %d or signal %d", req.PID, req.Sig)
				} else if child, err = r.signal(req.PID, syscall.Signal(req.Sig)); err == nil {
					say("%s", map[bool]string{true: "ok", false: "gone"}[child])
				}
			case "kill-all":
				if err = r.killAll(); err == nil {
					say("ok")
				}
			default:
				err = fmt.Errorf("unknown command %q", req.Cmd)
			}
		}
		if err != nil {
			say("error %s", strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	if err := in.Err(); err != nil && err != io.EOF {
		fmt.Fprintf(os.Stderr, "ckpt-reaper: stdin: %v\n", err)
	}
	if err := r.killAll(); err != nil {
		fatalf("%v", err)
	}
	os.Exit(0)
}

// run starts one child for a run request.
func run(r *reaper, req request, announce func(pid int)) error {
	open := func(name string, flag int) (*os.File, error) {
		if name == "" {
			name = os.DevNull
		}
		return os.OpenFile(name, flag|syscall.O_CLOEXEC, 0o644)
	}
	stdin, err := open("", os.O_RDONLY)
	if err != nil {
		return err
	}
	defer stdin.Close()
	stdout, err := open(req.Stdout, os.O_WRONLY|os.O_CREATE|os.O_APPEND)
	if err != nil {
		return err
	}
	defer stdout.Close()
	stderr, err := open(req.Stderr, os.O_WRONLY|os.O_CREATE|os.O_APPEND)
	if err != nil {
		return err
	}
	defer stderr.Close()
	env := req.Env
	if env == nil {
		env = os.Environ()
	}
	attr := &syscall.ProcAttr{
		Dir:   req.Cwd,
		Env:   env,
		Files: []uintptr{stdin.Fd(), stdout.Fd(), stderr.Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: req.Setsid},
	}
	return r.start(req.Argv, attr, announce)
}
