package sockets_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/netlock"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// connectNonBlocking connects e.cli again from scratch with a
// non-blocking connect (the socket layer keeps calling it connecting
// once established), replacing the ends newEnds made.
func connectNonBlocking(t testing.TB, e *tcpEnds, family string) {
	t.Helper()
	dom := unix.AF_INET
	if family != "tcp4" {
		dom = unix.AF_INET6
	}
	ln, err := unix.Socket(dom, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(ln)
	if dom == unix.AF_INET6 {
		must(t, unix.SetsockoptInt(ln, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0))
	}
	must(t, unix.Bind(ln, sockets.Sockaddr(netip.AddrPortFrom(e.remote.Addr(), 0))))
	must(t, unix.Listen(ln, 1))
	la, err := unix.Getsockname(ln)
	must(t, err)
	unix.Close(e.cli)
	unix.Close(e.srv)
	e.cli, err = unix.Socket(dom, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	must(t, err)
	if dom == unix.AF_INET6 {
		must(t, unix.SetsockoptInt(e.cli, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0))
	}
	if err := unix.Connect(e.cli, la); err != unix.EINPROGRESS {
		t.Fatalf("non-blocking connect: %v, want EINPROGRESS", err)
	}
	waitFor(t, "ESTABLISHED", stateIs(e.cli, sockets.StateEstablished))
	e.srv, _, err = unix.Accept4(ln, unix.SOCK_CLOEXEC)
	must(t, err)
	e.local, e.remote, err = sockets.Endpoints(e.cli)
	must(t, err)
}

// tcpInfo reads tcp_info's options byte and window scales.
func tcpInfo(t *testing.T, fd int) [2]byte {
	t.Helper()
	var info [256]byte
	_, err := sys.Getsockopt(fd, unix.IPPROTO_TCP, unix.TCP_INFO, unsafe.Pointer(&info[0]), uintptr(len(info)))
	must(t, err)
	return [2]byte{info[5], info[6]}
}

// TestTCPConnecting rebuilds connections made by a non-blocking connect
// (the socket layer calls them connecting: SockState) and by a blocking
// one, established and in states of a close, with data in both queues,
// as the restore does (Open behind a lock, ResumeSocket). It checks that
// connect() on the rebuilt socket gives what it gave on the original (0
// once, then EISCONN; EISCONN at once), the options, MSS, window and
// timestamp clock, and every byte from inside and from the peer.
func TestTCPConnecting(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TCP_REPAIR needs root (CAP_NET_ADMIN)")
	}
	states := []struct {
		name  string
		want  int
		setup func(t *testing.T, e *tcpEnds)
	}{
		{"established", sockets.StateEstablished, func(t *testing.T, e *tcpEnds) { e.takeLock(t) }},
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
	}
	for _, family := range []string{"tcp4", "tcp6", "mapped"} {
		for _, nonBlocking := range []bool{true, false} {
			for _, c := range states {
				name := family + "/blocking/" + c.name
				if nonBlocking {
					name = family + "/nonblocking/" + c.name
				}
				if nonBlocking && c.want == sockets.StateFinWait2 {
					continue // shutdown(SHUT_WR) made it connected
				}
				t.Run(name, func(t *testing.T) {
					e := newEnds(t, family)
					if nonBlocking {
						connectNonBlocking(t, e, family)
					}
					e.toCli = bytes.Repeat([]byte("to-cli|"), 3000)
					if c.want == sockets.StateEstablished || c.want == sockets.StateCloseWait {
						e.toSrv = bytes.Repeat([]byte("to-srv|"), 2000)
					}
					send(t, e.srv, e.toCli)
					send(t, e.cli, e.toSrv)
					c.setup(t, e)
					waitFor(t, sockets.StateName(c.want), stateIs(e.cli, c.want))
					mss0, err := unix.GetsockoptInt(e.cli, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
					must(t, err)
					info0 := tcpInfo(t, e.cli)
					clamp0, err := unix.GetsockoptInt(e.cli, unix.IPPROTO_TCP, unix.TCP_WINDOW_CLAMP)
					must(t, err)
					s, err := sockets.Describe(e.cli)
					must(t, err)
					ts0, _ := unix.GetsockoptInt(e.cli, unix.IPPROTO_TCP, unix.TCP_TIMESTAMP)
					st, recvQ, sendQ, err := sockets.DumpTCP(e.cli)
					must(t, err)
					s.TCP = &st.TCPRepair
					s.TCP.SockState = sockets.SockConnected
					if nonBlocking {
						s.TCP.SockState = sockets.SockConnecting
					}
					must(t, sockets.CheckSockState(st.State, s.Shutdown, s.TCP))
					if !sockets.NeedsSYNDropped(s) {
						t.Fatal("NeedsSYNDropped false: every connection is connected for real")
					}
					unix.Close(e.cli) // in repair mode: silent
					start := time.Now()
					sock, err := sockets.Open(s, recvQ, sendQ)
					must(t, err)
					defer sock.Close()
					fd := sock.Int()
					must(t, sockets.ResumeSocket(fd, s, sendQ))
					t.Logf("rebuilt in %v", time.Since(start))
					if got, _ := sockets.State(fd); got != c.want {
						t.Fatalf("restored in state %s, want %s", sockets.StateName(got), sockets.StateName(c.want))
					}
					if got := tcpInfo(t, fd); got != info0 {
						t.Errorf("tcp_info options, window scales %#x after the restore, %#x before", got, info0)
					}
					t.Logf("TCP_MAXSEG %d before", mss0)
					if clamp, _ := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_WINDOW_CLAMP); clamp != clamp0 {
						t.Errorf("TCP_WINDOW_CLAMP %d after the restore, %d before", clamp, clamp0)
					}
					if ts, _ := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_TIMESTAMP); uint32(ts-ts0) > 5000 {
						t.Errorf("TCP_TIMESTAMP %d after the restore, %d before", ts, ts0)
					}
					must(t, sockets.EnterRepair(fd))
					w, err := sockets.RepairWindow(fd)
					must(t, err)
					// In repair mode TCP_MAXSEG shows the MSS clamp, which
					// the dump saved.
					if clamp, _ := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG); clamp != st.MSS {
						t.Errorf("MSS clamp %d after the restore, %d before", clamp, st.MSS)
					}
					must(t, sockets.LeaveRepair(fd, 0))
					if [2]uint32(w[1:3]) != [2]uint32(st.Window[1:3]) {
						t.Errorf("window (snd_wnd, max_window) %v after the restore, %v before", w[1:3], st.Window[1:3])
					}
					e.release()
					// connect() as on the original: 0 once if the
					// connect was non-blocking, then EISCONN.
					ra := sockets.Sockaddr(e.remote)
					if nonBlocking {
						if err := unix.Connect(fd, ra); err != nil {
							t.Errorf("first connect() after the restore: %v, want 0", err)
						}
					}
					if err := unix.Connect(fd, ra); err != unix.EISCONN {
						t.Errorf("connect() after the restore: %v, want EISCONN", err)
					}
					got := readToEOF(t, "peer", e.srv, len(e.toSrv), e.cliClosed)
					if !bytes.Equal(got, e.toSrv) {
						t.Fatalf("peer read %d bytes that differ from the %d sent", len(got), len(e.toSrv))
					}
					got = readToEOF(t, "restored", fd, len(e.toCli), e.srvClosed)
					if !bytes.Equal(got, e.toCli) {
						t.Fatalf("restored end read %d bytes that differ from the %d sent", len(got), len(e.toCli))
					}
					if !e.srvClosed {
						send(t, e.srv, []byte("after|"))
						readToEOF(t, "restored after", fd, 6, false)
						must(t, unix.Shutdown(e.srv, unix.SHUT_WR))
						readToEOF(t, "restored end", fd, 0, true)
					}
					if !e.cliClosed {
						send(t, fd, []byte("after|"))
						readToEOF(t, "peer after", e.srv, 6, false)
					}
					closesCleanly(t, e, fd)
				})
			}
		}
	}
}

// BenchmarkTCPRebuild measures the rebuild of an established connection
// (Open and ResumeSocket) in repair mode (connected), by the forged
// handshake (connecting), and by the handshake behind a lock of its own
// taken and released around Open, as the restore does (fdkind
// openInetSocket).
func BenchmarkTCPRebuild(b *testing.B) {
	for _, mode := range []string{"connected", "connecting", "connecting+lock"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				e := newEnds(b, "tcp4")
				if mode != "connected" {
					connectNonBlocking(b, e, "tcp4")
				}
				send(b, e.srv, []byte("to-cli"))
				if mode != "connecting+lock" {
					e.takeLock(b)
				}
				s, err := sockets.Describe(e.cli)
				if err != nil {
					b.Fatal(err)
				}
				st, recvQ, sendQ, err := sockets.DumpTCP(e.cli)
				if err != nil {
					b.Fatal(err)
				}
				s.TCP = &st.TCPRepair
				s.TCP.SockState = sockets.SockConnected
				if mode != "connected" {
					s.TCP.SockState = sockets.SockConnecting
				}
				unix.Close(e.cli)
				b.StartTimer()
				var table string
				if mode == "connecting+lock" {
					l, err := netlock.Take(fmt.Sprintf("bench-%d-%d", os.Getpid(), e.local.Port()), []netlock.Conn{{Local: e.local, Remote: e.remote}}, -1)
					if err != nil {
						b.Fatal(err)
					}
					table = l.Table
				}
				sock, err := sockets.Open(s, recvQ, sendQ)
				if table != "" {
					netlock.Release(table, -1)
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := sockets.ResumeSocket(sock.Int(), s, sendQ); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				sock.Close()
				e.release()
				unix.Close(e.srv)
				b.StartTimer()
			}
		})
	}
}

// TestCheckSockState lists which socket layer states the restore makes
// in which TCP states, and which it refuses.
func TestCheckSockState(t *testing.T) {
	cases := []struct {
		state, shutdown int
		ss              uint8
		failed          bool // Connecting: a closed socket whose connect failed
		ok              bool
	}{
		{sockets.StateEstablished, 0, 0, false, true},
		{sockets.StateEstablished, 0, sockets.SockConnected, false, true},
		{sockets.StateEstablished, 0, sockets.SockConnecting, false, true},
		{sockets.StateEstablished, 1, sockets.SockConnecting, false, false}, // shutdown makes it connected
		{sockets.StateEstablished, 0, sockets.SockDisconnecting, false, false},
		{sockets.StateEstablished, 0, 1, false, false},
		{sockets.StateCloseWait, 1, sockets.SockConnecting, false, true},
		{sockets.StateFinWait2, 2, sockets.SockConnecting, false, false},
		{sockets.StateFinWait2, 2, sockets.SockConnected, false, true},
		{sockets.StateSynSent, 0, sockets.SockConnecting, false, true},
		{sockets.StateSynSent, 0, sockets.SockConnected, false, false},
		{sockets.StateClose, 3, sockets.SockConnected, false, true},
		{sockets.StateClose, 3, sockets.SockConnecting, false, true},
		{sockets.StateClose, 3, sockets.SockDisconnecting, false, true},
		{sockets.StateClose, 3, sockets.SockConnecting, true, true},
		{sockets.StateClose, 3, sockets.SockDisconnecting, true, true},
		{sockets.StateClose, 3, sockets.SockConnected, true, false},
	}
	for _, c := range cases {
		err := sockets.CheckSockState(c.state, c.shutdown, &image.TCPRepair{SockState: c.ss, Connecting: c.failed})
		if (err == nil) != c.ok {
			t.Errorf("state %s, shutdown %d, socket state %d, failed %v: %v, want ok %v", sockets.StateName(c.state), c.shutdown, c.ss, c.failed, err, c.ok)
		}
		if err != nil && !errors.Is(err, sockets.ErrState) {
			t.Errorf("state %s: %v, not ErrState", sockets.StateName(c.state), err)
		}
	}
}

// TestConnectingFastOpen checks that a connecting socket with
// TCP_FASTOPEN_CONNECT set is refused (its connect again could be
// deferred), and one without it, or connected, is not.
func TestConnectingFastOpen(t *testing.T) {
	e := newEnds(t, "tcp4")
	connectNonBlocking(t, e, "tcp4")
	connecting := &image.TCPRepair{SockState: sockets.SockConnecting}
	connected := &image.TCPRepair{SockState: sockets.SockConnected}
	must(t, sockets.ConnectingRefusal(e.cli, sockets.StateEstablished, connecting))
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT, 1); err != nil {
		t.Skipf("TCP_FASTOPEN_CONNECT: %v", err)
	}
	if err := sockets.ConnectingRefusal(fd, sockets.StateEstablished, connecting); !errors.Is(err, sockets.ErrState) {
		t.Errorf("connecting with TCP_FASTOPEN_CONNECT: %v, want ErrState", err)
	}
	must(t, sockets.ConnectingRefusal(fd, sockets.StateEstablished, connected))
}
