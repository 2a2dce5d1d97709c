package dump

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestRestartedCall(t *testing.T) {
	for _, tt := range []struct {
		name     string
		wchan    string
		rdi, rsi uint64
		want     int64
	}{
		{"poll", "poll_schedule_timeout.constprop.0", 0x561d69041e00, 1, unix.SYS_POLL},
		{"futex", "futex_wait_queue", 0x7f0000001000, 128, unix.SYS_FUTEX},
		{"glibc sleep", "do_syscall_64", unix.CLOCK_MONOTONIC, 0, unix.SYS_CLOCK_NANOSLEEP},
		{"absolute sleep", "hrtimer_nanosleep", unix.CLOCK_REALTIME, unix.TIMER_ABSTIME, unix.SYS_CLOCK_NANOSLEEP},
		{"raw nanosleep", "do_syscall_64", 0x7ffdc40c6f80, 0, unix.SYS_NANOSLEEP},
		{"not in restart_syscall", "", 0, 0, 0},
	} {
		if got := restartedCall(tt.wchan, tt.rdi, tt.rsi); got != tt.want {
			t.Errorf("%s: restartedCall(%q, %#x, %#x) = %d, want %d", tt.name, tt.wchan, tt.rdi, tt.rsi, got, tt.want)
		}
	}
}
