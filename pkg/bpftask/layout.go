package bpftask

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf/btf"
)

// layout holds where, in this kernel's structures, the fields the reader
// decodes are: byte offsets found in the kernel's BTF (/sys/kernel/btf/vmlinux).
type layout struct {
	taskSize                        uint32 // sizeof(struct task_struct)
	fsbase, gsbase                  uint32 // in task_struct (thread.fsbase, thread.gsbase)
	ds, es, fsindex, gsindex        uint32 // segment selectors, in task_struct (thread.*)
	sasSP, sasSize, sasFlags        uint32
	clearTID, pdeathSig             uint32
	rseq, rseqLen, rseqSig          uint32
	atomicFlags, mempolicy          uint32
	cred, signal, sighand           uint32 // pointers in task_struct
	securebits                      uint32 // in struct cred
	credSize                        uint32
	signalSize                      uint32
	subreaperBit                    uint32 // bit offset of is_child_subreaper in signal_struct
	realIncr, realTimerState        uint32 // in signal_struct
	realTimerStateSize              uint32
	itimers                         uint32 // signal_struct.it[2] {u64 expires, u64 incr}
	actions                         uint32 // sighand_struct.action[64]
	fpu                             uint32 // struct fpu, from the task
	fpstate                         uint32 // struct fpstate * in struct fpu
	fpstateXFeatures, fpstateUserXF uint32 // in struct fpstate
	fpstateUserSize                 uint32
	fpstateRegs                     uint32 // the xsave image in struct fpstate
	syscallWork                     uint32 // thread_info.syscall_work, in task_struct
	tiFlags                         uint32 // thread_info.flags, in task_struct
	sudBit                          uint32 // SYSCALL_WORK_BIT_SYSCALL_USER_DISPATCH
}

// errLayout means the kernel's BTF does not describe a field the reader
// needs, or describes it otherwise than it expects.
var errLayout = errors.New("kernel structure layout not as expected")

// member finds a member of st by a path of names, descending into
// anonymous structs and unions; it returns its offset in bits and its
// type.
func member(st btf.Type, path ...string) (uint32, btf.Type, error) {
	var off uint32
	t := st
	for _, name := range path {
		o, mt, ok := find(btf.UnderlyingType(t), name)
		if !ok {
			return 0, nil, fmt.Errorf("%s: no member %q: %w", btf.UnderlyingType(st).TypeName(), name, errLayout)
		}
		off += o
		t = mt
	}
	return off, t, nil
}

func find(t btf.Type, name string) (uint32, btf.Type, bool) {
	var ms []btf.Member
	switch c := t.(type) {
	case *btf.Struct:
		ms = c.Members
	case *btf.Union:
		ms = c.Members
	default:
		return 0, nil, false
	}
	for _, m := range ms {
		if m.Name == name {
			return uint32(m.Offset), m.Type, true
		}
		if m.Name == "" {
			if o, mt, ok := find(btf.UnderlyingType(m.Type), name); ok {
				return uint32(m.Offset) + o, mt, true
			}
		}
	}
	return 0, nil, false
}

// byteOff is member for a byte-aligned member of the given size in bytes
// (0: any).
func byteOff(st btf.Type, size uint32, path ...string) (uint32, error) {
	off, t, err := member(st, path...)
	if err != nil {
		return 0, err
	}
	if off%8 != 0 {
		return 0, fmt.Errorf("%v: not byte aligned: %w", path, errLayout)
	}
	if size != 0 {
		sz, err := btf.Sizeof(t)
		if err != nil || uint32(sz) != size {
			return 0, fmt.Errorf("%v: %d bytes, want %d: %w", path, sz, size, errLayout)
		}
	}
	return off / 8, nil
}

// offset is a field of a kernel structure that a reader's program reads:
// in struct st, along path, size bytes wide (0: any size); setOffsets puts
// its byte offset in dst.
type offset struct {
	dst  *uint32
	st   btf.Type
	size uint32
	path []string
}

// setOffsets finds the byte offset of every field of fs in the kernel's
// BTF.
func setOffsets(fs []offset) error {
	for _, f := range fs {
		var err error
		if *f.dst, err = byteOff(f.st, f.size, f.path...); err != nil {
			return err
		}
	}
	return nil
}

func structType(s *btf.Spec, name string) (*btf.Struct, error) {
	var st *btf.Struct
	if err := s.TypeByName(name, &st); err != nil {
		return nil, fmt.Errorf("BTF: struct %s: %w", name, err)
	}
	return st, nil
}

// loadLayout reads the offsets from the kernel's BTF s.
func loadLayout(s *btf.Spec) (*layout, error) {
	task, err := structType(s, "task_struct")
	if err != nil {
		return nil, err
	}
	l := &layout{taskSize: task.Size}
	fields := []offset{
		{&l.fsbase, task, 8, []string{"thread", "fsbase"}},
		{&l.gsbase, task, 8, []string{"thread", "gsbase"}},
		{&l.ds, task, 2, []string{"thread", "ds"}},
		{&l.es, task, 2, []string{"thread", "es"}},
		{&l.fsindex, task, 2, []string{"thread", "fsindex"}},
		{&l.gsindex, task, 2, []string{"thread", "gsindex"}},
		{&l.sasSP, task, 8, []string{"sas_ss_sp"}},
		{&l.sasSize, task, 8, []string{"sas_ss_size"}},
		{&l.sasFlags, task, 4, []string{"sas_ss_flags"}},
		{&l.clearTID, task, 8, []string{"clear_child_tid"}},
		{&l.pdeathSig, task, 4, []string{"pdeath_signal"}},
		{&l.rseq, task, 8, []string{"rseq"}},
		{&l.rseqLen, task, 4, []string{"rseq_len"}},
		{&l.rseqSig, task, 4, []string{"rseq_sig"}},
		{&l.atomicFlags, task, 8, []string{"atomic_flags"}},
		{&l.cred, task, 8, []string{"cred"}},
		{&l.signal, task, 8, []string{"signal"}},
		{&l.sighand, task, 8, []string{"sighand"}},
		{&l.syscallWork, task, 8, []string{"thread_info", "syscall_work"}},
		{&l.tiFlags, task, 8, []string{"thread_info", "flags"}},
	}
	if _, _, err := member(task, "mempolicy"); err == nil {
		fields = append(fields, offset{&l.mempolicy, task, 8, []string{"mempolicy"}})
	}
	cred, err := structType(s, "cred")
	if err != nil {
		return nil, err
	}
	l.credSize = cred.Size
	sig, err := structType(s, "signal_struct")
	if err != nil {
		return nil, err
	}
	l.signalSize = sig.Size
	sighand, err := structType(s, "sighand_struct")
	if err != nil {
		return nil, err
	}
	fpu, err := structType(s, "fpu")
	if err != nil {
		return nil, err
	}
	fpst, err := structType(s, "fpstate")
	if err != nil {
		return nil, err
	}
	fields = append(fields,
		offset{&l.securebits, cred, 4, []string{"securebits"}},
		offset{&l.realIncr, sig, 8, []string{"it_real_incr"}},
		offset{&l.itimers, sig, 32, []string{"it"}},
		offset{&l.actions, sighand, 64 * 32, []string{"action"}},
		offset{&l.fpstate, fpu, 8, []string{"fpstate"}},
		offset{&l.fpstateXFeatures, fpst, 8, []string{"xfeatures"}},
		offset{&l.fpstateUserXF, fpst, 8, []string{"user_xfeatures"}},
		offset{&l.fpstateUserSize, fpst, 4, []string{"user_size"}},
		offset{&l.fpstateRegs, fpst, 0, []string{"regs"}},
	)
	if err := setOffsets(fields); err != nil {
		return nil, err
	}
	// The hrtimer of ITIMER_REAL: queued or not (state, or is_queued in
	// newer kernels).
	for _, name := range []string{"state", "is_queued"} {
		off, t, err := member(sig, "real_timer", name)
		if err != nil {
			continue
		}
		sz, _ := btf.Sizeof(t)
		if off%8 != 0 || sz != 1 {
			return nil, fmt.Errorf("signal_struct.real_timer.%s: %w", name, errLayout)
		}
		l.realTimerState, l.realTimerStateSize = off/8, 1
		break
	}
	if l.realTimerStateSize == 0 {
		return nil, fmt.Errorf("signal_struct.real_timer: no state: %w", errLayout)
	}
	var work *btf.Enum
	if err := s.TypeByName("syscall_work_bit", &work); err != nil {
		return nil, fmt.Errorf("BTF: enum syscall_work_bit: %w", err)
	}
	found := false
	for _, v := range work.Values {
		if v.Name == "SYSCALL_WORK_BIT_SYSCALL_USER_DISPATCH" && v.Value < 64 {
			l.sudBit, found = uint32(v.Value), true
		}
	}
	if !found {
		return nil, fmt.Errorf("BTF: no SYSCALL_WORK_BIT_SYSCALL_USER_DISPATCH: %w", errLayout)
	}
	bit, t, err := member(sig, "is_child_subreaper")
	if err != nil {
		return nil, err
	}
	_ = t
	l.subreaperBit = bit
	// struct fpu: in thread_struct (older kernels), else right after the
	// task_struct (x86_task_fpu()).
	if off, _, err := member(task, "thread", "fpu"); err == nil {
		l.fpu = off / 8
	} else {
		l.fpu = task.Size
	}
	if l.fpu+fpu.Size > 1<<15 {
		return nil, fmt.Errorf("struct fpu at %d: %w", l.fpu, errLayout)
	}
	return l, nil
}
