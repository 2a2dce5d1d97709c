package sockets_test

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// fullListener listens on loopback with a full accept queue: SYNs to it
// go unanswered.
func fullListener(t *testing.T, f closedFamily) (int, unix.Sockaddr) {
	t.Helper()
	ln := f.socket(t)
	must(t, unix.Bind(ln, sockets.Sockaddr(netip.AddrPortFrom(f.lo, 0))))
	must(t, unix.Listen(ln, 0))
	la, err := unix.Getsockname(ln)
	must(t, err)
	for range 2 { // a backlog of 0 holds one
		c, err := unix.Socket(f.dom, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		must(t, err)
		t.Cleanup(func() { unix.Close(c) })
		unix.Connect(c, la)
	}
	time.Sleep(50 * time.Millisecond)
	return ln, la
}

// TestTCPPortGivenBack checks that rebuilt connections whose port connect
// had chosen give it back when they end, as the originals do: one
// established and reset, one in SYN_SENT refused.
func TestTCPPortGivenBack(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TCP_REPAIR needs root (CAP_NET_ADMIN)")
	}
	f := closedFamily{dom: unix.AF_INET, lo: netip.MustParseAddr("127.0.0.1")}
	t.Run("established", func(t *testing.T) {
		e := newEnds(t, "tcp4")
		st, recvQ, sendQ, err := sockets.DumpTCP(e.cli)
		must(t, err)
		unix.Close(e.cli) // in repair mode: silent
		nsock, err := sockets.RestoreTCP(st, recvQ, sendQ)
		must(t, err)
		defer nsock.Close()
		nfd := nsock.Int()
		must(t, sockets.Resume(nfd, st, sendQ))
		reset(t, nfd, e.srv)
		unix.GetsockoptInt(nfd, unix.SOL_SOCKET, unix.SO_ERROR)
		s, err := sockets.Describe(nfd)
		must(t, err)
		if !s.PortFree {
			t.Errorf("the rebuilt connection holds its port %s after its reset", s.Local)
		}
	})
	t.Run("syn_sent", func(t *testing.T) {
		ln, la := fullListener(t, f)
		fd := f.socket(t)
		must(t, unix.SetNonblock(fd, true))
		if err := unix.Connect(fd, la); err != unix.EINPROGRESS {
			t.Fatalf("connect: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
		if s, _ := sockets.State(fd); s != sockets.StateSynSent {
			t.Skipf("the SYN was answered (state %s)", sockets.StateName(s))
		}
		st, _, _, err := sockets.DumpTCP(fd)
		must(t, err)
		unix.Close(fd)
		s := &image.Socket{Family: unix.AF_INET, Type: unix.SOCK_STREAM, Protocol: unix.IPPROTO_TCP, State: st.State,
			Local: st.Local.String(), Remote: st.Remote.String(), TCP: &st.TCPRepair}
		nsock, err := sockets.Open(s, nil, nil)
		must(t, err)
		defer nsock.Close()
		nfd := nsock.Int()
		must(t, sockets.ResumeSocket(nfd, s, nil))
		if la, err := unix.Getsockname(nfd); err != nil || sockets.AddrPort(la) != st.Local {
			t.Fatalf("rebuilt from %v, want %s", sockets.AddrPort(la), st.Local)
		}
		unix.Close(ln) // the next SYN is refused
		deadline := time.Now().Add(10 * time.Second)
		for s, _ := sockets.State(nfd); s != sockets.StateClose; s, _ = sockets.State(nfd) {
			if time.Now().After(deadline) {
				t.Fatalf("still %s", sockets.StateName(s))
			}
			time.Sleep(5 * time.Millisecond)
		}
		unix.GetsockoptInt(nfd, unix.SOL_SOCKET, unix.SO_ERROR)
		d, err := sockets.Describe(nfd)
		must(t, err)
		if !d.PortFree {
			t.Errorf("the rebuilt connect holds its port %s after its refusal", d.Local)
		}
	})
}

// TestTCPSynSentFastOpen checks that a connection in SYN_SENT that TCP
// Fast Open made (data queued with its SYN, or TCP_FASTOPEN_CONNECT set)
// is refused by name.
func TestTCPSynSentFastOpen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root")
	}
	f := closedFamily{dom: unix.AF_INET, lo: netip.MustParseAddr("127.0.0.1")}
	for _, c := range []struct {
		name, want string
		connect    func(fd int, la unix.Sockaddr) error
	}{
		{"msg_fastopen", "10 bytes sent or queued with its SYN by TCP Fast Open", func(fd int, la unix.Sockaddr) error {
			// Without a cookie for the peer, the data goes with the SYN
			// only if the socket says none is needed.
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_FASTOPEN_NO_COOKIE, 1); err != nil {
				return err
			}
			return unix.Sendto(fd, []byte("early data"), unix.MSG_FASTOPEN, la)
		}},
		{"fastopen_connect", "TCP_FASTOPEN_CONNECT set", func(fd int, la unix.Sockaddr) error {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT, 1); err != nil {
				return err
			}
			return unix.Connect(fd, la)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, la := fullListener(t, f)
			fd := f.socket(t)
			must(t, unix.SetNonblock(fd, true))
			if err := c.connect(fd, la); err != nil && err != unix.EINPROGRESS {
				t.Skipf("TCP Fast Open: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
			if s, _ := sockets.State(fd); s != sockets.StateSynSent {
				t.Skipf("state %s, not SYN_SENT", sockets.StateName(s))
			}
			_, err := sockets.Describe(fd)
			if !errors.Is(err, sockets.ErrState) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Describe: %v, want a refusal naming %q", err, c.want)
			}
		})
	}
}
