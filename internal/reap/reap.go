// Package reap collects exited children for the processes that act as a
// reaper (ckpt-reaper, the node agent as PID 1).
package reap

import "syscall"

// Exited waits, without blocking, for every child (and traced task, with
// __WALL) that has exited, and calls f with each one's PID and status. It
// returns once none is left to collect. The caller serializes it with its
// own forks, so that a child is known before its exit can be collected.
func Exited(f func(pid int, ws syscall.WaitStatus)) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG|syscall.WALL, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		f(pid, ws)
	}
}
