package sys

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SigInfoSize is the size of a kernel siginfo.
const SigInfoSize = 128

// RtSigqueueinfo queues sig with the given siginfo to process pid
// (rt_sigqueueinfo(2); x/sys/unix has no wrapper). A full queue is EAGAIN.
func RtSigqueueinfo(pid PID, sig unix.Signal, info *[SigInfoSize]byte) error {
	_, _, e := unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, uintptr(pid), uintptr(sig), uintptr(unsafe.Pointer(&info[0])))
	if e != 0 {
		return os.NewSyscallError("rt_sigqueueinfo", e)
	}
	return nil
}

// RtTgsigqueueinfo queues sig with the given siginfo to thread tid of
// process pid (rt_tgsigqueueinfo(2); x/sys/unix has no wrapper).
func RtTgsigqueueinfo(pid PID, tid TID, sig unix.Signal, info *[SigInfoSize]byte) error {
	_, _, e := unix.Syscall6(unix.SYS_RT_TGSIGQUEUEINFO, uintptr(pid), uintptr(tid), uintptr(sig), uintptr(unsafe.Pointer(&info[0])), 0, 0)
	if e != 0 {
		return os.NewSyscallError("rt_tgsigqueueinfo", e)
	}
	return nil
}
