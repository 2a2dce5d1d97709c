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
