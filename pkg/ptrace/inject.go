package ptrace

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// An Injector runs system calls inside a stopped tracee. It saves the
// task's registers, points rip at a syscall instruction with the call's
// number and arguments, lets the task execute just that instruction, reads
// the result and puts the registers back.
//
// orig_rax is set to -1 in the injected registers: otherwise the kernel's
// syscall-restart logic would rewrite rip and rax when the tracee was
// stopped inside a system call.
type Injector struct {
	TID int
	// Gadget is the address of a `syscall` instruction in the tracee.
	Gadget uint64
	// Step selects single-stepping over the gadget (a bare `syscall`, as
	// found in the vDSO). Without it the gadget must be `syscall; int3`
	// and the task runs until the trap.
	Step bool

	// Signals that arrived while a call ran, with their siginfo. They were
	// taken off the queue: the caller re-delivers or saves them.
	Signals []Signal
	// Children lists tasks reported by fork and clone events.
	Children []int
}

// Signal is a signal that stopped a tracee, and its siginfo.
type Signal struct {
	Sig  unix.Signal
	Info []byte
}

// Syscall runs one system call in the tracee and returns its raw result
// (a negative errno on failure; see Errno).
func (in *Injector) Syscall(nr uint64, args ...uint64) (uint64, error) {
	saved, err := GetRegs(in.TID)
	if err != nil {
		return 0, err
	}
	r := saved
	var a [6]uint64
	copy(a[:], args)
	r.Rip = in.Gadget
	r.Rax = nr
	r.Orig_rax = ^uint64(0)
	r.Rdi, r.Rsi, r.Rdx, r.R10, r.R8, r.R9 = a[0], a[1], a[2], a[3], a[4], a[5]
	if err := SetRegs(in.TID, &r); err != nil {
		return 0, err
	}
	req := unix.PTRACE_CONT
	if in.Step {
		req = unix.PTRACE_SINGLESTEP
	}
	for {
		if err := ptrace(req, in.TID, 0, 0); err != nil {
			return 0, fmt.Errorf("inject syscall %d into %d: resume: %w", nr, in.TID, err)
		}
		st, err := Wait(in.TID)
		if err != nil {
			return 0, err
		}
		if st.Exited() {
			return 0, fmt.Errorf("inject syscall %d into %d: %s: %w", nr, in.TID, st, ErrExited)
		}
		switch {
		case st.Event == unix.PTRACE_EVENT_FORK || st.Event == unix.PTRACE_EVENT_CLONE || st.Event == unix.PTRACE_EVENT_VFORK:
			msg, err := GetEventMsg(in.TID)
			if err != nil {
				return 0, err
			}
			in.Children = append(in.Children, int(msg))
			continue
		case st.Event != 0:
			continue
		case st.Sig() == unix.SIGTRAP:
		default:
			info, _ := GetSigInfo(in.TID)
			in.Signals = append(in.Signals, Signal{Sig: st.Sig(), Info: info})
			continue
		}
		break
	}
	got, err := GetRegs(in.TID)
	if err != nil {
		return 0, err
	}
	want := in.Gadget + 2
	if !in.Step {
		want++
	}
	if got.Rip != want {
		return 0, fmt.Errorf("inject syscall %d into %d: stopped at %#x, not after the gadget at %#x", nr, in.TID, got.Rip, in.Gadget)
	}
	if err := SetRegs(in.TID, &saved); err != nil {
		return 0, err
	}
	return got.Rax, nil
}

// Park moves the task from the SIGTRAP stop that ends an injected call to
// an interrupt stop: the interrupt is queued, the trap is suppressed, and
// the task stops again before it runs a single instruction. If the tracer
// dies after that, the task goes on as if never traced, instead of getting
// a SIGTRAP. Call it after the last of a series of calls.
func (in *Injector) Park() error {
	if err := Interrupt(in.TID); err != nil {
		return err
	}
	if err := Cont(in.TID, 0); err != nil {
		return err
	}
	for {
		st, err := Wait(in.TID)
		if err != nil {
			return err
		}
		if st.Exited() {
			return fmt.Errorf("park %d: %s: %w", in.TID, st, ErrExited)
		}
		if st.IsEventStop() {
			return nil
		}
		if st.Event == 0 {
			info, _ := GetSigInfo(in.TID)
			in.Signals = append(in.Signals, Signal{Sig: st.Sig(), Info: info})
		}
		if err := Cont(in.TID, 0); err != nil {
			return err
		}
	}
}

// Call runs a system call and converts a failure into an error naming it.
func (in *Injector) Call(name string, nr uint64, args ...uint64) (uint64, error) {
	ret, err := in.Syscall(nr, args...)
	if err != nil {
		return 0, err
	}
	if e := Errno(ret); e != nil {
		return ret, fmt.Errorf("%s in %d: %w", name, in.TID, e)
	}
	return ret, nil
}

// ReadMem reads len(buf) bytes at addr of process pid.
func ReadMem(pid int, addr uint64, buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	l := []unix.Iovec{{Base: &buf[0]}}
	l[0].SetLen(len(buf))
	r := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	n, err := unix.ProcessVMReadv(pid, l, r, 0)
	if err == nil && n == len(buf) {
		return nil
	}
	// PROT_NONE and similar: /proc/PID/mem reads with FOLL_FORCE.
	return memAccess(pid, addr, buf, false)
}

// WriteMem writes buf at addr of process pid. Read-only mappings are
// written through /proc/PID/mem.
func WriteMem(pid int, addr uint64, buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	l := []unix.Iovec{{Base: &buf[0]}}
	l[0].SetLen(len(buf))
	r := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	n, err := unix.ProcessVMWritev(pid, l, r, 0)
	if err == nil && n == len(buf) {
		return nil
	}
	return memAccess(pid, addr, buf, true)
}

func memAccess(pid int, addr uint64, buf []byte, write bool) error {
	flag := os.O_RDONLY
	if write {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), flag, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var n int
	if write {
		n, err = f.WriteAt(buf, int64(addr))
	} else {
		n, err = f.ReadAt(buf, int64(addr))
	}
	if err != nil {
		return fmt.Errorf("access %d bytes at %#x of %d: %w", len(buf), addr, pid, err)
	}
	if n != len(buf) {
		return fmt.Errorf("access %d bytes at %#x of %d: short (%d)", len(buf), addr, pid, n)
	}
	return nil
}

// Bytes returns the memory of a value, to write a struct into a tracee.
func Bytes[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}
