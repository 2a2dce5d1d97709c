package bpftask

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestTCPLocksMPTCPListener: an MPTCP listener's TCP subflow listener is
// in TCP's listening hash, so the TCP lock reader reads it, under a
// cookie of its own; the MPTCP socket itself (the one a process holds,
// whose cookie the dump would ask about) is not read. The dump asks the
// reader only by the cookies of fds, so it never takes the subflow for
// another socket.
func TestTCPLocksMPTCPListener(t *testing.T) {
	r := openTCP(t)
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	before, err := r.Locks()
	if err != nil {
		t.Fatal(err)
	}
	l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_MPTCP)
	if err != nil {
		t.Skipf("no MPTCP here: %v", err)
	}
	defer unix.Close(l)
	if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(l, 3); err != nil {
		t.Fatal(err)
	}
	after, err := r.Locks()
	if err != nil {
		t.Fatal(err)
	}
	cookie, err := Cookie(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := after[cookie]; ok {
		t.Errorf("the MPTCP listener's own cookie %d is among the TCP sockets read", cookie)
	}
	added := 0
	for c := range after {
		if _, ok := before[c]; !ok {
			added++
		}
	}
	if added == 0 {
		t.Errorf("no new TCP socket read once an MPTCP listener listens: its subflow listener was expected")
	}
}
