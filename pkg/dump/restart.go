package dump

import (
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// A thread interrupted in a sleep, poll or futex wait with a timeout is
// resumed by the kernel through restart_syscall, which finishes the call
// from a record in the kernel (the restart block) no process can read or
// make. A restore runs the original call again instead; when the thread
// sits in restart_syscall (stopped before, e.g. by an earlier dump left
// running), the image must say which call that was: the kernel function
// it sleeps in tells, read before the freeze stops it, and the arguments,
// still in their registers, tell the two sleeps apart.

const (
	sysRestart   = unix.SYS_RESTART_SYSCALL
	restartBlock = 516 // -ERESTART_RESTARTBLOCK in rax: resume by restart_syscall
)

// restartWchan returns where thread tid sleeps in the kernel if it is in
// restart_syscall, "" otherwise.
func restartWchan(tid sys.TID) string {
	b, err := proc.ReadFile(proc.ThreadPath(tid, "syscall"))
	if err != nil || !strings.HasPrefix(string(b), strconv.Itoa(sysRestart)+" ") {
		return ""
	}
	w, err := proc.ReadFile(proc.ThreadPath(tid, "wchan"))
	if err != nil {
		return ""
	}
	return string(w)
}

// restartedCall names the call a thread in restart_syscall resumes, from
// where it slept (wchan) and its argument registers; 0 if unknown.
func restartedCall(wchan string, rdi, rsi uint64) int64 {
	switch {
	case strings.Contains(wchan, "poll"):
		return unix.SYS_POLL
	case strings.Contains(wchan, "futex"):
		return unix.SYS_FUTEX
	case wchan == "":
		return 0
	case rdi < 16 && rsi <= unix.TIMER_ABSTIME:
		// clock_nanosleep(clockid, flags, req, rem): glibc's sleep,
		// usleep and nanosleep all make this call.
		return unix.SYS_CLOCK_NANOSLEEP
	default:
		return unix.SYS_NANOSLEEP // nanosleep(req, rem): a pointer first
	}
}
