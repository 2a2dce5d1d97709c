package restore

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

const (
	gadgetSize = 16 * image.PageSize
	// taskSize is the top of the 47-bit user address space.
	taskSize         = 0x7ffffffff000
	archMapVDSO64    = 0x2003
	cloneArgsSize    = 88
	prctlMMMapSize   = 104
	scratchOff       = image.PageSize // scratch memory starts one page into the gadget area
	scratchAuxvOff   = scratchOff + 0x400
	scratchPathOff   = scratchOff + 0x1000
	scratchLimit     = gadgetSize
	restartSys       = 512
	restartNoIntr    = 513
	restartNoHand    = 514
	restartBlock     = 516
	ssOnStack        = 1
	ssDisable        = 2
	sigevThreadID    = 4
	prSetMM          = 35
	prSetMMMap       = 14
	prSetVMA         = 0x53564d41
	prSetVMAAnonName = 0
	siTimer          = -2
)

// builder builds one process of the tree.
type builder struct {
	t    *tree
	p    *image.Process
	opts *Options

	mapFD map[int]sys.TargetFD // index of Process.Mapped -> fd
	exeFD sys.TargetFD
	cwdFD sys.TargetFD // the deleted working directory made again (Misc.CwdRef)

	target sys.PID // pid of the process being built, 0 once handed over
	// pidfd holds the process being built from its fork, while ckpt-redo
	// traces it (nobody else can reap it): kill signals it through pidfd,
	// never by a PID number that may be free, or another process's, if
	// it has died and been reaped meanwhile.
	pidfd *sys.FD
	tasks []sys.TID
	in    ptrace.Injector
	// scratch is memory for the arguments of injected calls: the
	// helper's scratch page in a skeleton, in the gadget area once laid
	// out (a fork inherits its parent's).
	scratch uint64
	// from is the laid-out parent the process was forked from (nil: from
	// a skeleton); inherited are the VMAs kept from that fork, dropped
	// how far each was dropped (cow.go).
	from      *builder
	inherited map[*image.VMA]bool
	dropped   map[*image.VMA]uint64
	shared    int64 // pages of the parent's, shared
	// ins runs calls in each thread, in the order of Process.Threads
	// (ins[0] is &in, the leader).
	ins    []*ptrace.Injector
	gadget uint64
	pages  int64
	bytes  int64
	// filler, while the pages are written, fills private anonymous
	// memory with UFFDIO_COPY (nil: process_vm_writev only).
	filler *pageFiller
	// ourChildren are the zombies restore made: their SIGCHLD is not the
	// process's.
	ourChildren map[int32]bool
	// sharedFilters counts the oldest seccomp filters every thread has in
	// common, installed once for all with SECCOMP_FILTER_FLAG_TSYNC
	// (syncFilters); the threads' own calls install the rest.
	sharedFilters int
	// pendingStops are the stop signals pending in a stopped process,
	// queued once it is stopped again (deferStop, queueStops).
	pendingStops []pendingStop
}

func (b *builder) warnf(format string, args ...any) { b.t.warnf(format, args...) }

// clone runs clone3 with set_tid in this process (a skeleton still holding
// the helper's memory, or a process whose memory is in place), creating a
// child process with the PID of c, a copy of b, and waits for the child's
// first stop.
func (b *builder) clone(c *builder) error {
	var args [cloneArgsSize + 8]byte
	le := binary.LittleEndian
	if c.p.FilesOf != 0 && c.p.FilesOf == b.p.PID {
		le.PutUint64(args[0:], unix.CLONE_FILES) // flags: b's fd table, shared
	}
	le.PutUint64(args[32:], uint64(unix.SIGCHLD))    // exit_signal
	le.PutUint64(args[64:], b.scratch+cloneArgsSize) // set_tid
	le.PutUint64(args[72:], 1)                       // set_tid_size
	le.PutUint32(args[cloneArgsSize:], uint32(c.p.PID))
	// b.in runs in b's leader (the restore helper's too, whose target is 0).
	if err := ptrace.WriteMem(sys.PID(b.in.TID), b.scratch, args[:]); err != nil {
		return fmt.Errorf("write clone args: %w", err)
	}
	ret, err := b.in.Syscall(unix.SYS_CLONE3, b.scratch, cloneArgsSize)
	if err != nil {
		return err
	}
	if e := ptrace.Errno(ret); e != nil {
		if e == unix.EEXIST {
			if err := checkPID(c.p.PID, c.p.Comm); err != nil {
				return fmt.Errorf("clone3 with pid %d: %w", c.p.PID, err)
			}
			return fmt.Errorf("clone3 with pid %d: taken by a process that is gone again: %w", c.p.PID, ErrPIDInUse)
		}
		return fmt.Errorf("clone3 with pid %d: %w", c.p.PID, e)
	}
	if sys.PID(ret) != c.p.PID {
		unix.Kill(int(ret), unix.SIGKILL)
		return fmt.Errorf("clone3 gave pid %d, not %d", ret, c.p.PID)
	}
	c.target = c.p.PID
	c.tasks = []sys.TID{c.p.PID.Leader()}
	if c.pidfd, err = sys.PidfdOpen(c.target, 0); err != nil {
		// Traced by us, so not reaped: its PID is still its own.
		unix.Kill(int(c.target), unix.SIGKILL)
		return fmt.Errorf("clone3 with pid %d: %w", c.p.PID, err)
	}
	if err := waitNewTask(c.target.Leader()); err != nil {
		return err
	}
	c.in = ptrace.Injector{TID: c.target.Leader(), Gadget: b.in.Gadget}
	c.scratch = b.scratch
	if b.gadget != 0 {
		c.from = b
	}
	return nil
}

// kill SIGKILLs the process being built through its pidfd (a process
// reaped already is not signalled) and lets the pidfd go.
func (b *builder) kill() {
	if b.pidfd != nil {
		sys.PidfdSendSignal(b.pidfd, unix.SIGKILL) // ESRCH: reaped already
		b.pidfd.Close()
		b.pidfd = nil
	}
}

// call runs a syscall in the new process and names it in errors.
func (b *builder) call(name string, nr uint64, args ...uint64) (uint64, error) {
	return b.in.Call(name, nr, args...)
}

func (b *builder) write(off uint64, data []byte) error {
	if off+uint64(len(data)) > scratchLimit {
		return fmt.Errorf("scratch overflow: %d bytes at %#x", len(data), off)
	}
	return ptrace.WriteMem(b.target, b.gadget+off, data)
}

// build restores everything but the memory, which is in place.
func (b *builder) build() error {
	if err := b.protect(); err != nil {
		return err
	}
	if err := b.mm(); err != nil {
		return fmt.Errorf("mm: %w", err)
	}
	if err := b.createThreads(); err != nil {
		return fmt.Errorf("threads: %w", err)
	}
	if err := b.rlimits(); err != nil {
		return fmt.Errorf("rlimits: %w", err)
	}
	if err := b.fds(); err != nil {
		return fmt.Errorf("fds: %w", err)
	}
	if err := b.misc(); err != nil {
		return err
	}
	if err := b.signals(); err != nil {
		return fmt.Errorf("signals: %w", err)
	}
	if err := b.creds(); err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	if err := b.afterCreds(); err != nil {
		return err
	}
	return b.finish()
}

func (b *builder) rlimits() error {
	for _, l := range b.p.Rlimits {
		lim := [2]uint64{l.Cur, l.Max}
		if err := b.write(scratchOff, ptrace.Bytes(&lim)); err != nil {
			return err
		}
		ret, err := b.in.Syscall(unix.SYS_PRLIMIT64, 0, uint64(l.Resource), b.gadget+scratchOff, 0)
		if err != nil {
			return err
		}
		if e := ptrace.Errno(ret); e != nil {
			// checkLimits refused hard limits above ckpt-redo's own.
			return fmt.Errorf("prlimit64 resource %d (%d/%d): %w", l.Resource, l.Cur, l.Max, e)
		}
	}
	return nil
}

func (b *builder) writeString(off uint64, s string) error {
	return b.write(off, append([]byte(s), 0))
}

func (b *builder) misc() error {
	p := b.p
	if _, err := b.call("umask", unix.SYS_UMASK, uint64(p.Misc.Umask)); err != nil {
		return err
	}
	// A deleted one, or one in the /proc directory of a gone process,
	// was entered with the fds (fds.go).
	if ref := p.Misc.CwdRef; b.cwdFD == 0 && (ref == nil || ref.ProcGone == 0) {
		if err := b.writeString(scratchPathOff, p.Misc.Cwd); err != nil {
			return err
		}
		if _, err := b.call("chdir "+p.Misc.Cwd, unix.SYS_CHDIR, b.gadget+scratchPathOff); err != nil {
			return err
		}
	}
	if _, err := b.call("personality", unix.SYS_PERSONALITY, p.Misc.Personality); err != nil {
		return err
	}
	if err := b.procAttrs(); err != nil {
		return err
	}
	if err := b.threadsMisc(); err != nil {
		return err
	}
	return b.chroot() // last: the calls above name files from ckpt's root
}

// finish removes the gadget area and gives the thread its registers back.
func (b *builder) finish() error {
	// The gadget area can unmap itself (the call ends at its
	// syscall-exit stop, before the task returns there); calls injected
	// later (stopAgain) run at a syscall instruction of the restored vDSO,
	// or of another executable mapping if the process had unmapped its
	// vDSO.
	g, ok, err := ptrace.FindSyscall(b.target, execAreas(b.p.VMAs, b.gadget))
	if err != nil {
		return err
	}
	if _, err := b.call("munmap gadget", unix.SYS_MUNMAP, b.gadget, gadgetSize); err != nil {
		return err
	}
	b.in.Gadget = 0 // no syscall instruction left: later calls fail
	if ok {
		b.in.Gadget = g
	}
	for i, in := range b.ins {
		for _, sig := range in.Signals {
			if sig.Sig == unix.SIGCHLD && len(sig.Info) >= 20 && b.ourChildren[int32(binary.LittleEndian.Uint32(sig.Info[16:]))] {
				continue
			}
			return fmt.Errorf("unexpected signal during restore: %v", sig.Sig)
		}
		th := &b.p.Threads[i]
		if b.t.vforks[b.p.PID] != nil {
			continue // inside vfork(): set as it makes its child (vfork.go)
		}
		regs := resumeRegs(th.Regs, th.Restart)
		if err := ptrace.SetRegs(th.TID, (*unix.PtraceRegs)(unsafe.Pointer(&regs))); err != nil {
			return err
		}
		if err := ptrace.SetXState(th.TID, th.XState); err != nil {
			return err
		}
		if err := ptrace.SetSigMask(th.TID, th.SigMask); err != nil {
			return err
		}
	}
	return b.exitLeader() // a leader that had exited at the dump (deadleader.go)
}

// resumeRegs adjusts the registers of a thread that was stopped inside a
// system call, as the kernel does on the way back from a signal with no
// handler (see the package doc). A sleep, poll or futex wait with a
// timeout that the kernel would finish through restart_syscall (whose
// record of the time left stays in the dumped kernel) is made again from
// the start, with its arguments: it waits its whole timeout once more, as
// a call may (at least the time asked); restart is that call when the
// thread was in restart_syscall itself (Thread.Restart). Only a call it
// cannot name gets EINTR, as after a signal handler.
func resumeRegs(r image.Regs, restart int64) image.Regs {
	if int64(r.OrigRax) < 0 {
		return r
	}
	switch -int64(r.Rax) {
	case restartSys, restartNoIntr, restartNoHand:
		r.Rax = r.OrigRax
		r.Rip -= 2
	case restartBlock:
		nr := int64(r.OrigRax)
		if nr == unix.SYS_RESTART_SYSCALL {
			nr = restart
		}
		switch nr {
		case unix.SYS_POLL, unix.SYS_NANOSLEEP, unix.SYS_CLOCK_NANOSLEEP, unix.SYS_FUTEX:
			r.Rax = uint64(nr)
			r.Rip -= 2
		default:
			r.Rax = uint64(^uint64(unix.EINTR) + 1)
		}
	}
	r.OrigRax = ^uint64(0)
	return r
}

// execAreas lists the process's executable mappings, the vDSO first, but
// not the gadget area at gadget.
func execAreas(vmas []image.VMA, gadget uint64) []ptrace.Area {
	var out []ptrace.Area
	for _, v := range vmas {
		switch {
		case v.Start == gadget:
		case v.Kind == image.VMAVDSO:
			out = append([]ptrace.Area{{Start: v.Start, End: v.End}}, out...)
		case v.Prot&unix.PROT_EXEC != 0 && v.Kind != image.VMAVsyscall:
			out = append(out, ptrace.Area{Start: v.Start, End: v.End})
		}
	}
	return out
}
