package dump

// A process whose thread-group leader has exited (pthread_exit or the exit
// system call in its main thread) while other threads run on. The leader
// is a zombie thread until the whole process ends: /proc/PID/stat and
// /proc/PID/task/PID/stat say Z, ptrace cannot seize it, and what the
// kernel let go at its exit is gone from /proc/PID: its memory (maps,
// smaps, pagemap, mem, map_files, exe, cmdline, auxv, environ), its fd
// table (fd, fdinfo), its fs (cwd, root, and the Umask line of status)
// and its namespaces (ns). Every one of them is the process's, and the
// same through a live thread's /proc/TID (and process_vm_readv by its
// TID): the dump reads them there (frozen.via). What stays with the
// zombie leader and shows in /proc/PID/task/PID is its name, signal mask
// and private queue, credentials, scheduling and exit code: the image
// keeps them (Process.LeaderExited, Threads[0]), and the restore makes the
// leader exit with them.

import (
	"fmt"
	"os"
	"strings"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/bpftask"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// leaderExited tells whether the leader of process pid is a zombie thread
// while other threads of the process live. A zombie process has no thread
// but its leader.
func leaderExited(pid sys.PID) bool {
	st, err := proc.ReadStat(pid, pid.Leader())
	if err != nil || st.State != 'Z' {
		return false
	}
	tids, err := proc.Tasks(pid)
	if err != nil {
		return false
	}
	for _, tid := range tids {
		if tid != pid.Leader() {
			return true
		}
	}
	return false
}

// rd is the PID the process's /proc files and memory are read through:
// its own, or, when its leader has exited, a live thread's TID.
func (fz *frozen) rd() sys.PID {
	if fz != nil && fz.via != 0 {
		return fz.via
	}
	return fz.pid
}

// rd is the PID to read the member's /proc files and memory through.
func (m *member) rd() sys.PID {
	if m.fz != nil && m.fz.via != 0 {
		return m.fz.via
	}
	return m.pid
}

// rd is the PID to read the process's /proc files and memory through.
func (d *dumper) rd() sys.PID { return d.fz.rd() }

// viaLive sets, for a process whose leader has exited, the live thread
// its reads go through: the first frozen one.
func (fz *frozen) viaLive() error {
	if !fz.leaderExited {
		return nil
	}
	if len(fz.tasks) == 0 {
		return fmt.Errorf("process %d: its leader has exited and no other thread is left: %w", fz.pid, ErrNoProcess)
	}
	fz.via = sys.PID(fz.tasks[0].tid)
	return nil
}

// addExitedLeader puts the dead leader of p first in its threads, with
// what the zombie still shows: its name, signal mask, credentials,
// scheduling and exit code; the rest is a copy of the first live thread,
// which the restore builds it as before it makes it exit. What the
// zombie keeps and the restore cannot give it is refused by name. Its
// own queue of signals is empty: the kernel (6.18) empties it at its
// exit and queues nothing on a zombie thread (a tgkill to it is lost).
func (d *dumper) addExitedLeader(p *image.Process) error {
	if !d.fz.leaderExited {
		return nil
	}
	pid, tid := d.pid, d.pid.Leader()
	what := fmt.Sprintf("thread %d (the leader, exited)", tid)
	st, err := proc.ReadStat(pid, tid)
	if err != nil {
		return fmt.Errorf("%s: read stat: %w", what, err)
	}
	if st.State != 'Z' {
		return fmt.Errorf("%s: state %c, not a zombie: %w", what, st.State, ErrNotDumpable)
	}
	status, err := proc.ReadThreadStatus(tid)
	if err != nil {
		return fmt.Errorf("%s: read status: %w", what, err)
	}
	if status.SigPnd != 0 {
		// Linux (6.18) empties it at the exit, and queues nothing on
		// a zombie: never seen, its siginfo could not be read.
		return refuse(pid, what, "signals %#x pending in its own queue: their siginfo cannot be read from a dead thread", status.SigPnd)
	}
	if err := exitedLeaderSeccomp(d.fz, status); err != nil {
		return err
	}
	th := p.Threads[0] // a copy: registers and the rest to build it with
	th.TID, th.State, th.SigMask, th.Pending = tid, "Z", status.SigBlk, nil
	th.Restart, th.InSyscall, th.SeccompStrict = 0, -1, false
	// What the kernel undid at its exit: its clear_child_tid was written
	// and woken, its robust futexes released; the zombie has none, and
	// the live thread's (copied) must not be undone once more when the
	// restored leader exits. Nor its rseq area or signal stack.
	th.ClearTID, th.Robust, th.Rseq, th.AltStack = 0, image.Robust{}, image.Rseq{}, image.AltStack{Flags: 2} // SS_DISABLE
	// Its NUMA policy was freed at its exit too.
	th.MemPolicy = nil
	comm, err := os.ReadFile(proc.Path(pid, "task", tid.String(), "comm"))
	if err != nil {
		return fmt.Errorf("%s: read comm: %w", what, err)
	}
	th.Comm = strings.TrimSuffix(string(comm), "\n")
	if th.Creds, err = readCreds(tid, status); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	lead := &task{tid: tid, stat: st, status: status}
	if err := collectSched(pid, lead, &th); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := threadFlags(pid, lead, &th); err != nil { // its machine-check policy, from its stat flags
		return err
	}
	p.Threads = append([]image.Thread{th}, p.Threads...)
	p.LeaderExited = true
	p.LeaderExitCode = st.ExitCode
	return nil
}

// pidfdFlags are the pidfd_open flags for the PID fz is read through: a
// live thread's TID needs PIDFD_THREAD (its fd table is the process's).
func pidfdFlags(fz *frozen) int {
	if fz != nil && fz.via != 0 {
		return unix.PIDFD_THREAD
	}
	return 0
}

// exitedLeaderSeccomp refuses a dead leader in a seccomp mode: its filters
// cannot be read from a thread that cannot be seized.
func exitedLeaderSeccomp(fz *frozen, status *proc.Status) error {
	if !fz.leaderExited || status.Seccomp == 0 {
		return nil
	}
	return refuse(fz.pid, fmt.Sprintf("thread %d (the leader, exited)", fz.pid.Leader()), "seccomp mode %d: the filters of a dead thread cannot be read", status.Seccomp)
}

// exitedLeaderTask reads, with the BPF task reader, what only the dead
// leader's task holds and the restored leader must exit with: its
// parent-death signal (the kernel sends it to the process when the
// parent dies, the dead leader's too; PR_GET_PDEATHSIG in a live thread
// tells that thread's own). The reader is first checked on the first live
// thread, frozen and dumped (th, the process p). Speculation controls of
// the leader other than that thread's (its copy) are refused by name.
func (d *dumper) exitedLeaderTask(p *image.Process, th *image.Thread) error {
	if !d.fz.leaderExited {
		return nil
	}
	tid := d.pid.Leader()
	what := fmt.Sprintf("thread %d (the leader, exited)", tid)
	t := d.t
	if t.bpf == nil {
		var err error
		if t.bpf, err = bpftask.Open(t.kernel); err != nil {
			return refuse(d.pid, what, "its parent-death signal is read with the BPF task reader: %v", err)
		}
	}
	want := &bpftask.Task{XState: th.XState, ClearTID: th.ClearTID, PdeathSig: p.Misc.PdeathSig,
		AltStack:       bpftask.AltStack{SP: th.AltStack.SP, Flags: th.AltStack.Flags, Size: th.AltStack.Size},
		Rseq:           bpftask.Rseq{Ptr: th.Rseq.Ptr, Size: th.Rseq.Size, Sig: th.Rseq.Sig},
		Securebits:     p.Creds.Securebits,
		ChildSubreaper: p.Misc.ChildSubreaper}
	want.Regs = *(*unix.PtraceRegs)(unsafe.Pointer(&th.Regs))
	if th.Creds != nil {
		want.Securebits = th.Creds.Securebits
	}
	var handled uint64
	for i, a := range p.Signals.Actions {
		want.Actions[i] = bpftask.Sigaction{Handler: a.Handler, Flags: a.Flags, Restorer: a.Restorer, Mask: a.Mask}
		if a != (image.Sigaction{}) {
			handled |= 1 << i
		}
	}
	live, err := t.bpf.Verify(int(th.TID), want, handled)
	if err != nil {
		return refuse(d.pid, what, "the BPF task reader, checked on thread %d, %v: its parent-death signal cannot be read", th.TID, err)
	}
	lead, err := t.bpf.Read(int(tid), th.XState)
	if err != nil {
		return refuse(d.pid, what, "the BPF task reader cannot read it: %v", err)
	}
	if lead.AtomicFlags&specFlags != live.AtomicFlags&specFlags {
		return refuse(d.pid, what, "its speculation controls differ from thread %d's (flags %#x, %#x): they can be read only from a live thread", th.TID,
			lead.AtomicFlags&specFlags, live.AtomicFlags&specFlags)
	}
	p.Misc.PdeathSig = lead.PdeathSig
	return nil
}
