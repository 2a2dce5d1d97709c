package sockets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

func inode(t *testing.T, fd int) uint32 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return uint32(st.Ino)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// saved is a UNIX socket as the dump saw it, and what the test expects of
// its copy.
type saved struct {
	s     *image.Socket
	msgs  []UnixMsg
	opts  map[string]image.SockOpt
	shut  int
	local string
}

func describeAll(t *testing.T, fds []int) []saved {
	t.Helper()
	all, err := UnixSockets()
	must(t, err)
	pieces := kernelPieces(t)
	in := map[uint32]bool{}
	for _, fd := range fds {
		in[inode(t, fd)] = true
	}
	var out []saved
	for _, fd := range fds {
		ino := inode(t, fd)
		want := readAll(t, fd)
		s, msgs, err := DescribeUnix(fd, ino, all, func(i uint32) bool { return in[i] }, nil, pieces, false)
		must(t, err)
		out = append(out, saved{s, msgs, want, all[ino].Shutdown, all[ino].Name})
	}
	return out
}

// checkCopy compares a rebuilt socket with what was saved.
func checkCopy(t *testing.T, fd int, sv saved) {
	t.Helper()
	compareAll(t, sv.opts, readAll(t, fd))
	all, err := UnixSockets()
	must(t, err)
	if got := all[inode(t, fd)].Shutdown; got != sv.shut {
		t.Errorf("shutdown %d, want %d", got, sv.shut)
	}
}

// readMsgs reads what a rebuilt socket has queued, with the senders.
func readMsgs(t *testing.T, fd, typ int) []string {
	t.Helper()
	var out []string
	buf := make([]byte, 1<<16)
	for {
		n, _, _, from, err := unix.Recvmsg(fd, buf, nil, unix.MSG_DONTWAIT)
		if err == unix.EAGAIN || err == unix.EINVAL && typ == unix.SOCK_STREAM {
			return out // an empty queue, or a stream socket never connected
		}
		must(t, err)
		name := ""
		if sa, ok := from.(*unix.SockaddrUnix); ok {
			name = sa.Name
		}
		if n == 0 && typ == unix.SOCK_STREAM {
			return append(out, "EOF")
		}
		if typ == unix.SOCK_DGRAM {
			out = append(out, fmt.Sprintf("%s<%s", buf[:n], name))
		} else {
			out = append(out, string(buf[:n]))
		}
		if n == 0 && len(out) > 10 {
			return append(out, "...")
		}
	}
}

// TestUnixSockets saves UNIX sockets in the states a program leaves them
// in, rebuilds them after closing the originals, and checks options,
// shutdown state and queued messages (with their senders).
func TestUnixSockets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (SO_*BUFFORCE)")
	}
	dir := t.TempDir()
	tests := []struct {
		name string
		// make returns the sockets to save and the messages each
		// rebuilt socket must then read.
		make func(t *testing.T) ([]int, int, [][]string)
	}{
		{"stream pair, options, SHUT_WR", func(t *testing.T) ([]int, int, [][]string) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			must(t, err)
			must(t, unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1))
			must(t, unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_SNDBUF, 50000))
			must(t, unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_PEEK_OFF, 2))
			must(t, sendNow(fds[0], []byte("to b"), nil))
			must(t, sendNow(fds[1], []byte("to a"), nil))
			must(t, unix.Shutdown(fds[0], unix.SHUT_WR))
			return fds[:], unix.SOCK_STREAM, [][]string{{"to a"}, {"to b", "EOF"}}
		}},
		{"seqpacket pair, empty message", func(t *testing.T) ([]int, int, [][]string) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
			must(t, err)
			for _, m := range []string{"one", "", "three"} {
				must(t, sendNow(fds[1], []byte(m), nil))
			}
			return fds[:], unix.SOCK_SEQPACKET, [][]string{{"one", "", "three"}, nil}
		}},
		{"seqpacket, peer closed", func(t *testing.T) ([]int, int, [][]string) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
			must(t, err)
			must(t, sendNow(fds[1], []byte("last words"), nil))
			unix.Close(fds[1])
			return fds[:1], unix.SOCK_SEQPACKET, [][]string{{"last words", "", "", "", "", "", "", "", "", "", "", "..."}}
		}},
		{"stream, peer closed", func(t *testing.T) ([]int, int, [][]string) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			must(t, err)
			must(t, sendNow(fds[1], []byte("bye"), nil))
			unix.Close(fds[1])
			return fds[:1], unix.SOCK_STREAM, [][]string{{"bye", "EOF"}}
		}},
		{"datagram, several senders", func(t *testing.T) ([]int, int, [][]string) {
			srv, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
			must(t, err)
			name := fmt.Sprintf("@ckpt-test-srv-%d", time.Now().UnixNano())
			must(t, unix.Bind(srv, unixAddr(name)))
			abs := fmt.Sprintf("@ckpt-test-cli-%d", time.Now().UnixNano())
			path := filepath.Join(dir, "cli")
			var want []string
			for i, from := range []string{"", abs, path} {
				c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
				must(t, err)
				if from != "" {
					must(t, unix.Bind(c, unixAddr(from)))
				}
				must(t, unix.Sendto(c, []byte(fmt.Sprint("m", i)), 0, unixAddr(name)))
				unix.Close(c)
				want = append(want, fmt.Sprintf("m%d<%s", i, from))
			}
			os.Remove(path)
			return []int{srv}, unix.SOCK_DGRAM, [][]string{want}
		}},
		{"unconnected stream", func(t *testing.T) ([]int, int, [][]string) {
			a, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			must(t, err)
			b, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			must(t, err)
			must(t, unix.Bind(b, unixAddr(filepath.Join(dir, "bound"))))
			must(t, unix.Shutdown(b, unix.SHUT_RD))
			return []int{a, b}, unix.SOCK_STREAM, [][]string{nil, nil}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fds, typ, want := tt.make(t)
			sv := describeAll(t, fds)
			for _, fd := range fds {
				unix.Close(fd)
			}
			var rebuilt []*sys.FD
			if len(sv) == 2 && sv[0].s.Peer != 0 {
				a, b, fill, err := UnixPair(sv[0].s, sv[1].s, sv[0].msgs, sv[1].msgs, Connecting{})
				must(t, err)
				must(t, fill(Refill{}))
				rebuilt = []*sys.FD{a, b}
			} else {
				for _, v := range sv {
					fd, fill, err := OpenUnix(v.s, v.msgs)
					must(t, err)
					must(t, fill(Refill{}))
					rebuilt = append(rebuilt, fd)
				}
			}
			for i, sock := range rebuilt {
				defer sock.Close()
				fd := sock.Int()
				checkCopy(t, fd, sv[i])
				if sv[i].s.PeerClosed || sv[i].s.Peer == 0 {
					if sa, err := unix.Getsockname(fd); err == nil && sv[i].local != "" {
						if got := sa.(*unix.SockaddrUnix).Name; got != sv[i].local {
							t.Errorf("socket %d: name %q, want %q", i, got, sv[i].local)
						}
					}
				}
				unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEEK_OFF, -1)
				if got := readMsgs(t, fd, typ); strings.Join(got, "|") != strings.Join(want[i], "|") {
					t.Errorf("socket %d read %q, want %q", i, got, want[i])
				}
			}
		})
	}
}

// TestUnixRefused checks the UNIX sockets the dump refuses, by name.
func TestUnixRefused(t *testing.T) {
	tests := []struct {
		name  string
		make  func(t *testing.T) (fd int, inTree bool)
		where string
	}{
		{"peer outside the dump", func(t *testing.T) (int, bool) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			must(t, err)
			return fds[0], false
		}, "outside the dump"},
		{"accept queue", func(t *testing.T) (int, bool) {
			l, _ := waitingConn(t)
			return l, false
		}, "outside the dump not accepted yet"},
		{"data sent before accept", func(t *testing.T) (int, bool) {
			_, c := waitingConn(t)
			must(t, sendNow(c, []byte("early"), nil))
			return c, true
		}, "data sent on a connection"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd, in := tt.make(t)
			defer unix.Close(fd)
			all, err := UnixSockets()
			must(t, err)
			_, _, err = DescribeUnix(fd, inode(t, fd), all, func(uint32) bool { return in }, nil, nil, false)
			if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), tt.where) {
				t.Fatalf("DescribeUnix: %v, want a refusal naming %q", err, tt.where)
			}
		})
	}
}

// TestUnixAcceptQueue saves a listener with two connections waiting to be
// accepted (one client bound to a name), rebuilds them and checks that
// the listener accepts them in order, connected to the rebuilt clients.
func TestUnixAcceptQueue(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root")
	}
	name := fmt.Sprintf("@ckpt-test-aq-%d", time.Now().UnixNano())
	l, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(t, err)
	must(t, unix.Bind(l, unixAddr(name)))
	must(t, unix.Listen(l, 4))
	c1, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(t, err)
	must(t, unix.Connect(c1, unixAddr(name)))
	c2, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(t, err)
	must(t, unix.Bind(c2, unixAddr(name+"-c2")))
	must(t, unix.Connect(c2, unixAddr(name)))
	sv := describeAll(t, []int{l, c1, c2})
	if got := sv[0].s.AcceptQueue; len(got) != 2 || got[0] != sv[1].s.Ino || got[1] != sv[2].s.Ino {
		t.Fatalf("accept queue %v, want the inodes of the two clients", got)
	}
	for _, fd := range []int{l, c1, c2} {
		unix.Close(fd)
	}
	lsock, fill, err := OpenUnix(sv[0].s, nil)
	must(t, err)
	must(t, fill(Refill{}))
	defer lsock.Close()
	nl := lsock.Int()
	var clients []int
	for _, v := range sv[1:] {
		sock, err := ConnectUnix(v.s, nl, sv[0].s.Local, Connecting{})
		must(t, err)
		defer sock.Close()
		clients = append(clients, sock.Int())
	}
	for i, want := range []string{"@" /* unnamed, as x/sys shows it */, name + "-c2"} {
		a, _, err := unix.Accept(nl)
		must(t, err)
		defer unix.Close(a)
		pa, err := unix.Getpeername(a)
		must(t, err)
		if got := pa.(*unix.SockaddrUnix).Name; got != want {
			t.Errorf("connection %d from %q, want %q", i, got, want)
		}
		must(t, sendNow(clients[i], []byte("hi"), nil))
		b := make([]byte, 2)
		if n, err := unix.Read(a, b); n != 2 || err != nil {
			t.Errorf("connection %d: read %d, %v", i, n, err)
		}
	}
}

// waitingConn makes a UNIX stream listener with one client connected to it
// and not accepted yet.
func waitingConn(t *testing.T) (l, c int) {
	t.Helper()
	l, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(t, err)
	name := fmt.Sprintf("@ckpt-test-l-%d", time.Now().UnixNano())
	must(t, unix.Bind(l, unixAddr(name)))
	must(t, unix.Listen(l, 4))
	c, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(t, err)
	must(t, unix.Connect(c, unixAddr(name)))
	return l, c
}
