package restore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// A vfork() child (image.Process.VforkOf) is not built like the other
// processes: it is made again, once its parent is built but for its
// registers, by the parent: a clone3 with CLONE_VM|CLONE_VFORK (what
// vfork() is) and set_tid, so that it has its PID or fails, whatever else
// forks on the machine. At the parent's PTRACE_EVENT_VFORK stop, before
// it waits for the child, its registers, xstate and signal mask are set
// to the dumped ones (inside vfork: once the child calls exec or exits,
// vfork returns the child's PID with every other register as it was);
// the parent stays in that stop until Release detaches it. The child
// has the parent's memory, files, credentials and signal handlers (the
// dump checked that it had them); its registers, xstate, signal mask and
// timer slack are set like any thread's.

// sysVfork is the number of vfork(2) on x86-64.
const sysVfork = 58

// splitVforks takes the vfork() children out of the processes built the
// usual way: vforks maps each parent's PID to its child's builder.
func (t *tree) splitVforks() error {
	var keep []*builder
	for _, b := range t.procs {
		if b.p.VforkOf == 0 {
			keep = append(keep, b)
			continue
		}
		if len(b.p.Files) != 0 {
			return fmt.Errorf("process %d, a vfork() child, opens files of its own: %w", b.p.PID, image.ErrCorrupt)
		}
		if err := checkPID(b.p.PID, b.p.Comm); err != nil {
			return err
		}
		if t.vforks == nil {
			t.vforks = map[sys.PID]*builder{}
		}
		t.vforks[b.p.VforkOf] = b
		delete(t.byPID, b.p.PID)
		delete(t.index, b.p.PID)
	}
	t.procs = keep
	for i, b := range t.procs {
		t.index[b.p.PID] = i
	}
	return nil
}

// addProc puts a process made after the tree was created into it.
func (t *tree) addProc(b *builder) {
	t.index[b.p.PID] = len(t.procs)
	t.procs = append(t.procs, b)
	t.byPID[b.p.PID] = b
}

// vfork makes c, the vfork() child of b, from b, which is built and
// stopped (its registers are not set yet), and leaves b in its
// PTRACE_EVENT_VFORK stop with its dumped registers.
func (b *builder) vfork(c *builder) error {
	a := b.target.Leader()
	if len(b.p.Threads) != 1 || b.p.Threads[0].Regs.OrigRax != sysVfork {
		return fmt.Errorf("the parent of the vfork() child %d is not one thread in vfork(): %w", c.p.PID, image.ErrCorrupt)
	}
	if b.in.Gadget == 0 {
		return fmt.Errorf("no syscall instruction left in the parent to make its vfork() child again")
	}
	opts := ptrace.OptTraceFork | ptrace.OptTraceClone | ptrace.OptExitKill | ptrace.OptSuspendSeccomp |
		unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_TRACEVFORK
	if err := unix.PtraceSetOptions(int(a), opts); err != nil {
		return fmt.Errorf("ptrace options: %w", err)
	}
	regs, err := ptrace.GetRegs(a)
	if err != nil {
		return err
	}
	regs.Rip = b.in.Gadget
	kid, err := b.cloneVfork(a, regs, c.p)
	if errors.Is(err, errNoSetTID) {
		kid, err = b.vforkLastPID(a, regs, c.p)
	}
	if err != nil {
		return err
	}
	c.target = sys.PID(kid)
	c.tasks = []sys.TID{kid}
	if c.pidfd, err = sys.PidfdOpen(c.target, 0); err != nil {
		unix.Kill(int(kid), unix.SIGKILL)
		return fmt.Errorf("vfork() child %d: %w", kid, err)
	}
	b.t.addProc(c) // killed with the tree from here on
	c.in = ptrace.Injector{TID: kid, Gadget: b.in.Gadget}
	// The parent, inside vfork(), gets its dumped registers; the call's
	// result (the child's PID, when the child calls exec or exits) goes
	// into rax on the way out.
	th := &b.p.Threads[0]
	if err := ptrace.SetRegs(a, (*unix.PtraceRegs)(unsafe.Pointer(&th.Regs))); err != nil {
		return err
	}
	if err := ptrace.SetXState(a, th.XState); err != nil {
		return err
	}
	if err := ptrace.SetSigMask(a, th.SigMask); err != nil {
		return err
	}
	ct := &c.p.Threads[0]
	if ct.Sched != nil {
		slack := strconv.FormatUint(ct.TimerSlack, 10)
		if err := os.WriteFile(proc.ThreadPath(ct.TID, "timerslack_ns"), []byte(slack), 0); err != nil {
			return fmt.Errorf("process %d: timer slack: %w", c.p.PID, err)
		}
	}
	cr := resumeRegs(ct.Regs, ct.Restart)
	if err := ptrace.SetRegs(kid, (*unix.PtraceRegs)(unsafe.Pointer(&cr))); err != nil {
		return err
	}
	if err := ptrace.SetXState(kid, ct.XState); err != nil {
		return err
	}
	return ptrace.SetSigMask(kid, ct.SigMask)
}

// errNoSetTID says that the parent of a vfork() child cannot clone with
// set_tid (no CAP_SYS_ADMIN once its credentials are in place).
var errNoSetTID = errors.New("clone3 with set_tid not permitted in the parent")

// cloneVfork makes the vfork() child p again from task a (stopped, regs
// its registers): a clone3 with CLONE_VM|CLONE_VFORK, SIGCHLD and set_tid
// p's PID, run at a syscall instruction of a, whose arguments are written
// for the call into a's memory (below its stack pointer, or at the start
// of another writable mapping) and the bytes there put back before
// anything runs. It returns the child once a is in its
// PTRACE_EVENT_VFORK stop (before it waits for the child) and the child
// in its first stop. A PID taken by another process is ErrPIDInUse.
func (b *builder) cloneVfork(a sys.TID, regs unix.PtraceRegs, p *image.Process) (sys.TID, error) {
	addr, err := b.argsArea(b.p.Threads[0].Regs.Rsp) // the dumped stack pointer
	if err != nil {
		return 0, err
	}
	var args [cloneArgsSize + 8]byte
	le := binary.LittleEndian
	le.PutUint64(args[0:], unix.CLONE_VM|unix.CLONE_VFORK) // flags
	le.PutUint64(args[32:], uint64(unix.SIGCHLD))          // exit_signal
	le.PutUint64(args[64:], addr+cloneArgsSize)            // set_tid
	le.PutUint64(args[72:], 1)                             // set_tid_size
	le.PutUint32(args[cloneArgsSize:], uint32(p.PID))
	saved := make([]byte, len(args))
	if err := ptrace.ReadMem(sys.PID(a), addr, saved); err != nil {
		return 0, fmt.Errorf("read %#x of %d: %w", addr, a, err)
	}
	if err := ptrace.WriteMem(sys.PID(a), addr, args[:]); err != nil {
		return 0, fmt.Errorf("write clone args at %#x of %d: %w", addr, a, err)
	}
	kid, err := runVfork(a, regs, addr)
	if errors.Is(err, unix.EPERM) {
		// set_tid needs CAP_SYS_ADMIN, which the parent, its
		// credentials in place, may not have.
		err = errNoSetTID
	}
	if werr := ptrace.WriteMem(sys.PID(a), addr, saved); werr != nil && err == nil {
		err = fmt.Errorf("put back %#x of %d: %w", addr, a, werr)
	}
	if err != nil {
		if kid != 0 {
			unix.Kill(int(kid), unix.SIGKILL)
		}
		if errors.Is(err, unix.EEXIST) {
			if cerr := checkPID(p.PID, p.Comm); cerr != nil {
				return 0, cerr
			}
			return 0, fmt.Errorf("clone3 with pid %d: taken by a process that is gone again: %w", p.PID, ErrPIDInUse)
		}
		return 0, err
	}
	if err := waitNewTask(kid); err != nil {
		unix.Kill(int(kid), unix.SIGKILL)
		return 0, fmt.Errorf("vfork() child %d: %w", kid, err)
	}
	if sys.PID(kid) != p.PID {
		unix.Kill(int(kid), unix.SIGKILL)
		return 0, fmt.Errorf("clone3 gave pid %d, not %d", kid, p.PID)
	}
	return kid, nil
}

// argsArea picks where the arguments of the vfork()'s clone3 go in the
// parent: below its stack pointer (past the 128-byte red zone) when that
// lies in a writable mapping, else the start of a writable mapping.
func (b *builder) argsArea(sp uint64) (uint64, error) {
	const need = cloneArgsSize + 8
	writable := func(v *image.VMA) bool {
		return v.Prot&unix.PROT_WRITE != 0 && v.Prot&unix.PROT_READ != 0 && v.Len() >= need
	}
	if sp >= 1024 {
		at := (sp - 512) &^ 15
		for i := range b.p.VMAs {
			v := &b.p.VMAs[i]
			if writable(v) && v.Start <= at && at+need <= v.End {
				return at, nil
			}
		}
	}
	for i := range b.p.VMAs {
		if v := &b.p.VMAs[i]; writable(v) && (v.Kind == image.VMAAnon || v.Kind == image.VMAHeap || v.Kind == image.VMAStack) {
			return v.Start, nil
		}
	}
	return 0, fmt.Errorf("no writable memory in the parent for the arguments of its vfork()")
}

// runVfork runs the clone3 set up in task a: regs with the call at a's
// syscall instruction, its arguments at addr (see vforkStops).
func runVfork(a sys.TID, regs unix.PtraceRegs, addr uint64) (sys.TID, error) {
	regs.Rax, regs.Orig_rax = unix.SYS_CLONE3, ^uint64(0)
	regs.Rdi, regs.Rsi = addr, cloneArgsSize
	if err := ptrace.SetRegs(a, &regs); err != nil {
		return 0, err
	}
	return vforkStops(a, nil)
}

// vforkStops runs task a, set up to make a vfork() child (by vfork or
// clone3) at its next system call, through the call's stops: atEntry
// (if set) runs at its entry stop. It returns the child once a is in its
// PTRACE_EVENT_VFORK stop; a call that failed returns its errno.
func vforkStops(a sys.TID, atEntry func() error) (sys.TID, error) {
	entered := false
	for {
		if err := unix.PtraceSyscall(int(a), 0); err != nil {
			return 0, fmt.Errorf("vfork in %d: resume: %w", a, err)
		}
		st, err := ptrace.Wait(a)
		if err != nil {
			return 0, err
		}
		switch {
		case st.Exited():
			return 0, fmt.Errorf("vfork in %d: %s", a, st)
		case st.Event == unix.PTRACE_EVENT_VFORK:
			msg, err := ptrace.GetEventMsg(a)
			if err != nil {
				return 0, err
			}
			return sys.TID(msg), nil
		case st.Sig() == unix.SIGTRAP|0x80 && st.Event == 0 && !entered:
			entered = true // the call's entry stop
			if atEntry != nil {
				if err := atEntry(); err != nil {
					return 0, err
				}
			}
		case st.Sig() == unix.SIGTRAP|0x80 && st.Event == 0:
			r, err := ptrace.GetRegs(a)
			if err != nil {
				return 0, err
			}
			if e := ptrace.Errno(r.Rax); e != nil {
				return 0, fmt.Errorf("vfork in %d: %w", a, e)
			}
			return 0, fmt.Errorf("vfork in %d returned %d without a child", a, int64(r.Rax))
		default:
			return 0, fmt.Errorf("vfork in %d: unexpected stop: %s", a, st)
		}
	}
}

// waitAll is __WALL.
const waitAll = 0x40000000

// vforkTries bounds the vforks made for a child's PID: each one that
// gets another PID is undone.
const vforkTries = 5

// vforkAs runs the vfork() set up in task a (stopped, its registers at a
// syscall instruction with vfork's number) with ns_last_pid set for pid
// (under the lock other restorers take on it, at the call's entry stop:
// the PID is taken microseconds later), and returns the new child once a
// is in its PTRACE_EVENT_VFORK stop.
func vforkAs(a sys.TID, pid sys.PID) (sys.TID, error) {
	f, err := os.OpenFile("/proc/sys/kernel/ns_last_pid", os.O_RDWR, 0)
	if err != nil {
		return 0, fmt.Errorf("ns_last_pid: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return 0, fmt.Errorf("lock ns_last_pid: %w", err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	// The counter goes back where it was once the PID is taken: left at
	// pid, it would hand the PIDs after pid, which processes ended
	// recently may have had, to whatever forks next on the machine (a
	// restore that needs one of them back would find it taken).
	b := make([]byte, 16)
	n, err := f.ReadAt(b, 0)
	if n == 0 {
		return 0, fmt.Errorf("read ns_last_pid: %w", err)
	}
	old, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		return 0, fmt.Errorf("ns_last_pid %q: %w", b[:n], err)
	}
	written := false
	defer func() {
		if written && old >= int(pid) {
			f.WriteAt([]byte(strconv.Itoa(old)), 0)
		}
	}()
	return vforkStops(a, func() error {
		written = true
		if _, err := f.WriteAt([]byte(strconv.Itoa(int(pid)-1)), 0); err != nil {
			return fmt.Errorf("ns_last_pid %d: %w", pid-1, err)
		}
		return nil
	})
}

// undoVfork undoes a vfork() of task a that made kid with the wrong PID:
// kid is killed and reaped (by ckpt-redo, its tracer, then by a, its
// parent, with an injected wait4), a returns from vfork() to its
// syscall-exit stop, and the SIGCHLD of kid's death is taken off a's
// queue.
func (b *builder) undoVfork(a, kid sys.TID) error {
	if err := unix.Kill(int(kid), unix.SIGKILL); err != nil {
		return fmt.Errorf("kill %d: %w", kid, err)
	}
	for {
		st, err := ptrace.Wait(kid)
		if err != nil {
			return err
		}
		if st.Exited() {
			break
		}
		ptrace.Cont(kid, 0)
	}
	for {
		if err := unix.PtraceSyscall(int(a), 0); err != nil {
			return fmt.Errorf("resume %d: %w", a, err)
		}
		st, err := ptrace.Wait(a)
		if err != nil {
			return err
		}
		if st.Exited() {
			return fmt.Errorf("process %d %s", a, st)
		}
		if st.Sig() == unix.SIGTRAP|0x80 && st.Event == 0 {
			break // vfork's exit stop
		}
	}
	if ret, err := b.in.Syscall(unix.SYS_WAIT4, uint64(kid), 0, waitAll, 0); err != nil {
		return err
	} else if e := ptrace.Errno(ret); e != nil && e != unix.ECHILD { // ECHILD: SIGCHLD ignored, reaped already
		return fmt.Errorf("wait4 %d in %d: %w", kid, a, e)
	}
	// The SIGCHLD of kid's death, queued (a traced process gets even an
	// ignored one), is delivered, unblocked, as an injected call starts:
	// the injector takes it off the queue.
	mask, err := ptrace.GetSigMask(a)
	if err != nil {
		return err
	}
	if err := ptrace.SetSigMask(a, mask&^(1<<(unix.SIGCHLD-1))); err != nil {
		return err
	}
	_, err = b.in.Syscall(unix.SYS_GETPID)
	if merr := ptrace.SetSigMask(a, mask); err == nil {
		err = merr
	}
	b.in.Signals = nil // kid's SIGCHLD, ours
	return err
}

// waitAll is __WALL.

// vforkLastPID makes the vfork() child p from task a by vfork() itself,
// the child's PID taken through ns_last_pid: for a parent that cannot
// clone with set_tid. Another process forking meanwhile can take the
// PID: a child with another one is undone and the vfork() made again, up
// to vforkTries times; a PID taken for good is ErrPIDInUse.
func (b *builder) vforkLastPID(a sys.TID, regs unix.PtraceRegs, p *image.Process) (sys.TID, error) {
	regs.Rax, regs.Orig_rax = sysVfork, ^uint64(0)
	for try := 1; ; try++ {
		if err := ptrace.SetRegs(a, &regs); err != nil {
			return 0, err
		}
		kid, err := vforkAs(a, p.PID)
		if err != nil {
			return 0, err
		}
		if err := waitNewTask(kid); err != nil {
			unix.Kill(int(kid), unix.SIGKILL)
			return 0, fmt.Errorf("vfork() child %d: %w", kid, err)
		}
		if sys.PID(kid) == p.PID {
			return kid, nil
		}
		// Another process forked between ns_last_pid and the vfork.
		if err := b.undoVfork(a, kid); err != nil {
			return 0, fmt.Errorf("vfork() made pid %d, not %d: %w", kid, p.PID, err)
		}
		if try == vforkTries {
			return 0, fmt.Errorf("vfork() made pid %d, not %d, %d times: other processes take PIDs meanwhile: %w", kid, p.PID, try, ErrPIDInUse)
		}
		if err := checkPID(p.PID, p.Comm); err != nil {
			return 0, err
		}
	}
}
