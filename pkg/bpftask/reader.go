// Package bpftask reads the state the kernel keeps for a task that ptrace
// cannot stop: a parent waiting in vfork() sleeps uninterruptibly until
// its child calls exec or exits, so PTRACE_INTERRUPT never stops it and
// neither its registers nor anything an injected call would tell can be
// had from it.
//
// A BPF task iterator (kernel 6.1 or later, BTF, CONFIG_BPF_SYSCALL)
// limited to that one task copies its user registers (bpf_task_pt_regs),
// its task_struct, its credentials, signal and sighand structures and its
// saved FPU state (struct fpstate) out of the kernel; the offsets of the
// fields decoded come from the kernel's BTF. The xsave image is converted
// from the kernel's compacted format (XSAVES) to the standard one ptrace
// uses (NT_X86_XSTATE), with the component offsets and sizes of CPUID
// leaf 0xD.
//
// Nothing read is trusted unchecked: Reader.Verify reads a task that is
// stopped under ptrace the same way and compares every decoded value with
// what ptrace (and injected calls) gave for it. A caller uses the reader
// only once that check passed.
//
// The package also reads what nothing but accept() reaches: the server
// ends of the connections waiting in a UNIX listener's accept queue
// (UnixReader, unixqueue.go), with a UNIX socket iterator and a kernel
// memory reader, checked the same way (UnixReader.Verify) on connections
// it makes itself; and where the pieces (sends) queued in a UNIX stream
// start, which no peek tells (UnixReader.Pieces, unixpieces.go, checked
// by VerifyPieces).
package bpftask

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ErrUnavailable means the kernel cannot run the reader: no BTF, no BPF
// task iterators, or not allowed.
var ErrUnavailable = errors.New("BPF task reader unavailable")

// Reader reads tasks through one loaded program.
type Reader struct {
	l       *layout
	buf     *ebpf.Map
	prog    *ebpf.Program
	regions []region
	total   uint32
	// where in the output each part starts
	task, cred, signal, actions, fpstate, xsave uint32
	xsaveLen                                    uint32
}

// Open loads the reader's program. It fails with ErrUnavailable when the
// kernel cannot run it.
func Open(k *Kernel) (*Reader, error) {
	spec, cache, err := k.load(ErrUnavailable)
	if err != nil {
		return nil, err
	}
	l, err := loadLayout(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	r := &Reader{l: l}
	// The kernel's xsave buffer: CPUID(0xD, 1).EBX is the size of the
	// XSAVES area of every feature enabled in XCR0 | IA32_XSS; the
	// standard area (CPUID(0xD, 0).EBX) for a kernel using XSAVE.
	_, std, _, _ := cpuid(0xd, 0)
	_, comp, _, _ := cpuid(0xd, 1)
	r.xsaveLen = max(std, comp)
	if r.xsaveLen < 576 || r.xsaveLen > 16<<10 {
		return nil, fmt.Errorf("%w: xsave area of %d bytes", ErrUnavailable, r.xsaveLen)
	}
	off := uint32(ptRegsSize)
	add := func(via, from, n uint32) uint32 {
		at := off
		r.regions = append(r.regions, region{via: via, off: from, len: n, out: at})
		off += (n + 7) &^ 7
		return at
	}
	r.task = add(noDeref, 0, l.taskSize)
	r.cred = add(l.cred, 0, l.credSize)
	r.signal = add(l.signal, 0, l.signalSize)
	r.actions = add(l.sighand, l.actions, 64*32)
	r.fpstate = add(l.fpu+l.fpstate, 0, l.fpstateRegs)
	r.xsave = add(l.fpu+l.fpstate, l.fpstateRegs, r.xsaveLen)
	r.total = off
	if r.buf, r.prog, err = load(r.regions, r.total, cache); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return r, nil
}

// Close unloads the program.
func (r *Reader) Close() {
	r.prog.Close()
	r.buf.Close()
}

// bpf(2) commands and attach type (uapi/linux/bpf.h).
const (
	bpfLinkCreate = 28
	bpfIterCreate = 33
	bpfTraceIter  = 28
)

// raw reads the output of the program for task tid.
func (r *Reader) raw(tid int) ([]byte, error) {
	// union bpf_iter_link_info, task: {u32 tid; u32 pid; u32 pid_fd}
	var info [16]byte
	binary.LittleEndian.PutUint32(info[0:], uint32(tid))
	var attr [64]byte
	binary.LittleEndian.PutUint32(attr[0:], uint32(r.prog.FD()))
	binary.LittleEndian.PutUint32(attr[8:], bpfTraceIter)
	binary.LittleEndian.PutUint64(attr[16:], uint64(uintptr(unsafe.Pointer(&info[0]))))
	binary.LittleEndian.PutUint32(attr[24:], uint32(len(info)))
	lfd, _, e := unix.Syscall(unix.SYS_BPF, bpfLinkCreate, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	if e != 0 {
		return nil, fmt.Errorf("BPF link for task %d: %w", tid, e)
	}
	defer unix.Close(int(lfd))
	var iattr [8]byte
	binary.LittleEndian.PutUint32(iattr[0:], uint32(lfd))
	ifd, _, e := unix.Syscall(unix.SYS_BPF, bpfIterCreate, uintptr(unsafe.Pointer(&iattr[0])), uintptr(len(iattr)))
	if e != 0 {
		return nil, fmt.Errorf("BPF iterator for task %d: %w", tid, e)
	}
	f := os.NewFile(ifd, "bpf-iter")
	defer f.Close()
	out := make([]byte, 0, r.total)
	chunk := make([]byte, 64<<10)
	for {
		n, err := f.Read(chunk)
		out = append(out, chunk[:n]...)
		if n == 0 || err != nil {
			break
		}
	}
	if len(out) != int(r.total) {
		return nil, fmt.Errorf("BPF iterator for task %d: %d bytes, want %d (task gone?)", tid, len(out), r.total)
	}
	return out, nil
}
