package sys

import (
	"os"
	"strconv"
)

// PID is a process ID (a thread-group ID) in ckpt's PID namespace.
type PID int

// TID is a thread ID in ckpt's PID namespace.
type TID int

// TargetFD is a file descriptor number inside another process (the process
// being dumped or built), meaningless as an fd of this one.
type TargetFD int

// Getpid is this process's PID.
func Getpid() PID { return PID(os.Getpid()) }

// Leader is the process's leader thread: the thread whose ID is the
// process ID (its main thread, or the one that took over at an execve).
// It is what a request about the whole process goes through when the
// kernel asks for a thread (ptrace, a process-wide signal queue).
func (p PID) Leader() TID { return TID(p) }

// String renders the PID as a number.
func (p PID) String() string { return strconv.Itoa(int(p)) }

// String renders the TID as a number.
func (t TID) String() string { return strconv.Itoa(int(t)) }

// String renders the fd number.
func (f TargetFD) String() string { return strconv.Itoa(int(f)) }
