package sys

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotThatProcess says a process was not signalled: the PID is free, or
// it is held by a process other than the one meant.
var ErrNotThatProcess = errors.New("no such process (or not the one meant)")

// PidfdSendSignal sends sig to the process behind pidfd (pidfd_send_signal(2)).
// A process that has exited gives unix.ESRCH, whatever process holds its
// PID number now.
func PidfdSendSignal(pidfd *FD, sig unix.Signal) error {
	if err := unix.PidfdSendSignal(pidfd.Int(), sig, nil, 0); err != nil {
		return os.NewSyscallError("pidfd_send_signal", err)
	}
	return nil
}

// SignalIf sends sig to process pid if ok(pid) says it is the process
// meant, with no race with the PID being freed and taken again meanwhile:
// a pidfd is opened first, ok then reads /proc (the pidfd's process if it
// is still alive), and the signal goes through the pidfd, so a process that
// ended in between is not signalled, whatever took its number since.
// It returns ErrNotThatProcess if the PID is free or ok refuses it.
func SignalIf(pid PID, sig unix.Signal, ok func(PID) bool) error {
	if pid <= 0 {
		return fmt.Errorf("signal %d: bad pid: %w", pid, ErrNotThatProcess)
	}
	fd, err := PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %d: %w", pid, ErrNotThatProcess)
	}
	if err != nil {
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	defer fd.Close()
	if !ok(pid) {
		return fmt.Errorf("signal %d: %w", pid, ErrNotThatProcess)
	}
	err = PidfdSendSignal(fd, sig)
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %d: %w", pid, ErrNotThatProcess)
	}
	if err != nil {
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	return nil
}

// ParentOf returns the parent PID of pid, read from /proc/PID/stat, or 0
// if pid does not exist.
func ParentOf(pid PID) PID {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
	if err != nil {
		return 0
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parens.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return PID(ppid)
}

// DescendantOf tells whether pid is ancestor or one of its descendants,
// following parent PIDs up (/proc/PID/stat). With SignalIf it names a
// process as one of a tree: a PID freed and taken by a process elsewhere
// fails it.
func DescendantOf(pid, ancestor PID) bool {
	for i := 0; i < 4096 && pid > 0; i++ {
		if pid == ancestor {
			return true
		}
		pid = ParentOf(pid)
	}
	return false
}
