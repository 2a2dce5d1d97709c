package sys

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FOwner is the kernel's struct f_owner_ex: who gets SIGIO for an open
// file description (Type is F_OWNER_TID, F_OWNER_PID or F_OWNER_PGRP).
type FOwner struct {
	Type int32
	PID  int32
}

// GetOwner is fcntl(F_GETOWN_EX) on one of ckpt's own fds.
func GetOwner(fd int) (FOwner, error) {
	var ow FOwner
	if _, _, e := unix.Syscall(unix.SYS_FCNTL, uintptr(fd), unix.F_GETOWN_EX, uintptr(unsafe.Pointer(&ow))); e != 0 {
		return ow, os.NewSyscallError("fcntl(F_GETOWN_EX)", e)
	}
	return ow, nil
}

// SetOwner is fcntl(F_SETOWN_EX) on one of ckpt's own fds.
func SetOwner(fd int, ow FOwner) error {
	if _, _, e := unix.Syscall(unix.SYS_FCNTL, uintptr(fd), unix.F_SETOWN_EX, uintptr(unsafe.Pointer(&ow))); e != 0 {
		return os.NewSyscallError("fcntl(F_SETOWN_EX)", e)
	}
	return nil
}
