// Package restore brings a checkpointed process back from its image.
//
// The Go runtime cannot unmap itself, so the process is built from outside.
// ckpt-redo starts a tiny single-threaded helper program (see helper.go),
// seizes it with ptrace, and through system calls injected into it (each
// run between its PTRACE_SYSCALL entry and exit stops, see
// ptrace.Injector):
//
//  1. forks the new process with clone3 set_tid, so it gets its old PID,
//     in its old session and process group (see ids.go: gone leaders are
//     stood in for by short-lived helpers holding their PIDs);
//  2. in that process, maps a small gadget page (`syscall; int3` and scratch
//     memory) at an address the image leaves free, and unmaps everything else;
//  3. maps the vDSO at its old address (arch_prctl ARCH_MAP_VDSO_64) and every
//     VMA at its original address, file-backed ones from files opened by
//     ckpt-redo and inherited through the helper;
//  4. writes the pages with process_vm_writev in large batches while the
//     next batch is read from the image, then sets the final protections.
//     Steps 1-4 run process by process in image order, so that each child
//     is forked from its parent once the parent's memory is in place: it
//     keeps the VMAs it shares copy-on-write with it (the pages the image
//     stores as the parent's) instead of unmapping them (see cow.go);
//  5. restores the mm (PR_SET_MM_MAP, with exe and auxv), file descriptors
//     (dup3 of the inherited files), signal handlers, sigaltstack, timers,
//     rlimits, umask, cwd, rseq, robust list, pending signals, and
//     credentials last (strict seccomp mode the very last);
//  6. unmaps the gadget page and sets the registers and full xstate; a
//     leader that had exited at the dump exits again (deadleader.go);
//  7. stops again, by the same signal, a process that was stopped (see
//     stopped.go).
//
// The process is then held stopped (Built) until Release lets it run. While
// it is being built it is traced with PTRACE_O_EXITKILL: if anything fails,
// or ckpt-redo dies, it is killed, and nothing half-restored is left.
//
// A thread stopped inside a system call at dump time resumes as after a
// signal with no handler: calls the kernel restarts transparently (read,
// write, wait4, pause, accept, futex without timeout...: -ERESTARTSYS,
// -ERESTARTNOINTR, -ERESTARTNOHAND) are restarted; calls that can only be
// resumed through the kernel's restart block (nanosleep, clock_nanosleep,
// poll, epoll_wait, futex with a timeout: -ERESTART_RESTARTBLOCK) return
// EINTR.
package restore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/fdkind"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/kernelcheck"
	"github.com/ckpt/ckpt/pkg/machine"
	"github.com/ckpt/ckpt/pkg/netlock"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"github.com/ckpt/ckpt/pkg/rewrite"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// Errors callers can branch on.
var (
	// ErrPIDInUse means the PID the image needs is taken.
	ErrPIDInUse = errors.New("pid in use")
	// ErrIncompatible means the image was taken on a machine this one
	// cannot stand in for (CPU features, kernel vDSO, architecture).
	ErrIncompatible = machine.ErrIncompatible
	// ErrFileChanged means a file the process uses changed since the dump.
	ErrFileChanged = fdkind.ErrFileChanged
	// ErrExternal means the process had a resource shared with something
	// outside the dump, and no option says how to replace it.
	ErrExternal = fdkind.ErrExternal
)

// Options tune a restore.
type Options struct {
	// ShellJob attaches terminal fds to ckpt-redo's own terminal.
	ShellJob bool
	// Inherit gives target fd N one of ckpt-redo's files, replacing what
	// the image says.
	Inherit map[sys.TargetFD]*os.File
	// Stdio replaces fds 0-2 that cannot be restored otherwise (a pipe
	// or terminal outside the dump) with this file, e.g. /dev/null.
	Stdio string
	// Rules, if set, move socket endpoints (local and remote, of TCP and
	// UDP sockets) to new addresses: both ends of a connection must move
	// consistently for it to carry on.
	Rules *rewrite.Rules
	// TCPClose restores every TCP connection as a socket whose connection
	// ended (state CLOSE, shut down both ways, queues dropped): for a
	// process moved where its peers cannot follow. The dump's network
	// lock is lifted on Release.
	TCPClose bool
	// Progress, if set, is called as pages are written.
	Progress func(done, total int64)
	// Fault, if set, is called at the start of each phase with its name.
	Fault func(phase string)
	// Log receives warnings; nil discards them.
	Log func(format string, args ...any)
	// Group says the restore is one member of a group restored at once,
	// whose other members (its connections' peers) may be restored
	// elsewhere, each under a network lock its own restore takes. The
	// restored sockets' own packets are then let out only at Release,
	// once every member is built and so locked: sent earlier (the data
	// and window probe of a connection leaving repair mode, a SYN), they
	// could reach a peer's node before its lock, where the kernel, with
	// no socket yet, would answer with a reset.
	Group bool
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

// Phases named to Options.Fault.
const (
	PhaseChecked = "checked"
	PhaseCreated = "created"
	PhaseMemory  = "memory"
	PhaseBuilt   = "built"
)

// Result tells what a restore did.
type Result struct {
	PID        sys.PID       `json:"pid"`
	Processes  int           `json:"processes"`
	Threads    int           `json:"threads"`
	Pages      int64         `json:"pages"`
	Bytes      int64         `json:"bytes"`
	Build      time.Duration `json:"build_ns"` // until the process was complete
	MemoryRate float64       `json:"memory_mb_per_s"`
	Warnings   []string      `json:"warnings,omitempty"`
}

// Restored is a process tree rebuilt from an image and held stopped.
type Restored struct {
	Result
	tasks   []sys.TID
	lock    string // network lock table to lift once released
	ownLock bool   // taken by this restore (not the dump's)
	// conns are ckpt-redo's copies of the restored connections: a copy
	// discarded before its release puts them back in repair mode, so that
	// they die silently (no FIN to a peer, no TIME_WAIT holding the
	// 4-tuple against a retry).
	conns []*os.File
	// pidfds hold the restored processes (not zombies) from their fork:
	// Kill signals them through these, not by PID numbers that a process
	// released, ended and reaped may have left to another.
	pidfds []*sys.FD
	done   bool
	// outgoing is closed once the lock lets the sockets' own packets out
	// (nil without a lock, or for a member of a group: openAtRelease).
	outgoing chan struct{}
	// openAtRelease says the lock lets the sockets' own packets out only
	// at Release (Options.Group), and deferred are the connections
	// (ckpt-redo's copies, in repair mode) that leave repair mode then.
	openAtRelease bool
	deferred      []repairing
}

// waitOutgoing waits until the lock lets the sockets' own packets out.
func (r *Restored) waitOutgoing() {
	if r.outgoing != nil {
		<-r.outgoing
	}
}

func (r *Restored) closePidfds() {
	for _, fd := range r.pidfds {
		fd.Close()
	}
	r.pidfds = nil
}

func (r *Restored) closeConns() {
	for _, f := range append(r.conns, r.takeDeferred()...) {
		f.Close()
	}
	r.conns = nil
}

// takeDeferred hands over the files of the connections left to Release.
func (r *Restored) takeDeferred() []*os.File {
	var fs []*os.File
	for _, c := range r.deferred {
		fs = append(fs, c.f)
	}
	r.deferred = nil
	return fs
}

// unlock lifts the network lock, if any.
func (r *Restored) unlock() error {
	if r.lock == "" {
		return nil
	}
	err := netlock.Release(r.lock, -1)
	r.lock = ""
	return err
}

// Release lets the restored processes run, detached from ckpt-redo. It
// must be called from the goroutine (locked OS thread) that called Build.
func (r *Restored) Release() error {
	if r.done {
		return nil
	}
	r.done = true
	// What the processes send as soon as they run (the answer to a
	// request read before the dump) goes out rather than waiting for a
	// retransmission; the peers' packets stay held until unlock.
	r.waitOutgoing()
	if r.openAtRelease {
		if err := netlock.OpenOutgoing(r.lock, -1); err != nil {
			r.done = false
			r.Kill()
			return fmt.Errorf("release %d: %w", r.PID, err)
		}
	}
	for len(r.deferred) > 0 {
		c := r.deferred[0]
		r.deferred = r.deferred[1:]
		// Among the connections Kill silences, before it leaves repair.
		r.conns = append(r.conns, c.f)
		if err := resumeRepairing(c); err != nil {
			r.done = false
			r.Kill()
			return fmt.Errorf("release %d: %w", r.PID, err)
		}
	}
	for i := len(r.tasks) - 1; i >= 0; i-- {
		// A stopped process is in its group-stop already (see
		// stopAgain): detached, it stays stopped.
		if err := ptrace.Detach(r.tasks[i], 0); err != nil {
			r.done = false
			r.Kill()
			return fmt.Errorf("release %d: %w", r.tasks[i], err)
		}
	}
	r.closeConns()
	r.closePidfds()
	// The connections are live and their processes run: let packets in.
	if err := r.unlock(); err != nil {
		return fmt.Errorf("released, but the network lock stays: %w", err)
	}
	return nil
}

// Kill discards the restored processes.
func (r *Restored) Kill() {
	if r.done {
		return
	}
	r.done = true
	r.waitOutgoing()
	for _, f := range r.conns {
		sockets.EnterRepair(int(f.Fd()))
	}
	for _, fd := range r.pidfds {
		sys.PidfdSendSignal(fd, unix.SIGKILL) // ESRCH: reaped already
	}
	for _, t := range r.tasks {
		ptrace.Detach(t, 0)
	}
	r.closePidfds()
	r.closeConns()
	// Back to how things were: a lock this restore took goes, the dump's
	// stays for a retry.
	if r.ownLock {
		r.unlock()
	}
}

// Build rebuilds the process tree from the image stream and holds it
// stopped. The caller must have locked its goroutine to its OS thread and
// keep it locked until Release or Kill. It first probes the kernel features
// every restore needs (kernelcheck.Check): a missing one is an error
// wrapping kernelcheck.ErrNotSupported, before anything is built.
func Build(rd io.Reader, opts Options) (r *Restored, err error) {
	start := time.Now()
	go image.Warm() // while the kernel is probed
	// A kernel feature the restore needs is missing: say which, before
	// anything is built.
	if err := kernelcheck.Check(kernelcheck.Restore); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	img, err := readMeta(rd)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = lockStays(img.hdr.NetLock, err)
		}
	}()
	if err := machine.Check(&img.hdr); err != nil {
		return nil, err
	}
	if opts.TCPClose {
		closeConnections(img)
	}
	if err := checkImageFeatures(img); err != nil {
		return nil, err
	}
	t, err := newTree(img, &opts)
	if err != nil {
		return nil, err
	}
	if err := t.splitVforks(); err != nil {
		return nil, err
	}
	root := t.procs[0].p
	if err := checkSysVSem(img.hdr.SysVSem); err != nil {
		return nil, err
	}
	for _, b := range t.procs {
		if err := checkPID(b.p.PID, b.p.Comm); err != nil {
			return nil, err
		}
		if err := checkLimits(b.p); err != nil {
			return nil, err
		}
		for _, th := range b.p.Threads[min(1, len(b.p.Threads)):] {
			if err := checkPID(sys.PID(th.TID), th.Comm); err != nil { // a TID is taken from the PIDs
				return nil, fmt.Errorf("thread %d of %d: %w", th.TID, b.p.PID, err)
			}
		}
	}
	for _, id := range t.goneLeaders() {
		if err := checkPID(id, "(session or group leader)"); err != nil {
			return nil, fmt.Errorf("the gone leader %d of a session or process group of the tree: %w", id, err)
		}
	}
	opts.fault(PhaseChecked)
	defer t.cleanup()
	if err := t.takeLock(); err != nil {
		return nil, fmt.Errorf("restore %d: %w", root.PID, err)
	}
	// The restored sockets send nothing while they are in repair mode, so
	// their own packets are let out now (netlock.OpenOutgoing), while the
	// tree is built, rather than at Release: a commit of the lock table
	// waits for the kernel (10-20 ms) and would add to the time the
	// processes and their peers wait.
	var outgoing chan struct{}
	if t.lock != "" && !opts.Group {
		outgoing = make(chan struct{})
		go func(lock string) {
			defer close(outgoing)
			netlock.OpenOutgoing(lock, -1)
		}(t.lock)
		t.outgoing = outgoing
		defer func() {
			if err != nil {
				<-outgoing // before the cleanup lifts a lock this restore took
			}
		}()
	}
	if err := t.prepareFiles(); err != nil {
		return nil, fmt.Errorf("restore %d: %w", root.PID, err)
	}
	if opts.Rules != nil {
		for _, r := range opts.Rules.Unused() {
			t.warnf("rewrite rule %s (line %d) matches no endpoint of the image", r, r.Line)
		}
	}
	if err := t.build(img.pages); err != nil {
		t.kill()
		return nil, fmt.Errorf("restore %d: %w", root.PID, err)
	}
	if err := t.setOwners(); err != nil {
		t.kill()
		return nil, fmt.Errorf("restore %d: %w", root.PID, err)
	}
	opts.fault(PhaseBuilt)
	// Connections leave repair mode last, and the lock is lifted: from
	// here a restore that dies would close them (the processes are killed
	// with ckpt-redo), so the window is kept to these few calls.
	if err := t.resumeSockets(); err != nil {
		t.kill()
		return nil, fmt.Errorf("restore %d: %w", root.PID, err)
	}
	r = &Restored{lock: t.lock, ownLock: t.ownLock, conns: t.conns, outgoing: outgoing, deferred: t.deferred,
		openAtRelease: opts.Group && t.lock != ""}
	t.lock, t.conns, t.deferred = "", nil, nil // owned by r now
	r.PID = root.PID
	for _, b := range t.procs {
		r.Processes++
		r.Threads += len(b.p.Threads)
		r.Pages += b.pages
		r.Bytes += b.bytes
		r.tasks = append(r.tasks, b.tasks...)
	}
	r.Build = time.Since(start)
	if s := t.memTime.Seconds(); s > 0 {
		r.MemoryRate = float64(r.Bytes) / s / 1e6
	}
	r.Warnings = t.warnings
	for _, b := range t.procs {
		if b.target != 0 && b.pidfd != nil {
			r.pidfds = append(r.pidfds, b.pidfd)
			b.pidfd = nil
		}
		b.target = 0 // owned by r now
	}
	return r, nil
}

// imageMeta is what an image says before its pages, read and checked by
// image.ReadMeta.
type imageMeta struct {
	hdr   image.Header
	procs []*image.Process
	data  map[int][]byte
	// pages reads the pages records that follow.
	pages *image.PagesReader
}

func readMeta(rd io.Reader) (*imageMeta, error) {
	m, err := image.ReadMeta(rd)
	if err != nil {
		return nil, err
	}
	return &imageMeta{hdr: m.Header, procs: m.Processes, data: m.FileData, pages: m.Pages()}, nil
}

// checkPID makes sure the PID is free, and says what holds it if not.
func checkPID(pid sys.PID, comm string) error {
	st, err := proc.ReadStat(pid, 0)
	if err != nil {
		return nil
	}
	if st.State == 'Z' {
		if st.Comm == comm {
			return fmt.Errorf("pid %d is held by the zombie of the dumped process (%s): its parent %d has not reaped it; "+
				"make the parent reap it (or kill the parent), then retry: %w", pid, comm, st.PPID, ErrPIDInUse)
		}
		return fmt.Errorf("pid %d is held by a zombie (%s) whose parent %d has not reaped it: %w", pid, st.Comm, st.PPID, ErrPIDInUse)
	}
	if st.Comm == comm {
		return fmt.Errorf("pid %d is in use by a running %s — is the dumped process still running (dumped with --leave-running)? "+
			"kill it first, then retry: %w", pid, comm, ErrPIDInUse)
	}
	return fmt.Errorf("pid %d is in use by %s (parent %d); the process must get its old PID back: stop that process, then retry: %w",
		pid, st.Comm, st.PPID, ErrPIDInUse)
}

// LockedError is a failed restore that leaves the dump's network lock in
// place, as designed: the peers of the dumped connections hear nothing
// and keep them open for a retry. Table names the lock (`ckpt unlock`
// lifts it).
type LockedError struct {
	Table string
	Err   error
}

// Error says the restore's error and that the lock stays.
func (e *LockedError) Error() string {
	return fmt.Sprintf("%v (the network lock %s stays: the connections' peers wait for a retry; ckpt unlock lifts it)", e.Err, e.Table)
}

// Unwrap returns the restore's error.
func (e *LockedError) Unwrap() error { return e.Err }

// lockStays wraps err, a failed restore's error, in a LockedError when the
// dump's network lock table is still there.
func lockStays(table string, err error) error {
	if table == "" {
		return err
	}
	ts, lerr := netlock.Tables()
	if lerr != nil || !slices.Contains(ts, table) {
		return err
	}
	return &LockedError{Table: table, Err: err}
}
