// Package dump writes the checkpoint image of a running process.
//
// Dump freezes the process (every thread seized with ptrace and stopped),
// reads its state — from /proc, from ptrace requests that read without
// running anything in the target, and from one short window of injected
// system calls for what only the process itself can tell (signal handlers,
// interval timers, sigaltstack, ...) — and streams it into an image: first
// the metadata, then the memory pages, read with process_vm_readv in large
// batches and written while the next batch is read.
//
// The files mirror pkg/restore's steps: tree.go and freeze.go (the tree,
// seized), vmas.go and memory.go (mm: mappings and pages), threads.go,
// signals.go, creds.go, procattrs.go (process and thread attributes),
// files.go (fds, through pkg/fdkind) and sockets.go; refuse.go holds what
// no restore can produce, and inject.go the window of injected calls.
//
// The tree's sessions and process groups must be led from inside it (or
// by processes gone): a leader alive outside is refused by name unless
// Options.ShellJob. A parent waiting in vfork(), which cannot be stopped,
// is read from outside (vfork.go); other sharing of memory between
// processes is refused before anything is seized; every wait for a
// thread to stop is bounded. A process whose leader thread has exited
// while others run (a zombie leader) is frozen without it and read
// through a live thread (deadleader.go).
//
// Nothing lost: the target's registers are changed only while an injected
// system call runs (between its PTRACE_SYSCALL entry and exit stops: no
// trap, no SIGTRAP), and put back right after it. If anything fails, or ckpt
// itself dies (the kernel then detaches it), the process goes on as if it
// had never been dumped. The image is committed (renamed to its final name)
// before the process is killed.
package dump

import (
	"fmt"
	"github.com/ckpt/ckpt/pkg/bpftask"
	"runtime"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/kernelcheck"
	"github.com/ckpt/ckpt/pkg/machine"
	"golang.org/x/sys/unix"
)

// Sink receives the image records, in the order pkg/image checks.
// *image.DirWriter and *transfer.Sender are sinks: both write through an
// *image.Writer.
type Sink interface {
	WriteHeader(h *image.Header) error
	WriteProcess(p *image.Process) error
	WriteFileData(id int, data []byte) error
	// WritePrepared writes a pages record encoded and checksummed ahead.
	WritePrepared(rec *image.Prepared) error
	Commit() error
	Abort()
}

// Options tune a dump.
type Options struct {
	// LeaveRunning lets the process go on after the dump instead of
	// killing it.
	LeaveRunning bool
	// GhostLimit is the largest deleted file whose content is saved in
	// the image. Zero means DefaultGhostLimit.
	GhostLimit int64
	// Progress, if set, is called as memory is written.
	Progress func(done, total int64)
	// Fault, if set, is called at the start of each phase with its name.
	// Tests use it to kill ckpt at a chosen point.
	Fault func(phase string)
	// Log receives warnings; nil discards them.
	Log func(format string, args ...any)
	// GuardExe is the ckpt executable, run as `GuardExe netlock-guard
	// TABLE` to remove the network lock if ckpt dies during the dump.
	// Empty means DefaultGuardExe (the running ckpt, or a ckpt next to
	// the running executable).
	GuardExe string
	// NoGuard runs the dump without a guard: if ckpt dies during it, the
	// network lock and the connections' repair mode stay.
	NoGuard bool
	// AcceptRetries is how many times the dump is tried again when a
	// listener has connections waiting to be accepted, letting the
	// processes run AcceptRetryWait in between. Zero means
	// DefaultAcceptRetries, a negative value none. The queues are looked
	// at before AfterFreeze; a try that fails past it is not tried again.
	AcceptRetries int
	// SkipInFlight drops the TCP connections waiting in a listener's
	// accept queue instead of refusing them (and without retries), as
	// CRIU's --skip-in-flight: the listener alone is saved. Their clients
	// see nothing until they send, then a reset from the restored
	// listener. Each listener with such connections is named in a
	// warning (Log). With LeaveRunning the running process keeps them.
	SkipInFlight bool
	// ExternalUnix lets the dump save UNIX sockets connected to a socket
	// of a process outside the dump (see sockets.External): every one
	// if it holds 0, else those whose inodes it holds. Without it such a
	// socket is refused by name.
	ExternalUnix []uint32
	// AfterFreeze, if set, is called once every process is frozen and the
	// network lock is in place, before any state is read. A group
	// checkpoint waits there until every member is frozen. An error aborts
	// the dump.
	AfterFreeze func() error
	// BeforeCommit, if set, is called once the whole image is written (and,
	// for a sink with a Prepare method, prepared), before the sink commits
	// and the processes are killed or released. A group checkpoint waits
	// there until every member is dumped. An error aborts the dump: the
	// processes resume.
	BeforeCommit func() error
	// ShellJob accepts sessions and process groups led by processes
	// outside the dump (the shell of a job started from a terminal): the
	// restore puts their members into ckpt-redo's own session and group.
	// Without it such a dump is refused.
	ShellJob bool
	// DropLock lifts the network lock once the processes are killed,
	// instead of leaving it for ckpt-redo: for an image restored in
	// another network namespace, where nobody else would lift it.
	DropLock bool
}

// A Preparer is a Sink that does the part of its commit that can fail
// before the processes' fate is decided: DirWriter-like sinks sync,
// a transfer waits for the receiver to have built the processes.
type Preparer interface {
	Prepare() error
}

// DefaultGhostLimit is the default size limit for deleted files kept in an
// image.
const DefaultGhostLimit = 64 << 20

// Phases named to Options.Fault.
const (
	PhaseFrozen    = "frozen"
	PhaseInjected  = "injected"
	PhaseCollected = "collected"
	PhaseMemory    = "memory"
	PhaseWritten   = "written"
	PhaseCommitted = "committed"
)

// Result tells what a dump did.
type Result struct {
	PID       sys.PID `json:"pid"`
	Processes int     `json:"processes"`
	Threads   int     `json:"threads"`
	VMAs      int     `json:"vmas"`
	FDs       int     `json:"fds"`
	Pages     int64   `json:"pages"`      // pages with data
	ZeroPages int64   `json:"zero_pages"` // pages stored as zero
	// ParentPages are the pages stored as their parent's, shared
	// copy-on-write (no data).
	ParentPages int64         `json:"parent_pages"`
	Bytes       int64         `json:"bytes"`     // page bytes written
	Frozen      time.Duration `json:"frozen_ns"` // from freeze to release or kill
	Total       time.Duration `json:"total_ns"`
	Killed      bool          `json:"killed"`
	MemoryRate  float64       `json:"memory_mb_per_s"`
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		o.Log(format, args...)
	}
}

func (o *Options) fault(phase string) {
	if o.Fault != nil {
		o.Fault(phase)
	}
}

// Run dumps process pid and all its descendants into sink. On success the
// sink is committed and the processes killed (unless opts.LeaveRunning); on
// failure the sink is aborted and every process resumes untouched. It first
// probes the kernel features every dump needs (kernelcheck.Check): a missing
// one is an error wrapping kernelcheck.ErrNotSupported, before the process
// is touched. A dump that meets connections waiting in a listener's accept
// queue is tried again (Options.AcceptRetries), into the same sink; TCP
// connections are locked under a guard (Options.GuardExe) that lifts the
// lock if the dump dies.
func Run(pid sys.PID, sink Sink, opts Options) (*Result, error) {
	if opts.GuardExe == "" && !opts.NoGuard {
		opts.GuardExe = DefaultGuardExe()
	}
	if opts.NoGuard {
		opts.GuardExe = ""
	}
	go image.Warm() // while the tree is being frozen
	hs := &holdSink{Sink: sink}
	for try := 0; ; try++ {
		// A try that failed past a group's barrier (AfterFreeze) is not
		// tried again: the group has seen this member frozen.
		o, passed := opts, false
		if opts.AfterFreeze != nil {
			o.AfterFreeze = func() error { passed = true; return opts.AfterFreeze() }
		}
		res, err := runOnce(pid, hs, o)
		if err != nil && try < opts.acceptRetries() && !passed && hs.retryable(err) {
			// Connections wait in a listener's accept queue and cannot be
			// saved: let the processes accept them, and try again.
			hs.aborted = false
			time.Sleep(AcceptRetryWait)
			continue
		}
		if hs.aborted {
			sink.Abort()
		}
		return res, err
	}
}

// runOnce is one try of Run.
func runOnce(pid sys.PID, sink Sink, opts Options) (res *Result, err error) {
	start := time.Now()
	if opts.GhostLimit == 0 {
		opts.GhostLimit = DefaultGhostLimit
	}
	// A kernel feature the dump needs is missing: say which, before the
	// process is touched.
	if err := kernelcheck.Check(kernelcheck.Dump); err != nil {
		sink.Abort()
		return nil, fmt.Errorf("dump %d: %w", pid, err)
	}
	st, err := checkTarget(pid)
	if err != nil {
		sink.Abort()
		return nil, err
	}

	own := ownLimitsLater()

	// ptrace requests must all come from the thread that seized.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	t := &tree{opts: &opts, ghosts: map[[2]uint64]image.FileRef{}, kernel: bpftask.NewKernel()}
	if err := t.freeze(pid); err != nil {
		sink.Abort()
		return nil, fmt.Errorf("dump %d (%s): %w", pid, st.Comm, err)
	}
	frozenAt := time.Now()
	res = &Result{PID: pid, Processes: len(t.members)}
	defer t.closeSockets()
	defer func() {
		if err != nil {
			sink.Abort()
			t.releaseSockets()
			t.release()
			err = fmt.Errorf("dump %d (%s): %w", pid, st.Comm, err)
		}
	}()
	external, err := t.checkIDs()
	if err != nil {
		return nil, err
	}
	opts.fault(PhaseFrozen)
	if err := t.refuse(own); err != nil {
		return nil, err
	}
	if err := t.takeSockets(); err != nil {
		return nil, err
	}
	if err := t.checkFeatures(); err != nil {
		return nil, err
	}
	// Before a group's barrier, where a failed try can still be followed
	// by another.
	if err := t.acceptQueues(); err != nil {
		return nil, err
	}
	if opts.AfterFreeze != nil {
		if err := opts.AfterFreeze(); err != nil {
			return nil, err
		}
	}

	for _, m := range t.members {
		if m.p != nil { // a zombie, described when frozen
			continue
		}
		d := &dumper{pid: m.pid, fz: m.fz, opts: &opts, t: t}
		if m.p, err = d.collect(); err != nil {
			return nil, fmt.Errorf("process %d (%s): %w", m.pid, m.comm, err)
		}
	}
	if err := t.finishVfork(); err != nil {
		return nil, err
	}
	if err := t.finishFiles(); err != nil {
		return nil, err
	}
	shm := shmObjects{}
	byPID := map[sys.PID]*member{}
	hasChild := map[sys.PID]bool{}
	for _, m := range t.members {
		byPID[m.pid] = m
		if !m.p.Zombie {
			hasChild[m.p.PPID] = true
		}
	}
	zero := zeroPFN()
	for _, m := range t.members {
		if m.p.Zombie {
			continue
		}
		env := &planEnv{shm: shm, keepFrames: hasChild[m.pid], zeroPFN: zero}
		if pm := byPID[m.p.PPID]; pm != nil && pm.plan != nil {
			env.parent = &cowParent{p: pm.p, fr: pm.plan.frames}
		}
		if m.plan, err = planMemory(m.rd(), m.p, env); err != nil {
			return nil, fmt.Errorf("process %d: %w", m.pid, err)
		}
	}
	for _, m := range t.members {
		if m.plan != nil {
			m.plan.frames = nil // planned: the children have theirs
		}
	}
	if err := shm.unreachable(); err != nil {
		return nil, err
	}
	msgQueues, semSets, err := checkSysV(t.members)
	if err != nil {
		return nil, err
	}
	if err := checkAIOQuiet(t.members); err != nil {
		return nil, err
	}
	opts.fault(PhaseCollected)
	root := t.members[0].p
	hdr, err := header(pid, t.members[0].rd(), root)
	if err != nil {
		return nil, err
	}
	hdr.LeaveRunning = opts.LeaveRunning
	hdr.ExternalIDs = external
	hdr.SysVMsg = msgQueues
	hdr.SysVSem = semSets
	hdr.Processes = len(t.members)
	if t.socks.lock != nil && !opts.LeaveRunning {
		hdr.NetLock = t.socks.lock.Table
	}
	if err := sink.WriteHeader(hdr); err != nil {
		return nil, err
	}
	for _, m := range t.members {
		if err := sink.WriteProcess(m.p); err != nil {
			return nil, err
		}
		if !m.p.Zombie {
			res.Threads += len(m.p.Threads)
			res.VMAs += len(m.p.VMAs)
			res.FDs += len(m.p.FDs)
		}
	}
	for _, fd := range t.fileData {
		if err := sink.WriteFileData(fd.id, fd.data); err != nil {
			return nil, err
		}
	}
	opts.fault(PhaseMemory)
	// With --leave-running the processes are let go as soon as their
	// pages are all read, while they are still being written.
	var early func()
	if opts.LeaveRunning {
		early = func() {
			t.releaseSockets()
			t.release()
			res.Frozen = time.Since(frozenAt)
		}
	}
	var jobs []memJob
	for _, m := range t.members {
		if !m.p.Zombie {
			jobs = append(jobs, memJob{m.pid, m.plan, m.rd()})
		}
	}
	memStart := time.Now()
	ms, err := dumpMemory(jobs, sink, opts.Progress, early)
	if err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	res.Pages, res.ZeroPages, res.ParentPages, res.Bytes = ms.pages, ms.zero, ms.parent, ms.bytes
	if secs := time.Since(memStart).Seconds(); secs > 0 {
		res.MemoryRate = float64(res.Bytes) / secs / 1e6
	}
	if !opts.LeaveRunning {
		// Still frozen: a last look for completions that came meanwhile.
		if err := checkAIOQuiet(t.members); err != nil {
			return nil, err
		}
	}
	opts.fault(PhaseWritten)
	if p, ok := sink.(Preparer); ok {
		if err := p.Prepare(); err != nil {
			return nil, err
		}
	}
	if opts.BeforeCommit != nil {
		if err := opts.BeforeCommit(); err != nil {
			return nil, err
		}
	}
	if err := sink.Commit(); err != nil {
		return nil, err
	}
	opts.fault(PhaseCommitted)
	if opts.LeaveRunning {
		t.releaseSockets()
		t.release() // no-op if already released
	} else {
		// The connections are in repair mode: they die silently, and the
		// lock keeps their peers from being reset until the restore.
		if err := t.keepLock(); err != nil {
			opts.logf("%v", err)
		}
		t.silence()
		t.kill()
		res.Killed = true
		if opts.DropLock {
			t.releaseSockets()
		}
	}
	if res.Frozen == 0 {
		res.Frozen = time.Since(frozenAt)
	}
	res.Total = time.Since(start)
	return res, nil
}

// header describes the machine and the CPU features the process may use;
// rd is the PID its memory is read through (see frozen.via).
func header(pid, rd sys.PID, p *image.Process) (*image.Header, error) {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return nil, err
	}
	h := &image.Header{
		Tool:      "ckpt",
		Created:   time.Now().UTC(),
		Kernel:    unix.ByteSliceToString(uts.Release[:]),
		Machine:   unix.ByteSliceToString(uts.Machine[:]),
		Hostname:  unix.ByteSliceToString(uts.Nodename[:]),
		Root:      pid,
		Processes: 1,
		BootID:    machine.BootID(),
	}
	cpu, err := machine.ReadCPU()
	if err != nil {
		return nil, err
	}
	h.CPU = cpu
	if len(p.Threads) > 0 {
		h.CPU.XSaveSize = len(p.Threads[0].XState)
		h.CPU.XCR0 = xcr0(p.Threads[0].XState)
	}
	for _, v := range p.VMAs {
		if v.Kind == image.VMAVDSO {
			buf := make([]byte, v.Len())
			if err := readMem(rd, v.Start, buf); err != nil {
				return nil, fmt.Errorf("read vdso: %w", err)
			}
			h.VDSO = image.VDSO{Size: v.Len(), SHA256: machine.HashVDSO(buf)}
		}
	}
	return h, nil
}
