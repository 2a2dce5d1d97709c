package sys

import (
	"fmt"
	"os"
	"runtime"
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

// fGetOwnerUIDs is F_GETOWNER_UIDS (CONFIG_CHECKPOINT_RESTORE).
const fGetOwnerUIDs = 17

// GetOwnerUIDs is fcntl(F_GETOWNER_UIDS): the real and effective user IDs
// of whoever set the owner (they decide whether SIGIO may be sent).
func GetOwnerUIDs(fd int) (uid, euid uint32, err error) {
	var ids [2]uint32
	if _, _, e := unix.Syscall(unix.SYS_FCNTL, uintptr(fd), fGetOwnerUIDs, uintptr(unsafe.Pointer(&ids))); e != 0 {
		return 0, 0, os.NewSyscallError("fcntl(F_GETOWNER_UIDS)", e)
	}
	return ids[0], ids[1], nil
}

// SetOwnerAs is fcntl(F_SETOWN_EX) made with the real and effective user
// IDs uid and euid, which the kernel records with the owner: the calling
// thread (locked to it) takes them for the call and takes its own back
// (its saved user ID stays 0, so that it can). A thread that could not
// take its own back is left locked, and the runtime ends it.
func SetOwnerAs(fd int, ow FOwner, uid, euid uint32) error {
	if uid == 0 && euid == 0 {
		return SetOwner(fd, ow)
	}
	runtime.LockOSThread()
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(euid), 0); e != 0 {
		runtime.UnlockOSThread()
		return fmt.Errorf("setresuid %d %d 0 (this thread): %w", uid, euid, e)
	}
	err := SetOwner(fd, ow)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 0, 0, 0); e != 0 {
		return fmt.Errorf("setresuid 0 0 0 after F_SETOWN_EX (this thread): %w", e)
	}
	runtime.UnlockOSThread()
	return err
}
