package restore

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ckpt/ckpt/pkg/fdkind"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
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

	mapFD map[int]int // index of Process.Mapped -> fd
	exeFD int

	target int // pid of the process being built, 0 once handed over
	tasks  []int
	in     ptrace.Injector
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
}

func (b *builder) warnf(format string, args ...any) { b.t.warnf(format, args...) }

// clone runs clone3 with set_tid in this process (a skeleton still holding
// the helper's memory), creating a child process with the PID of c, and
// waits for the child's first stop.
func (b *builder) clone(c *builder) error {
	var args [cloneArgsSize + 8]byte
	le := binary.LittleEndian
	le.PutUint64(args[32:], uint64(unix.SIGCHLD))        // exit_signal
	le.PutUint64(args[64:], helperScratch+cloneArgsSize) // set_tid
	le.PutUint64(args[72:], 1)                           // set_tid_size
	le.PutUint32(args[cloneArgsSize:], uint32(c.p.PID))
	if err := ptrace.WriteMem(b.in.TID, helperScratch, args[:]); err != nil {
		return fmt.Errorf("write clone args: %w", err)
	}
	ret, err := b.in.Syscall(unix.SYS_CLONE3, helperScratch, cloneArgsSize)
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
	if int(ret) != c.p.PID {
		unix.Kill(int(ret), unix.SIGKILL)
		return fmt.Errorf("clone3 gave pid %d, not %d", ret, c.p.PID)
	}
	c.target = c.p.PID
	c.tasks = []int{c.p.PID}
	if err := waitNewTask(c.target); err != nil {
		return err
	}
	c.in = ptrace.Injector{TID: c.target, Gadget: helperGadget}
	return nil
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

// layout gives the process its address space: the gadget area at g,
// the vDSO and every VMA, ready for the pages.
func (b *builder) layout(g uint64) error {
	if err := b.addressSpace(g); err != nil {
		return fmt.Errorf("address space: %w", err)
	}
	if err := b.mapVMAs(); err != nil {
		return fmt.Errorf("map: %w", err)
	}
	return nil
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

// addressSpace maps the gadget area where the image leaves room, removes
// everything else the helper had, and maps the vDSO at its old address.
func (b *builder) addressSpace(g uint64) error {
	ret, err := b.call("mmap gadget", unix.SYS_MMAP, g, gadgetSize, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uint64(0), 0)
	if err != nil {
		return err
	}
	if ret != g {
		return fmt.Errorf("gadget mapped at %#x, not %#x", ret, g)
	}
	b.gadget = g
	if err := ptrace.WriteMem(b.target, g, []byte{0x0f, 0x05, 0xcc}); err != nil {
		return err
	}
	b.in.Gadget = g
	if _, err := b.call("munmap below gadget", unix.SYS_MUNMAP, 0, g); err != nil {
		return err
	}
	if _, err := b.call("munmap above gadget", unix.SYS_MUNMAP, g+gadgetSize, taskSize-(g+gadgetSize)); err != nil {
		return err
	}
	var lo, vdso uint64
	for _, v := range b.p.VMAs {
		if v.Kind == image.VMAVvar || v.Kind == image.VMAVDSO {
			if lo == 0 || v.Start < lo {
				lo = v.Start
			}
			if v.Kind == image.VMAVDSO {
				vdso = v.Start
			}
		}
	}
	if vdso == 0 {
		return nil
	}
	if _, err := b.call("arch_prctl(ARCH_MAP_VDSO_64)", unix.SYS_ARCH_PRCTL, archMapVDSO64, lo); err != nil {
		return err
	}
	now, err := proc.ReadSmaps(b.target)
	if err != nil {
		return err
	}
	for _, m := range now {
		if m.Path == "[vdso]" {
			if m.Start != vdso {
				return fmt.Errorf("vdso landed at %#x, the image has it at %#x: %w", m.Start, vdso, ErrIncompatible)
			}
			return nil
		}
	}
	return fmt.Errorf("vdso not mapped")
}

// mapProt is the protection a VMA is mapped with while it is filled.
func mapProt(v *image.VMA) int {
	if v.Pages > 0 && v.Kind != image.VMASysVShm { // see sysvWrite
		return v.Prot | unix.PROT_READ | unix.PROT_WRITE
	}
	return v.Prot
}

// mapVMAs maps every VMA of the image at its address; shared anonymous
// memory last (see mapShared), once everything else is in place.
func (b *builder) mapVMAs() error {
	var shared, sysv []*image.VMA
	for i := range b.p.VMAs {
		v := &b.p.VMAs[i]
		if v.Start < b.gadget+gadgetSize && b.gadget < v.End {
			return fmt.Errorf("vma %#x-%#x overlaps the gadget", v.Start, v.End)
		}
		flags := unix.MAP_FIXED | unix.MAP_PRIVATE
		if v.Shared {
			flags = unix.MAP_FIXED | unix.MAP_SHARED
		}
		fd, off := ^uint64(0), uint64(0)
		switch v.Kind {
		case image.VMAVDSO, image.VMAVvar, image.VMAVsyscall:
			continue
		case image.VMAShmAnon:
			shared = append(shared, v)
			continue
		case image.VMASysVShm:
			sysv = append(sysv, v)
			continue
		case image.VMAFile:
			fd, off = uint64(b.mapFD[v.File]), v.Offset
		default:
			flags |= unix.MAP_ANONYMOUS
		}
		if v.GrowsDown {
			flags |= unix.MAP_GROWSDOWN
		}
		if err := b.mapAt(v, flags, fd, off); err != nil {
			return err
		}
	}
	if err := b.mapShared(shared); err != nil {
		return err
	}
	return b.attachSysV(sysv)
}

// mapAt maps v at its address and gives it its advice.
func (b *builder) mapAt(v *image.VMA, flags int, fd, off uint64) error {
	ret, err := b.call(fmt.Sprintf("mmap %#x-%#x %s", v.Start, v.End, v.Name), unix.SYS_MMAP,
		v.Start, v.Len(), uint64(mapProt(v)), uint64(flags), fd, off)
	if err != nil {
		return err
	}
	if ret != v.Start {
		return fmt.Errorf("mmap %#x-%#x landed at %#x", v.Start, v.End, ret)
	}
	if name, ok := anonName(v); ok {
		// The name given with prctl(PR_SET_VMA_ANON_NAME).
		if err := b.writeString(scratchPathOff, name); err != nil {
			return err
		}
		if _, err := b.call("prctl(PR_SET_VMA_ANON_NAME) "+v.Name, unix.SYS_PRCTL, prSetVMA, prSetVMAAnonName,
			v.Start, v.Len(), b.gadget+scratchPathOff); err != nil {
			return err
		}
	}
	return b.advise(v)
}

// advise gives v its madvise(2) advice.
func (b *builder) advise(v *image.VMA) error {
	for _, a := range v.Advice {
		ret, err := b.in.Syscall(unix.SYS_MADVISE, v.Start, v.Len(), uint64(a))
		if err != nil {
			return err
		}
		if e := ptrace.Errno(ret); e != nil {
			// The advice shows in smaps (and MADV_DONTFORK,
			// MADV_WIPEONFORK change what a fork does): never dropped.
			return fmt.Errorf("madvise(%d) on %#x-%#x: %w", a, v.Start, v.End, e)
		}
	}
	return nil
}

func (b *builder) protect() error {
	for i := range b.p.VMAs {
		v := &b.p.VMAs[i]
		switch v.Kind {
		case image.VMAVDSO, image.VMAVvar, image.VMAVsyscall:
			continue
		}
		if mapProt(v) != v.Prot {
			if _, err := b.call("mprotect", unix.SYS_MPROTECT, v.Start, v.Len(), uint64(v.Prot)); err != nil {
				return err
			}
		}
		if err := b.lockSeal(v); err != nil {
			return err
		}
	}
	if b.p.LockFuture != 0 {
		// Every mapping of the image is in place: only the program's
		// own mappings from now on are locked.
		if _, err := b.call("mlockall", unix.SYS_MLOCKALL, uint64(b.p.LockFuture)); err != nil {
			return err
		}
	}
	return nil
}

// lockSeal locks v in memory (mlock2, on fault or not) and seals it
// (mseal) as it was; sealing comes last, nothing changes v after it.
func (b *builder) lockSeal(v *image.VMA) error {
	if v.Locked || v.LockOnFault {
		flags := uint64(0)
		if v.LockOnFault {
			flags = unix.MLOCK_ONFAULT
		}
		if _, err := b.call(fmt.Sprintf("mlock2 %#x-%#x", v.Start, v.End), unix.SYS_MLOCK2, v.Start, v.Len(), flags); err != nil {
			return err
		}
	}
	if v.Sealed {
		if _, err := b.call(fmt.Sprintf("mseal %#x-%#x", v.Start, v.End), unix.SYS_MSEAL, v.Start, v.Len(), 0); err != nil {
			return err
		}
	}
	return nil
}

// mm sets the mm fields, auxv and exe link with PR_SET_MM_MAP.
func (b *builder) mm() error {
	m := b.p.MM
	auxv := make([]byte, 8*len(b.p.Auxv))
	for i, a := range b.p.Auxv {
		binary.LittleEndian.PutUint64(auxv[8*i:], a)
	}
	if len(auxv) > scratchPathOff-scratchAuxvOff {
		return fmt.Errorf("auxv of %d bytes too large", len(auxv))
	}
	exe := uint32(0xffffffff)
	if b.exeFD >= 0 {
		exe = uint32(b.exeFD)
	}
	s := struct {
		StartCode, EndCode, StartData, EndData, StartBrk, Brk, StartStack uint64
		ArgStart, ArgEnd, EnvStart, EnvEnd                                uint64
		Auxv                                                              uint64
		AuxvSize, ExeFD                                                   uint32
	}{m.StartCode, m.EndCode, m.StartData, m.EndData, m.StartBrk, m.Brk, m.StartStack,
		m.ArgStart, m.ArgEnd, m.EnvStart, m.EnvEnd, b.gadget + scratchAuxvOff, uint32(len(auxv)), exe}
	if unsafe.Sizeof(s) != prctlMMMapSize {
		panic("prctl_mm_map size")
	}
	if err := b.write(scratchOff, ptrace.Bytes(&s)); err != nil {
		return err
	}
	if err := b.write(scratchAuxvOff, auxv); err != nil {
		return err
	}
	_, err := b.call("prctl(PR_SET_MM_MAP)", unix.SYS_PRCTL, prSetMM, prSetMMMap, b.gadget+scratchOff, prctlMMMapSize)
	return err
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

// fds puts every file at its fd number (dup3 of the helper's copy, or
// opened by the process itself), runs the kinds' in-process steps (epoll
// items) once every fd is in place, closes the helper's copies, and then
// has the process take its POSIX locks again.
func (b *builder) fds() error {
	tg := target{b}
	for _, e := range b.p.FDs {
		flags := uint64(0)
		if e.CloExec {
			flags = unix.O_CLOEXEC
		}
		if open := b.t.inTarget[e.File]; open != nil {
			if err := open(tg, e.FD, e.CloExec); err != nil {
				return fmt.Errorf("fd %d: %w", e.FD, err)
			}
			continue
		}
		src, ok := b.t.fileFD[e.File]
		if !ok {
			return fmt.Errorf("fd %d: file %d was not opened: %w", e.FD, e.File, image.ErrCorrupt)
		}
		if _, err := b.call(fmt.Sprintf("dup3 fd %d", e.FD), unix.SYS_DUP3, uint64(src), uint64(e.FD), flags); err != nil {
			return err
		}
	}
	for i := range b.p.Files {
		f := &b.p.Files[i]
		k, err := fdkind.Lookup(f.Kind)
		if err != nil {
			return err
		}
		if k.Steps == nil {
			continue
		}
		if err := k.Steps(tg, b.p, f); err != nil {
			return fmt.Errorf("%s: %w", fdkind.Show(f), err)
		}
	}
	if _, err := b.call("close_range", unix.SYS_CLOSE_RANGE, uint64(b.t.passBase), ^uint64(0), 0); err != nil {
		return err
	}
	// POSIX locks last: closing any fd of a file drops them.
	return fdkind.TakePOSIXLocks(tg, b.p, b.t.files)
}

// target is a process being built, as the fd kinds see it.
type target struct{ b *builder }

func (t target) PID() int { return t.b.p.PID }

func (t target) Call(name string, nr uint64, args ...uint64) (uint64, error) {
	return t.b.call(name, nr, args...)
}

func (t target) Scratch(data []byte) (uint64, error) {
	if err := t.b.write(scratchPathOff, data); err != nil {
		return 0, err
	}
	return t.b.gadget + scratchPathOff, nil
}

func (t target) Passed(fileID int) (int, bool) {
	fd, ok := t.b.t.fileFD[fileID]
	return fd, ok
}

func (b *builder) writeString(off uint64, s string) error {
	return b.write(off, append([]byte(s), 0))
}

func (b *builder) misc() error {
	p := b.p
	if _, err := b.call("umask", unix.SYS_UMASK, uint64(p.Misc.Umask)); err != nil {
		return err
	}
	if err := b.writeString(scratchPathOff, p.Misc.Cwd); err != nil {
		return err
	}
	if _, err := b.call("chdir "+p.Misc.Cwd, unix.SYS_CHDIR, b.gadget+scratchPathOff); err != nil {
		return err
	}
	if _, err := b.call("personality", unix.SYS_PERSONALITY, p.Misc.Personality); err != nil {
		return err
	}
	if err := b.procAttrs(); err != nil {
		return err
	}
	for i := range p.Threads {
		if err := b.threadMisc(i); err != nil {
			return fmt.Errorf("thread %d: %w", p.Threads[i].TID, err)
		}
	}
	return nil
}

// threadMisc restores what each thread has of its own.
func (b *builder) threadMisc(i int) error {
	th, in := &b.p.Threads[i], b.ins[i]
	if err := b.writeString(scratchPathOff, th.Comm); err != nil {
		return err
	}
	if _, err := in.Call("prctl(PR_SET_NAME)", unix.SYS_PRCTL, unix.PR_SET_NAME, b.gadget+scratchPathOff); err != nil {
		return err
	}
	if th.Rseq.Ptr != 0 {
		if _, err := in.Call("rseq", unix.SYS_RSEQ, th.Rseq.Ptr, uint64(th.Rseq.Size), 0, uint64(th.Rseq.Sig)); err != nil {
			return err
		}
	}
	if th.Robust.Head != 0 {
		if _, err := in.Call("set_robust_list", unix.SYS_SET_ROBUST_LIST, th.Robust.Head, th.Robust.Len); err != nil {
			return err
		}
	}
	if _, err := in.Call("set_tid_address", unix.SYS_SET_TID_ADDRESS, th.ClearTID); err != nil {
		return err
	}
	if err := b.threadSched(i); err != nil {
		return err
	}
	if th.AltStack.Flags&ssDisable == 0 && th.AltStack.Size != 0 {
		ss := struct {
			SP    uint64
			Flags int32
			_     int32
			Size  uint64
		}{SP: th.AltStack.SP, Flags: th.AltStack.Flags &^ ssOnStack, Size: th.AltStack.Size}
		if err := b.write(scratchOff, ptrace.Bytes(&ss)); err != nil {
			return err
		}
		if _, err := in.Call("sigaltstack", unix.SYS_SIGALTSTACK, b.gadget+scratchOff, 0); err != nil {
			return err
		}
	}
	return nil
}

// createThreads clones every thread but the leader with its old TID. Each
// starts as a copy of the leader stopped at the gadget; its own registers
// are set at the end.
func (b *builder) createThreads() error {
	b.ins = []*ptrace.Injector{&b.in}
	const flags = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM
	for _, th := range b.p.Threads[1:] {
		var args [cloneArgsSize + 8]byte
		le := binary.LittleEndian
		le.PutUint64(args[0:], flags)
		le.PutUint64(args[64:], b.gadget+scratchOff+cloneArgsSize) // set_tid
		le.PutUint64(args[72:], 1)
		le.PutUint32(args[cloneArgsSize:], uint32(th.TID))
		if err := b.write(scratchOff, args[:]); err != nil {
			return err
		}
		ret, err := b.in.Syscall(unix.SYS_CLONE3, b.gadget+scratchOff, cloneArgsSize)
		if err != nil {
			return err
		}
		if e := ptrace.Errno(ret); e != nil {
			if e == unix.EEXIST {
				return fmt.Errorf("clone3 thread with tid %d: %w", th.TID, ErrPIDInUse)
			}
			return fmt.Errorf("clone3 thread with tid %d: %w", th.TID, e)
		}
		if int(ret) != th.TID {
			return fmt.Errorf("clone3 gave tid %d, not %d", ret, th.TID)
		}
		b.tasks = append(b.tasks, th.TID)
		if err := waitNewTask(th.TID); err != nil {
			return err
		}
		b.ins = append(b.ins, &ptrace.Injector{TID: th.TID, Gadget: b.gadget})
	}
	return nil
}

// waitNewTask waits for the first stop of a task made by an injected clone.
func waitNewTask(tid int) error {
	for {
		st, err := ptrace.Wait(tid)
		if err != nil {
			return err
		}
		if st.Exited() {
			return fmt.Errorf("new task %d %s", tid, st)
		}
		if st.IsEventStop() {
			return nil
		}
		if err := ptrace.Cont(tid, 0); err != nil {
			return err
		}
	}
}

func (b *builder) signals() error {
	p := b.p
	// Block everything while signals are queued, so none is delivered
	// during the remaining injections; the real mask is set last.
	for _, t := range b.tasks {
		if err := ptrace.SetSigMask(t, ^uint64(0)); err != nil {
			return err
		}
	}
	for i, a := range p.Signals.Actions {
		sig := i + 1
		if a == (image.Sigaction{}) || sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) {
			continue
		}
		if err := b.write(scratchOff, ptrace.Bytes(&a)); err != nil {
			return err
		}
		if _, err := b.call(fmt.Sprintf("rt_sigaction %d", sig), unix.SYS_RT_SIGACTION, uint64(sig), b.gadget+scratchOff, 0, 8); err != nil {
			return err
		}
	}
	for which, it := range []image.ITimer{p.Timers.Real, p.Timers.Virtual, p.Timers.Prof} {
		if it.ValueUs == 0 && it.IntervalUs == 0 {
			continue
		}
		if it.ValueUs == 0 {
			// An interval timer that expired with its signal still
			// queued: the kernel re-arms it when that signal is taken,
			// which setitimer cannot express (a zero value disarms).
			// Armed for one interval, it next fires where the re-armed
			// timer would; the queued signal is restored with the rest.
			it.ValueUs = it.IntervalUs
		}
		v := [4]int64{it.IntervalUs / 1e6, it.IntervalUs % 1e6, it.ValueUs / 1e6, it.ValueUs % 1e6}
		if err := b.write(scratchOff, ptrace.Bytes(&v)); err != nil {
			return err
		}
		if _, err := b.call("setitimer", unix.SYS_SETITIMER, uint64(which), b.gadget+scratchOff, 0); err != nil {
			return err
		}
	}
	rearmed, err := b.posixTimers()
	if err != nil {
		return err
	}
	for _, si := range p.Signals.Pending {
		if timerSignal(si, rearmed) {
			continue
		}
		if err := b.queue(si, -1); err != nil {
			return err
		}
	}
	for i, th := range p.Threads {
		for _, si := range th.Pending {
			if timerSignal(si, rearmed) {
				continue
			}
			if err := b.queue(si, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// posixTimers re-creates timer_create timers with their IDs: the kernel
// hands out IDs in order from 0, so holes are filled with timers that are
// deleted afterwards. It returns the IDs of the periodic timers whose
// signal was pending (value 0: the kernel re-arms them only when their
// signal is dequeued): they are armed to expire at once, which queues
// their signal again, tied to the timer as the kernel's own is, so that
// its dequeue re-arms the timer; the saved copy of that signal is not
// queued (timerSignal).
func (b *builder) posixTimers() (map[int32]bool, error) {
	ts := b.p.Timers.Posix
	rearmed := map[int32]bool{}
	if len(ts) == 0 {
		return rearmed, nil
	}
	want := map[int]image.PosixTimer{}
	maxID := 0
	for _, t := range ts {
		want[t.ID] = t
		maxID = max(maxID, t.ID)
	}
	if maxID > 4096 {
		return nil, fmt.Errorf("posix timer id %d: too large to recreate", maxID)
	}
	var filler []int
	for id := 0; id <= maxID; id++ {
		t, ok := want[id]
		// struct sigevent: sigval (8), signo (4), notify (4), tid (4) ...
		var ev [64]byte
		clock := 1 // CLOCK_MONOTONIC for fillers
		if ok {
			binary.LittleEndian.PutUint64(ev[0:], t.SigValue)
			binary.LittleEndian.PutUint32(ev[8:], uint32(t.Signal))
			binary.LittleEndian.PutUint32(ev[12:], uint32(t.Notify))
			if t.Notify&sigevThreadID != 0 {
				binary.LittleEndian.PutUint32(ev[16:], uint32(t.NotifyTID))
			}
			clock = t.Clock
		} else {
			binary.LittleEndian.PutUint32(ev[12:], 1) // SIGEV_NONE
		}
		if err := b.write(scratchOff, ev[:]); err != nil {
			return nil, err
		}
		if _, err := b.call("timer_create", unix.SYS_TIMER_CREATE, uint64(clock), b.gadget+scratchOff, b.gadget+scratchOff+64); err != nil {
			return nil, err
		}
		var got [4]byte
		if err := ptrace.ReadMem(b.target, b.gadget+scratchOff+64, got[:]); err != nil {
			return nil, err
		}
		if gid := int(binary.LittleEndian.Uint32(got[:])); gid != id {
			return nil, fmt.Errorf("timer_create gave id %d, want %d", gid, id)
		}
		if !ok {
			filler = append(filler, id)
			continue
		}
		if t.ValueNs == 0 && t.IntervalNs == 0 {
			continue
		}
		if t.ValueNs == 0 {
			t.ValueNs = 1
			rearmed[int32(id)] = true
		}
		spec := [4]int64{t.IntervalNs / 1e9, t.IntervalNs % 1e9, t.ValueNs / 1e9, t.ValueNs % 1e9}
		if err := b.write(scratchOff, ptrace.Bytes(&spec)); err != nil {
			return nil, err
		}
		if _, err := b.call("timer_settime", unix.SYS_TIMER_SETTIME, uint64(id), 0, b.gadget+scratchOff, 0); err != nil {
			return nil, err
		}
	}
	for _, id := range filler {
		if _, err := b.call("timer_delete", unix.SYS_TIMER_DELETE, uint64(id)); err != nil {
			return nil, err
		}
	}
	return rearmed, nil
}

// timerSignal reports whether si is the signal of a POSIX timer in
// rearmed (si_code SI_TIMER, si_timerid at offset 16).
func timerSignal(si image.SigInfo, rearmed map[int32]bool) bool {
	if len(si) < 20 || len(rearmed) == 0 {
		return false
	}
	code := int32(binary.LittleEndian.Uint32(si[8:]))
	return code == siTimer && rearmed[int32(binary.LittleEndian.Uint32(si[16:]))]
}

// queue puts a pending signal back, with its siginfo: to the process, or
// to thread i of Process.Threads (i >= 0). The signal is sent by the
// thread to itself: only then does the kernel accept any si_code.
func (b *builder) queue(si image.SigInfo, i int) error {
	if len(si) != ptrace.SigInfoSize {
		return fmt.Errorf("siginfo of %d bytes: %w", len(si), image.ErrCorrupt)
	}
	sig := uint64(binary.LittleEndian.Uint32(si))
	if err := b.write(scratchOff, si); err != nil {
		return err
	}
	if i < 0 {
		_, err := b.call(fmt.Sprintf("rt_sigqueueinfo %d", sig), unix.SYS_RT_SIGQUEUEINFO, uint64(b.target), sig, b.gadget+scratchOff)
		return err
	}
	tid := b.p.Threads[i].TID
	_, err := b.ins[i].Call(fmt.Sprintf("rt_tgsigqueueinfo %d", sig), unix.SYS_RT_TGSIGQUEUEINFO, uint64(b.target), uint64(tid), sig, b.gadget+scratchOff)
	return err
}

// creds gives every thread its own credentials (setCreds), last: the
// calls before needed privilege.
func (b *builder) creds() error {
	for i := range b.ins {
		if err := b.setCreds(i); err != nil {
			return fmt.Errorf("thread %d: %w", b.p.Threads[i].TID, err)
		}
	}
	return nil
}

// afterCreds sets what a change of credentials resets: the parent-death
// signal and the dumpable flag.
func (b *builder) afterCreds() error {
	p := b.p
	if p.Misc.PdeathSig != 0 {
		if _, err := b.call("prctl(PR_SET_PDEATHSIG)", unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uint64(p.Misc.PdeathSig)); err != nil {
			return err
		}
	}
	if err := b.mdwe(); err != nil {
		return err
	}
	if p.Misc.Dumpable != 1 {
		if _, err := b.call("prctl(PR_SET_DUMPABLE)", unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, uint64(p.Misc.Dumpable)); err != nil {
			return err
		}
	}
	return nil
}

// seccomp sets no_new_privs and installs the seccomp filters of thread i,
// oldest first, with the flags they had. ckpt-redo traces with
// PTRACE_O_SUSPEND_SECCOMP, so the filters do not apply to the calls it
// still injects; setCreds calls it while the thread still has
// CAP_SYS_ADMIN, which a filter without no_new_privs needs.
func (b *builder) seccomp(i int) error {
	c, in := b.threadCreds(i), b.ins[i]
	if c.NoNewPrivs {
		if _, err := in.Call("prctl(PR_SET_NO_NEW_PRIVS)", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return err
		}
	}
	for k := len(c.Filters) - 1; k >= 0; k-- {
		f := c.Filters[k]
		if len(f) == 0 || len(f)%8 != 0 || len(f) > 4096*8 {
			return fmt.Errorf("filter %d is %d bytes: %w", k, len(f), image.ErrCorrupt)
		}
		flags := uint64(0)
		if k < len(c.FilterFlags) {
			flags = c.FilterFlags[k]
		}
		if err := b.write(scratchOff+16, f); err != nil {
			return err
		}
		prog := struct {
			Len    uint16
			_      [6]byte
			Filter uint64
		}{Len: uint16(len(f) / 8), Filter: b.gadget + scratchOff + 16}
		if err := b.write(scratchOff, ptrace.Bytes(&prog)); err != nil {
			return err
		}
		if _, err := in.Call("seccomp(SECCOMP_SET_MODE_FILTER)", unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, b.gadget+scratchOff); err != nil {
			return err
		}
	}
	// Strict mode after the filters: the calls ckpt-redo still injects
	// run because seccomp is suspended while it traces
	// (PTRACE_O_SUSPEND_SECCOMP).
	if b.p.Threads[i].SeccompStrict {
		if _, err := in.Call("seccomp(SECCOMP_SET_MODE_STRICT)", unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_STRICT, 0, 0); err != nil {
			return err
		}
	}
	return nil
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
	return nil
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

// anonName is the name an anonymous VMA was given with
// prctl(PR_SET_VMA_ANON_NAME): "[anon:NAME]", "[anon_shmem:NAME]".
func anonName(v *image.VMA) (string, bool) {
	prefix := "[anon:"
	switch v.Kind {
	case image.VMAAnon:
	case image.VMAShmAnon:
		prefix = "[anon_shmem:"
	default:
		return "", false
	}
	name, ok := strings.CutPrefix(v.Name, prefix)
	return strings.TrimSuffix(name, "]"), ok
}
