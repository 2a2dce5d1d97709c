package sys

import (
	"os"

	"golang.org/x/sys/unix"
)

// semGetPID is semctl's GETPID command.
const semGetPID = 11

// SemGetPID returns the PID of the last process that operated on
// semaphore num of System V semaphore set id (semctl GETPID; x/sys/unix
// has no semctl).
func SemGetPID(id, num int) (PID, error) {
	r, _, e := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), uintptr(num), semGetPID, 0, 0, 0)
	if e != 0 {
		return 0, os.NewSyscallError("semctl GETPID", e)
	}
	return PID(r), nil
}
