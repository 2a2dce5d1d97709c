// Package ptrace wraps the ptrace(2) requests ckpt needs on x86-64 Linux:
// seizing and interrupting tasks, reading and writing registers and the
// full xstate, signal masks and queued signals, rseq configuration, and
// running system calls inside a stopped task ("injection").
//
// The kernel ties a tracee to the thread that attached it, so every call for
// one tracee must come from the same OS thread: callers lock their goroutine
// with runtime.LockOSThread before seizing and keep it locked until they
// detach.
package ptrace

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// ErrExited means a task exited (or was killed) while being traced.
var ErrExited = errors.New("task exited")

func ptrace(req int, tid sys.TID, addr, data uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// ptracePtr is ptrace with a pointer as data. A pointer goes to the system
// call as an unsafe.Pointer, converted in the call expression itself: a
// uintptr made by the caller would not keep its object alive, nor follow a
// stack that moves meanwhile (the kernel then read a stale iovec, and an
// xstate came back 65536 bytes long).
func ptracePtr(req int, tid sys.TID, addr uintptr, data unsafe.Pointer) (uintptr, error) {
	r, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, uintptr(data), 0, 0)
	if e != 0 {
		return 0, e
	}
	return r, nil
}

// ptracePtrs is ptrace with pointers as addr and data.
func ptracePtrs(req int, tid sys.TID, addr, data unsafe.Pointer) (uintptr, error) {
	r, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), uintptr(addr), uintptr(data), 0, 0)
	if e != 0 {
		return 0, e
	}
	return r, nil
}

// Options used when seizing.
const (
	OptTraceClone = unix.PTRACE_O_TRACECLONE
	OptTraceFork  = unix.PTRACE_O_TRACEFORK
	OptExitKill   = unix.PTRACE_O_EXITKILL
	// OptSuspendSeccomp lets injected syscalls through the tracee's seccomp
	// filters.
	OptSuspendSeccomp = unix.PTRACE_O_SUSPEND_SECCOMP
)

// Seize attaches to tid without stopping it. PTRACE_O_TRACESYSGOOD is
// always added: the Injector tells its syscall stops by it.
func Seize(tid sys.TID, opts int) error {
	if err := ptrace(unix.PTRACE_SEIZE, tid, 0, uintptr(opts|unix.PTRACE_O_TRACESYSGOOD)); err != nil {
		return fmt.Errorf("ptrace seize %d: %w", tid, err)
	}
	return nil
}

// Interrupt asks a seized task to stop.
func Interrupt(tid sys.TID) error {
	if err := ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0); err != nil {
		return fmt.Errorf("ptrace interrupt %d: %w", tid, err)
	}
	return nil
}

// Detach lets a task go, delivering sig if it is not zero.
func Detach(tid sys.TID, sig unix.Signal) error {
	if err := ptrace(unix.PTRACE_DETACH, tid, 0, uintptr(sig)); err != nil {
		return fmt.Errorf("ptrace detach %d: %w", tid, err)
	}
	return nil
}

// Cont resumes a stopped task, delivering sig if it is not zero.
func Cont(tid sys.TID, sig unix.Signal) error {
	if err := ptrace(unix.PTRACE_CONT, tid, 0, uintptr(sig)); err != nil {
		return fmt.Errorf("ptrace cont %d: %w", tid, err)
	}
	return nil
}

// Stop is how a task stopped, as reported by wait4.
type Stop struct {
	Status unix.WaitStatus
	Event  int // PTRACE_EVENT_* or 0
}

// Exited reports whether the task is gone.
func (s Stop) Exited() bool { return s.Status.Exited() || s.Status.Signaled() }

// Sig is the stop signal.
func (s Stop) Sig() unix.Signal { return s.Status.StopSignal() }

// IsEventStop reports a PTRACE_EVENT_STOP (interrupt or group-stop).
func (s Stop) IsEventStop() bool { return s.Status.Stopped() && s.Event == unix.PTRACE_EVENT_STOP }

// IsGroupStop reports a group-stop (the task got SIGSTOP or similar).
func (s Stop) IsGroupStop() bool {
	if !s.IsEventStop() {
		return false
	}
	switch s.Sig() {
	case unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU:
		return true
	}
	return false
}

// String describes the stop (exited, killed, a signal or event stop).
func (s Stop) String() string {
	switch {
	case s.Status.Exited():
		return fmt.Sprintf("exited with %d", s.Status.ExitStatus())
	case s.Status.Signaled():
		return fmt.Sprintf("killed by %v", s.Status.Signal())
	case s.Event != 0:
		return fmt.Sprintf("event %d stop (%v)", s.Event, s.Sig())
	}
	return fmt.Sprintf("stopped by %v", s.Sig())
}

// Wait waits for a state change of tid (any child or tracee, threads too).
func Wait(tid sys.TID) (Stop, error) {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(int(tid), &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return Stop{}, fmt.Errorf("wait %d: %w", tid, err)
		}
		st := Stop{Status: ws}
		if ws.Stopped() {
			st.Event = int(ws>>16) & 0xff
		}
		return st, nil
	}
}

// GetRegs reads the general-purpose registers.
func GetRegs(tid sys.TID) (unix.PtraceRegs, error) {
	var r unix.PtraceRegs
	if err := unix.PtraceGetRegs(int(tid), &r); err != nil {
		return r, fmt.Errorf("ptrace getregs %d: %w", tid, err)
	}
	return r, nil
}

// SetRegs writes the general-purpose registers.
func SetRegs(tid sys.TID, r *unix.PtraceRegs) error {
	if err := unix.PtraceSetRegs(int(tid), r); err != nil {
		return fmt.Errorf("ptrace setregs %d: %w", tid, err)
	}
	return nil
}

// XStateMax bounds the NT_X86_XSTATE buffer.
const XStateMax = 64 << 10

// GetXState reads the full extended state (x87, SSE, AVX, AVX-512, ...).
func GetXState(tid sys.TID) ([]byte, error) {
	buf := make([]byte, XStateMax)
	iov := unix.Iovec{Base: &buf[0]}
	iov.SetLen(len(buf))
	if _, err := ptracePtr(unix.PTRACE_GETREGSET, tid, unix.NT_X86_XSTATE, unsafe.Pointer(&iov)); err != nil {
		return nil, fmt.Errorf("ptrace getregset xstate %d: %w", tid, err)
	}
	return buf[:iov.Len], nil
}

// SetXState writes the full extended state.
func SetXState(tid sys.TID, xs []byte) error {
	if len(xs) == 0 {
		return nil
	}
	iov := unix.Iovec{Base: &xs[0]}
	iov.SetLen(len(xs))
	if _, err := ptracePtr(unix.PTRACE_SETREGSET, tid, unix.NT_X86_XSTATE, unsafe.Pointer(&iov)); err != nil {
		return fmt.Errorf("ptrace setregset xstate %d: %w", tid, err)
	}
	return nil
}

// XCR0 returns the feature mask stored by the kernel in an xstate buffer
// (the sw_reserved area of the FXSAVE region).
func XCR0(xs []byte) uint64 {
	if len(xs) < 472 {
		return 0
	}
	return *(*uint64)(unsafe.Pointer(&xs[464]))
}

// GetSigMask reads the blocked signal mask.
func GetSigMask(tid sys.TID) (uint64, error) {
	var m uint64
	if _, err := ptracePtr(unix.PTRACE_GETSIGMASK, tid, 8, unsafe.Pointer(&m)); err != nil {
		return 0, fmt.Errorf("ptrace getsigmask %d: %w", tid, err)
	}
	return m, nil
}

// SetSigMask writes the blocked signal mask.
func SetSigMask(tid sys.TID, m uint64) error {
	if _, err := ptracePtr(unix.PTRACE_SETSIGMASK, tid, 8, unsafe.Pointer(&m)); err != nil {
		return fmt.Errorf("ptrace setsigmask %d: %w", tid, err)
	}
	return nil
}

// SigInfoSize is the size of a kernel siginfo.
const SigInfoSize = 128

// PeekSigInfo reads the queued signals of tid without dequeuing them:
// the thread's own queue, or with shared the process-wide one.
func PeekSigInfo(tid sys.TID, shared bool) ([][]byte, error) {
	var out [][]byte
	buf := make([]byte, 32*SigInfoSize)
	for off := uint64(0); ; {
		args := struct {
			Off   uint64
			Flags uint32
			Nr    int32
		}{Off: off, Nr: 32}
		if shared {
			args.Flags = unix.PTRACE_PEEKSIGINFO_SHARED
		}
		n, err := ptracePtrs(unix.PTRACE_PEEKSIGINFO, tid, unsafe.Pointer(&args), unsafe.Pointer(&buf[0]))
		if err != nil {
			return nil, fmt.Errorf("ptrace peeksiginfo %d: %w", tid, err)
		}
		for i := 0; i < int(n); i++ {
			out = append(out, append([]byte(nil), buf[i*SigInfoSize:(i+1)*SigInfoSize]...))
		}
		if n < 32 {
			return out, nil
		}
		off += uint64(n)
	}
}

// GetSigInfo reads the siginfo of the signal a task is stopped by.
func GetSigInfo(tid sys.TID) ([]byte, error) {
	buf := make([]byte, SigInfoSize)
	if _, err := ptracePtr(unix.PTRACE_GETSIGINFO, tid, 0, unsafe.Pointer(&buf[0])); err != nil {
		return nil, fmt.Errorf("ptrace getsiginfo %d: %w", tid, err)
	}
	return buf, nil
}

// RseqConfig is the result of PTRACE_GET_RSEQ_CONFIGURATION.
type RseqConfig struct {
	Ptr   uint64
	Size  uint32
	Sig   uint32
	Flags uint32
	_     uint32
}

// GetRseq reads a thread's rseq registration.
func GetRseq(tid sys.TID) (RseqConfig, error) {
	var c RseqConfig
	if _, err := ptracePtr(unix.PTRACE_GET_RSEQ_CONFIGURATION, tid, unsafe.Sizeof(c), unsafe.Pointer(&c)); err != nil {
		return c, fmt.Errorf("ptrace get rseq %d: %w", tid, err)
	}
	return c, nil
}

// GetSeccompFilters reads the task's seccomp filters, oldest first (index 0,
// PTRACE_SECCOMP_GET_FILTER's filter_off, is the first one installed), as
// raw sock_filter arrays.
func GetSeccompFilters(tid sys.TID) ([][]byte, error) {
	var out [][]byte
	for i := 0; ; i++ {
		n, err := ptracePtr(unix.PTRACE_SECCOMP_GET_FILTER, tid, uintptr(i), nil)
		if err == unix.ENOENT {
			return out, nil
		}
		if err == unix.EINVAL && i == 0 {
			return nil, nil // no filter
		}
		if err != nil {
			return nil, fmt.Errorf("ptrace seccomp get filter %d of %d: %w", i, tid, err)
		}
		buf := make([]byte, 8*n)
		if _, err := ptracePtr(unix.PTRACE_SECCOMP_GET_FILTER, tid, uintptr(i), unsafe.Pointer(&buf[0])); err != nil {
			return nil, fmt.Errorf("ptrace seccomp get filter %d of %d: %w", i, tid, err)
		}
		out = append(out, buf)
	}
}

// GetSeccompFilterFlags returns the SECCOMP_FILTER_FLAG_* that filter i
// of the task (index 0 the first installed) was installed with
// (PTRACE_SECCOMP_GET_METADATA).
func GetSeccompFilterFlags(tid sys.TID, i int) (uint64, error) {
	md := struct{ FilterOff, Flags uint64 }{FilterOff: uint64(i)}
	if _, err := ptracePtr(ptraceSeccompGetMetadata, tid, unsafe.Sizeof(md), unsafe.Pointer(&md)); err != nil {
		return 0, fmt.Errorf("ptrace seccomp get metadata %d of %d: %w", i, tid, err)
	}
	return md.Flags, nil
}

// GetSyscallUserDispatchMode returns the task's syscall user dispatch mode
// (PR_SET_SYSCALL_USER_DISPATCH; 0 is off), read with
// PTRACE_GET_SYSCALL_USER_DISPATCH_CONFIG.
func GetSyscallUserDispatchMode(tid sys.TID) (uint64, error) {
	sud := struct{ Mode, Selector, Offset, Len uint64 }{}
	if _, err := ptracePtr(ptraceGetSyscallUserDispatchConfig, tid, unsafe.Sizeof(sud), unsafe.Pointer(&sud)); err != nil {
		return 0, fmt.Errorf("ptrace get syscall user dispatch config %d: %w", tid, err)
	}
	return sud.Mode, nil
}

// ptrace requests golang.org/x/sys/unix does not name.
const (
	ptraceSeccompGetMetadata           = 0x420d // PTRACE_SECCOMP_GET_METADATA
	ptraceGetSyscallUserDispatchConfig = 0x4210 // PTRACE_GET_SYSCALL_USER_DISPATCH_CONFIG
)

// GetEventMsg returns the message of the last ptrace event (e.g. the PID
// of a new child).
func GetEventMsg(tid sys.TID) (uint64, error) {
	var m uint64
	if _, err := ptracePtr(unix.PTRACE_GETEVENTMSG, tid, 0, unsafe.Pointer(&m)); err != nil {
		return 0, fmt.Errorf("ptrace geteventmsg %d: %w", tid, err)
	}
	return m, nil
}

// Errno converts a raw syscall return value into an error, or nil.
func Errno(ret uint64) error {
	if r := int64(ret); r < 0 && r > -4096 {
		return syscall.Errno(-r)
	}
	return nil
}
