package sys

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cloneArgs is struct clone_args up to set_tid_size (CLONE_ARGS_SIZE_VER1).
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls uint64
	setTID, setTIDSize                                                   uint64
}

// Clone3SetTIDProbe tells whether clone3 takes a set_tid array (Linux
// 5.5), without creating a process: it passes one and an invalid exit
// signal. A kernel with set_tid checks the signal and says EINVAL (nil
// here); one with clone3 but no set_tid refuses the larger struct (E2BIG);
// one without clone3 says ENOSYS.
func Clone3SetTIDProbe() error {
	tid := int32(1)
	args := cloneArgs{exitSignal: 1 << 32, setTID: uint64(uintptr(unsafe.Pointer(&tid))), setTIDSize: 1}
	_, _, e := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args), 0)
	switch e {
	case unix.EINVAL:
		return nil
	case 0:
		// Unreachable: the exit signal is invalid. Never return in a child.
		unix.RawSyscall(unix.SYS_EXIT, 127, 0, 0)
	}
	return os.NewSyscallError("clone3", e)
}
