// Package agent is the per-node side of group operations: a long-running
// server (`ckpt agent`) that a coordinator drives over a control
// connection to start, dump, restore and kill processes on its node, to
// stream images to other nodes, and to run its node's part of the XOR
// parity ring.
//
// # Nodes
//
// An agent is meant to run as PID 1 of a node made of namespaces — a
// network namespace, a PID namespace and a mount namespace with its own
// /proc — so that the processes of the node keep their PIDs when they are
// restored on another node (clone3 set_tid in the node's PID namespace).
// As PID 1 it reaps every orphan of the node. So that its own threads and
// the tools it runs never take a PID that a restored process needs, it keeps
// two PID ranges: programs started with OpExec get PIDs from JobPIDBase
// upwards, everything else (its threads, ckpt, ckpt-redo) from
// ToolPIDBase upwards (ns_last_pid is set around each fork).
//
// # Protocol
//
// One operation per connection: the coordinator sends a Request (a JSON
// line), the agent answers with Events (JSON lines), the last one EvOK or
// EvError. At a barrier (EvFrozen, EvPrepared, EvBuilt, EvListening and
// EvStats of parity) the agent waits for the coordinator's next Request,
// whose Op is the decision. If the control connection breaks, the
// operation aborts: a dump resumes its processes, a restore discards its
// copy, a parity run discards its output.
//
// The dump and restore work is done by child processes (`ckpt dump
// --control`, `ckpt-redo --control`, see internal/control), never in the
// agent itself: a crash there must not take PID 1, and with it the whole
// node, down.
package agent

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
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

// PID ranges of a node whose agent is PID 1 (see the package doc).
const (
	JobPIDBase  = 100
	ToolPIDBase = 20000
)

// Config configures an agent.
type Config struct {
	// Root is the directory under which images are stored: a Request's
	// Image is relative to it.
	Root string
	// Ckpt and Redo are the ckpt and ckpt-redo executables.
	Ckpt, Redo string
	// DataIP is the address of this node on the network between nodes:
	// receivers of transfers and parity links listen there.
	DataIP string
	// ToolPIDBase is where the tool PID range starts (0: ToolPIDBase).
	// Processes that a job forks after it started take their PIDs from
	// the tool range of their node too, so a node that may receive such
	// a job (a spare, a migration's destination) should have a tool range
	// that does not hold them: another base.
	ToolPIDBase int
	// Log receives one line per operation; nil discards.
	Log func(format string, args ...any)
}

// Agent serves group operations on one node.
type Agent struct {
	cfg Config

	// mu is held while forking and reaping, so that the creator of a
	// child registers it before its exit can be collected.
	mu       sync.Mutex
	waiters  map[int]chan syscall.WaitStatus
	jobNext  int
	toolBase int
	pidNS    bool // PID 1 of its PID namespace: manage ns_last_pid
}

// New makes an agent. If it is PID 1 it moves its own PID allocation to
// the tool range at once.
func New(cfg Config) (*Agent, error) {
	if cfg.Root == "" || cfg.Ckpt == "" || cfg.Redo == "" {
		return nil, errors.New("agent: root, ckpt and ckpt-redo must be set")
	}
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	// Whatever the agent inherited beyond stdio must not leak into the
	// programs it starts (and then into their images).
	unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	a := &Agent{cfg: cfg, waiters: map[int]chan syscall.WaitStatus{}, jobNext: JobPIDBase, toolBase: cmp.Or(cfg.ToolPIDBase, ToolPIDBase)}
	if a.toolBase <= JobPIDBase {
		return nil, fmt.Errorf("agent: tool PID base %d is not above the job range (%d up)", a.toolBase, JobPIDBase)
	}
	if os.Getpid() == 1 {
		a.pidNS = true
		if err := setLastPID(a.toolBase); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	} else if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("agent: become a child subreaper: %w", err)
	}
	return a, nil
}

func (a *Agent) logf(format string, args ...any) {
	if a.cfg.Log != nil {
		a.cfg.Log(format, args...)
	}
}

const lastPIDFile = "/proc/sys/kernel/ns_last_pid"

func setLastPID(pid int) error {
	if err := os.WriteFile(lastPIDFile, []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("set ns_last_pid: %w", err)
	}
	return nil
}

func lastPID() int {
	b, err := os.ReadFile(lastPIDFile)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// Serve reaps children and serves control connections from l until ctx
// is done.
func (a *Agent) Serve(ctx context.Context, l net.Listener) error {
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("agent: accept: %w", err)
		}
		go a.handle(ctx, NewConn(c))
	}
}

// Reap collects exited children until ctx is done: the ones the agent
// started are handed to their waiters, orphans are just reaped.
func (a *Agent) Reap(ctx context.Context) {
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, syscall.SIGCHLD)
	defer signal.Stop(sig)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		a.reapOnce()
		select {
		case <-ctx.Done():
			return
		case <-sig:
		case <-tick.C:
		}
	}
}

// reapOnce collects exited children and hands the ones the agent started
// to their waiters.
func (a *Agent) reapOnce() {
	a.mu.Lock()
	defer a.mu.Unlock()
	reap.Exited(func(pid int, ws syscall.WaitStatus) {
		if ch, ok := a.waiters[pid]; ok {
			ch <- ws
			delete(a.waiters, pid)
		}
	})
}

// child is a program the agent started.
type child struct {
	pid    int
	exit   chan syscall.WaitStatus
	stdout *bytes.Buffer
	stderr *bytes.Buffer
	ctl    *os.File // our end of the control socket, if any
	done   sync.WaitGroup
}

// start forks argv. files are its fds 0, 1, 2, 3...; job selects the
// job PID range.
func (a *Agent) start(argv []string, env []string, cwd string, files []uintptr, job bool) (int, chan syscall.WaitStatus, error) {
	attr := &syscall.ProcAttr{Dir: cwd, Env: env, Files: files, Sys: &syscall.SysProcAttr{Setsid: job}}
	if env == nil {
		attr.Env = os.Environ()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	restore := 0
	if job && a.pidNS {
		restore = lastPID()
		setLastPID(a.jobNext - 1)
	}
	pid, err := syscall.ForkExec(argv[0], argv, attr)
	if restore != 0 {
		setLastPID(max(restore, a.toolBase))
	}
	if err != nil {
		return 0, nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	if job && pid >= a.jobNext && pid < a.toolBase {
		a.jobNext = pid + 1
	}
	ch := make(chan syscall.WaitStatus, 1)
	a.waiters[pid] = ch
	return pid, ch, nil
}

// killChild SIGKILLs pid, a child the agent started, unless it has been
// reaped already (reapOnce, under a.mu, drops its waiter when it reaps
// it): its PID may be another process's by then.
func (a *Agent) killChild(pid int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.waiters[pid]; ok {
		unix.Kill(pid, unix.SIGKILL)
	}
}

// startTool runs a ckpt tool with a control socket at fd 3 and its
// stdout and stderr captured.
func (a *Agent) startTool(argv []string) (*child, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "control"), os.NewFile(uintptr(pair[1]), "control")
	defer theirs.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		ours.Close()
		return nil, err
	}
	defer devnull.Close()
	or, ow, err := os.Pipe()
	if err != nil {
		ours.Close()
		return nil, err
	}
	er, ew, err := os.Pipe()
	if err != nil {
		ours.Close()
		or.Close()
		ow.Close()
		return nil, err
	}
	c := &child{stdout: new(bytes.Buffer), stderr: new(bytes.Buffer), ctl: ours}
	c.pid, c.exit, err = a.start(argv, nil, "/", []uintptr{devnull.Fd(), ow.Fd(), ew.Fd(), theirs.Fd()}, false)
	ow.Close()
	ew.Close()
	if err != nil {
		or.Close()
		er.Close()
		ours.Close()
		return nil, err
	}
	c.done.Add(2)
	go func() { io.Copy(c.stdout, or); or.Close(); c.done.Done() }()
	go func() { io.Copy(c.stderr, er); er.Close(); c.done.Done() }()
	return c, nil
}

// wait waits for the tool to exit and returns its --json output, or its
// error message.
func (c *child) wait() (json.RawMessage, error) {
	ws := <-c.exit
	c.done.Wait()
	c.ctl.Close()
	if ws.Exited() && ws.ExitStatus() == 0 {
		return json.RawMessage(bytes.TrimSpace(c.stdout.Bytes())), nil
	}
	msg := strings.TrimSpace(c.stderr.String())
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	if msg == "" {
		msg = fmt.Sprintf("exited with %v", ws)
	}
	return nil, errors.New(msg)
}

// imageDir resolves a Request's Image under the root.
func (a *Agent) imageDir(rel string) (string, error) {
	clean := filepath.Clean(rel)
	if rel == "" || filepath.IsAbs(clean) || clean == "." || strings.HasPrefix(clean, "..") {
		return "", fmt.Errorf("image %q: want a path relative to the agent's root", rel)
	}
	return filepath.Join(a.cfg.Root, clean), nil
}

// handle serves one control connection.
func (a *Agent) handle(ctx context.Context, c *Conn) {
	defer c.Close()
	var req Request
	if err := c.Recv(&req); err != nil {
		return
	}
	a.logf("%s %s", req.Op, brief(req))
	ev, err := a.do(ctx, c, &req)
	if err != nil {
		a.logf("%s: %v", req.Op, err)
		c.Send(Event{Event: EvError, Error: err.Error()})
		return
	}
	ev.Event = EvOK
	c.Send(ev)
}

func brief(r Request) string {
	var parts []string
	if r.PID != 0 {
		parts = append(parts, fmt.Sprintf("pid=%d", r.PID))
	}
	if r.Image != "" {
		parts = append(parts, "image="+r.Image)
	}
	if r.To != "" {
		parts = append(parts, "to="+r.To)
	}
	if len(r.Argv) > 0 {
		parts = append(parts, strings.Join(r.Argv, " "))
	}
	return strings.Join(parts, " ")
}

func (a *Agent) do(ctx context.Context, c *Conn, req *Request) (Event, error) {
	switch req.Op {
	case OpHello:
		host, _ := os.Hostname()
		return Event{Node: host, DataIP: a.cfg.DataIP, PID: os.Getpid()}, nil
	case OpExec:
		return a.exec(req)
	case OpKill:
		return Event{}, a.kill(req.PIDs)
	case OpDump:
		return a.dump(c, req)
	case OpRestore:
		return a.restore(c, req)
	case OpRemove:
		dir, err := a.imageDir(req.Image)
		if err != nil {
			return Event{}, err
		}
		return Event{}, os.RemoveAll(dir)
	case OpImageSize:
		return a.imageSize(req)
	case OpParityEncode:
		return a.parityEncode(ctx, c, req)
	case OpParitySurvive, OpParityReplace:
		return a.parityRecover(ctx, c, req)
	}
	return Event{}, fmt.Errorf("unknown operation %q", req.Op)
}

func (a *Agent) exec(req *Request) (Event, error) {
	if len(req.Argv) == 0 {
		return Event{}, errors.New("exec: empty argv")
	}
	out := req.Stdout
	if out == "" {
		out = os.DevNull
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return Event{}, fmt.Errorf("exec: %w", err)
	}
	defer f.Close()
	in, err := os.Open(os.DevNull)
	if err != nil {
		return Event{}, err
	}
	defer in.Close()
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/"
	}
	argv := append([]string(nil), req.Argv...)
	if argv[0], err = exec.LookPath(argv[0]); err != nil {
		return Event{}, fmt.Errorf("exec: %w", err)
	}
	pid, _, err := a.start(argv, req.Env, cwd, []uintptr{in.Fd(), f.Fd(), f.Fd()}, true)
	if err != nil {
		return Event{}, err
	}
	return Event{PID: pid}, nil
}

// kill SIGKILLs pids, each with its descendants (a member is a process
// tree), and waits until they are all gone (reaped, by the agent or by
// their parent). The processes are held by pidfds from before they are
// signalled until they are reaped: one that ends by itself meanwhile is
// not confused with whatever takes its PID afterwards.
func (a *Agent) kill(pids []int) error {
	var all []held
	defer func() {
		for _, h := range all {
			h.fd.Close()
		}
	}()
	for _, pid := range pids {
		if pid <= 1 {
			return fmt.Errorf("kill: refusing pid %d", pid)
		}
		all = append(all, holdTree(pid)...)
	}
	for _, h := range all {
		sys.PidfdSendSignal(h.fd, unix.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, h := range all {
		for alive(h.fd) {
			if time.Now().After(deadline) {
				return fmt.Errorf("kill: %d is still there after 10s", h.pid)
			}
			a.reapOnce()
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// relay runs a tool's control protocol: each event line is passed to the
// coordinator; at a barrier the coordinator's decision is passed back.
// barriers maps an event to the decision that lets the tool go on. A word
// from the coordinator outside a barrier, or its connection closing, ends
// the operation: the tool is killed (a dump's processes then resume, a
// restore's half-built copy dies with it).
func (a *Agent) relay(c *Conn, ch *child, barriers map[string]string) {
	coord := make(chan Request, 4)
	go func() {
		defer close(coord)
		for {
			var r Request
			if err := c.Recv(&r); err != nil {
				return
			}
			coord <- r
		}
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		r := bufio.NewReader(ch.ctl)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimSpace(line)
		}
	}()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return
			}
			word, arg, _ := strings.Cut(line, " ")
			ev := Event{Event: word, Addr: arg}
			if word == EvProgress {
				ev.Addr = ""
				fmt.Sscan(arg, &ev.Done, &ev.Total)
			}
			c.Send(ev)
			want, ok := barriers[word]
			if !ok {
				continue
			}
			dec, ok := <-coord
			if !ok || dec.Op != want {
				dec.Op = OpAbort
			}
			io.WriteString(ch.ctl, dec.Op+"\n")
		case _, ok := <-coord:
			// Not at a barrier: only an abort (or a lost coordinator)
			// can come now.
			a.logf("coordinator aborted (connection %v): killing %d", map[bool]string{true: "open", false: "closed"}[ok], ch.pid)
			a.killChild(ch.pid)
			for range lines {
			}
			return
		}
	}
}

func (a *Agent) dump(c *Conn, req *Request) (Event, error) {
	argv := []string{a.cfg.Ckpt, "dump", "--json", "--control", "3"}
	switch {
	case req.To != "":
		argv = append(argv, "--to", req.To)
	case req.Image != "":
		dir, err := a.imageDir(req.Image)
		if err != nil {
			return Event{}, err
		}
		argv = append(argv, "--dir", dir)
	default:
		return Event{}, errors.New("dump: want an image directory or a destination")
	}
	if req.LeaveRunning {
		argv = append(argv, "--leave-running")
	}
	argv = append(argv, strconv.Itoa(req.PID))
	ch, err := a.startTool(argv)
	if err != nil {
		return Event{}, err
	}
	a.relay(c, ch, map[string]string{EvFrozen: OpContinue, EvPrepared: OpCommit})
	res, err := ch.wait()
	return Event{Result: res}, err
}

func (a *Agent) restore(c *Conn, req *Request) (Event, error) {
	argv := []string{a.cfg.Redo, "--json", "--control", "3"}
	if req.Rules != "" {
		f, err := os.CreateTemp(a.cfg.Root, ".rules-*")
		if err != nil {
			return Event{}, err
		}
		defer os.Remove(f.Name())
		_, err = f.WriteString(req.Rules)
		f.Close()
		if err != nil {
			return Event{}, err
		}
		argv = append(argv, "--rules", f.Name())
	}
	barriers := map[string]string{}
	if req.Listen {
		if a.cfg.DataIP == "" {
			return Event{}, errors.New("restore: this agent has no data address to listen on (--data-ip)")
		}
		argv = append(argv, "--listen", net.JoinHostPort(a.cfg.DataIP, "0"))
		if req.Keep {
			dir, err := a.imageDir(req.Image)
			if err != nil {
				return Event{}, err
			}
			argv = append(argv, "--keep", dir)
		}
	} else {
		dir, err := a.imageDir(req.Image)
		if err != nil {
			return Event{}, err
		}
		argv = append(argv, dir)
		barriers[EvBuilt] = OpRelease
	}
	ch, err := a.startTool(argv)
	if err != nil {
		return Event{}, err
	}
	a.relay(c, ch, barriers)
	res, err := ch.wait()
	return Event{Result: res}, err
}
