package dump

import (
	"errors"
	"fmt"
	"math/bits"
	"reflect"
	"strings"
	"time"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/bpftask"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// A parent waiting in vfork() for its child (which runs in the parent's
// memory until it calls exec or exits) sleeps in the kernel and cannot be
// stopped: ptrace gives neither its registers nor any injected call. Its
// child is frozen like any process; once it is, the parent cannot return
// from vfork() either, and is read from outside: /proc, and a BPF task
// iterator (pkg/bpftask) for its registers, xstate and what only its
// task_struct holds, checked first on the frozen child against what
// ptrace and the injected calls gave for it. What the parent shares with
// the child (its memory) is taken from the child's dump; what the restore
// gives the child by making it again with vfork() from the rebuilt parent
// must be the child's own now, or the dump refuses naming it.

// sysVfork is the number of vfork(2) on x86-64.
const sysVfork = 58

// errVforkMoved means a vfork() child called exec or exited while the
// tree was being frozen: its parent runs again, and the tree is frozen
// again from the start.
var errVforkMoved = errors.New("a vfork() child called exec or exited while the tree was frozen")

// vforkChild checks that process pid (st), whose children kids share its
// memory, is a parent waiting in vfork() for the one of them, and can be
// dumped that way, and returns that child; any other sharing of memory is
// refused by name. The process is not touched.
func (t *tree) vforkChild(pid sys.PID, st *proc.Stat, kids []sys.PID) (sys.PID, error) {
	shares := func(why string, args ...any) error {
		return fmt.Errorf("process %d (%s): its child %d shares its memory (a vfork() child before it calls exec or exits, or clone(CLONE_VM)): %s: cannot be dumped: %w",
			pid, st.Comm, kids[0], fmt.Sprintf(why, args...), ErrUnsupported)
	}
	if len(kids) > 1 {
		return 0, shares("so do its children %v (clone(CLONE_VM))", kids[1:])
	}
	kid := kids[0]
	if pm := t.member(st.PPID); pm != nil && pm.vforkChild == pid {
		return 0, shares("the parent is itself the vfork() child of %d (nested vfork() is not restored)", st.PPID)
	}
	nr, err := syscallOf(pid)
	if err != nil {
		return 0, err
	}
	switch nr {
	case sysVfork:
	case unix.SYS_CLONE, unix.SYS_CLONE3:
		return 0, shares("the parent waits in clone(CLONE_VM|CLONE_VFORK) (posix_spawn), which the restore does not make again; only vfork() is")
	default:
		return 0, shares("the parent is not waiting in vfork() (a clone(CLONE_VM) child, which the restore does not make again)")
	}
	if tids, err := proc.Tasks(pid); err != nil || len(tids) != 1 {
		return 0, shares("the parent has %d threads (only a single-threaded parent waiting in vfork() is restored)", len(tids))
	}
	status, err := proc.ReadStatus(pid)
	if err != nil {
		return 0, fmt.Errorf("process %d: read status: %w", pid, err)
	}
	switch {
	case status.Seccomp != 0:
		return 0, shares("the parent, waiting in vfork(), has seccomp mode %d: its filters can be read only from a stopped process", status.Seccomp)
	case status.SigPnd|status.ShdPnd != 0:
		return 0, shares("the parent, waiting in vfork(), has signals pending (%#x): their siginfo can be read only from a stopped process", status.SigPnd|status.ShdPnd)
	case status.UntagMask != ^uint64(0) || status.X86ThreadFeatures != "":
		return 0, shares("the parent uses x86 linear address masking or shadow stacks, which are not restored")
	}
	if own, err := proc.ReadStatus(sys.Getpid()); err == nil {
		for _, c := range []uint64{status.CapPrm, status.CapEff, status.CapInh, status.CapBnd, status.CapAmb} {
			if extra := c &^ own.CapBnd; extra != 0 {
				return 0, shares("the parent has capabilities %#x outside ckpt's own bounding set: no restore can give them", extra)
			}
		}
	}
	if timers, err := proc.ReadTimers(pid); err != nil || len(timers) > 0 {
		return 0, shares("the parent, waiting in vfork(), has POSIX timers, whose times can be read only from a stopped process")
	}
	if t.bpf == nil {
		if t.bpf, err = bpftask.Open(t.kernel); err != nil {
			return 0, shares("the registers of a parent waiting in vfork() are read with a BPF task iterator: %v", err)
		}
	}
	return kid, nil
}

// syscallOf returns the system call a sleeping process is in
// (/proc/PID/syscall), -1 if none.
func syscallOf(pid sys.PID) (int, error) {
	b, err := proc.ReadFile(proc.Path(pid, "syscall"))
	if err != nil {
		return 0, fmt.Errorf("process %d: read syscall: %w", pid, err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 || f[0] == "running" {
		return -1, nil
	}
	var nr int
	if _, err := fmt.Sscanf(f[0], "%d", &nr); err != nil {
		return -1, nil
	}
	return nr, nil
}

// vforkFrozen holds a parent waiting in vfork(): a pidfd only (no thread
// is seized; it cannot run until its child, frozen next, goes on).
func vforkFrozen(pid sys.PID) (*frozen, error) {
	fd, err := sys.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("process %d: pidfd: %w", pid, err)
	}
	return &frozen{pid: pid, pidfd: fd}, nil
}

// checkVforks checks, once the tree is frozen, that every parent taken as
// waiting in vfork() still does, for its child, which is frozen now.
func (t *tree) checkVforks() error {
	for _, m := range t.members {
		if m.vforkChild == 0 {
			continue
		}
		c := t.member(m.vforkChild)
		if c == nil || c.fz == nil || len(c.fz.tasks) == 0 {
			return errVforkMoved
		}
		same, _ := sys.SameVM(m.pid, c.pid)
		nr, err := syscallOf(m.pid)
		if !same || err != nil || nr != sysVfork {
			return errVforkMoved
		}
	}
	return nil
}

// member returns the member of PID pid, nil if none.
func (t *tree) member(pid sys.PID) *member {
	for _, m := range t.members {
		if m.pid == pid {
			return m
		}
	}
	return nil
}

// killVforkParents kills the parents waiting in vfork() and waits until
// they have exited (they are nobody's tracees: the tracer's wait of
// waitDead does not see them).
func (t *tree) killVforkParents(deadline time.Time) {
	for _, m := range t.members {
		if m.vforkChild == 0 || m.fz == nil || m.fz.pidfd == nil {
			continue
		}
		fd := m.fz.pidfd
		sys.PidfdSendSignal(fd, unix.SIGKILL)
		for time.Now().Before(deadline) {
			fds := []unix.PollFd{{Fd: int32(fd.Int()), Events: unix.POLLIN}}
			if n, err := unix.Poll(fds, 10); err == unix.EINTR || (err == nil && n == 0) {
				continue
			}
			break
		}
	}
}

// collectVforkParent describes the thread of process pid, a parent
// waiting in vfork() for child, from outside, and what only it could
// tell otherwise; the rest of p is read already. finishVfork completes
// it once the child is dumped.
func (d *dumper) collectVforkParent(p *image.Process, status *proc.Status, child sys.PID) (*image.Process, error) {
	pid := d.pid
	tid := pid.Leader()
	ref, err := ptrace.GetXState(child.Leader())
	if err != nil {
		return nil, fmt.Errorf("vfork child %d: %w", child, err)
	}
	what := fmt.Sprintf("thread %d, waiting in vfork()", tid)
	bt, err := d.t.bpf.Read(int(tid), ref)
	if err != nil {
		return nil, refuse(pid, what, "its registers cannot be read with the BPF task reader: %v", err)
	}
	switch {
	case bt.Regs.Orig_rax != sysVfork:
		return nil, refuse(pid, what, "its registers say system call %d, not vfork", int64(bt.Regs.Orig_rax))
	case bt.SyscallUserDispatch:
		return nil, refuse(pid, what, "syscall user dispatch (PR_SET_SYSCALL_USER_DISPATCH) is not restored")
	case bt.MemPolicy != 0:
		return nil, refuse(pid, what, "a NUMA memory policy (set_mempolicy) cannot be restored")
	case vmaPolicyMarked(p) != nil:
		v := vmaPolicyMarked(p)
		return nil, refuse(pid, what, "mapping %#x-%#x has a NUMA memory policy in numa_maps (mbind, or the task's): it cannot be read without injected calls", v.Start, v.End)
	case bt.ITimers != [3]bool{}:
		return nil, refuse(pid, what, "an interval timer (setitimer) is armed: its time can be read only from a stopped process")
	}
	if cookie, err := coreCookie(tid); err == nil && cookie != 0 {
		return nil, refuse(pid, what, "core-scheduling cookie %#x (PR_SCHED_CORE) is not restored", cookie)
	}
	th := &image.Thread{TID: tid, InSyscall: sysVfork, XState: bt.XState, SigMask: status.SigBlk,
		AltStack: image.AltStack{SP: bt.AltStack.SP, Flags: bt.AltStack.Flags, Size: bt.AltStack.Size},
		Rseq:     image.Rseq{Ptr: bt.Rseq.Ptr, Size: bt.Rseq.Size, Sig: bt.Rseq.Sig},
		ClearTID: bt.ClearTID}
	th.Regs = *(*image.Regs)(unsafe.Pointer(&bt.Regs))
	head, hlen, err := sys.GetRobustList(tid)
	if err != nil {
		return nil, fmt.Errorf("thread %d: %w", tid, err)
	}
	th.Robust = image.Robust{Head: head, Len: hlen}
	tk := &task{tid: tid}
	if b, err := tk.readFile(pid, "comm"); err == nil {
		th.Comm = strings.TrimSuffix(string(b), "\n")
	}
	if s, err := tk.readStat(pid); err == nil {
		th.State = string(s.State)
	}
	if th.Creds, err = readCreds(tid, status); err != nil {
		return nil, err
	}
	th.Creds.Securebits = bt.Securebits
	if err := collectSched(pid, tk, th); err != nil {
		return nil, err
	}
	if err := threadFlags(pid, tk, th); err != nil {
		return nil, err
	}
	p.Threads = []image.Thread{*th}
	threadCreds(p)
	handled := status.SigCgt | status.SigIgn | 1<<(unix.SIGCHLD-1)
	p.Signals.Actions = make([]image.Sigaction, 64)
	for i, a := range bt.Actions {
		if sig := i + 1; handled&(1<<i) != 0 && sig != int(unix.SIGKILL) && sig != int(unix.SIGSTOP) {
			p.Signals.Actions[i] = image.Sigaction{Handler: a.Handler, Flags: a.Flags, Restorer: a.Restorer, Mask: a.Mask}
		}
	}
	p.Misc.PdeathSig = bt.PdeathSig
	p.Misc.ChildSubreaper = bt.ChildSubreaper
	return p, nil
}

// coreCookie reads a thread's core-scheduling cookie from outside.
func coreCookie(tid sys.TID) (uint64, error) {
	var c uint64
	_, _, e := unix.Syscall6(unix.SYS_PRCTL, unix.PR_SCHED_CORE, unix.PR_SCHED_CORE_GET, uintptr(tid), 0, uintptr(unsafe.Pointer(&c)), 0)
	if e != 0 {
		return 0, e
	}
	return c, nil
}

// finishVfork completes, for each parent waiting in vfork(), what its
// child's dump tells: the reader is checked on the child, the parent
// takes the state of the memory they share from it, and the child is
// checked to be what a vfork() from the parent makes, but for its
// registers, signal mask and timer slack (which the restore sets). The
// child's record then holds no memory of its own.
func (t *tree) finishVfork() error {
	for _, m := range t.members {
		if m.vforkChild == 0 {
			continue
		}
		c := t.member(m.vforkChild)
		if c == nil || c.p == nil || c.fz == nil {
			return errVforkMoved
		}
		if err := t.checkReader(m, c); err != nil {
			return err
		}
		for _, q := range t.members {
			if q.p != nil && !q.p.Zombie && q.p.PPID == m.pid && q.p.Misc.Stopped {
				return refuse(q.pid, "stop", "a stopped child of a parent waiting in vfork() (%d): whether the parent collected the stop can be asked only of a stopped process", m.pid)
			}
		}
		a, b := m.p, c.p
		a.LockFuture = b.LockFuture
		a.Misc.Dumpable, a.Misc.THPDisable, a.Misc.MDWE, a.Misc.Membarrier = b.Misc.Dumpable, b.Misc.THPDisable, b.Misc.MDWE, b.Misc.Membarrier
		if err := vforkInherits(a, b); err != nil {
			return err
		}
		b.VforkOf = a.PID
		b.VMAs, b.Mapped, b.Auxv, b.MM = nil, nil, nil, image.MM{}
	}
	t.closeReader()
	return nil
}

// closeReader unloads the BPF reader, if it was loaded.
func (t *tree) closeReader() {
	if t.bpf != nil {
		t.bpf.Close()
		t.bpf = nil
	}
}

// specFlags are the task's atomic flags that speculation controls keep
// (PFA_SPEC_SSB_DISABLE ... PFA_SPEC_SSB_NOEXEC, bits 3-7).
const specFlags = 0xf8

// checkReader reads the frozen child c with the BPF reader and compares
// it with its dump. The parent m's speculation controls, which only a
// call in the task tells, are the child's (it inherited them at vfork())
// when their flags agree; its TSC mode is read from its thread flags.
func (t *tree) checkReader(m, c *member) error {
	th := &c.p.Threads[0]
	want := &bpftask.Task{XState: th.XState, ClearTID: th.ClearTID, PdeathSig: c.p.Misc.PdeathSig,
		AltStack:       bpftask.AltStack{SP: th.AltStack.SP, Flags: th.AltStack.Flags, Size: th.AltStack.Size},
		Rseq:           bpftask.Rseq{Ptr: th.Rseq.Ptr, Size: th.Rseq.Size, Sig: th.Rseq.Sig},
		Securebits:     c.p.Creds.Securebits,
		ChildSubreaper: c.p.Misc.ChildSubreaper}
	want.Regs = *(*unix.PtraceRegs)(unsafe.Pointer(&th.Regs))
	if th.Creds != nil {
		want.Securebits = th.Creds.Securebits
	}
	var handled uint64
	for i, a := range c.p.Signals.Actions {
		want.Actions[i] = bpftask.Sigaction{Handler: a.Handler, Flags: a.Flags, Restorer: a.Restorer, Mask: a.Mask}
		if a != (image.Sigaction{}) {
			handled |= 1 << i
		}
	}
	got, err := t.bpf.Verify(int(th.TID), want, handled)
	if err != nil {
		return fmt.Errorf("process %d (%s) waits in vfork() for its child %d: the BPF task reader, checked on the frozen child, %v: cannot be dumped: %w",
			m.pid, m.comm, c.pid, err, ErrUnsupported)
	}
	pt, err := t.bpf.Read(int(m.pid), th.XState)
	if err != nil {
		return fmt.Errorf("process %d: %w", m.pid, err)
	}
	pth := &m.p.Threads[0]
	if pt.AtomicFlags&specFlags != got.AtomicFlags&specFlags {
		return refuse(m.pid, fmt.Sprintf("thread %d, waiting in vfork()", pth.TID), "its speculation controls differ from its child's (flags %#x, %#x): they can be read only from a stopped process",
			pt.AtomicFlags&specFlags, got.AtomicFlags&specFlags)
	}
	if len(th.SpecCtrl) > 2 && th.SpecCtrl[2] != -1 {
		return refuse(m.pid, fmt.Sprintf("thread %d, waiting in vfork()", pth.TID), "its L1D flush control (PR_SPEC_L1D_FLUSH) can be read only from a stopped process")
	}
	pth.SpecCtrl = append([]int(nil), th.SpecCtrl...)
	notsc, err := t.notscFlag(c)
	if err != nil {
		return refuse(m.pid, fmt.Sprintf("thread %d, waiting in vfork()", pth.TID), "its TSC mode (PR_GET_TSC) cannot be read: %v", err)
	}
	pth.TSC = unix.PR_TSC_ENABLE
	if pt.ThreadFlags&notsc != 0 {
		pth.TSC = unix.PR_TSC_SIGSEGV
	}
	return nil
}

// notscFlag finds the thread flag of a disabled time stamp counter
// (TIF_NOTSC, whose number BTF does not give) on the frozen child c: it
// sets the child's TSC mode both ways, a few times, with injected prctl
// calls, ending with the child's own, and reads its flags after each; the
// one flag that always follows the mode is it (others come and go: a
// pending notification, ...).
func (t *tree) notscFlag(c *member) (uint64, error) {
	th := &c.p.Threads[0]
	if th.TSC != unix.PR_TSC_ENABLE && th.TSC != unix.PR_TSC_SIGSEGV {
		return 0, fmt.Errorf("the child's TSC mode %d is unknown", th.TSC)
	}
	gadget, err := syscallGadget(c.pid, c.p.VMAs)
	if err != nil {
		return 0, err
	}
	tk := c.fz.tasks[0]
	d := &dumper{pid: c.pid, fz: c.fz, opts: t.opts, t: t}
	r, err := d.newRemote(tk.tid, gadget)
	if err != nil {
		return 0, err
	}
	follows := ^uint64(0) // set when disabled, clear when enabled, every time
	other := unix.PR_TSC_ENABLE + unix.PR_TSC_SIGSEGV - th.TSC
	err = r.block()
	for round := 0; round < 8 && err == nil && (round < 2 || bits.OnesCount64(follows) > 1); round++ {
		for _, mode := range []int{other, th.TSC} {
			if _, _, cerr := r.call("prctl(PR_SET_TSC)", 0, unix.SYS_PRCTL, unix.PR_SET_TSC, uint64(mode)); cerr != nil {
				err = cerr
				break
			}
			got, rerr := t.bpf.Read(int(tk.tid), th.XState)
			if rerr != nil {
				err = rerr
				break
			}
			if mode == unix.PR_TSC_SIGSEGV {
				follows &= got.ThreadFlags
			} else {
				follows &^= got.ThreadFlags
			}
		}
	}
	if err != nil {
		// The child gets its own mode back whatever failed.
		r.call("prctl(PR_SET_TSC)", 0, unix.SYS_PRCTL, unix.PR_SET_TSC, uint64(th.TSC))
	}
	if derr := r.done(tk); err == nil {
		err = derr
	}
	if err != nil {
		return 0, err
	}
	if bits.OnesCount64(follows) != 1 {
		return 0, fmt.Errorf("no single thread flag of the child follows its TSC mode (%#x)", follows)
	}
	return follows, nil
}

// vforkInherits checks that child b is what a vfork() from a makes: the
// restore makes it so, then sets only its registers, xstate, signal mask
// and timer slack.
func vforkInherits(a, b *image.Process) error {
	differs := func(what string) error {
		return refuse(b.PID, what, "differs from its parent's (%d, waiting in vfork() for it): the restore makes the child again with vfork(), which gives it the parent's", a.PID)
	}
	if len(b.Threads) != 1 {
		return refuse(b.PID, "threads", "a vfork() child with %d threads is not restored", len(b.Threads))
	}
	at, bt := &a.Threads[0], &b.Threads[0]
	bm := b.Misc
	if bm.PdeathSig != 0 || bm.ChildSubreaper || bm.Stopped {
		return refuse(b.PID, "parent death signal, subreaper or stop", "set in a vfork() child, not restored")
	}
	bm.PdeathSig, bm.ChildSubreaper = a.Misc.PdeathSig, a.Misc.ChildSubreaper
	switch {
	case b.PGID != a.PGID || b.SID != a.SID:
		return differs("session or process group")
	case !reflect.DeepEqual(b.Creds, a.Creds) || bt.Creds != nil || bt.SeccompStrict:
		return differs("credentials")
	case len(b.Files) != 0 || b.FilesOf != 0 || !reflect.DeepEqual(b.FDs, a.FDs):
		return differs("file descriptor table")
	case !reflect.DeepEqual(b.Signals.Actions, a.Signals.Actions):
		return differs("signal handlers")
	case len(b.Signals.Pending) != 0 || len(bt.Pending) != 0:
		return refuse(b.PID, "pending signals", "a vfork() child with signals pending is not restored")
	case !reflect.DeepEqual(b.Timers, image.Timers{}):
		return refuse(b.PID, "timers", "a vfork() child with timers is not restored")
	case !reflect.DeepEqual(b.Rlimits, a.Rlimits):
		return differs("resource limits")
	case !reflect.DeepEqual(bm, a.Misc):
		return differs("process attributes (working directory, root, umask, personality, OOM score, ...)")
	case b.Exe != a.Exe:
		return differs("executable")
	case bt.ClearTID != 0 || bt.Rseq != (image.Rseq{}) || bt.Robust.Head != 0:
		return refuse(b.PID, "thread", "a vfork() child with a TID address, rseq area or robust futex list of its own is not restored")
	case bt.AltStack != at.AltStack:
		return differs("signal stack (sigaltstack)")
	case bt.Comm != at.Comm:
		return differs("name (comm)")
	case !reflect.DeepEqual(bt.Sched, at.Sched) || !reflect.DeepEqual(bt.Affinity, at.Affinity) || bt.IOPrio != at.IOPrio || bt.MCEKill != at.MCEKill:
		return differs("scheduling attributes")
	case bt.TSC != at.TSC || !reflect.DeepEqual(bt.SpecCtrl, at.SpecCtrl):
		return differs("TSC mode or speculation controls")
	}
	return nil
}
