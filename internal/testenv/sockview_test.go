package testenv

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestSockets reads this process's own sockets: a TCP connection shows its
// 4-tuple from both ends, a socket pair each end's peer, and a dup'ed fd
// the same socket as its original.
func TestSockets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(pair[0])
	defer syscall.Close(pair[1])
	dup, err := syscall.Dup(pair[0])
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(dup)

	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(ep)
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, pair[1], &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: 0x2a}); err != nil {
		t.Fatal(err)
	}

	v, err := Sockets([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	var descs []string
	for _, s := range v {
		descs = append(descs, s.Desc)
	}
	find := func(sub string) {
		t.Helper()
		if !slices.ContainsFunc(descs, func(d string) bool { return strings.Contains(d, sub) }) {
			t.Errorf("no socket like %q in:\n%s", sub, strings.Join(descs, "\n"))
		}
	}
	find("tcp LISTEN " + ln.Addr().String())
	find("tcp ESTAB " + c.LocalAddr().String() + " " + c.RemoteAddr().String() + " nodelay=1 keepalive=1")
	find(fmt.Sprintf("epoll flags=02000002 tfd=%d/data=2a", pair[1]))
	find("tcp ESTAB " + s.LocalAddr().String() + " " + s.RemoteAddr().String())
	keyOf := func(fd int) string { return fmt.Sprintf("%d fd %d", os.Getpid(), fd) }
	a, b, d := v[keyOf(pair[0])], v[keyOf(pair[1])], v[keyOf(dup)]
	if a.Ino == 0 || a.Ino != d.Ino || a.Desc != d.Desc {
		t.Errorf("a dup'ed fd is not the same socket: %+v and %+v", a, d)
	}
	// The first fd (by name) holding a socket names it.
	first := min(keyOf(pair[0]), keyOf(dup))
	if !strings.Contains(a.Desc, `peer="`+keyOf(pair[1])+`"`) || !strings.Contains(b.Desc, `peer="`+first+`"`) {
		t.Errorf("socket pair %d/%d: %q and %q do not name each other", pair[0], pair[1], a.Desc, b.Desc)
	}
}

func TestSocketViewDiff(t *testing.T) {
	before := SocketView{
		"1 fd 3": {Ino: 10, Desc: "tcp ESTAB 127.0.0.1:1 127.0.0.1:2"},
		"1 fd 4": {Ino: 11, Desc: "unix a"},
	}
	cases := []struct {
		name       string
		after      SocketView
		sameInodes bool
		want       []string
	}{
		{"restored", SocketView{"1 fd 3": {Ino: 20, Desc: "tcp ESTAB 127.0.0.1:1 127.0.0.1:2"}, "1 fd 4": {Ino: 21, Desc: "unix a"}}, false, nil},
		{"replaced", SocketView{"1 fd 3": {Ino: 20, Desc: "tcp ESTAB 127.0.0.1:1 127.0.0.1:2"}, "1 fd 4": {Ino: 11, Desc: "unix a"}}, true,
			[]string{"1 fd 3: inode 20, was 10 (tcp ESTAB 127.0.0.1:1 127.0.0.1:2)"}},
		{"reconnected", SocketView{"1 fd 3": {Ino: 10, Desc: "tcp ESTAB 127.0.0.1:5 127.0.0.1:2"}, "1 fd 4": {Ino: 11, Desc: "unix a"}}, true,
			[]string{"1 fd 3: tcp ESTAB 127.0.0.1:5 127.0.0.1:2, was tcp ESTAB 127.0.0.1:1 127.0.0.1:2"}},
		{"gone and new", SocketView{"1 fd 3": {Ino: 10, Desc: "tcp ESTAB 127.0.0.1:1 127.0.0.1:2"}, "1 fd 5": {Ino: 11, Desc: "unix a"}}, true,
			[]string{"1 fd 4: unix a is gone", "1 fd 5: new socket unix a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := before.Diff(c.after, c.sameInodes); !slices.Equal(got, c.want) {
				t.Errorf("Diff: %q, want %q", got, c.want)
			}
		})
	}
}
