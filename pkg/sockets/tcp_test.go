package sockets

import (
	"bytes"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// connPair makes an established loopback connection: the client end as a
// raw fd (the one to dump), the server end as a net.Conn.
func connPair(t *testing.T, network, addr string) (int, net.Conn) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	f, err := c.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return fd, s
}

// TestDumpRestoreTCP saves an established connection with data in both
// queues, closes it silently, rebuilds it and checks that both ends see
// every byte once, in order, and no reset.
func TestDumpRestoreTCP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TCP_REPAIR needs root (CAP_NET_ADMIN)")
	}
	tests := []struct{ network, addr string }{
		{"tcp4", "127.0.0.1:0"},
		{"tcp6", "[::1]:0"},
	}
	for _, tt := range tests {
		t.Run(tt.network, func(t *testing.T) {
			fd, peer := connPair(t, tt.network, tt.addr)
			// The peer sends data the client does not read: it sits in
			// the client's receive queue.
			toClient := bytes.Repeat([]byte("server->client|"), 1000)
			if _, err := peer.Write(toClient); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			// The client sends data the peer does not read yet.
			toPeer := bytes.Repeat([]byte("client->server|"), 500)
			if err := sendAll(fd, toPeer); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)

			st, recvQ, sendQ, err := DumpTCP(fd)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(recvQ, toClient) {
				t.Fatalf("receive queue: %d bytes, want the %d the peer sent", len(recvQ), len(toClient))
			}
			unix.Close(fd) // in repair mode: no FIN, no RST

			nsock, err := RestoreTCP(st, recvQ, sendQ)
			if err != nil {
				t.Fatal(err)
			}
			defer nsock.Close()
			nfd := nsock.Int()
			if err := Resume(nfd, st, sendQ); err != nil {
				t.Fatal(err)
			}
			if s, err := State(nfd); err != nil || s != StateEstablished {
				t.Fatalf("restored socket state %d (%v), want established", s, err)
			}
			// The MSS in use comes from the path (loopback: tens of
			// kilobytes), not the default's 524 bytes.
			if mss, err := sndMSS(nfd); err != nil || mss <= 536 {
				t.Errorf("restored connection sends segments of %d bytes (%v): its MSS was not computed from the path (clamp %d)", mss, err, st.MSS)
			}
			la, _ := unix.Getsockname(nfd)
			if AddrPort(la) != st.Local {
				t.Fatalf("restored local address %v, want %v", AddrPort(la), st.Local)
			}
			// The client reads what was queued for it, then new data.
			if err := sendAll(nfd, []byte("after|")); err != nil {
				t.Fatal(err)
			}
			if _, err := peer.Write([]byte("new|")); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(toClient)+4)
			f := os.NewFile(uintptr(nfd), "restored")
			defer f.Close()
			f.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(f, got); err != nil {
				t.Fatalf("read on the restored socket: %v", err)
			}
			if want := append(append([]byte(nil), toClient...), "new|"...); !bytes.Equal(got, want) {
				t.Fatalf("client read %d bytes that differ from what the peer sent", len(got))
			}
			peer.SetReadDeadline(time.Now().Add(5 * time.Second))
			want := append(append([]byte(nil), toPeer...), "after|"...)
			pgot := make([]byte, len(want))
			if _, err := io.ReadFull(peer, pgot); err != nil {
				t.Fatalf("peer read: %v", err)
			}
			if !bytes.Equal(pgot, want) {
				t.Fatalf("peer got %q..., want %q...", pgot[:20], want[:20])
			}
		})
	}
}
