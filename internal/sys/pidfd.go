package sys

import (
	"os"

	"golang.org/x/sys/unix"
)

// PidfdOpen opens a pidfd for pid (pidfd_open(2)).
func PidfdOpen(pid PID, flags int) (*FD, error) {
	r, err := unix.PidfdOpen(int(pid), flags)
	if err != nil {
		return nil, os.NewSyscallError("pidfd_open", err)
	}
	return NewFD(r)
}

// PidfdGetfd duplicates fd number target of the process behind pidfd into
// this process (pidfd_getfd(2)); the copy is close-on-exec.
func PidfdGetfd(pidfd *FD, target TargetFD) (*FD, error) {
	r, err := unix.PidfdGetfd(pidfd.Int(), int(target), 0)
	if err != nil {
		return nil, os.NewSyscallError("pidfd_getfd", err)
	}
	return NewFD(r)
}
