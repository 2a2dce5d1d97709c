package sockets

import (
	"bytes"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// setter sets one option on a socket under test.
type setter struct {
	name string
	set  func(fd int) error
}

func intOpt(level, name, v int) setter {
	return setter{"", func(fd int) error { return unix.SetsockoptInt(fd, level, name, v) }}
}

func bytesOpt(level, name int, b []byte) setter {
	return setter{"", func(fd int) error { return sys.Setsockopt(fd, level, name, unsafe.Pointer(&b[0]), uintptr(len(b))) }}
}

// acceptAll is a classic BPF program that accepts every packet whole.
func acceptAll(fd int) error {
	insns := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff}}
	prog := unix.SockFprog{Len: 1, Filter: &insns[0]}
	return sys.Setsockopt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, unsafe.Pointer(&prog), unsafe.Sizeof(prog))
}

// commonOpts are set on every socket of the tests: SOL_SOCKET options a
// program sets, including those lost before the inventory existed.
func commonOpts() []setter {
	tv := unix.Timeval{Sec: 2, Usec: 5}
	tvb := (*[16]byte)(unsafe.Pointer(&tv))[:]
	l := unix.Linger{Onoff: 1, Linger: 4}
	lb := (*[8]byte)(unsafe.Pointer(&l))[:]
	return []setter{
		intOpt(unix.SOL_SOCKET, unix.SO_REUSEADDR, 1),
		intOpt(unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1),
		intOpt(unix.SOL_SOCKET, unix.SO_PRIORITY, 5),
		intOpt(unix.SOL_SOCKET, unix.SO_MARK, 7),
		intOpt(unix.SOL_SOCKET, unix.SO_RCVLOWAT, 3),
		intOpt(unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1),
		bytesOpt(unix.SOL_SOCKET, unix.SO_RCVTIMEO, tvb),
		bytesOpt(unix.SOL_SOCKET, unix.SO_SNDTIMEO, tvb),
		bytesOpt(unix.SOL_SOCKET, unix.SO_LINGER, lb),
		intOpt(unix.SOL_SOCKET, unix.SO_SNDBUF, 100000),
		intOpt(unix.SOL_SOCKET, unix.SO_RCVBUF, 80000),
		bytesOpt(unix.SOL_SOCKET, unix.SO_BINDTODEVICE, []byte("lo")),
		{"filter", acceptAll},
		intOpt(unix.SOL_SOCKET, unix.SO_LOCK_FILTER, 1),
	}
}

func ipOpts() []setter {
	return []setter{
		intOpt(unix.IPPROTO_IP, unix.IP_TOS, 0x10),
		intOpt(unix.IPPROTO_IP, unix.IP_TTL, 33),
		intOpt(unix.IPPROTO_IP, unix.IP_FREEBIND, 1),
		intOpt(unix.IPPROTO_IP, unix.IP_RECVERR, 1),
	}
}

func ipv6Opts() []setter {
	return []setter{
		intOpt(unix.IPPROTO_IPV6, unix.IPV6_TCLASS, 0x20),
		intOpt(unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, 17),
		intOpt(unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1),
	}
}

func tcpOpts() []setter {
	return []setter{
		intOpt(unix.IPPROTO_TCP, unix.TCP_NODELAY, 1),
		intOpt(unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 77),
		intOpt(unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 11),
		intOpt(unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 4),
		intOpt(unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, 12345),
		intOpt(unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, 65536),
		bytesOpt(unix.IPPROTO_TCP, unix.TCP_CONGESTION, []byte("reno")),
	}
}

// readAll reads every row of the inventory a socket has, to compare a
// socket with its restored copy.
func readAll(t *testing.T, fd int) map[string]image.SockOpt {
	t.Helper()
	family, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	proto, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	st, _ := State(fd)
	out := map[string]image.SockOpt{}
	for i := range Options {
		o := &Options[i]
		if !o.applies(family, proto, proto == unix.IPPROTO_TCP && st == StateEstablished) {
			continue
		}
		v, ok, err := readRow(fd, o)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			out[o.Label] = v
		}
	}
	return out
}

// volatile are rows that a connection changes by itself.
var volatile = map[string]bool{"SOL_SOCKET SO_INCOMING_CPU": true}

func compareAll(t *testing.T, want, got map[string]image.SockOpt) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if volatile[k] {
			continue
		}
		if !ok || g.Value != w.Value || !bytes.Equal(g.Bytes, w.Bytes) {
			t.Errorf("%s: restored %d %x, want %d %x", k, g.Value, g.Bytes, w.Value, w.Bytes)
		}
	}
}

func setAll(t *testing.T, fd int, ss []setter) {
	t.Helper()
	for i, s := range ss {
		if err := s.set(fd); err != nil {
			t.Fatalf("setter %d %s: %v", i, s.name, err)
		}
	}
}

// TestOptionsListenUDP sets options on listeners and UDP sockets, saves
// them, closes them, rebuilds them and compares every row of the
// inventory.
func TestOptionsListenUDP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (SO_MARK, SO_*BUFFORCE)")
	}
	tests := []struct {
		name           string
		family, typ    int
		addr           string
		listen, v6only bool
		opts           []setter
	}{
		{"tcp4-listen", unix.AF_INET, unix.SOCK_STREAM, "127.0.0.1", true, false, append(append(commonOpts(), ipOpts()...), tcpOpts()...)},
		{"tcp6-listen", unix.AF_INET6, unix.SOCK_STREAM, "::1", true, true, append(append(append(commonOpts(), ipOpts()...), ipv6Opts()...), tcpOpts()...)},
		{"tcp6-any-listen", unix.AF_INET6, unix.SOCK_STREAM, "::", true, false, append(commonOpts(), tcpOpts()...)},
		{"tcp4-bound", unix.AF_INET, unix.SOCK_STREAM, "127.0.0.1", false, false, append(commonOpts(), tcpOpts()...)},
		{"udp4", unix.AF_INET, unix.SOCK_DGRAM, "127.0.0.1", false, false, append(append(commonOpts(), ipOpts()...), intOpt(unix.IPPROTO_UDP, unix.UDP_SEGMENT, 1000))},
		{"udp6", unix.AF_INET6, unix.SOCK_DGRAM, "::1", false, true, append(append(commonOpts(), ipv6Opts()...), intOpt(unix.IPPROTO_UDP, unix.UDP_GRO, 1))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd, err := unix.Socket(tt.family, tt.typ|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			if tt.family == unix.AF_INET6 {
				setAll(t, fd, []setter{intOpt(unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, map[bool]int{true: 1}[tt.v6only])})
			}
			setAll(t, fd, tt.opts)
			var sa unix.Sockaddr = &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
			if tt.family == unix.AF_INET6 {
				a := net.ParseIP(tt.addr)
				s6 := &unix.SockaddrInet6{}
				copy(s6.Addr[:], a)
				sa = s6
			}
			if err := unix.Bind(fd, sa); err != nil {
				t.Fatal(err)
			}
			if tt.listen {
				if err := unix.Listen(fd, 7); err != nil {
					t.Fatal(err)
				}
			}
			want := readAll(t, fd)
			s, err := Describe(fd)
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(fd)
			nsock, err := Open(s, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer nsock.Close()
			nfd := nsock.Int()
			compareAll(t, want, readAll(t, nfd))
		})
	}
}

// TestOptionsConnection sets options on established connections (IPv4,
// IPv6, v4-mapped), dumps them in repair mode, closes them silently,
// rebuilds them and compares every row; the connection still carries
// data both ways.
func TestOptionsConnection(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (TCP_REPAIR)")
	}
	tests := []struct {
		name, network, addr string
		opts                []setter
	}{
		{"tcp4", "tcp4", "127.0.0.1:0", append(append(commonOpts(), ipOpts()...), tcpOpts()...)},
		{"tcp6", "tcp6", "[::1]:0", append(append(commonOpts(), ipv6Opts()...), tcpOpts()...)},
		{"v4-mapped", "tcp", "[::ffff:127.0.0.1]:0", append(append(commonOpts(), ipOpts()...), tcpOpts()...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd, peer := connPair(t, tt.network, tt.addr)
			setAll(t, fd, tt.opts)
			if err := unix.Shutdown(fd, unix.SHUT_RD); err != nil {
				t.Fatal(err)
			}
			want := readAll(t, fd)
			s, err := Describe(fd)
			if err != nil {
				t.Fatal(err)
			}
			if s.Shutdown != 1 {
				t.Fatalf("shutdown %d, want 1 (SHUT_RD)", s.Shutdown)
			}
			st, recvQ, sendQ, err := DumpTCP(fd)
			if err != nil {
				t.Fatal(err)
			}
			s.TCP = &st.TCPRepair
			unix.Close(fd)
			dropRebuildSYNs(t)
			nsock, err := Open(s, recvQ, sendQ)
			if err != nil {
				t.Fatal(err)
			}
			defer nsock.Close()
			nfd := nsock.Int()
			if err := Resume(nfd, st, sendQ); err != nil {
				t.Fatal(err)
			}
			compareAll(t, want, readAll(t, nfd))
			if got := shutdownOf(nfd); got != 1 {
				t.Errorf("restored shutdown %d, want 1", got)
			}
			if err := sendAll(nfd, []byte("after")); err != nil {
				t.Fatal(err)
			}
			peer.SetReadDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, 5)
			if _, err := peer.Read(b); err != nil || string(b) != "after" {
				t.Fatalf("peer read %q, %v", b, err)
			}
		})
	}
}

// TestRefusedOptions checks that state that cannot be read back refuses
// the socket, naming it.
func TestRefusedOptions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root")
	}
	tests := []struct {
		name  string
		make  func(t *testing.T) int
		where string
	}{
		{"pending error", func(t *testing.T) int {
			fd, _ := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVERR, 1)
			// A closed port answers with ICMP port unreachable.
			unix.Connect(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: 9})
			unix.Write(fd, []byte("x"))
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				p := []unix.PollFd{{Fd: int32(fd)}}
				if unix.Poll(p, 10); p[0].Revents&unix.POLLERR != 0 {
					break
				}
			}
			return fd
		}, "pending socket error"},
		{"TCP-MD5 key", func(t *testing.T) int {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			must(t, err)
			var sig [216]byte // struct tcp_md5sig: a key for peer 127.0.0.2
			*(*uint16)(unsafe.Pointer(&sig[0])) = unix.AF_INET
			copy(sig[4:8], []byte{127, 0, 0, 2})
			*(*uint16)(unsafe.Pointer(&sig[130])) = 6
			copy(sig[136:], "secret")
			if err := sys.Setsockopt(fd, unix.IPPROTO_TCP, unix.TCP_MD5SIG, unsafe.Pointer(&sig[0]), uintptr(len(sig))); err != nil {
				t.Skipf("no TCP-MD5 here: %v", err)
			}
			must(t, unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
			must(t, unix.Listen(fd, 1))
			return fd
		}, "TCP-MD5"},
		{"many TCP-MD5 keys", func(t *testing.T) int {
			// 100 keys: sock_diag's reply (104 bytes a key) is larger
			// than the first buffer it is read into.
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			must(t, err)
			for i := range 100 {
				var sig [216]byte
				*(*uint16)(unsafe.Pointer(&sig[0])) = unix.AF_INET
				copy(sig[4:8], []byte{127, 0, 1, byte(i)})
				*(*uint16)(unsafe.Pointer(&sig[130])) = 6
				copy(sig[136:], "secret")
				if err := sys.Setsockopt(fd, unix.IPPROTO_TCP, unix.TCP_MD5SIG, unsafe.Pointer(&sig[0]), uintptr(len(sig))); err != nil {
					t.Skipf("no TCP-MD5 key %d here: %v", i, err)
				}
			}
			must(t, unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
			must(t, unix.Listen(fd, 1))
			return fd
		}, "TCP-MD5"},
		{"urgent data", func(t *testing.T) int {
			fd, peer := connPair(t, "tcp4", "127.0.0.1:0")
			f, err := peer.(*net.TCPConn).File()
			must(t, err)
			defer f.Close()
			must(t, unix.Send(int(f.Fd()), []byte("!"), unix.MSG_OOB))
			deadline := time.Now().Add(5 * time.Second)
			for !urgentData(fd) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			return fd
		}, "urgent data"},
		{"MPTCP connection", func(t *testing.T) int {
			_, srv := mptcpPair(t, true)
			return srv
		}, "MPTCP connection (ESTABLISHED): its subflows cannot be repaired"},
		{"reset connection, its error not read", func(t *testing.T) int {
			fd, peer := connPair(t, "tcp4", "127.0.0.1:0")
			peer.(*net.TCPConn).SetLinger(0)
			peer.Close()
			deadline := time.Now().Add(5 * time.Second)
			for s, _ := State(fd); s != tcpClose && time.Now().Before(deadline); s, _ = State(fd) {
				time.Sleep(5 * time.Millisecond)
			}
			return fd // ECONNRESET pending: its value cannot be read without clearing it
		}, "closed after a connection with an error pending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd := tt.make(t)
			defer unix.Close(fd)
			_, err := Describe(fd)
			if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), tt.where) {
				t.Fatalf("Describe: %v, want a refusal naming %q", err, tt.where)
			}
		})
	}
}
