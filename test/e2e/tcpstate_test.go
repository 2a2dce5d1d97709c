package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
	"golang.org/x/sys/unix"
)

// tcpStatePeer is the test's end of a tcpstate victim's connection.
type tcpStatePeer struct {
	ln   net.Listener
	conn net.Conn
}

// TestTCPStatesOutside restores connections whose peer is outside the
// dump (the test) in CLOSE_WAIT, FIN_WAIT2, FIN_WAIT1 and SYN_SENT: the
// restored program checks its state and timestamp clock from inside
// (testdata/tcpstate.c), the test checks from the peer that every byte and
// FIN comes once, with no reset, and that a SYN_SENT connection is one
// connection.
func TestTCPStatesOutside(t *testing.T) {
	e := setup(t)
	bin := compileC(t, "tcpstate.c")
	cases := []struct {
		mode, network, addr string
		// before acts on the peer before the dump, after once the victim
		// is restored and told to check.
		before, after func(t *testing.T, p *tcpStatePeer, ready string)
	}{
		{"close_wait", "tcp4", "127.0.0.1", func(t *testing.T, p *tcpStatePeer, _ string) {
			b := make([]byte, 3000)
			for i := range b {
				b[i] = byte(uint32(i) * 2654435761 >> 7)
			}
			tcpMust(t, tcpWrite(p.conn, b))
			tcpMust(t, p.conn.(*net.TCPConn).CloseWrite())
		}, func(t *testing.T, p *tcpStatePeer, _ string) {
			expectAll(t, p.conn, []byte("bye"))
		}},
		{"close_wait", "tcp6", "::1", nil, nil},
		{"fin_wait2", "tcp4", "127.0.0.1", func(t *testing.T, p *tcpStatePeer, _ string) {
			expectAll(t, p.conn, []byte("data"))
		}, func(t *testing.T, p *tcpStatePeer, _ string) {
			tcpMust(t, tcpWrite(p.conn, []byte("more")))
			tcpMust(t, p.conn.(*net.TCPConn).CloseWrite())
		}},
		{"fin_wait1", "tcp4", "127.0.0.1", nil, func(t *testing.T, p *tcpStatePeer, ready string) {
			n, _ := strconv.Atoi(logField(ready, "sent"))
			want := make([]byte, n)
			for i := range want {
				want[i] = byte(uint32(i) * 2654435761 >> 7)
			}
			expectAll(t, p.conn, want)
			tcpMust(t, p.conn.(*net.TCPConn).CloseWrite())
		}},
		{"syn_sent", "tcp4", "127.0.0.1", nil, nil},
	}
	for _, c := range cases {
		if c.mode == "close_wait" && c.before == nil {
			c.before, c.after = cases[0].before, cases[0].after
		}
		t.Run(c.mode+"_"+c.network, func(t *testing.T) {
			p := &tcpStatePeer{}
			lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
				return rc.Control(func(fd uintptr) {
					if c.mode == "fin_wait1" { // a small window, filled soon
						unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096)
					}
				})
			}}
			var fillers []net.Conn
			var raw int
			var port int
			if c.mode == "syn_sent" {
				// A listener whose accept queue is full drops SYNs.
				var err error
				raw, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				tcpMust(t, err)
				defer unix.Close(raw)
				tcpMust(t, unix.Bind(raw, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
				tcpMust(t, unix.Listen(raw, 0))
				sa, _ := unix.Getsockname(raw)
				port = sa.(*unix.SockaddrInet4).Port
				for i := 0; i < 2; i++ {
					d := net.Dialer{Timeout: 200 * time.Millisecond}
					if f, err := d.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
						defer f.Close()
						fillers = append(fillers, f)
					}
				}
			} else {
				ln, err := lc.Listen(context.Background(), c.network, net.JoinHostPort(c.addr, "0"))
				tcpMust(t, err)
				defer ln.Close()
				p.ln = ln
				port = ln.Addr().(*net.TCPAddr).Port
			}
			v := e.startLogged(t, "tcpstate", func(log string) []string {
				return []string{bin, log, c.mode, c.addr, strconv.Itoa(port)}
			})
			if p.ln != nil {
				conn, err := p.ln.Accept()
				tcpMust(t, err)
				defer conn.Close()
				p.conn = conn
			}
			if c.before != nil {
				c.before(t, p, "")
			}
			ready := v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "ready") || strings.HasPrefix(l, "FAIL") })
			if !strings.HasPrefix(ready, "ready") {
				t.Fatalf("victim: %s", ready)
			}
			img := t.TempDir() + "/img"
			e.dumpKill(t, v, img)
			if res := e.runRedo(t, nil, img); res.code != 0 {
				t.Fatalf("ckpt-redo: %v", res)
			}
			e.r.MustSignal(t, v.pid, unix.SIGTERM)
			v.waitLine(t, func(l string) bool { return l == "checked" })
			if c.mode == "syn_sent" {
				// Room in the queue: the victim's next SYN is answered, as
				// one connection from its port.
				vport, _ := strconv.Atoi(logField(ready, "port"))
				for range fillers {
					if fd, _, err := unix.Accept4(raw, unix.SOCK_CLOEXEC); err == nil {
						unix.Close(fd)
					}
				}
				fd, sa, err := unix.Accept4(raw, unix.SOCK_CLOEXEC)
				tcpMust(t, err)
				defer unix.Close(fd)
				if got := sa.(*unix.SockaddrInet4).Port; got != vport {
					t.Fatalf("accepted a connection from port %d, want the victim's %d", got, vport)
				}
				_, err = unix.Write(fd, []byte("hi"))
				tcpMust(t, err)
				tcpMust(t, unix.SetNonblock(raw, true))
				if fd2, sa2, err := unix.Accept4(raw, 0); err == nil {
					unix.Close(fd2)
					t.Fatalf("a second connection from %v: the peer saw two", sa2)
				}
			} else if c.after != nil {
				c.after(t, p, ready)
			}
			if p.conn != nil {
				// The peer reads end of file, not a reset.
				p.conn.SetReadDeadline(time.Now().Add(wait))
				if n, err := p.conn.Read(make([]byte, 1)); n != 0 || err != io.EOF {
					t.Errorf("peer: read %d bytes, %v; want end of file", n, err)
				}
			}
			verdict := v.waitLine(t, func(l string) bool { return l == "PASS" || strings.HasPrefix(l, "FAIL") })
			if verdict != "PASS" {
				t.Fatalf("restored program: %s", verdict)
			}
		})
	}
}

// TestTCPSynSentAnswered restores a connection in SYN_SENT whose peer, a
// listener that had no room in its accept queue at the dump, has room by
// the time of the restore: the SYN the restore sends must go out at once
// (not be dropped by the network lock and sent again a second later), so
// the restored program finds its connection made without any segment sent
// again (tcpi_total_retrans 0, testdata/tcpstate.c syn_answered).
//
// Everything is in a network namespace of its own: the kernel drops every
// packet held in a namespace when any netfilter table of it goes
// (nf_queue_nf_hook_drop), and the other tests of the run lift locks in the
// root one; a SYN-ACK held by this restore's lock and dropped so would be
// sent again.
func TestTCPSynSentAnswered(t *testing.T) {
	e := setup(t)
	bin := compileC(t, "tcpstate.c")
	ns := privateNetNS(t, "ckpt-syn")
	// A listener whose accept queue is full drops SYNs.
	var raw, port int
	var fillers []int
	tcpMust(t, testenv.InNetNS(ns, func() error {
		var err error
		if raw, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err := unix.Bind(raw, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err := unix.Listen(raw, 0); err != nil {
			return err
		}
		sa, err := unix.Getsockname(raw)
		if err != nil {
			return err
		}
		port = sa.(*unix.SockaddrInet4).Port
		for i := 0; i < 2; i++ {
			f, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
			if err != nil {
				return err
			}
			fillers = append(fillers, f)
			unix.Connect(f, sa)
		}
		return nil
	}))
	defer unix.Close(raw)
	defer func() {
		for _, f := range fillers {
			unix.Close(f)
		}
	}()
	v := e.startLogged(t, "tcpstate", func(log string) []string {
		return []string{"ip", "netns", "exec", ns, bin, log, "syn_answered", "127.0.0.1", strconv.Itoa(port)}
	})
	ready := v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "ready") || strings.HasPrefix(l, "FAIL") })
	if !strings.HasPrefix(ready, "ready") {
		t.Fatalf("victim: %s", ready)
	}
	img := t.TempDir() + "/img"
	e.dumpKill(t, v, img)
	// Room in the queue before the restore, and no other SYN to take it.
	for _, f := range fillers {
		unix.Close(f)
	}
	fillers = nil
	tcpMust(t, unix.SetNonblock(raw, true))
	for {
		fd, _, err := unix.Accept4(raw, unix.SOCK_CLOEXEC)
		if err != nil {
			break
		}
		unix.Close(fd)
	}
	tcpMust(t, unix.SetNonblock(raw, false))
	if res := e.runRedoArgv(t, []string{"ip", "netns", "exec", ns, e.redo(), img}); res.code != 0 {
		t.Fatalf("ckpt-redo in %s: %v", ns, res)
	}
	e.r.MustSignal(t, v.pid, unix.SIGTERM)
	v.waitLine(t, func(l string) bool { return l == "checked" })
	vport, _ := strconv.Atoi(logField(ready, "port"))
	fd, sa, err := unix.Accept4(raw, unix.SOCK_CLOEXEC)
	tcpMust(t, err)
	defer unix.Close(fd)
	if got := sa.(*unix.SockaddrInet4).Port; got != vport {
		t.Fatalf("accepted a connection from port %d, want the victim's %d", got, vport)
	}
	_, err = unix.Write(fd, []byte("hi"))
	tcpMust(t, err)
	verdict := v.waitLine(t, func(l string) bool { return l == "PASS" || strings.HasPrefix(l, "FAIL") })
	if verdict != "PASS" {
		t.Fatalf("restored program: %s", verdict)
	}
}

// TestTCPClose restores an established connection with ckpt-redo
// --tcp-close: the program finds it closed (state CLOSE, end of file,
// EPIPE), the dump's network lock is lifted, and the peer, outside the
// dump, is reset when it sends.
func TestTCPClose(t *testing.T) {
	e := setup(t)
	bin := compileC(t, "tcpstate.c")
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	tcpMust(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	v := e.startLogged(t, "tcpstate", func(log string) []string {
		return []string{bin, log, "tcp_close", "127.0.0.1", strconv.Itoa(port)}
	})
	conn, err := ln.Accept()
	tcpMust(t, err)
	defer conn.Close()
	tcpMust(t, tcpWrite(conn, []byte("unread by the program")))
	ready := v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "ready") || strings.HasPrefix(l, "FAIL") })
	if !strings.HasPrefix(ready, "ready") {
		t.Fatalf("victim: %s", ready)
	}
	img := t.TempDir() + "/img"
	e.dumpKill(t, v, img)
	if res := e.runRedo(t, nil, "--tcp-close", img); res.code != 0 {
		t.Fatalf("ckpt-redo --tcp-close: %v", res)
	}
	if tables := lockTables(t, v.pid); len(tables) != 0 {
		t.Fatalf("lock tables after ckpt-redo --tcp-close: %v", tables)
	}
	e.r.MustSignal(t, v.pid, unix.SIGTERM)
	verdict := v.waitLine(t, func(l string) bool { return l == "PASS" || strings.HasPrefix(l, "FAIL") })
	if verdict != "PASS" {
		t.Fatalf("restored program: %s", verdict)
	}
	// The peer: what the program had sent, then a reset once it sends.
	expectAll(t, conn, []byte("unacked?"))
	deadline := time.Now().Add(wait)
	for {
		conn.SetDeadline(time.Now().Add(time.Second))
		conn.Write([]byte("ping"))
		_, err := conn.Read(make([]byte, 1))
		if err != nil && strings.Contains(err.Error(), "reset") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("peer: %v, want a reset", err)
		}
	}
}

func tcpWrite(c net.Conn, b []byte) error {
	c.SetWriteDeadline(time.Now().Add(wait))
	_, err := c.Write(b)
	return err
}

// expectAll reads exactly want from c.
func expectAll(t *testing.T, c net.Conn, want []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(wait))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("peer: read: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("peer: read %d bytes that differ from what was sent", len(got))
	}
}

// field returns the value of name=value in a log line.
func logField(line, name string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}

func tcpMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
