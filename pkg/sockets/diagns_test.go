package sockets

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// socketInNewNetns makes a socket in a network namespace of its own (on a
// thread thrown away afterwards) and binds it to a port of 0.0.0.0.
func socketInNewNetns(t *testing.T) int {
	t.Helper()
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{-1, err}
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrInet4{})
		}
		ch <- result{fd, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { unix.Close(r.fd) })
	return r.fd
}

// TestDiagOtherNetns: sock_diag is asked in the network namespace of the
// socket concerned, not in ckpt's. A bound TCP socket of another namespace
// is found holding its port (asked in ckpt's own, it was not found: a
// closed socket's port would have been lost without a word).
func TestDiagOtherNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (CLONE_NEWNET, SIOCGSKNS)")
	}
	fd := socketInNewNetns(t)
	held, err := holdsPort(fd, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatal("a bound socket of another network namespace: sock_diag does not list it as holding its port")
	}
	// The same socket number in ckpt's namespace: nothing there has it.
	own, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(own)
	if held, err := holdsPort(own, unix.AF_INET); err != nil || held {
		t.Fatalf("an unbound socket of ckpt's namespace: held %v, %v; want false", held, err)
	}
}
