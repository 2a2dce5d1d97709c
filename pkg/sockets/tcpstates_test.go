package sockets_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/netlock"
	"github.com/ckpt/ckpt/pkg/sockets"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// tcpEnds is a loopback connection: cli is the end dumped and rebuilt,
// srv its peer, which stays.
type tcpEnds struct {
	cli, srv  int
	local     netip.AddrPort // cli's
	remote    netip.AddrPort
	lock      string
	toCli     []byte // sent by srv, not read by cli
	toSrv     []byte // sent by cli, not read by srv
	srvClosed bool   // srv sent its FIN
	cliClosed bool   // cli sent its FIN
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// newEnds connects two sockets of family ("tcp4", "tcp6", "mapped").
func newEnds(t testing.TB, family string) *tcpEnds {
	t.Helper()
	dom, addr := unix.AF_INET, netip.MustParseAddr("127.0.0.1")
	switch family {
	case "tcp6":
		dom, addr = unix.AF_INET6, netip.MustParseAddr("::1")
	case "mapped":
		dom, addr = unix.AF_INET6, netip.MustParseAddr("::ffff:127.0.0.1")
	}
	sock := func() int {
		fd, err := unix.Socket(dom, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		must(t, err)
		if dom == unix.AF_INET6 {
			must(t, unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0))
		}
		return fd
	}
	ln := sock()
	defer unix.Close(ln)
	must(t, unix.Bind(ln, sockets.Sockaddr(netip.AddrPortFrom(addr, 0))))
	must(t, unix.Listen(ln, 1))
	la, err := unix.Getsockname(ln)
	must(t, err)
	e := &tcpEnds{cli: sock()}
	must(t, unix.Connect(e.cli, la))
	e.srv, _, err = unix.Accept4(ln, unix.SOCK_CLOEXEC)
	must(t, err)
	t.Cleanup(func() { unix.Close(e.srv) })
	e.local, e.remote, err = sockets.Endpoints(e.cli)
	must(t, err)
	return e
}

// takeLock drops the connection's packets, as a dump does.
func (e *tcpEnds) takeLock(t testing.TB) {
	t.Helper()
	l, err := netlock.Take(fmt.Sprintf("test-%d-%d", os.Getpid(), e.local.Port()), []netlock.Conn{{Local: e.local, Remote: e.remote}}, -1)
	must(t, err)
	e.lock = l.Table
	t.Cleanup(e.release)
}

func (e *tcpEnds) release() {
	if e.lock != "" {
		netlock.Release(e.lock, -1)
		e.lock = ""
	}
}

// dropToCli drops what srv sends to cli (its acknowledgments), until the
// returned function is called: cli's FIN is sent but stays unacknowledged.
func (e *tcpEnds) dropToCli(t *testing.T) func() {
	t.Helper()
	c, err := nftables.New()
	must(t, err)
	tbl := c.AddTable(&nftables.Table{Name: fmt.Sprintf("ckpt-test-drop-%d", e.local.Port()), Family: nftables.TableFamilyINet})
	policy := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: "out", Table: tbl, Hooknum: nftables.ChainHookOutput,
		Priority: nftables.ChainPriorityRef(-300), Type: nftables.ChainTypeFilter, Policy: &policy})
	port := func(off uint32, p uint16) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(p >> 8), byte(p)}},
		}
	}
	exprs := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
	exprs = append(append(append(exprs, port(0, e.remote.Port())...), port(2, e.local.Port())...), &expr.Verdict{Kind: expr.VerdictDrop})
	c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: exprs})
	must(t, c.Flush())
	done := false
	lift := func() {
		if !done {
			done = true
			c.DelTable(tbl)
			c.Flush()
		}
	}
	t.Cleanup(lift)
	return lift
}

func send(t testing.TB, fd int, b []byte) {
	t.Helper()
	for len(b) > 0 {
		n, err := unix.SendmsgN(fd, b, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		must(t, err)
		b = b[n:]
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func stateIs(fd, want int) func() bool {
	return func() bool { s, err := sockets.State(fd); return err == nil && s == want }
}

// readToEOF reads n bytes, then, if eof, end of file; any error (a reset)
// fails.
func readToEOF(t *testing.T, who string, fd, n int, eof bool) []byte {
	t.Helper()
	var got []byte
	buf := make([]byte, 65536)
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n || eof {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d bytes (eof %v) before the deadline", who, len(got), n, eof)
		}
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		unix.Poll(p, 100)
		m, err := unix.Read(fd, buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("%s: read after %d bytes: %v", who, len(got), err)
		}
		if m == 0 {
			if !eof || len(got) < n {
				t.Fatalf("%s: end of file after %d of %d bytes", who, len(got), n)
			}
			return got
		}
		got = append(got, buf[:m]...)
	}
	return got
}

// TestTCPStates drives a connection into each state, dumps it under the
// network lock, closes it silently, rebuilds it, and checks the state from
// inside (TCP_INFO) and from the peer: every byte once, each FIN once, no
// reset, and the connection goes on to its end.
func TestTCPStates(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TCP_REPAIR needs root (CAP_NET_ADMIN)")
	}
	cases := []struct {
		name  string
		want  int
		setup func(t *testing.T, e *tcpEnds)
	}{
		{"close_wait", sockets.StateCloseWait, func(t *testing.T, e *tcpEnds) {
			must(t, unix.Shutdown(e.srv, unix.SHUT_WR))
			e.srvClosed = true
			waitFor(t, "CLOSE_WAIT", stateIs(e.cli, sockets.StateCloseWait))
			e.takeLock(t)
		}},
		{"fin_wait2", sockets.StateFinWait2, func(t *testing.T, e *tcpEnds) {
			waitFor(t, "data acknowledged", func() bool { n, _ := unix.IoctlGetInt(e.cli, unix.SIOCOUTQ); return n == 0 })
			must(t, unix.Shutdown(e.cli, unix.SHUT_WR))
			e.cliClosed = true
			waitFor(t, "FIN_WAIT2", stateIs(e.cli, sockets.StateFinWait2))
			e.takeLock(t)
		}},
		{"fin_wait1", sockets.StateFinWait1, func(t *testing.T, e *tcpEnds) {
			e.takeLock(t)
			send(t, e.cli, []byte("sent-under-the-lock|"))
			e.toSrv = append(e.toSrv, "sent-under-the-lock|"...)
			must(t, unix.Shutdown(e.cli, unix.SHUT_WR))
			e.cliClosed = true
		}},
		{"last_ack", sockets.StateLastAck, func(t *testing.T, e *tcpEnds) {
			must(t, unix.Shutdown(e.srv, unix.SHUT_WR))
			e.srvClosed = true
			waitFor(t, "CLOSE_WAIT", stateIs(e.cli, sockets.StateCloseWait))
			e.takeLock(t)
			must(t, unix.Shutdown(e.cli, unix.SHUT_WR))
			e.cliClosed = true
		}},
		{"fin_wait1_sent", sockets.StateFinWait1, func(t *testing.T, e *tcpEnds) {
			lift := e.dropToCli(t)
			must(t, unix.Shutdown(e.cli, unix.SHUT_WR))
			e.cliClosed = true
			waitFor(t, "the FIN sent", func() bool { n, _ := unix.IoctlGetInt(e.cli, unix.SIOCOUTQNSD); return n == 0 })
			e.takeLock(t)
			lift()
		}},
		{"last_ack_sent", sockets.StateLastAck, func(t *testing.T, e *tcpEnds) {
			must(t, unix.Shutdown(e.srv, unix.SHUT_WR))
			e.srvClosed = true
			waitFor(t, "CLOSE_WAIT", stateIs(e.cli, sockets.StateCloseWait))
			lift := e.dropToCli(t)
			must(t, unix.Shutdown(e.cli, unix.SHUT_WR))
			e.cliClosed = true
			waitFor(t, "the FIN sent", func() bool { n, _ := unix.IoctlGetInt(e.cli, unix.SIOCOUTQNSD); return n == 0 })
			e.takeLock(t)
			lift()
		}},
		{"closing_sent", sockets.StateClosing, func(t *testing.T, e *tcpEnds) {
			waitFor(t, "data acknowledged", func() bool { n, _ := unix.IoctlGetInt(e.srv, unix.SIOCOUTQ); return n == 0 })
			lift := e.dropToCli(t)
			must(t, unix.Shutdown(e.cli, unix.SHUT_WR))
			waitFor(t, "the FIN sent", func() bool { n, _ := unix.IoctlGetInt(e.cli, unix.SIOCOUTQNSD); return n == 0 })
			e.takeLock(t)
			lift()
			must(t, unix.Shutdown(e.srv, unix.SHUT_WR))
			e.cliClosed, e.srvClosed = true, true
			st, _, sq, err := sockets.DumpTCP(e.cli)
			must(t, err)
			must(t, sockets.LeaveRepair(e.cli, 0))
			must(t, sockets.InjectFIN(st, st.RcvSeq, st.SndSeq-1-uint32(len(sq))))
		}},
		{"closing", sockets.StateClosing, func(t *testing.T, e *tcpEnds) {
			// Both FINs cross: each end sends its FIN, the lock drops
			// both, then the peer's reaches cli (forged) before cli's
			// FIN is acknowledged.
			waitFor(t, "data acknowledged", func() bool { n, _ := unix.IoctlGetInt(e.srv, unix.SIOCOUTQ); return n == 0 })
			e.takeLock(t)
			must(t, unix.Shutdown(e.cli, unix.SHUT_WR))
			must(t, unix.Shutdown(e.srv, unix.SHUT_WR))
			e.cliClosed, e.srvClosed = true, true
			st, _, sq, err := sockets.DumpTCP(e.cli)
			must(t, err)
			must(t, sockets.LeaveRepair(e.cli, 0))
			must(t, sockets.InjectFIN(st, st.RcvSeq, st.SndSeq-1-uint32(len(sq))))
		}},
	}
	for _, family := range []string{"tcp4", "tcp6", "mapped"} {
		for _, c := range cases {
			t.Run(family+"/"+c.name, func(t *testing.T) {
				e := newEnds(t, family)
				e.toCli = bytes.Repeat([]byte("to-cli|"), 3000)
				e.toSrv = bytes.Repeat([]byte("to-srv|"), 2000)
				send(t, e.srv, e.toCli)
				send(t, e.cli, e.toSrv)
				c.setup(t, e)
				waitFor(t, sockets.StateName(c.want), stateIs(e.cli, c.want))
				var ts0 int
				ts0, _ = unix.GetsockoptInt(e.cli, unix.IPPROTO_TCP, unix.TCP_TIMESTAMP)
				st, recvQ, sendQ, err := sockets.DumpTCP(e.cli)
				must(t, err)
				t.Logf("saved: FIN unsent %v, %d bytes unsent", st.FinUnsent, st.Unsent)
				if st.State != c.want {
					t.Fatalf("dumped state %s, want %s", sockets.StateName(st.State), sockets.StateName(c.want))
				}
				unix.Close(e.cli) // in repair mode: silent
				sock, err := sockets.RestoreTCP(st, recvQ, sendQ)
				must(t, err)
				defer sock.Close()
				fd := sock.Int()
				must(t, sockets.Resume(fd, st, sendQ))
				if s, _ := sockets.State(fd); s != c.want {
					t.Fatalf("restored in state %s, want %s", sockets.StateName(s), sockets.StateName(c.want))
				}
				if ts, _ := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_TIMESTAMP); uint32(ts-ts0) > 5000 {
					t.Fatalf("TCP_TIMESTAMP %d after the restore, %d before", ts, ts0)
				}
				// The peer's window as it was (the lock still holds: nothing
				// came from the peer): snd_wnd, max_window. (snd_wl1 is
				// set back by the kernel's window probe when a socket
				// leaves repair mode established, so that the peer's
				// answer updates the window.)
				must(t, sockets.EnterRepair(fd))
				w, err := sockets.RepairWindow(fd)
				must(t, err)
				must(t, sockets.LeaveRepair(fd, 0))
				if [2]uint32(w[1:3]) != [2]uint32(st.Window[1:3]) {
					t.Fatalf("window (snd_wnd, max_window) %v after the restore, %v before", w[1:3], st.Window[1:3])
				}
				e.release()
				// From the peer: every byte cli had sent, then its FIN.
				got := readToEOF(t, "peer", e.srv, len(e.toSrv), e.cliClosed)
				if !bytes.Equal(got, e.toSrv) {
					t.Fatalf("peer read %d bytes that differ from the %d sent", len(got), len(e.toSrv))
				}
				// From inside: every byte queued, then the peer's FIN.
				got = readToEOF(t, "restored", fd, len(e.toCli), e.srvClosed)
				if !bytes.Equal(got, e.toCli) {
					t.Fatalf("restored end read %d bytes that differ from the %d sent", len(got), len(e.toCli))
				}
				// The connection goes on: a side still open can send.
				if !e.cliClosed {
					send(t, fd, []byte("after|"))
					readToEOF(t, "peer after", e.srv, 6, false)
				}
				if !e.srvClosed {
					send(t, e.srv, []byte("after|"))
					readToEOF(t, "restored after", fd, 6, false)
					must(t, unix.Shutdown(e.srv, unix.SHUT_WR))
					readToEOF(t, "restored end", fd, 0, true)
				}
				closesCleanly(t, e, fd)
			})
		}
	}
}

// closesCleanly ends the connection of the restored end fd: its FIN if
// it has not sent it yet, read to end of file by the peer; both FINs
// acknowledged, it is closed (after TIME_WAIT, which no socket shows),
// never reset.
func closesCleanly(t *testing.T, e *tcpEnds, fd int) {
	t.Helper()
	if !e.cliClosed {
		must(t, unix.Shutdown(fd, unix.SHUT_WR))
		readToEOF(t, "peer end", e.srv, 0, true)
	}
	waitFor(t, "the restored end closed", stateIs(fd, sockets.StateClose))
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || v != 0 {
		t.Fatalf("restored end: SO_ERROR %d (%v)", v, err)
	}
}

// TestTCPSynSent dumps a connection whose SYN is not answered (the
// listener's accept queue is full: it drops SYNs), rebuilds it in
// SYN_SENT, and lets the listener make room: the listener accepts one
// connection from the rebuilt socket's port, which reads what it sends.
func TestTCPSynSent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TCP_REPAIR needs root (CAP_NET_ADMIN)")
	}
	for _, family := range []string{"tcp4", "tcp6", "mapped"} {
		t.Run(family, func(t *testing.T) {
			e := newEnds(t, family) // for its family's addresses only
			dom := unix.AF_INET
			if family != "tcp4" {
				dom = unix.AF_INET6
			}
			ln, err := unix.Socket(dom, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			must(t, err)
			defer unix.Close(ln)
			must(t, unix.Bind(ln, sockets.Sockaddr(netip.AddrPortFrom(e.remote.Addr(), 0))))
			must(t, unix.Listen(ln, 0))
			la, err := unix.Getsockname(ln)
			must(t, err)
			// Fill the accept queue (a backlog of 0 holds one).
			var fillers []int
			for i := 0; i < 2; i++ {
				f, err := unix.Socket(dom, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
				must(t, err)
				defer unix.Close(f)
				unix.Connect(f, la)
				fillers = append(fillers, f)
			}
			time.Sleep(50 * time.Millisecond)
			fd, err := unix.Socket(dom, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
			must(t, err)
			if err := unix.Connect(fd, la); err != unix.EINPROGRESS {
				t.Fatalf("connect: %v, want EINPROGRESS", err)
			}
			time.Sleep(20 * time.Millisecond)
			if s, _ := sockets.State(fd); s != sockets.StateSynSent {
				t.Skipf("the SYN was answered (state %s): the accept queue did not fill", sockets.StateName(s))
			}
			st, recvQ, sendQ, err := sockets.DumpTCP(fd)
			must(t, err)
			if st.Remote != sockets.AddrPort(la) {
				t.Fatalf("saved peer %v, want %v", st.Remote, sockets.AddrPort(la))
			}
			unix.Close(fd)
			s := &image.Socket{Family: dom, Type: unix.SOCK_STREAM, Protocol: unix.IPPROTO_TCP, State: st.State,
				Local: st.Local.String(), Remote: st.Remote.String(), TCP: &st.TCPRepair}
			nsock, err := sockets.Open(s, recvQ, sendQ)
			must(t, err)
			defer nsock.Close()
			nfd := nsock.Int()
			must(t, sockets.ResumeSocket(nfd, s, sendQ))
			if s, _ := sockets.State(nfd); s != sockets.StateSynSent {
				t.Fatalf("restored in state %s, want SYN_SENT", sockets.StateName(s))
			}
			// Room in the queue: the next SYN is answered.
			accepted := 0
			var conn int
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) && !stateIs(nfd, sockets.StateEstablished)() {
				c, sa, err := unix.Accept4(ln, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
				if err == nil {
					if sockets.AddrPort(sa) == st.Local {
						accepted++
						conn = c
					} else {
						unix.Close(c)
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			waitFor(t, "established", stateIs(nfd, sockets.StateEstablished))
			for time.Now().Before(deadline) && accepted == 0 {
				if c, sa, err := unix.Accept4(ln, unix.SOCK_CLOEXEC); err == nil && sockets.AddrPort(sa) == st.Local {
					accepted, conn = accepted+1, c
				}
			}
			if accepted != 1 {
				t.Fatalf("the listener accepted %d connections from %v, want 1", accepted, st.Local)
			}
			defer unix.Close(conn)
			send(t, conn, []byte("hello|"))
			if got := readToEOF(t, "restored", nfd, 6, false); string(got) != "hello|" {
				t.Fatalf("read %q", got)
			}
		})
	}
}
