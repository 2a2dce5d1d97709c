package sys

import (
	"os"

	"golang.org/x/sys/unix"
)

// ioprioWhoProcess selects a single task (thread) by its TID.
const ioprioWhoProcess = 1

// IoprioGet returns the I/O priority of thread tid (ioprio_get).
func IoprioGet(tid TID) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
	if e != 0 {
		return 0, os.NewSyscallError("ioprio_get", e)
	}
	return int(r), nil
}

// IoprioSet sets the I/O priority of thread tid (ioprio_set).
func IoprioSet(tid TID, prio int) error {
	if _, _, e := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), uintptr(prio)); e != 0 {
		return os.NewSyscallError("ioprio_set", e)
	}
	return nil
}
