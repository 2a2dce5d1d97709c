package dump

import (
	"fmt"
	"os"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// Signal state of a frozen process: what restore/signals.go sets again.
// Handlers, interval and POSIX timers are asked in the injection window
// (askSignals); the queued signals are read last (collectPending).

// askSignals asks the leader of process p for its signal handlers, its
// interval timers and the times of its POSIX timers.
func (d *dumper) askSignals(a asker, p *image.Process) error {
	// Only caught and ignored signals can have a handler; the others are
	// SIG_DFL. SIGCHLD is always asked: SA_NOCLDWAIT and SA_NOCLDSTOP
	// matter even with SIG_DFL.
	status, err := proc.ReadStatus(d.pid)
	if err != nil {
		return fmt.Errorf("read status: %w", err)
	}
	handled := status.SigCgt | status.SigIgn | 1<<(unix.SIGCHLD-1)
	p.Signals.Actions = make([]image.Sigaction, 64)
	for sig := 1; sig <= 64; sig++ {
		if sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) || handled&(1<<(sig-1)) == 0 {
			continue
		}
		act := &p.Signals.Actions[sig-1]
		a.ask("rt_sigaction", 32, func(_ uint64, b []byte) error {
			*act = image.Sigaction{Handler: le64(b), Flags: le64(b[8:]), Restorer: le64(b[16:]), Mask: le64(b[24:])}
			return nil
		}, unix.SYS_RT_SIGACTION, uint64(sig), 0, outArg, 8)
	}
	for which, it := range []*image.ITimer{&p.Timers.Real, &p.Timers.Virtual, &p.Timers.Prof} {
		a.ask("getitimer", 32, func(_ uint64, b []byte) error {
			it.IntervalUs = int64(le64(b))*1e6 + int64(le64(b[8:]))
			it.ValueUs = int64(le64(b[16:]))*1e6 + int64(le64(b[24:]))
			return nil
		}, unix.SYS_GETITIMER, uint64(which), outArg)
	}
	timers, err := readPosixTimers(d.rd())
	if err != nil {
		return err
	}
	for i := range timers {
		pt := &timers[i]
		a.ask("timer_gettime", 32, func(_ uint64, b []byte) error {
			pt.IntervalNs = int64(le64(b))*1e9 + int64(le64(b[8:]))
			pt.ValueNs = int64(le64(b[16:]))*1e9 + int64(le64(b[24:]))
			return nil
		}, unix.SYS_TIMER_GETTIME, uint64(pt.ID), outArg)
		a.ask("timer_getoverrun", 0, func(ov uint64, _ []byte) error {
			pt.Overrun = int(ov)
			return nil
		}, unix.SYS_TIMER_GETOVERRUN, uint64(pt.ID))
	}
	p.Timers.Posix = timers
	return nil
}

// collectPending saves the signals queued for each thread and for the
// process, after the injection: a SIGSTOP the injection took off the
// queue (task.signals) is saved as pending.
func (d *dumper) collectPending(p *image.Process) error {
	for i, t := range d.fz.tasks {
		pend, err := ptrace.PeekSigInfo(t.tid, false)
		if err != nil {
			return fmt.Errorf("thread %d: %w", t.tid, err)
		}
		var taken [][]byte
		for _, s := range t.signals {
			if t.stopped && t.sharedQueue(s.Sig) {
				taken = append(taken, s.Info) // from the process's queue
				continue
			}
			pend = append(pend, s.Info)
		}
		for _, s := range pend {
			p.Threads[i].Pending = append(p.Threads[i].Pending, image.SigInfo(s))
		}
		for _, s := range taken {
			p.Signals.Pending = append(p.Signals.Pending, image.SigInfo(s))
		}
	}
	shared, err := ptrace.PeekSigInfo(d.fz.tasks[0].tid, true) // the leader, or a live thread
	if err != nil {
		return err
	}
	for _, s := range shared {
		p.Signals.Pending = append(p.Signals.Pending, image.SigInfo(s))
	}
	return nil
}

// readPosixTimers reads the POSIX timers of a process from
// /proc/PID/timers; their times come from injected timer_gettime.
func readPosixTimers(pid sys.PID) ([]image.PosixTimer, error) {
	ts, err := proc.ReadTimers(pid)
	if err != nil {
		return nil, fmt.Errorf("read timers: %w", err)
	}
	var out []image.PosixTimer
	for _, t := range ts {
		exited := false
		if t.Notify&sigevThreadID != 0 {
			if _, err := os.Stat(proc.Path(pid, "task", t.NotifyTID.String())); err != nil {
				// The thread has exited: the timer's signals go
				// nowhere. The restore makes it for a thread of that
				// TID that exits at once (timer_create only names a
				// live thread), which needs the number free.
				exited = true
				if _, err := os.Stat(proc.ThreadPath(t.NotifyTID)); err == nil {
					return nil, fmt.Errorf("POSIX timer %d notifies thread %d (SIGEV_THREAD_ID), which has exited, and another task has that number now: cannot be restored: %w",
						t.ID, t.NotifyTID, ErrUnsupported)
				}
			}
		}
		out = append(out, image.PosixTimer{ID: t.ID, Clock: t.Clock, Signal: t.Signal, Notify: t.Notify, NotifyTID: t.NotifyTID,
			NotifyExited: exited, SigValue: t.SigValue})
	}
	return out, nil
}

// sigevThreadID is SIGEV_THREAD_ID: a POSIX timer's signal goes to one
// thread.
const sigevThreadID = 4
