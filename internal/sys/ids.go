package sys

import "strconv"

// PID is a process ID (a thread-group ID) in ckpt's PID namespace.
type PID int

// TID is a thread ID in ckpt's PID namespace.
type TID int

// TargetFD is a file descriptor number inside another process (the process
// being dumped or built), meaningless as an fd of this one.
type TargetFD int

// String renders the PID as a number.
func (p PID) String() string { return strconv.Itoa(int(p)) }

// String renders the TID as a number.
func (t TID) String() string { return strconv.Itoa(int(t)) }

// String renders the fd number.
func (f TargetFD) String() string { return strconv.Itoa(int(f)) }
