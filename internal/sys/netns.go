package sys

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs f on a thread in the network namespace netns (an fd of a
// /proc/PID/ns/net or /run/netns file), or on the caller's thread when
// netns is negative. Sockets f makes stay in that namespace wherever they
// are used later. The thread goes back to its namespace afterwards, or,
// if it cannot, dies with its goroutine.
func InNetns(netns int, f func() error) error {
	if netns < 0 {
		return f()
	}
	ch := make(chan error)
	go func() {
		runtime.LockOSThread()
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- err
			return
		}
		defer back.Close()
		if err := unix.Setns(netns, unix.CLONE_NEWNET); err != nil {
			ch <- fmt.Errorf("setns: %w", err)
			return
		}
		err = f()
		if unix.Setns(int(back.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}
