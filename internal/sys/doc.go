// Package sys is ckpt's one door to the Linux system calls that
// golang.org/x/sys/unix does not wrap (kcmp, get_robust_list, raw
// get/setsockopt, the userfaultfd and timerfd ioctls) and the ABI constants
// it lacks. Each wrapper is typed — sys.PID, sys.TID, sys.TargetFD for an fd
// number inside another process, sys.FD for an fd this process owns — and
// its errors name the syscall (an *os.SyscallError wrapping the errno, so
// errors.Is(err, unix.EEXIST) still works).
//
// Syscalls injected into a traced process go through pkg/ptrace instead:
// this package only acts on the calling process.
package sys
