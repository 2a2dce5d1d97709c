package restore

// A process whose leader had exited at the dump (Process.LeaderExited):
// it is built as usual, the leader at PID and the other threads at their
// TIDs, and once it is built (finish) the leader exits with the exit
// system call, not exit_group: a zombie thread, as at the dump, while the
// process runs on. Whatever the restore does after that goes through a
// live thread (builder.in); a process stopped at the dump is stopped again
// through its live threads (stopped.go). The dump side is
// pkg/dump/deadleader.go.

import (
	"fmt"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// leaderExitWait bounds the wait for the leader, detached in its exit, to
// be a zombie.
const leaderExitWait = 5 * time.Second

// exitLeader makes the leader of a process whose leader had exited run
// the exit system call (at the syscall instruction of b.in.Gadget) with
// its old exit code. It runs to its PTRACE_EVENT_EXIT stop with every
// signal blocked (it takes none of the process's signals on its way),
// gets its own signal mask there (the zombie shows it), and is detached
// to end its exit untraced: its zombie is nobody's tracee, the process's
// parent sees the process end as it would have. b.in and b.tasks then
// name the first live thread and the live threads only.
func (b *builder) exitLeader() error {
	p := b.p
	if !p.LeaderExited {
		return nil
	}
	lead := p.PID.Leader()
	if b.in.Gadget == 0 {
		return fmt.Errorf("thread %d (the leader, exited at the dump): no syscall instruction to make it exit at", lead)
	}
	opts := ptrace.OptTraceFork | ptrace.OptTraceClone | ptrace.OptExitKill | ptrace.OptSuspendSeccomp | unix.PTRACE_O_TRACEEXIT
	if err := unix.PtraceSetOptions(int(lead), opts); err != nil {
		return fmt.Errorf("thread %d: ptrace options: %w", lead, err)
	}
	if err := ptrace.SetSigMask(lead, allSignals); err != nil {
		return fmt.Errorf("thread %d: %w", lead, err)
	}
	regs, err := ptrace.GetRegs(lead)
	if err != nil {
		return err
	}
	regs.Rip, regs.Rax, regs.Orig_rax = b.in.Gadget, unix.SYS_EXIT, ^uint64(0)
	regs.Rdi = uint64(p.LeaderExitCode>>8) & 0xff
	if err := ptrace.SetRegs(lead, &regs); err != nil {
		return err
	}
	if err := ptrace.Cont(lead, 0); err != nil {
		return fmt.Errorf("thread %d: run its exit: %w", lead, err)
	}
	st, err := ptrace.Wait(lead)
	if err != nil {
		return err
	}
	if !st.Status.Stopped() || st.Event != unix.PTRACE_EVENT_EXIT {
		return fmt.Errorf("thread %d: %s on its way to exit, not its exit stop", lead, st)
	}
	if err := ptrace.SetSigMask(lead, p.Threads[0].SigMask); err != nil {
		return fmt.Errorf("thread %d: signal mask at its exit: %w", lead, err)
	}
	if err := ptrace.Detach(lead, 0); err != nil {
		return fmt.Errorf("thread %d: detach in its exit: %w", lead, err)
	}
	b.tasks = removeTID(b.tasks, lead)
	if len(b.ins) > 1 {
		b.in = ptrace.Injector{TID: b.ins[1].TID, Gadget: b.in.Gadget}
	}
	return waitZombieThread(p.PID, lead)
}

// waitZombieThread waits until thread tid of process pid is a zombie.
func waitZombieThread(pid sys.PID, tid sys.TID) error {
	deadline := time.Now().Add(leaderExitWait)
	sleep := time.Duration(0)
	for i := 0; ; i++ {
		st, err := proc.ReadStat(pid, tid)
		if err != nil {
			return fmt.Errorf("thread %d after its exit: %w", tid, err)
		}
		if st.State == 'Z' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("thread %d: still in state %c %v after its exit", tid, st.State, leaderExitWait)
		}
		sleep = ptrace.Backoff(i, sleep)
	}
}

func removeTID(tids []sys.TID, tid sys.TID) []sys.TID {
	out := tids[:0:0]
	for _, t := range tids {
		if t != tid {
			out = append(out, t)
		}
	}
	return out
}

// injected is the index in Process.Threads of the thread b.in runs calls
// in: the leader, or the live thread that took over once it exited.
func (b *builder) injected() int {
	for i, th := range b.p.Threads {
		if th.TID == b.in.TID {
			return i
		}
	}
	return 0
}
