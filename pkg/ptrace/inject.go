package ptrace

import (
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// An Injector runs system calls inside a stopped tracee. It saves the
// task's registers, points rip at a syscall instruction with the call's
// number and arguments, resumes the task with PTRACE_SYSCALL to its
// syscall-entry stop and on to its syscall-exit stop, reads the result and
// puts the registers back. The task never runs an instruction past the
// call, and no trap is raised: a single-step or int3 trap is a SIGTRAP the
// kernel forces (unblocking it, resetting a handler of a blocked or
// ignored SIGTRAP, merging with a SIGTRAP the process has pending).
//
// orig_rax is set to -1 in the injected registers: otherwise the kernel's
// syscall-restart logic would rewrite rip and rax when the tracee was
// stopped inside a system call.
type Injector struct {
	TID sys.TID
	// Gadget is the address of a `syscall` instruction in the tracee.
	Gadget uint64

	// Signals that arrived while a call ran, with their siginfo. They were
	// taken off the queue: the caller re-delivers or saves them.
	Signals []Signal
	// Children lists tasks reported by fork and clone events.
	Children []sys.TID
}

// Signal is a signal that stopped a tracee, and its siginfo.
type Signal struct {
	Sig  unix.Signal
	Info []byte
}

// Syscall runs one system call in the tracee and returns its raw result
// (a negative errno on failure; see Errno).
func (in *Injector) Syscall(nr uint64, args ...uint64) (uint64, error) {
	if in.Gadget == 0 {
		return 0, fmt.Errorf("inject syscall %d into %d: no syscall instruction to run it at", nr, in.TID)
	}
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
	entered := false
	for {
		if err := ptrace(unix.PTRACE_SYSCALL, in.TID, 0, 0); err != nil {
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
			in.Children = append(in.Children, sys.TID(msg))
			continue
		case st.Event != 0:
			continue
		}
		if st.Sig() == unix.SIGTRAP|0x80 { // a syscall stop (PTRACE_O_TRACESYSGOOD)
			// The task was not inside a system call (it is in an
			// interrupt stop, or at the exit stop of the previous
			// call): the first syscall stop is the call's entry, the
			// second its exit. Counting them spares a
			// PTRACE_GET_SYSCALL_INFO at each.
			if !entered {
				entered = true
				continue
			}
			break
		}
		// A signal-delivery stop: the signal was taken off the queue.
		info, _ := GetSigInfo(in.TID)
		if fault(st.Sig(), info) {
			// The instruction at rip faulted or trapped: the gadget is
			// not a syscall instruction (resuming would fault again).
			r, _ := GetRegs(in.TID)
			SetRegs(in.TID, &saved)
			return 0, fmt.Errorf("inject syscall %d into %d: %v at %#x, not after the gadget at %#x", nr, in.TID, st.Sig(), r.Rip, in.Gadget)
		}
		in.Signals = append(in.Signals, Signal{Sig: st.Sig(), Info: info})
	}
	got, err := GetRegs(in.TID)
	if err != nil {
		return 0, err
	}
	if want := in.Gadget + 2; got.Rip != want {
		return 0, fmt.Errorf("inject syscall %d into %d: stopped at %#x, not after the gadget at %#x", nr, in.TID, got.Rip, in.Gadget)
	}
	if err := SetRegs(in.TID, &saved); err != nil {
		return 0, err
	}
	return got.Rax, nil
}

// fault tells whether a signal was raised by the instruction the task ran
// (si_code > 0: a fault or trap the kernel sent), not sent by someone.
func fault(sig unix.Signal, info []byte) bool {
	switch sig {
	case unix.SIGSEGV, unix.SIGBUS, unix.SIGILL, unix.SIGTRAP, unix.SIGFPE:
		return len(info) >= 12 && int32(binary.LittleEndian.Uint32(info[8:])) > 0
	}
	return false
}

// Park moves the task from the syscall-exit stop that ends an injected
// call to an interrupt stop: the interrupt is queued and the task stops
// again before it runs a single instruction. Call it after the last of a
// series of calls.
func (in *Injector) Park() error {
	if err := Interrupt(in.TID); err != nil {
		return err
	}
	if err := Cont(in.TID, 0); err != nil {
		return err
	}
	return in.waitInterrupt("park")
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
func ReadMem(pid sys.PID, addr uint64, buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	l := []unix.Iovec{{Base: &buf[0]}}
	l[0].SetLen(len(buf))
	r := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	n, err := unix.ProcessVMReadv(int(pid), l, r, 0)
	if err == nil && n == len(buf) {
		return nil
	}
	// PROT_NONE and similar: /proc/PID/mem reads with FOLL_FORCE.
	return memAccess(pid, addr, buf, false)
}

// WriteMem writes buf at addr of process pid. Read-only mappings are
// written through /proc/PID/mem.
func WriteMem(pid sys.PID, addr uint64, buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	l := []unix.Iovec{{Base: &buf[0]}}
	l[0].SetLen(len(buf))
	r := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	n, err := unix.ProcessVMWritev(int(pid), l, r, 0)
	if err == nil && n == len(buf) {
		return nil
	}
	return memAccess(pid, addr, buf, true)
}

func memAccess(pid sys.PID, addr uint64, buf []byte, write bool) error {
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
