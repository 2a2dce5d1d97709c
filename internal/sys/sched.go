package sys

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SchedCoreCookie returns the core-scheduling cookie of the calling thread
// (prctl PR_SCHED_CORE_GET); an error says the kernel has no core
// scheduling (or forbids asking).
func SchedCoreCookie() (uint64, error) {
	var cookie uint64
	// PR_SCHED_CORE_GET, pid 0 (this thread), PIDTYPE_PID, &cookie.
	if _, _, e := unix.Syscall6(unix.SYS_PRCTL, unix.PR_SCHED_CORE, unix.PR_SCHED_CORE_GET, 0, 0, uintptr(unsafe.Pointer(&cookie)), 0); e != 0 {
		return 0, os.NewSyscallError("prctl PR_SCHED_CORE_GET", e)
	}
	return cookie, nil
}

// SchedYield gives the CPU up to another runnable thread (sched_yield;
// x/sys/unix has no wrapper).
func SchedYield() {
	unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
