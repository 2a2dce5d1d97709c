package restore

import (
	"encoding/binary"
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// A process stopped at the dump is stopped again at the end of the build,
// while it is still traced, by the same signal (SIGSTOP, SIGTSTP, SIGTTIN
// or SIGTTOU: its parent's waitpid(WUNTRACED) tells which): the signal is
// queued to one thread with every other signal blocked, delivered from its
// signal-delivery stop, and the other threads join the group-stop. Its
// parent in the tree then sees exactly what it saw at the dump: the stop
// still to be collected, or already collected (the restore collects it in
// the parent), and no SIGCHLD it did not have pending. Detached, the
// process stays stopped until a SIGCONT, as before.

const allSignals = ^uint64(0)

func sigBit(s unix.Signal) uint64 { return 1 << (uint(s) - 1) }

// stopAgain stops again every process that was stopped at the dump.
func (t *tree) stopAgain() error {
	for _, b := range t.live() {
		if !b.p.Misc.Stopped {
			continue
		}
		if err := b.stop(); err != nil {
			return fmt.Errorf("process %d: stop again: %w", b.p.PID, err)
		}
		if err := b.queueStops(); err != nil {
			return fmt.Errorf("process %d: stopped again: %w", b.p.PID, err)
		}
		parent, ok := t.byPID[b.p.PPID]
		if !ok || b == t.procs[0] {
			continue // the root's parent is a new one
		}
		if err := parent.settleStop(b); err != nil {
			return fmt.Errorf("process %d: its child %d stopped again: %w", parent.p.PID, b.p.PID, err)
		}
	}
	return nil
}

// stop puts every thread of the process into a group-stop by its stop
// signal.
func (b *builder) stop() error {
	sig := unix.Signal(b.p.Misc.StopSignal)
	if sig == 0 {
		sig = unix.SIGSTOP
	}
	ths := b.p.Threads
	if b.p.LeaderExited {
		ths = ths[1:] // the leader has exited again (deadleader.go)
	}
	first := -1
	for i, th := range ths {
		if sig == unix.SIGSTOP || th.SigMask&sigBit(sig) == 0 {
			first = i
			break
		}
	}
	if first < 0 {
		return fmt.Errorf("%v is blocked in every thread", sig)
	}
	order := []int{first}
	for i := range ths {
		if i != first {
			order = append(order, i)
		}
	}
	for k, i := range order {
		tid := ths[i].TID
		if err := ptrace.SetSigMask(tid, allSignals&^sigBit(sig)); err != nil {
			return err
		}
		if k == 0 {
			if err := unix.Tgkill(int(b.p.PID), int(tid), sig); err != nil {
				return fmt.Errorf("thread %d: tgkill %v: %w", tid, sig, err)
			}
		}
		if err := groupStop(tid, sig, k == 0); err != nil {
			return fmt.Errorf("thread %d: %w", tid, err)
		}
		if err := ptrace.SetSigMask(tid, ths[i].SigMask); err != nil {
			return err
		}
	}
	return nil
}

// groupStop resumes a thread held at a ptrace stop until it reports the
// group-stop of sig. The first thread gets sig in a signal-delivery stop
// and is let take it; an interrupt bounds the wait, should the signal not
// stop it.
func groupStop(tid sys.TID, sig unix.Signal, first bool) error {
	if err := ptrace.Cont(tid, 0); err != nil {
		return err
	}
	interrupted := false
	for {
		st, err := ptrace.Wait(tid)
		if err != nil {
			return err
		}
		switch {
		case st.Exited():
			return fmt.Errorf("%s: %w", st, ptrace.ErrExited)
		case st.IsGroupStop() && st.Sig() == sig:
			return nil
		case st.IsEventStop() && interrupted:
			return fmt.Errorf("%v did not stop it", sig)
		case st.Event == 0 && st.Sig() == sig && first:
			if err := ptrace.Cont(tid, sig); err != nil {
				return err
			}
			if err := ptrace.Interrupt(tid); err != nil {
				return err
			}
			interrupted = true
			continue
		case st.Event == 0:
			return fmt.Errorf("unexpected %v while stopping it by %v", st.Sig(), sig)
		}
		if !interrupted {
			if err := ptrace.Interrupt(tid); err != nil {
				return err
			}
			interrupted = true
		}
		if err := ptrace.Cont(tid, 0); err != nil {
			return err
		}
	}
}

// settleStop makes the parent see its child's new stop as it saw the old
// one: collected already (unless StopUnreported), and no SIGCHLD for it
// unless one was pending at the dump.
func (b *builder) settleStop(c *builder) error {
	leader := b.p.Threads[b.injected()] // the leader, or a live thread if it has exited
	if err := ptrace.SetSigMask(leader.TID, allSignals); err != nil {
		return err
	}
	defer ptrace.SetSigMask(leader.TID, leader.SigMask)
	if !c.p.Misc.StopUnreported {
		ret, err := b.call("wait4 for the stopped child", unix.SYS_WAIT4, uint64(c.p.PID), 0, unix.WUNTRACED|unix.WNOHANG|unix.WALL, 0)
		if err != nil {
			return err
		}
		if sys.PID(ret) != c.p.PID {
			return fmt.Errorf("wait4 for the stopped child %d returned %d", c.p.PID, int64(ret))
		}
	}
	if hasPending(b.p.Signals.Pending, unix.SIGCHLD) {
		return nil
	}
	st, err := proc.ReadStatus(b.p.PID)
	if err != nil {
		return err
	}
	if st.ShdPnd&sigBit(unix.SIGCHLD) == 0 {
		return nil
	}
	return b.dequeue(unix.SIGCHLD)
}

func hasPending(sis []image.SigInfo, sig unix.Signal) bool {
	for _, si := range sis {
		if len(si) >= 4 && unix.Signal(binary.LittleEndian.Uint32(si)) == sig {
			return true
		}
	}
	return false
}

// dequeue takes one pending sig off the process's queue with an injected
// rt_sigtimedwait, its arguments on the stack below the red zone (put back
// after). The caller blocks every signal in the leader.
func (b *builder) dequeue(sig unix.Signal) error {
	tid := b.in.TID // the leader, or a live thread if it has exited
	regs, err := ptrace.GetRegs(tid)
	if err != nil {
		return err
	}
	at := (regs.Rsp - 128 - 64) &^ 15
	saved := make([]byte, 24)
	if err := ptrace.ReadMem(sys.PID(tid), at, saved); err != nil {
		return err
	}
	args := make([]byte, 24) // sigset, then a zero timespec
	binary.LittleEndian.PutUint64(args, sigBit(sig))
	if err := ptrace.WriteMem(sys.PID(tid), at, args); err != nil {
		return err
	}
	ret, err := b.call("rt_sigtimedwait", unix.SYS_RT_SIGTIMEDWAIT, at, 0, at+8, 8)
	if werr := ptrace.WriteMem(sys.PID(tid), at, saved); err == nil {
		err = werr
	}
	if err != nil {
		return err
	}
	if unix.Signal(ret) != sig {
		return fmt.Errorf("rt_sigtimedwait took %d, not %v", ret, sig)
	}
	return nil
}
