package dump

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/ptrace"
)

// The threads of a frozen process, each with its registers, xstate, signal
// mask, rseq and robust futex list, name, credentials and scheduling: what
// restore/threads.go and restore/creds.go set again.

// collectThread reads what thread t has of its own, from outside.
func (d *dumper) collectThread(t *task) (*image.Thread, error) {
	th := &image.Thread{TID: t.tid, InSyscall: -1}
	regs, err := ptrace.GetRegs(t.tid)
	if err != nil {
		return nil, err
	}
	th.Regs = *(*image.Regs)(unsafe.Pointer(&regs))
	if int64(regs.Orig_rax) >= 0 {
		th.InSyscall = int64(regs.Orig_rax)
	}
	if regs.Orig_rax == sysRestart && int64(regs.Rax) == -restartBlock {
		th.Restart = restartedCall(t.wchan, regs.Rdi, regs.Rsi)
	}
	if th.XState, err = ptrace.GetXState(t.tid); err != nil {
		return nil, err
	}
	th.SigMask = t.mask
	rs, err := ptrace.GetRseq(t.tid)
	if err != nil {
		return nil, err
	}
	th.Rseq = image.Rseq{Ptr: rs.Ptr, Size: rs.Size, Sig: rs.Sig, Flags: rs.Flags}
	if err := d.fixRseq(th); err != nil {
		return nil, err
	}
	head, hlen, err := sys.GetRobustList(t.tid)
	if err != nil {
		return nil, fmt.Errorf("thread %d: %w", t.tid, err)
	}
	th.Robust = image.Robust{Head: head, Len: hlen}
	if b, err := t.readFile(d.pid, "comm"); err == nil {
		th.Comm = strings.TrimSuffix(string(b), "\n")
	}
	if s, err := t.readStat(d.pid); err == nil {
		th.State = string(s.State)
	}
	status, err := t.readStatus()
	if err != nil {
		return nil, fmt.Errorf("read status: %w", err)
	}
	if th.Creds, err = readCreds(t.tid, status); err != nil {
		return nil, err
	}
	if err := collectSched(d.pid, t, th); err != nil {
		return nil, err
	}
	if err := threadFlags(d.pid, t, th); err != nil {
		return nil, err
	}
	return th, nil
}

// fixRseq moves a thread stopped inside an rseq critical section to the
// section's abort handler, as the kernel would on preemption: in the image
// and in the live thread.
func (d *dumper) fixRseq(th *image.Thread) error {
	if th.Rseq.Ptr == 0 {
		return nil
	}
	// struct rseq: u32 cpu_id_start, u32 cpu_id, u64 rseq_cs, ...
	var csPtr [8]byte
	if err := readMem(d.rd(), th.Rseq.Ptr+8, csPtr[:]); err != nil {
		return fmt.Errorf("read rseq area: %w", err)
	}
	cs := binary.LittleEndian.Uint64(csPtr[:])
	if cs == 0 {
		return nil
	}
	// struct rseq_cs: u32 version, u32 flags, u64 start_ip, u64 post_commit_offset, u64 abort_ip
	var b [32]byte
	if err := readMem(d.rd(), cs, b[:]); err != nil {
		return nil // a stale pointer: the kernel ignores it too until used
	}
	start, off, abort := binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:])
	if th.Regs.Rip < start || th.Regs.Rip >= start+off {
		return nil
	}
	th.Regs.Rip = abort
	// The running thread goes to the abort handler too, as the kernel
	// would send it there when it resumes after this preemption. Left
	// inside the section it would finish it unprotected: the injected
	// calls return to user space outside the section, where the kernel
	// clears rseq_cs, and a dump with --leave-running (or a refused one)
	// would resume it there, its sequence no longer restartable.
	regs, err := ptrace.GetRegs(th.TID)
	if err != nil {
		return fmt.Errorf("thread %d: rseq abort: %w", th.TID, err)
	}
	regs.Rip = abort
	if err := ptrace.SetRegs(th.TID, &regs); err != nil {
		return fmt.Errorf("thread %d: rseq abort: %w", th.TID, err)
	}
	return nil
}
