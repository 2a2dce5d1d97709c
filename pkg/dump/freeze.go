package dump

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/fdkind"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// Errors callers can branch on.
var (
	// ErrNoProcess means the PID does not exist.
	ErrNoProcess = errors.New("no such process")
	// ErrNotDumpable means the PID names something ckpt cannot dump: a
	// kernel thread, a zombie, ckpt itself.
	ErrNotDumpable = errors.New("process cannot be dumped")
	// ErrUnsupported means the process uses something ckpt cannot save
	// yet; the error names the process, the fd or mapping, and the kind.
	ErrUnsupported = fdkind.ErrUnsupported
	// ErrStaleLock means a connection of the tree is held by a network
	// lock that is not this dump's (ckpt unlock lifts it).
	ErrStaleLock = errors.New("connection held by a stale network lock")
)

// task is one seized thread.
type task struct {
	tid     sys.TID
	stopped bool        // in group-stop when seized
	stopSig unix.Signal // the signal of that group-stop
	wchan   string      // where it slept in restart_syscall, before the freeze
	mask    uint64      // the blocked signal mask, as the process had it
	// suspended tells that its seccomp protections are suspended while
	// traced (PTRACE_O_SUSPEND_SECCOMP, which needs CAP_SYS_ADMIN).
	suspended bool
	// signals taken off the queue while injecting (only SIGSTOP can be:
	// every other signal is blocked then), to be re-delivered when the
	// task is let go, or saved in the image.
	signals []ptrace.Signal
	// sharedStops and privateStops are the stop signals (stopSignals)
	// pending in the process's and the thread's own queue when a thread
	// in group-stop was seized: ones that came while it was stopped, and
	// that the injection then takes off the queue.
	sharedStops, privateStops uint64
	// status caches /proc/TID/status once the task is frozen (see
	// task.readStatus): reading it is the dearest part of a thread's dump.
	status *proc.Status
	stat   *proc.Stat // /proc/PID/task/TID/stat, the same way (task.readStat)
	// fetched is closed once frozen.prefetch has read status and stat
	// (nil: it does not read them).
	fetched chan struct{}
	files   map[string][]byte // the prefetched files read (task.readFile)
}

// frozen is a process whose every thread is seized and stopped.
type frozen struct {
	pid   sys.PID
	tasks []*task
	// pidfd holds the process from the seizure of its leader (traced, it
	// is reaped by nobody else): the signals release sends again after
	// the detach go through it, never to a PID number the process may
	// have left by then (detached, it can end and be reaped at once).
	pidfd *sys.FD
	// leaderExited is set when the leader had exited (a zombie thread,
	// not seized) while other threads ran on; via is then the live
	// thread the process's /proc files and memory are read through
	// (deadleader.go).
	leaderExited bool
	via          sys.PID
}

// checkTarget refuses PIDs that cannot be dumped, with the reason.
func checkTarget(pid sys.PID) (*proc.Stat, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	st, err := proc.ReadStat(pid, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	switch {
	case pid == sys.Getpid():
		return nil, fmt.Errorf("pid %d is ckpt itself: %w", pid, ErrNotDumpable)
	case st.Flags&proc.PFKthread != 0:
		return nil, fmt.Errorf("pid %d (%s) is a kernel thread: %w", pid, st.Comm, ErrNotDumpable)
	case (st.State == 'Z' || st.State == 'X') && !leaderExited(pid):
		return nil, fmt.Errorf("pid %d (%s) is a zombie, it has exited: %w", pid, st.Comm, ErrNotDumpable)
	}
	if tgid := tgidOf(pid.Leader()); tgid != pid {
		return nil, fmt.Errorf("pid %d is a thread of process %d: dump the process: %w", pid, tgid, ErrNotDumpable)
	}
	return st, nil
}

func tgidOf(tid sys.TID) sys.PID {
	st, err := proc.ReadThreadStatus(tid)
	if err != nil {
		return sys.PID(tid)
	}
	return st.TGID
}

// freeze seizes and stops every thread of pid. Threads created meanwhile are
// caught by rescanning until the set is stable. Each round seizes and
// interrupts every new thread first and then waits for them: they stop
// together, not one after the other. On error everything seized is
// released. deadLeader tells that the leader has exited (a zombie
// thread, other threads running: see deadleader.go): it is not seized.
func freeze(pid sys.PID, deadLeader bool) (*frozen, error) {
	fz := &frozen{pid: pid, leaderExited: deadLeader}
	seen := map[sys.TID]bool{}
	if fz.leaderExited {
		seen[pid.Leader()] = true // a zombie thread: not seized
	}
	for round := 0; ; round++ {
		tids, err := proc.Tasks(pid)
		if err != nil {
			fz.release()
			return nil, fmt.Errorf("list threads of %d: %w", pid, err)
		}
		var started []*task
		fail := func(err error) (*frozen, error) {
			for _, t := range started {
				ptrace.Detach(t.tid, 0)
			}
			fz.release()
			return nil, fmt.Errorf("freeze %d: %w", pid, err)
		}
		for _, tid := range tids {
			if seen[tid] {
				continue
			}
			seen[tid] = true
			t, err := startSeize(tid)
			if err != nil {
				if errors.Is(err, unix.ESRCH) && tid != pid.Leader() {
					continue // thread exited meanwhile
				}
				return fail(err)
			}
			started = append(started, t)
		}
		if len(started) == 0 {
			if err := fz.viaLive(); err != nil {
				fz.release()
				return nil, err
			}
			fz.prefetch()
			return fz, nil
		}
		deadline := time.Now().Add(stopTimeout)
		for len(started) > 0 {
			t := started[0]
			err := t.waitSeized(deadline)
			if err == nil {
				fz.tasks = append(fz.tasks, t)
				if (t.tid == pid.Leader() || fz.leaderExited) && fz.pidfd == nil {
					fz.pidfd, _ = sys.PidfdOpen(pid, 0) // nil: by number, as before
				}
			} else if !errors.Is(err, unix.ESRCH) || t.tid == pid.Leader() {
				return fail(err) // detaches it too, and the ones not waited for
			}
			started = started[1:]
		}
		if round > 100 {
			fz.release()
			return nil, fmt.Errorf("freeze %d: threads keep appearing", pid)
		}
	}
}

// startSeize seizes a thread and asks it to stop (see waitSeized).
func startSeize(tid sys.TID) (*task, error) {
	suspended := true
	if err := ptrace.Seize(tid, ptrace.OptSuspendSeccomp); err != nil {
		suspended = false
		// Without CAP_SYS_ADMIN suspending seccomp is refused: try without.
		if err2 := ptrace.Seize(tid, 0); err2 != nil {
			if errors.Is(err2, unix.EPERM) {
				return nil, fmt.Errorf("thread %d: %w (another tracer attached, or no permission)", tid, err2)
			}
			return nil, err2
		}
	}
	// Where a thread sleeps in the kernel is seen only while it sleeps.
	wchan := restartWchan(tid)
	if err := ptrace.Interrupt(tid); err != nil {
		ptrace.Detach(tid, 0)
		return nil, err
	}
	return &task{tid: tid, suspended: suspended, wchan: wchan}, nil
}

// waitSeized waits until a thread startSeize asked to stop is in its
// interrupt (or group) stop; it is detached if that fails.
func (t *task) waitSeized(deadline time.Time) error {
	tid := t.tid
	for {
		st, err := waitStop(tid, deadline)
		if err != nil {
			ptrace.Detach(tid, 0)
			return err
		}
		if st.Exited() {
			return fmt.Errorf("thread %d %s: %w", tid, st, unix.ESRCH)
		}
		if st.IsEventStop() {
			if t.stopped = st.IsGroupStop(); t.stopped {
				t.stopSig = st.Sig()
				ps, err := proc.ReadThreadStatus(tid)
				if err != nil {
					return err
				}
				t.sharedStops, t.privateStops = ps.ShdPnd&stopSignals, ps.SigPnd&stopSignals
			}
			// The process's own mask, before the dump changes it.
			if t.mask, err = ptrace.GetSigMask(tid); err != nil {
				return err
			}
			return nil
		}
		if st.Event != 0 {
			// Some other event stop: let it go on, the interrupt is pending.
			if err := ptrace.Cont(tid, 0); err != nil {
				return err
			}
			continue
		}
		// A signal-delivery stop: the task took a signal off its queue
		// before it saw the interrupt. Let the delivery go on, as it would
		// have without us: a handler's frame is set up (the task stops at
		// the interrupt before running a single instruction of it), an
		// ignored signal is dropped, a stop signal stops the process.
		// Taking it and sending it again would lose its siginfo (si_code,
		// si_value, a POSIX timer's id and overrun) or reorder real-time
		// signals.
		if err := ptrace.Cont(tid, st.Sig()); err != nil {
			return err
		}
		// A trap clears a pending interrupt (ptrace_stop): ask again,
		// or a thread that gets no further signal would run on.
		if err := ptrace.Interrupt(tid); err != nil {
			return err
		}
	}
}

// stopTimeout bounds the wait for a seized thread to stop: one that does
// not is stuck in the kernel (an uninterruptible wait), and the dump fails
// instead of hanging.
const stopTimeout = 10 * time.Second

// waitStop waits for a state change of tid until deadline: it polls, with
// ptrace.Backoff between polls (a seized thread usually stops within
// microseconds).
func waitStop(tid sys.TID, deadline time.Time) (ptrace.Stop, error) {
	sleep := time.Duration(0)
	for i := 0; ; i++ {
		var ws unix.WaitStatus
		got, err := unix.Wait4(int(tid), &ws, unix.WALL|unix.WNOHANG, nil)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return ptrace.Stop{}, fmt.Errorf("wait %d: %w", tid, err)
		case sys.TID(got) == tid:
			st := ptrace.Stop{Status: ws}
			if ws.Stopped() {
				st.Event = int(ws>>16) & 0xff
			}
			return st, nil
		}
		if time.Now().After(deadline) {
			state := "?"
			if s, err := proc.ReadStat(sys.PID(tid), 0); err == nil {
				state = string(s.State)
			}
			return ptrace.Stop{}, fmt.Errorf("thread %d did not stop within %v (state %s: stuck in the kernel): %w", tid, stopTimeout, state, ErrUnsupported)
		}
		sleep = ptrace.Backoff(i, sleep)
	}
}

// release detaches every task, leaving the process as it was (a SIGSTOP
// taken while injecting is delivered again). A task stopped when seized
// stops again by its own stop signal, and once it has, the stop signals
// that were pending in it then are sent again to the queue they were in
// (stopped, it leaves them there).
func (fz *frozen) release() {
	for _, t := range fz.tasks {
		if t.stopped {
			ptrace.Detach(t.tid, t.stopSig)
			if len(t.signals) > 0 {
				waitStopped(t.tid)
			}
			for _, s := range t.signals {
				fz.resend(t.tid, s.Sig, t.sharedQueue(s.Sig))
			}
			continue
		}
		var first unix.Signal
		rest := t.signals
		if len(rest) > 0 {
			first, rest = rest[0].Sig, rest[1:]
		}
		ptrace.Detach(t.tid, first)
		for _, s := range rest {
			fz.resend(t.tid, s.Sig, false)
		}
	}
	fz.tasks = nil
	fz.pidfd.Close()
	fz.pidfd = nil
}

// resend sends sig again, after the detach, to the process (shared) or
// to its thread tid. Through the pidfd: the process, running again, may
// have ended and been reaped, and its PID taken by another. A thread
// other than the leader is named by tgkill, which also checks that it
// is in a thread group of the process's PID.
func (fz *frozen) resend(tid sys.TID, sig unix.Signal, shared bool) {
	switch {
	case fz.pidfd == nil:
		if shared {
			unix.Kill(int(fz.pid), sig)
		} else {
			unix.Tgkill(int(fz.pid), int(tid), sig)
		}
	case shared:
		unix.PidfdSendSignal(fz.pidfd.Int(), sig, nil, 0)
	case tid == fz.pid.Leader():
		err := unix.PidfdSendSignal(fz.pidfd.Int(), sig, nil, unix.PIDFD_SIGNAL_THREAD)
		if err == unix.EINVAL && sys.PidfdSendSignal(fz.pidfd, 0) == nil { // before Linux 6.9
			unix.Tgkill(int(fz.pid), int(tid), sig)
		}
	default:
		if sys.PidfdSendSignal(fz.pidfd, 0) == nil { // not reaped: fz.pid is still its
			unix.Tgkill(int(fz.pid), int(tid), sig)
		}
	}
}

// stopSignals are the signals whose default action stops a process.
const stopSignals = 1<<(unix.SIGSTOP-1) | 1<<(unix.SIGTSTP-1) | 1<<(unix.SIGTTIN-1) | 1<<(unix.SIGTTOU-1)

// sharedQueue tells whether sig, taken off a stopped task's queue while
// injecting, came from the process's shared queue (it was pending there
// and not in the thread's own).
func (t *task) sharedQueue(sig unix.Signal) bool {
	bit := uint64(1) << (uint(sig) - 1)
	return t.privateStops&bit == 0 && t.sharedStops&bit != 0
}

// waitStopped waits a little for a detached thread to be in its stop
// again (state T), so that a stop signal sent afterwards stays pending
// instead of being the one it stops by.
func waitStopped(tid sys.TID) {
	deadline := time.Now().Add(time.Second)
	sleep := time.Duration(0)
	for i := 0; time.Now().Before(deadline); i++ {
		if st, err := proc.ReadStat(sys.PID(tid), 0); err != nil || st.State == 'T' {
			return
		}
		sleep = ptrace.Backoff(i, sleep)
	}
}

// kill kills the frozen process; it dies without running again.
func (fz *frozen) kill() error {
	if fz.pidfd != nil {
		defer func() { fz.pidfd.Close(); fz.pidfd = nil }()
		if err := sys.PidfdSendSignal(fz.pidfd, unix.SIGKILL); err != nil {
			return fmt.Errorf("kill %d: %w", fz.pid, err)
		}
		return nil
	}
	if err := unix.Kill(int(fz.pid), unix.SIGKILL); err != nil {
		return fmt.Errorf("kill %d: %w", fz.pid, err)
	}
	return nil
}

// waitDead waits until every thread of the killed process has exited, as
// its tracer sees it: its memory is freed by then, and its PID is left
// only as a zombie for its parent to reap. A restore of the same PID (a
// migration back to this node) must not find it still dying. Threads are
// polled together: a leader is reported only once the tracer has reaped
// its other threads.
func (fz *frozen) waitDead(deadline time.Time) {
	left := map[sys.TID]bool{}
	for _, t := range fz.tasks {
		left[t.tid] = true
	}
	for len(left) > 0 && time.Now().Before(deadline) {
		progress := false
		for tid := range left {
			var ws unix.WaitStatus
			got, err := unix.Wait4(int(tid), &ws, unix.WALL|unix.WNOHANG, nil)
			switch {
			case err == unix.EINTR:
			case err != nil || (sys.TID(got) == tid && (ws.Exited() || ws.Signaled())):
				delete(left, tid)
				progress = true
			case sys.TID(got) == tid && ws.Stopped():
				ptrace.Detach(tid, 0)
				progress = true
			}
		}
		if !progress {
			time.Sleep(500 * time.Microsecond)
		}
	}
	fz.tasks = nil
}

// strictSeccomp marks the threads in strict seccomp mode. Their injected
// calls run only because seccomp is suspended while they are traced: a
// thread in strict mode seized without that is refused (any other call
// would kill it).
func (d *dumper) strictSeccomp(p *image.Process) error {
	for i, t := range d.fz.tasks {
		st, err := t.readStatus()
		if err != nil {
			return fmt.Errorf("thread %d: read status: %w", t.tid, err)
		}
		if st.Seccomp != 1 {
			continue
		}
		if !t.suspended {
			return fmt.Errorf("thread %d: strict seccomp mode, and its seccomp cannot be suspended (PTRACE_O_SUSPEND_SECCOMP needs CAP_SYS_ADMIN) to run the dump's injected calls: %w", t.tid, ErrUnsupported)
		}
		p.Threads[i].SeccompStrict = true
	}
	return nil
}
