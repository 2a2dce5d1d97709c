package sockets

import (
	"net"
	"os"
	"testing"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// TestListenerAfterItsConnection rebuilds a connection accepted from a
// listener before the listener itself (the order of their fds when the
// accepted one got a lower number): the listener still binds its port,
// keeps its own SO_REUSEADDR (off) and accepts new connections.
func TestListenerAfterItsConnection(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TCP_REPAIR needs root (CAP_NET_ADMIN)")
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	lf, _ := ln.(*net.TCPListener).File()
	unix.SetsockoptInt(int(lf.Fd()), unix.SOL_SOCKET, unix.SO_REUSEADDR, 0) // as a C program's listener
	lf.Close()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	f, err := srv.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	fd := int(f.Fd())
	st, recvQ, sendQ, err := DumpTCP(fd)
	if err != nil {
		t.Fatal(err)
	}
	f.Close() // in repair mode: silent
	ln.Close()

	csock, err := RestoreTCP(st, recvQ, sendQ)
	if err != nil {
		t.Fatal(err)
	}
	defer csock.Close()
	cfd := csock.Int()
	lsock, err := Open(&image.Socket{Family: unix.AF_INET, Type: unix.SOCK_STREAM, Protocol: unix.IPPROTO_TCP,
		State: StateListen, Local: addr, Backlog: 4}, nil, nil)
	if err != nil {
		t.Fatalf("listener rebuilt after its accepted connection: %v", err)
	}
	defer lsock.Close()
	lfd := lsock.Int()
	if err := Resume(cfd, st, sendQ); err != nil {
		t.Fatal(err)
	}
	if r := ReuseAddr(lfd); r != 0 {
		t.Fatalf("rebuilt listener has SO_REUSEADDR %d, the original had 0", r)
	}
	c2, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatalf("connect to the rebuilt listener: %v", err)
	}
	defer c2.Close()
	nfd, _, err := unix.Accept(lfd)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(nfd)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("the rebuilt connection: %v", err)
	}
}
