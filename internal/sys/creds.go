package sys

import (
	"os"

	"golang.org/x/sys/unix"
)

// keepID is -1 for setresuid/setresgid: leave that id as it is.
const keepID = ^uintptr(0)

// SetThreadEUID sets the effective user ID of the calling OS thread only
// (raw setresuid(-1, uid, -1), not the Go runtime's process-wide
// syscall.Setresuid). The caller must hold the thread with
// runtime.LockOSThread until it has put the id back.
func SetThreadEUID(uid uint32) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keepID, uintptr(uid), keepID); e != 0 {
		return os.NewSyscallError("setresuid", e)
	}
	return nil
}

// SetThreadEGID sets the effective group ID of the calling OS thread only
// (raw setresgid(-1, gid, -1)); see SetThreadEUID.
func SetThreadEGID(gid uint32) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keepID, uintptr(gid), keepID); e != 0 {
		return os.NewSyscallError("setresgid", e)
	}
	return nil
}
