package bpftask

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Task is what the reader decodes of one task.
type Task struct {
	// Regs are the user registers, as PTRACE_GETREGS gives them.
	Regs unix.PtraceRegs
	// XState is the xsave image in the standard format of
	// PTRACE_GETREGSET NT_X86_XSTATE.
	XState []byte
	// AltStack is what sigaltstack(NULL, &old) answers in the task.
	AltStack AltStack
	// ClearTID is what PR_GET_TID_ADDRESS answers.
	ClearTID uint64
	// PdeathSig is what PR_GET_PDEATHSIG answers.
	PdeathSig int
	// Rseq is the task's rseq registration (PTRACE_GET_RSEQ_CONFIGURATION).
	Rseq Rseq
	// Securebits of the task's credentials (PR_GET_SECUREBITS).
	Securebits int
	// Actions are the signal handlers (rt_sigaction), signal 1 first.
	Actions [64]Sigaction
	// ChildSubreaper is what PR_GET_CHILD_SUBREAPER answers.
	ChildSubreaper bool
	// ITimers tell, for ITIMER_REAL, _VIRTUAL and _PROF, whether the
	// process has the timer armed.
	ITimers [3]bool
	// AtomicFlags are the task's atomic flags (PFA_*: speculation
	// controls among them).
	AtomicFlags uint64
	// SyscallUserDispatch tells that the task has syscall user dispatch
	// on (PR_SET_SYSCALL_USER_DISPATCH).
	SyscallUserDispatch bool
	// ThreadFlags are the task's thread_info flags (TIF_*; their numbers
	// are not in BTF: a caller finds the one it needs by changing it).
	ThreadFlags uint64
	// MemPolicy is nonzero when the task has a NUMA memory policy of its
	// own (set_mempolicy).
	MemPolicy uint64
}

// AltStack is a signal stack as sigaltstack(2) describes it.
type AltStack struct {
	SP    uint64
	Flags int32
	Size  uint64
}

// Rseq is an rseq registration.
type Rseq struct {
	Ptr  uint64
	Size uint32
	Sig  uint32
}

// Sigaction is one signal's struct kernel_sigaction.
type Sigaction struct {
	Handler, Flags, Restorer, Mask uint64
}

const (
	ssOnStack    = 1
	ssDisable    = 2
	ssAutoDisarm = 1 << 31
)

// Read reads task tid. ref is an NT_X86_XSTATE image of a stopped task
// of this machine (the one Verify checked): it gives the size of the
// standard image and the constant parts of its legacy area.
func (r *Reader) Read(tid int, ref []byte) (*Task, error) {
	b, err := r.raw(tid)
	if err != nil {
		return nil, err
	}
	l := r.l
	le := binary.LittleEndian
	t := &Task{}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&t.Regs)), ptRegsSize), b[:ptRegsSize])
	task := b[r.task : r.task+l.taskSize]
	t.Regs.Fs_base = le.Uint64(task[l.fsbase:])
	t.Regs.Gs_base = le.Uint64(task[l.gsbase:])
	t.Regs.Ds = uint64(le.Uint16(task[l.ds:]))
	t.Regs.Es = uint64(le.Uint16(task[l.es:]))
	t.Regs.Fs = uint64(le.Uint16(task[l.fsindex:]))
	t.Regs.Gs = uint64(le.Uint16(task[l.gsindex:]))
	sp, size, flags := le.Uint64(task[l.sasSP:]), le.Uint64(task[l.sasSize:]), le.Uint32(task[l.sasFlags:])
	t.AltStack = AltStack{SP: sp, Size: size, Flags: int32(flags)}
	switch usp := t.Regs.Rsp; {
	case size == 0:
		t.AltStack.Flags |= ssDisable
	case flags&ssAutoDisarm == 0 && usp > sp && usp-sp <= size:
		t.AltStack.Flags |= ssOnStack
	}
	t.ClearTID = le.Uint64(task[l.clearTID:])
	t.PdeathSig = int(int32(le.Uint32(task[l.pdeathSig:])))
	t.Rseq = Rseq{Ptr: le.Uint64(task[l.rseq:]), Size: le.Uint32(task[l.rseqLen:]), Sig: le.Uint32(task[l.rseqSig:])}
	t.AtomicFlags = le.Uint64(task[l.atomicFlags:])
	t.SyscallUserDispatch = le.Uint64(task[l.syscallWork:])&(1<<l.sudBit) != 0
	t.ThreadFlags = le.Uint64(task[l.tiFlags:])
	if l.mempolicy != 0 {
		t.MemPolicy = le.Uint64(task[l.mempolicy:])
	}
	t.Securebits = int(le.Uint32(b[r.cred+l.securebits:]))
	for i := range t.Actions {
		a := b[r.actions+uint32(i)*32:]
		t.Actions[i] = Sigaction{Handler: le.Uint64(a), Flags: le.Uint64(a[8:]), Restorer: le.Uint64(a[16:]), Mask: le.Uint64(a[24:])}
	}
	sig := b[r.signal : r.signal+l.signalSize]
	t.ChildSubreaper = sig[l.subreaperBit/8]&(1<<(l.subreaperBit%8)) != 0
	t.ITimers[0] = le.Uint64(sig[l.realIncr:]) != 0 || sig[l.realTimerState] != 0
	for k := 0; k < 2; k++ {
		t.ITimers[1+k] = le.Uint64(sig[l.itimers+uint32(k)*16:]) != 0
	}
	fpst := b[r.fpstate : r.fpstate+l.fpstateRegs]
	if t.XState, err = standardXState(b[r.xsave:r.xsave+r.xsaveLen], le.Uint64(fpst[l.fpstateUserXF:]), le.Uint32(fpst[l.fpstateUserSize:]), ref); err != nil {
		return nil, fmt.Errorf("task %d: %w", tid, err)
	}
	return t, nil
}

const (
	xfeatFP       = 1 << 0
	xfeatSSE      = 1 << 1
	xfeatYMM      = 1 << 2
	xfeatPKRU     = 1 << 9
	xcompCompact  = 1 << 63
	xsaveHdrOff   = 512
	xsaveExtStart = 576
)

// standardXState converts a kernel xsave buffer xs (compacted by XSAVES,
// or standard) into the standard image ptrace gives: the components in
// userXF, each from xs where its XSTATE_BV bit is set, else in its init
// state, as copy_xstate_to_uabi_buf does.
func standardXState(xs []byte, userXF uint64, userSize uint32, ref []byte) ([]byte, error) {
	le := binary.LittleEndian
	if int(userSize) != len(ref) {
		return nil, fmt.Errorf("xstate of %d bytes, the stopped task's of %d: %w", userSize, len(ref), errLayout)
	}
	if userXF&xfeatPKRU != 0 {
		return nil, fmt.Errorf("protection keys (PKRU) in the xstate are kept apart by the kernel: %w", errLayout)
	}
	bv := le.Uint64(xs[xsaveHdrOff:]) & userXF
	xcomp := le.Uint64(xs[xsaveHdrOff+8:])
	out := make([]byte, userSize)
	if bv&xfeatFP != 0 {
		copy(out[0:24], xs[0:24])
		copy(out[32:160], xs[32:160])
	} else {
		le.PutUint16(out[0:], 0x037f) // FCW of FNINIT
	}
	if bv&(xfeatSSE|xfeatYMM) != 0 {
		copy(out[24:32], xs[24:32])
	} else {
		le.PutUint32(out[24:], 0x1f80)
		copy(out[28:32], ref[28:32]) // MXCSR_MASK: the CPU's
	}
	if bv&xfeatSSE != 0 {
		copy(out[160:416], xs[160:416])
	}
	copy(out[464:512], ref[464:512]) // software-reserved bytes: the kernel's
	le.PutUint64(out[xsaveHdrOff:], bv)
	comp := map[int]uint32{}
	if xcomp&xcompCompact != 0 {
		off := uint32(xsaveExtStart)
		for i := 2; i < 63; i++ {
			if xcomp&(1<<i) == 0 {
				continue
			}
			size, _, ecx, _ := cpuid(0xd, uint32(i))
			if ecx&2 != 0 {
				off = (off + 63) &^ 63
			}
			comp[i] = off
			off += size
		}
	}
	for i := 2; i < 63; i++ {
		if userXF&(1<<i) == 0 {
			continue
		}
		size, stdOff, _, _ := cpuid(0xd, uint32(i))
		if stdOff+size > userSize {
			return nil, fmt.Errorf("xstate component %d at %d+%d past %d bytes: %w", i, stdOff, size, userSize, errLayout)
		}
		if bv&(1<<i) == 0 {
			continue // init state: zeros
		}
		src := stdOff
		if xcomp&xcompCompact != 0 {
			var ok bool
			if src, ok = comp[i]; !ok {
				return nil, fmt.Errorf("xstate component %d not in the compacted buffer (%#x): %w", i, xcomp, errLayout)
			}
		}
		if int(src+size) > len(xs) {
			return nil, fmt.Errorf("xstate component %d at %d+%d past the %d bytes read: %w", i, src, size, len(xs), errLayout)
		}
		copy(out[stdOff:stdOff+size], xs[src:src+size])
	}
	return out, nil
}
