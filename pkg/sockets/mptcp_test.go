package sockets

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// mptcpSocket makes an MPTCP socket of family, or skips the test on a
// kernel (or net.mptcp.enabled=0) without MPTCP.
func mptcpSocket(t *testing.T, family int) int {
	t.Helper()
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_MPTCP)
	if err != nil {
		t.Skipf("no MPTCP here: %v", err)
	}
	return fd
}

// mptcpListener makes an MPTCP listener on 127.0.0.1 (closed at the end
// of the test) and returns it and its address.
func mptcpListener(t *testing.T) (int, netip.AddrPort) {
	t.Helper()
	l := mptcpSocket(t, unix.AF_INET)
	t.Cleanup(func() { unix.Close(l) })
	must(t, unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	must(t, unix.Listen(l, 4))
	sa, err := unix.Getsockname(l)
	must(t, err)
	return l, AddrPort(sa)
}

// mptcpPair connects a client (an MPTCP one if mp) to a new MPTCP
// listener and accepts it: the client's fd and the accepted one's.
func mptcpPair(t *testing.T, mp bool) (cli, srv int) {
	t.Helper()
	l, addr := mptcpListener(t)
	cli = dialTo(t, addr, mp)
	srv, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
	must(t, err)
	t.Cleanup(func() { unix.Close(srv) })
	return cli, srv
}

// dialTo connects a new client (MPTCP if mp) to addr; closed at the end
// of the test.
func dialTo(t *testing.T, addr netip.AddrPort, mp bool) int {
	t.Helper()
	proto := 0
	if mp {
		proto = unix.IPPROTO_MPTCP
	}
	family := unix.AF_INET
	if addr.Addr().Is6() {
		family = unix.AF_INET6
	}
	c, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, proto)
	must(t, err)
	t.Cleanup(func() { unix.Close(c) })
	must(t, unix.Connect(c, Sockaddr(addr)))
	return c
}

// exchangeVia connects a new client (MPTCP if mp) to the listener l at
// addr, accepts it, checks the accepted socket's protocol and sends a
// line each way.
func exchangeVia(t *testing.T, l int, addr netip.AddrPort, mp bool) {
	t.Helper()
	c := dialTo(t, addr, mp)
	p := []unix.PollFd{{Fd: int32(l), Events: unix.POLLIN}}
	if n, err := unix.Poll(p, 10000); n != 1 || err != nil {
		t.Fatalf("MPTCP %v client: not accepted (%d, %v)", mp, n, err)
	}
	s, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
	must(t, err)
	defer unix.Close(s)
	want := unix.IPPROTO_TCP
	if mp {
		want = unix.IPPROTO_MPTCP
	}
	if got, _ := unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_PROTOCOL); got != want {
		t.Errorf("MPTCP %v client: accepted SO_PROTOCOL %d, want %d", mp, got, want)
	}
	for _, dir := range [][2]int{{c, s}, {s, c}} {
		must(t, sendAll(dir[0], []byte("line\n")))
		b := make([]byte, 5)
		if _, err := io.ReadFull(fdReader(dir[1]), b); err != nil || string(b) != "line\n" {
			t.Fatalf("MPTCP %v client: read %q, %v", mp, b, err)
		}
	}
}

// fdReader reads a blocking fd.
type fdReader int

func (f fdReader) Read(b []byte) (int, error) {
	n, err := unix.Read(int(f), b)
	if n == 0 && err == nil {
		return 0, io.EOF
	}
	return max(n, 0), err
}

// mptcpOpts are options an MPTCP socket lets a program set and read back
// (the integer ones TestMPTCPOptionSweep finds itself).
func mptcpOpts() []setter {
	tv := unix.Timeval{Sec: 2, Usec: 5}
	tvb := (*[16]byte)(unsafe.Pointer(&tv))[:]
	l := unix.Linger{Onoff: 1, Linger: 4}
	lb := (*[8]byte)(unsafe.Pointer(&l))[:]
	ts := [8]byte{0x10} // SOF_TIMESTAMPING_SOFTWARE... flags, bind_phc 0
	return []setter{
		bytesOpt(unix.SOL_SOCKET, unix.SO_RCVTIMEO, tvb),
		bytesOpt(unix.SOL_SOCKET, unix.SO_SNDTIMEO, tvb),
		bytesOpt(unix.SOL_SOCKET, unix.SO_LINGER, lb),
		bytesOpt(unix.SOL_SOCKET, unix.SO_BINDTODEVICE, []byte("lo")),
		bytesOpt(unix.SOL_SOCKET, unix.SO_TIMESTAMPING, ts[:]),
		bytesOpt(unix.IPPROTO_TCP, unix.TCP_CONGESTION, []byte("reno")),
		intOpt(unix.SOL_SOCKET, unix.SO_REUSEADDR, 1),
		intOpt(unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1),
		intOpt(unix.SOL_SOCKET, unix.SO_PRIORITY, 5),
		intOpt(unix.SOL_SOCKET, unix.SO_MARK, 7),
		intOpt(unix.SOL_SOCKET, unix.SO_RCVBUF, 80000),
		intOpt(unix.SOL_SOCKET, unix.SO_SNDBUF, 100000),
		intOpt(unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1),
		intOpt(unix.IPPROTO_TCP, unix.TCP_NODELAY, 1),
		intOpt(unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 77),
		intOpt(unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 11),
		intOpt(unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 4),
	}
}

// TestMPTCPListen saves MPTCP listeners and never-connected MPTCP
// sockets (bound or not), closes them, rebuilds them and compares every
// row of the inventory, the protocol, the address and the backlog; the
// rebuilt listener accepts a plain TCP client and an MPTCP one.
func TestMPTCPListen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (SO_MARK, SO_*BUFFORCE)")
	}
	tests := []struct {
		name         string
		family       int
		addr         string
		bind, listen bool
		v6only       int
		opts         []setter
	}{
		{"listen4", unix.AF_INET, "127.0.0.1", true, true, 0, mptcpOpts()},
		{"listen6", unix.AF_INET6, "::1", true, true, 1, mptcpOpts()},
		{"listen6-any", unix.AF_INET6, "::", true, true, 0, mptcpOpts()},
		{"listen4-no-reuseaddr", unix.AF_INET, "127.0.0.1", true, true, 0, []setter{intOpt(unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)}},
		{"bound4", unix.AF_INET, "127.0.0.1", true, false, 0, mptcpOpts()},
		{"unbound4", unix.AF_INET, "", false, false, 0, mptcpOpts()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd := mptcpSocket(t, tt.family)
			if tt.family == unix.AF_INET6 {
				setAll(t, fd, []setter{intOpt(unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, tt.v6only)})
			}
			setAll(t, fd, tt.opts)
			if tt.bind {
				must(t, unix.Bind(fd, Sockaddr(netip.AddrPortFrom(netip.MustParseAddr(tt.addr), 0))))
			}
			if tt.listen {
				must(t, unix.Listen(fd, 7))
			}
			want := readAll(t, fd)
			sa, err := unix.Getsockname(fd)
			must(t, err)
			name := AddrPort(sa)
			s, err := Describe(fd)
			if err != nil {
				unix.Close(fd)
				t.Fatal(err)
			}
			unix.Close(fd)
			if s.Protocol != unix.IPPROTO_MPTCP {
				t.Fatalf("saved protocol %d, want MPTCP", s.Protocol)
			}
			nsock, err := Open(s, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer nsock.Close()
			nfd := nsock.Int()
			compareAll(t, want, readAll(t, nfd))
			if p, _ := unix.GetsockoptInt(nfd, unix.SOL_SOCKET, unix.SO_PROTOCOL); p != unix.IPPROTO_MPTCP {
				t.Errorf("restored SO_PROTOCOL %d, want MPTCP", p)
			}
			sa, err = unix.Getsockname(nfd)
			must(t, err)
			if got := AddrPort(sa); got != name {
				t.Errorf("restored address %s, want %s", got, name)
			}
			if !tt.listen {
				return
			}
			var info [256]byte
			if _, err := sys.Getsockopt(nfd, unix.IPPROTO_TCP, unix.TCP_INFO, ptr(&info[0]), uintptr(len(info))); err != nil {
				t.Fatal(err)
			}
			if info[0] != StateListen || le32(info[28:]) != 7 {
				t.Errorf("restored state %d backlog %d, want LISTEN, 7", info[0], le32(info[28:]))
			}
			addr := name
			if addr.Addr().IsUnspecified() {
				addr = netip.AddrPortFrom(netip.MustParseAddr("::1"), name.Port())
			}
			exchangeVia(t, nfd, addr, false)
			exchangeVia(t, nfd, addr, true)
		})
	}
}

// TestMPTCPOptionSweep sets, one at a time, every integer option of the
// inventory that an MPTCP socket lets a program change (setsockopt
// succeeds and getsockopt reads the new value), on a listener, and checks
// that the rebuilt listener has it: every option the dump saves of an
// MPTCP socket can be set back.
func TestMPTCPOptionSweep(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (SO_MARK, SO_*BUFFORCE)")
	}
	mptcpSocket(t, unix.AF_INET) // skips without MPTCP
	var swept []string
	for i := range Options {
		o := &Options[i]
		if o.How != Int && o.How != Buffer || !o.applies(unix.AF_INET6, unix.IPPROTO_MPTCP, false) {
			continue
		}
		fd := mptcpSocket(t, unix.AF_INET6)
		v, ok, err := readRow(fd, o)
		if err != nil || !ok {
			unix.Close(fd)
			continue
		}
		nv := 1
		if v.Value != 0 {
			nv = v.Value + 1
		}
		if o.How == Buffer {
			nv = 50000
		}
		if unix.SetsockoptInt(fd, o.Level, o.Name, nv) != nil {
			unix.Close(fd)
			continue // a program cannot change it either
		}
		if now, _, _ := readRow(fd, o); now.Value == v.Value {
			unix.Close(fd)
			continue
		}
		if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: [16]byte{15: 1}}); err != nil {
			unix.Close(fd)
			t.Fatalf("%s: bind: %v", o.Label, err)
		}
		must(t, unix.Listen(fd, 3))
		want, _, _ := readRow(fd, o)
		s, err := Describe(fd)
		unix.Close(fd)
		if err != nil {
			t.Errorf("%s = %d: Describe: %v", o.Label, nv, err)
			continue
		}
		nsock, err := Open(s, nil, nil)
		if err != nil {
			t.Errorf("%s = %d: Open: %v", o.Label, nv, err)
			continue
		}
		got, _, _ := readRow(nsock.Int(), o)
		nsock.Close()
		if got.Value != want.Value {
			t.Errorf("%s: restored %d, want %d", o.Label, got.Value, want.Value)
		}
		swept = append(swept, o.Label)
	}
	if len(swept) < 10 {
		t.Errorf("only %d options swept: %v", len(swept), swept)
	}
	t.Logf("%d options an MPTCP listener lets a program change, each restored: %s", len(swept), strings.Join(swept, ", "))
}

// TestMPTCPRefused checks the MPTCP sockets the dump refuses by name,
// and that an MPTCP listener with a connection in its accept queue is
// described with ErrAcceptQueue (retried, or dropped with
// --skip-in-flight, as a TCP listener).
func TestMPTCPRefused(t *testing.T) {
	tests := []struct {
		name  string
		make  func(t *testing.T) int
		want  error
		where string
	}{
		{"accepted MPTCP connection", func(t *testing.T) int {
			_, srv := mptcpPair(t, true)
			return srv
		}, ErrState, "MPTCP connection (ESTABLISHED): its subflows cannot be repaired"},
		{"connected MPTCP client", func(t *testing.T) int {
			cli, _ := mptcpPair(t, true)
			return cli
		}, ErrState, "MPTCP connection (ESTABLISHED)"},
		{"MPTCP client whose peer closed", func(t *testing.T) int {
			cli, srv := mptcpPair(t, true)
			unix.Close(srv)
			return cli
		}, ErrState, "MPTCP connection ("},
		{"disconnected MPTCP client", func(t *testing.T) int {
			cli, _ := mptcpPair(t, true)
			must(t, sys.Disconnect(cli))
			return cli
		}, ErrState, "MPTCP socket closed or disconnected after a connection (or an attempt) to 127.0.0.1:"},
		{"MPTCP client whose connect was refused", func(t *testing.T) int {
			l, addr := mptcpListener(t)
			unix.Close(l) // nobody listens there now
			c := mptcpSocket(t, unix.AF_INET)
			t.Cleanup(func() { unix.Close(c) })
			if err := unix.Connect(c, Sockaddr(addr)); !errors.Is(err, unix.ECONNREFUSED) {
				t.Fatalf("connect to a closed port: %v, want ECONNREFUSED", err)
			}
			return c
		}, ErrState, "MPTCP socket"},
		{"MPTCP socket shut down, never connected", func(t *testing.T) int {
			c := mptcpSocket(t, unix.AF_INET)
			t.Cleanup(func() { unix.Close(c) })
			unix.Shutdown(c, unix.SHUT_RD)
			return c
		}, ErrState, "MPTCP socket in state CLOSE with its receive side shut"},
		{"MPTCP listener with a half-open connection (TCP_DEFER_ACCEPT)", func(t *testing.T) int {
			l := mptcpSocket(t, unix.AF_INET)
			t.Cleanup(func() { unix.Close(l) })
			must(t, unix.SetsockoptInt(l, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, 30))
			must(t, unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
			must(t, unix.Listen(l, 4))
			sa, err := unix.Getsockname(l)
			must(t, err)
			dialTo(t, AddrPort(sa), false)
			return l
		}, ErrAcceptQueue, "MPTCP listening socket with 1 connections half-open (SYN_RECV"},
		{"MPTCP listener with a connection waiting", func(t *testing.T) int {
			l, addr := mptcpListener(t)
			dialTo(t, addr, false)
			return l
		}, ErrAcceptQueue, "MPTCP listening socket with 1 connections not accepted yet"},
		{"MPTCP listener with an MPTCP connection waiting", func(t *testing.T) int {
			l, addr := mptcpListener(t)
			dialTo(t, addr, true)
			return l
		}, ErrAcceptQueue, "MPTCP listening socket with 1 connections not accepted yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd := tt.make(t)
			s, err := Describe(fd)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.where) {
				t.Fatalf("Describe: %v, want %v naming %q", err, tt.want, tt.where)
			}
			t.Logf("refused: %v", err)
			if tt.want == ErrAcceptQueue && (s == nil || s.State != StateListen || s.Protocol != unix.IPPROTO_MPTCP) {
				t.Fatalf("listener described as %+v, want an MPTCP listener", s)
			}
		})
	}
}

// TestMPTCPReusePort saves two MPTCP listeners of one SO_REUSEPORT group
// (PortShared) and rebuilds them on the same port; the first one rebuilt
// accepts (alone in the group then).
func TestMPTCPReusePort(t *testing.T) {
	var fds []int
	port := 0
	for range 2 {
		fd := mptcpSocket(t, unix.AF_INET)
		must(t, unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1))
		must(t, unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port}))
		must(t, unix.Listen(fd, 2))
		sa, err := unix.Getsockname(fd)
		must(t, err)
		port = sa.(*unix.SockaddrInet4).Port
		fds = append(fds, fd)
	}
	var saved []*image.Socket
	for _, fd := range fds {
		s, err := Describe(fd)
		if err != nil {
			t.Fatal(err)
		}
		if !s.PortShared {
			t.Fatalf("listener of a reuseport group not PortShared: %+v", s)
		}
		saved = append(saved, s)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
	for i, s := range saved {
		nsock, err := Open(s, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer nsock.Close()
		if i == 0 {
			exchangeVia(t, nsock.Int(), addr, true)
		}
	}
}

// TestMPTCPAcceptedPort checks that a plain TCP connection accepted from
// an MPTCP listener is known to share its listener's port (the TCP
// subflow listener sock_diag lists holds it): the dump then never asks
// the BPF lock reader about it, whose iterator also reads the subflow
// listener (a cookie no fd has).
func TestMPTCPAcceptedPort(t *testing.T) {
	_, srv := mptcpPair(t, false)
	if p, _ := unix.GetsockoptInt(srv, unix.SOL_SOCKET, unix.SO_PROTOCOL); p != unix.IPPROTO_TCP {
		t.Fatalf("accepted SO_PROTOCOL %d, want TCP", p)
	}
	sa, err := unix.Getsockname(srv)
	must(t, err)
	port := AddrPort(sa).Port()
	if lo, hi, ok := localPortRange(); !ok || port < lo || port > hi {
		t.Skipf("listener port %d outside ip_local_port_range %d-%d: nothing to tell", port, lo, hi)
	}
	may, err := ConnectMayChoosePort(srv, &Listeners{})
	if err != nil {
		t.Fatal(err)
	}
	if may {
		t.Errorf("accepted connection on port %d of an MPTCP listener: connect may have chosen its port, want its listener's", port)
	}
}

// TestMPTCPDisabled rebuilds an MPTCP listener in a network namespace
// whose net.mptcp.enabled is 0: the restore fails, naming the sysctl.
func TestMPTCPDisabled(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (unshare, sysctl)")
	}
	mptcpSocket(t, unix.AF_INET) // skips without MPTCP
	s := &image.Socket{Family: unix.AF_INET, Type: unix.SOCK_STREAM, Protocol: unix.IPPROTO_MPTCP,
		State: StateListen, Local: "127.0.0.1:0", Backlog: 3}
	ch := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- err
			return
		}
		if err := os.WriteFile("/proc/sys/net/mptcp/enabled", []byte("0"), 0); err != nil {
			ch <- err
			return
		}
		sock, err := Open(s, nil, nil)
		if err == nil {
			sock.Close()
			err = errors.New("built")
		}
		ch <- err
	}()
	err := <-ch
	if !errors.Is(err, ErrMPTCPDisabled) || !strings.Contains(err.Error(), "net.mptcp.enabled=0") {
		t.Fatalf("Open with net.mptcp.enabled=0: %v, want ErrMPTCPDisabled", err)
	}
	t.Logf("refused: %v", err)
}

// TestMPTCPListenerAfterAccepted rebuilds a plain TCP connection accepted
// from an MPTCP listener before the listener (a lower fd): the connection
// holds the port in repair mode, and the listener still binds and listens
// on it; both carry data afterwards.
func TestMPTCPListenerAfterAccepted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TCP_REPAIR needs root (CAP_NET_ADMIN)")
	}
	l := mptcpSocket(t, unix.AF_INET)
	must(t, unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	must(t, unix.Listen(l, 4))
	lsa, err := unix.Getsockname(l)
	must(t, err)
	addr := AddrPort(lsa)
	cli := dialTo(t, addr, false)
	srv, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
	must(t, err)
	ls, err := Describe(l)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := Describe(srv)
	if err != nil {
		t.Fatal(err)
	}
	st, recvQ, sendQ, err := DumpTCP(srv)
	if err != nil {
		t.Fatal(err)
	}
	ss.TCP = &st.TCPRepair
	unix.Close(srv) // in repair mode: silent
	unix.Close(l)
	dropRebuildSYNs(t)
	nsrv, err := Open(ss, recvQ, sendQ)
	if err != nil {
		t.Fatal(err)
	}
	defer nsrv.Close()
	nl, err := Open(ls, nil, nil)
	if err != nil {
		t.Fatalf("MPTCP listener after its accepted connection: %v", err)
	}
	defer nl.Close()
	if err := Resume(nsrv.Int(), st, sendQ); err != nil {
		t.Fatal(err)
	}
	for _, dir := range [][2]int{{cli, nsrv.Int()}, {nsrv.Int(), cli}} {
		must(t, sendAll(dir[0], []byte("kept\n")))
		b := make([]byte, 5)
		if _, err := io.ReadFull(fdReader(dir[1]), b); err != nil || string(b) != "kept\n" {
			t.Fatalf("the accepted connection: read %q, %v", b, err)
		}
	}
	exchangeVia(t, nl.Int(), addr, false)
	exchangeVia(t, nl.Int(), addr, true)
}
