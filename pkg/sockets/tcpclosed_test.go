package sockets_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"testing"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/netlock"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// closedView is what a program can see of a TCP socket in state CLOSE
// without changing it.
type closedView struct {
	State, Revents  int
	Name            string
	PeerErr         error // getpeername
	PeerName        string
	MaxSeg, InQ     int
	Options, Wscale byte
}

func viewClosed(t *testing.T, fd int) closedView {
	t.Helper()
	var v closedView
	var err error
	v.State, err = sockets.State(fd)
	must(t, err)
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLOUT | unix.POLLRDHUP | unix.POLLPRI}}
	unix.Poll(p, 0)
	v.Revents = int(p[0].Revents)
	la, err := unix.Getsockname(fd)
	must(t, err)
	v.Name = sockets.AddrPort(la).String()
	_, v.PeerErr = unix.Getpeername(fd)
	buf := make([]byte, 16)
	if dom, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); dom == unix.AF_INET6 {
		buf = make([]byte, 28)
	}
	if n, err := sys.Getsockopt(fd, unix.SOL_SOCKET, unix.SO_PEERNAME, unsafe.Pointer(&buf[0]), uintptr(len(buf))); err == nil {
		v.PeerName = fmt.Sprint(buf[:n])
	} else {
		v.PeerName = err.Error()
	}
	v.MaxSeg, _ = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
	v.InQ, _ = unix.IoctlGetInt(fd, unix.SIOCINQ)
	var info [256]byte
	_, err = sys.Getsockopt(fd, unix.IPPROTO_TCP, unix.TCP_INFO, unsafe.Pointer(&info[0]), uintptr(len(info)))
	must(t, err)
	v.Options, v.Wscale = info[5], info[6]
	return v
}

// useClosed is what using a closed socket gives: the error, reads, a
// write, connect again (to an address of another family: no side
// effect on a socket the kernel calls connected or not), listen.
func useClosed(fd int) string {
	e, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	out := fmt.Sprintf("SO_ERROR %d", e)
	buf := make([]byte, 64)
	for range 2 {
		n, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
		out += fmt.Sprintf("; recv %d %q %v", n, buf[:max(n, 0)], err)
	}
	_, err := unix.SendmsgN(fd, []byte("x"), nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
	out += fmt.Sprintf("; send %v", err)
	out += fmt.Sprintf("; connect %v", unix.Connect(fd, &unix.SockaddrUnix{Name: "/nonexistent"}))
	out += fmt.Sprintf("; listen %v", unix.Listen(fd, 1))
	return out
}

// closedFamily makes sockets and addresses of one family.
type closedFamily struct {
	dom    int
	lo     netip.Addr
	mapped bool
}

func (f closedFamily) socket(t *testing.T) int {
	t.Helper()
	fd, err := unix.Socket(f.dom, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	must(t, err)
	if f.dom == unix.AF_INET6 {
		v6only := 1
		if f.mapped {
			v6only = 0
		}
		must(t, unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, v6only))
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// listener listens on a port bound explicitly (explicit) or chosen by
// the kernel.
func (f closedFamily) listener(t *testing.T, explicit bool) (int, unix.Sockaddr) {
	t.Helper()
	ln := f.socket(t)
	must(t, unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1))
	port := uint16(0)
	if explicit {
		port = freePort(t, f)
	}
	must(t, unix.Bind(ln, sockets.Sockaddr(netip.AddrPortFrom(f.lo, port))))
	must(t, unix.Listen(ln, 4))
	la, err := unix.Getsockname(ln)
	must(t, err)
	return ln, la
}

// freePort is a port nobody holds now.
func freePort(t *testing.T, f closedFamily) uint16 {
	t.Helper()
	fd, err := unix.Socket(f.dom, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	must(t, unix.Bind(fd, sockets.Sockaddr(netip.AddrPortFrom(f.lo, 0))))
	la, err := unix.Getsockname(fd)
	must(t, err)
	return sockets.AddrPort(la).Port()
}

// reset closes peer with a reset (SO_LINGER 0) and waits for fd to be
// closed by it.
func reset(t *testing.T, fd, peer int) {
	t.Helper()
	must(t, unix.SetsockoptLinger(peer, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}))
	unix.Close(peer)
	waitFor(t, "the reset", stateIs(fd, sockets.StateClose))
}

// TestTCPClosed makes TCP sockets closed in every way a connection ends
// (and disconnected ones), describes each, builds it again, and compares
// everything a program sees of the two: state, poll, names, SO_PEERNAME,
// MSS and options, bytes not read, the port held or given back, then
// what reading, writing, connecting and listening give.
func TestTCPClosed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TCP_REPAIR needs root (CAP_NET_ADMIN)")
	}
	families := map[string]closedFamily{
		"tcp4":   {dom: unix.AF_INET, lo: netip.MustParseAddr("127.0.0.1")},
		"tcp6":   {dom: unix.AF_INET6, lo: netip.IPv6Loopback()},
		"mapped": {dom: unix.AF_INET6, lo: netip.MustParseAddr("::ffff:127.0.0.1"), mapped: true},
	}
	peerListener := map[int]int{} // closed socket -> a listener on its peer's address
	sameListener := map[int]int{} // closed socket -> the listener holding its port
	cases := []struct {
		name     string
		families []string
		// setup returns the closed socket; the error it had is read.
		setup    func(t *testing.T, f closedFamily) int
		portFree bool
		// gap names what the rebuilt socket cannot show as the
		// original (see the inventory): "holds" (an accepted socket
		// holds the port its listener holds).
		gap string
	}{
		{"reset", []string{"tcp4", "tcp6", "mapped"}, func(t *testing.T, f closedFamily) int {
			ln, la := f.listener(t, false)
			fd := f.socket(t)
			must(t, unix.Connect(fd, la))
			srv, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
			must(t, err)
			reset(t, fd, srv)
			return fd
		}, true, ""},
		{"reset_data", []string{"tcp4"}, func(t *testing.T, f closedFamily) int {
			ln, la := f.listener(t, false)
			fd := f.socket(t)
			must(t, unix.Connect(fd, la))
			srv, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
			must(t, err)
			send(t, srv, []byte("unread bytes"))
			waitFor(t, "the bytes", func() bool { n, _ := unix.IoctlGetInt(fd, unix.SIOCINQ); return n == 12 })
			reset(t, fd, srv)
			return fd
		}, true, ""},
		{"reset_bound", []string{"tcp4"}, func(t *testing.T, f closedFamily) int {
			ln, la := f.listener(t, false)
			fd := f.socket(t)
			must(t, unix.Bind(fd, sockets.Sockaddr(netip.AddrPortFrom(f.lo, freePort(t, f)))))
			must(t, unix.Connect(fd, la))
			srv, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
			must(t, err)
			reset(t, fd, srv)
			return fd
		}, false, ""},
		{"reset_accepted", []string{"tcp4", "tcp6"}, func(t *testing.T, f closedFamily) int {
			ln, la := f.listener(t, true)
			cli := f.socket(t)
			must(t, unix.Connect(cli, la))
			fd, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
			must(t, err)
			t.Cleanup(func() { unix.Close(fd) })
			reset(t, fd, cli)
			sameListener[fd] = ln
			return fd
		}, true, "holds"},
		{"fin_active", []string{"tcp4", "tcp6", "mapped"}, func(t *testing.T, f closedFamily) int {
			ln, la := f.listener(t, false)
			fd := f.socket(t)
			must(t, unix.Connect(fd, la))
			srv, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
			must(t, err)
			send(t, srv, []byte("last words"))
			must(t, unix.Shutdown(fd, unix.SHUT_WR))
			waitFor(t, "FIN_WAIT2", stateIs(fd, sockets.StateFinWait2))
			unix.Close(srv)
			waitFor(t, "TIME_WAIT handed over", stateIs(fd, sockets.StateClose))
			return fd
		}, true, ""},
		{"fin_passive", []string{"tcp4"}, func(t *testing.T, f closedFamily) int {
			ln, la := f.listener(t, false)
			fd := f.socket(t)
			must(t, unix.Connect(fd, la))
			srv, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
			must(t, err)
			t.Cleanup(func() { unix.Close(srv) })
			must(t, unix.Shutdown(srv, unix.SHUT_WR))
			waitFor(t, "CLOSE_WAIT", stateIs(fd, sockets.StateCloseWait))
			must(t, unix.Shutdown(fd, unix.SHUT_WR))
			waitFor(t, "LAST_ACK done", stateIs(fd, sockets.StateClose))
			return fd
		}, true, ""},
		{"refused_nonblocking", []string{"tcp4", "tcp6"}, func(t *testing.T, f closedFamily) int {
			ln, la := f.listener(t, false)
			unix.Close(ln)
			fd := f.socket(t)
			must(t, unix.SetNonblock(fd, true))
			if err := unix.Connect(fd, la); err != unix.EINPROGRESS {
				t.Fatalf("connect: %v, want EINPROGRESS", err)
			}
			waitFor(t, "the refusal", stateIs(fd, sockets.StateClose))
			// The peer listens now: the SYN the rebuild sends must
			// not reach it (the test checks its queue stays empty).
			reopened := f.socket(t)
			must(t, unix.SetsockoptInt(reopened, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1))
			must(t, unix.Bind(reopened, la))
			must(t, unix.Listen(reopened, 4))
			peerListener[fd] = reopened
			return fd
		}, true, ""},
		{"refused_blocking", []string{"tcp4", "tcp6"}, func(t *testing.T, f closedFamily) int {
			ln, la := f.listener(t, false)
			unix.Close(ln)
			fd := f.socket(t)
			if err := unix.Connect(fd, la); err != unix.ECONNREFUSED {
				t.Fatalf("connect: %v, want ECONNREFUSED", err)
			}
			return fd
		}, true, ""},
		{"disconnected_bound_address", []string{"tcp4", "tcp6"}, func(t *testing.T, f closedFamily) int {
			// Bound to an address (the port chosen by bind): the
			// address stays after the disconnect, the port goes.
			_, la := f.listener(t, false)
			fd := f.socket(t)
			must(t, unix.Bind(fd, sockets.Sockaddr(netip.AddrPortFrom(f.lo, 0))))
			must(t, unix.Connect(fd, la))
			must(t, sys.Disconnect(fd))
			return fd
		}, true, ""},
		{"disconnected", []string{"tcp4"}, func(t *testing.T, f closedFamily) int {
			_, la := f.listener(t, false)
			fd := f.socket(t)
			must(t, unix.Connect(fd, la))
			must(t, sys.Disconnect(fd))
			return fd
		}, true, ""},
	}
	for _, c := range cases {
		for _, fam := range c.families {
			t.Run(c.name+"_"+fam, func(t *testing.T) {
				f := families[fam]
				fd := c.setup(t, f)
				unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR) // the program had read it
				want := viewClosed(t, fd)
				s, err := sockets.Describe(fd)
				must(t, err)
				if s.PortFree != c.portFree {
					t.Errorf("described with PortFree %v, want %v", s.PortFree, c.portFree)
				}
				var recvQ []byte
				if s.TCP != nil {
					recvQ, err = sockets.PeekClosed(fd)
					must(t, err)
				}
				if got := viewClosed(t, fd); !reflect.DeepEqual(got, want) {
					t.Fatalf("the dump changed the socket: %+v, was %+v", got, want)
				}
				nfd := openClosed(t, s, recvQ)
				if ln, ok := sameListener[fd]; ok {
					// Rebuilding on a port a listener holds leaves it be.
					delete(sameListener, fd)
					st, err := sockets.State(ln)
					e, _ := unix.GetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_ERROR)
					if err != nil || st != sockets.StateListen || e != 0 {
						t.Errorf("the listener on the port: state %s, error %d (%v)", sockets.StateName(st), e, err)
					}
				}
				if ln, ok := peerListener[fd]; ok {
					delete(peerListener, fd)
					var info [256]byte
					_, err := sys.Getsockopt(ln, unix.IPPROTO_TCP, unix.TCP_INFO, unsafe.Pointer(&info[0]), uintptr(len(info)))
					must(t, err)
					p := []unix.PollFd{{Fd: int32(ln), Events: unix.POLLIN}}
					unix.Poll(p, 50)
					if q := binary.LittleEndian.Uint32(info[24:]); q != 0 || p[0].Revents != 0 {
						t.Errorf("the rebuild's SYN reached the peer: %d connections queued (poll %#x)", q, p[0].Revents)
					}
				}
				if got := viewClosed(t, nfd); !reflect.DeepEqual(got, want) {
					t.Errorf("rebuilt: %+v\nwant      %+v", got, want)
				}
				again, err := sockets.Describe(nfd)
				must(t, err)
				if c.gap == "holds" {
					again.PortFree = true
				}
				if again.PortFree != s.PortFree || again.Local != s.Local || again.Remote != s.Remote {
					t.Errorf("rebuilt socket described as %s-%s free %v, want %s-%s free %v",
						again.Local, again.Remote, again.PortFree, s.Local, s.Remote, s.PortFree)
				}
				// Described again (a second dump), it is the same
				// but for the clock.
				if (again.TCP == nil) != (s.TCP == nil) {
					t.Fatalf("rebuilt socket described with TCP %+v, want %+v", again.TCP, s.TCP)
				}
				if s.TCP != nil {
					a, b := *again.TCP, *s.TCP
					a.Timestamp, b.Timestamp = 0, 0
					if a != b {
						t.Errorf("rebuilt socket described with TCP %+v, want %+v", a, b)
					}
				}
				if got, want := useClosed(nfd), useClosed(fd); got != want {
					t.Errorf("using the rebuilt socket: %s\nwant %s", got, want)
				}
			})
		}
	}
}

// openClosed rebuilds a described socket as the restore does: behind a
// lock of its own when the rebuild sends a SYN.
func openClosed(t *testing.T, s *image.Socket, recvQ []byte) int {
	t.Helper()
	if sockets.NeedsSYNDropped(s) {
		local, remote := netip.MustParseAddrPort(s.Local), netip.MustParseAddrPort(s.Remote)
		l, err := netlock.Take(fmt.Sprintf("test-closed-%d-%d", os.Getpid(), local.Port()), []netlock.Conn{{Local: local, Remote: remote}}, -1)
		must(t, err)
		defer netlock.Release(l.Table, -1)
	}
	nsock, err := sockets.Open(s, recvQ, nil)
	must(t, err)
	t.Cleanup(func() { nsock.Close() })
	return nsock.Int()
}

// TestTCPClosedPendingError checks that a closed socket whose error was
// not read yet is refused by name, and left as it was.
func TestTCPClosedPendingError(t *testing.T) {
	f := closedFamily{dom: unix.AF_INET, lo: netip.MustParseAddr("127.0.0.1")}
	ln, la := f.listener(t, false)
	fd := f.socket(t)
	must(t, unix.Connect(fd, la))
	srv, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
	must(t, err)
	reset(t, fd, srv)
	_, err = sockets.Describe(fd)
	if !errors.Is(err, sockets.ErrPendingError) {
		t.Fatalf("Describe: %v, want ErrPendingError", err)
	}
	if e, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); e != int(unix.ECONNRESET) {
		t.Errorf("SO_ERROR %d after the refusal, want ECONNRESET", e)
	}
}
