package sockets

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// scmRead is what one recvmsg gave: bytes, how many files came with
// them, and the credentials.
type scmRead struct {
	data  string
	files int
	cred  unix.Ucred
}

// readSCM reads a socket's whole queue size bytes at a time, with
// SO_PASSCRED on, closing the files that come.
func readSCM(t *testing.T, fd, size int) []scmRead {
	t.Helper()
	must(t, unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PASSCRED, 1))
	var out []scmRead
	buf, oob := make([]byte, size), make([]byte, oobSize)
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_DONTWAIT)
		if err == unix.EAGAIN || err == nil && n == 0 {
			return out
		}
		must(t, err)
		r := scmRead{data: string(buf[:n])}
		cms, err := unix.ParseSocketControlMessage(oob[:oobn])
		must(t, err)
		for _, c := range cms {
			if fds, err := unix.ParseUnixRights(&c); err == nil {
				r.files += len(fds)
				for _, f := range fds {
					unix.Close(f)
				}
			} else if uc, err := unix.ParseUnixCredentials(&c); err == nil {
				r.cred = *uc
			}
		}
		out = append(out, r)
	}
}

// TestUnixSCMQueue queues messages with files and credentials of other
// ids in a pair, saves it, rebuilds it, and reads both the same way: the
// same bytes, pieces, files and credentials come.
func TestUnixSCMQueue(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root")
	}
	me := int32(os.Getpid())
	for _, typ := range []int{unix.SOCK_STREAM, unix.SOCK_SEQPACKET, unix.SOCK_DGRAM} {
		for _, size := range []int{1, 3, 4096} {
			t.Run(fmt.Sprintf("type %d read %d", typ, size), func(t *testing.T) {
				fill := func(fds [2]int) {
					send := func(b string, rights []int, cred *unix.Ucred) {
						var oob []byte
						if len(rights) > 0 {
							oob = unix.UnixRights(rights...)
						}
						if cred != nil {
							oob = append(oob, unix.UnixCredentials(cred)...)
						}
						must(t, unix.Sendmsg(fds[1], []byte(b), oob, nil, 0))
					}
					// Files right after other files or new
					// credentials: where a peek tells their
					// piece's start.
					send("ab", []int{0, 1}, nil)
					send("cd", []int{2}, nil)
					send("ef", nil, nil)
					send("gh", []int{0}, &unix.Ucred{Pid: me, Uid: 7, Gid: 8})
					send("ij", nil, &unix.Ucred{Pid: me, Uid: 7, Gid: 8})
					send("kl", nil, nil)
					// Files after bytes with the same
					// credentials and none: where their piece
					// starts is found by one-byte peeks.
					send("opq", []int{1, 2}, nil)
					send("rs", nil, nil)
					send("t", []int{0}, nil)
					if typ != unix.SOCK_STREAM {
						send("", nil, nil)
						send("mn", []int{1}, nil)
					}
				}
				var want [][]scmRead
				var sv []saved
				for round := 0; round < 2; round++ {
					fds, err := unix.Socketpair(unix.AF_UNIX, typ, 0)
					must(t, err)
					fill([2]int{fds[0], fds[1]})
					if round == 0 {
						sv = describeAll(t, fds[:])
						unix.Close(fds[0])
						unix.Close(fds[1])
						a, b, fill, err := UnixPair(sv[0].s, sv[1].s, sv[0].msgs, sv[1].msgs, Connecting{})
						must(t, err)
						must(t, fill(Refill{}))
						CloseRights(sv[0].msgs)
						want = append(want, readSCM(t, a.Int(), size))
						a.Close()
						b.Close()
						continue
					}
					want = append(want, readSCM(t, fds[0], size))
					unix.Close(fds[0])
					unix.Close(fds[1])
				}
				if got, orig := fmt.Sprint(want[0]), fmt.Sprint(want[1]); got != orig {
					t.Errorf("rebuilt queue reads\n%s\nthe original\n%s", got, orig)
				}
				if !strings.Contains(fmt.Sprint(want[1]), "{7 8}") && !strings.Contains(fmt.Sprint(want[1]), " 7 8}") {
					t.Errorf("no read with the credentials sent: %v", want[1])
				}
			})
		}
	}
}

// TestUnixName: sender names as recvmsg writes them (msg_namelen bytes).
func TestUnixName(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want string
	}{
		{"", ""},
		{"\x01\x00", ""}, // unnamed: sun_family only
		{"\x01\x00/tmp/s\x00", "/tmp/s"},
		{"\x01\x00/tmp/s", "/tmp/s"},
		{"\x01\x00\x00abc", "@abc"},
		{"\x01\x00\x00\x00", "@\x00"},
		{"\x01\x00\x00\x00x\x00", "@\x00x\x00"},
	} {
		if got := unixName([]byte(c.raw)); got != c.want {
			t.Errorf("unixName(%q) = %q, want %q", c.raw, got, c.want)
		}
	}
}

// TestBindFreed: an abstract name held by sockets in flight in their own
// queues after every fd of them is closed (garbage only the kernel's
// collector frees) is bound; one a live socket holds is refused.
func TestBindFreed(t *testing.T) {
	for i, c := range []struct {
		what string
		live bool
	}{{"garbage cycle", false}, {"live holder", true}} {
		t.Run(c.what, func(t *testing.T) {
			name := fmt.Sprintf("@ckpt-bindfreed-%d-%d", os.Getpid(), i)
			p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Bind(p[0], unixAddr(name)); err != nil {
				t.Fatal(err)
			}
			if c.live {
				defer unix.Close(p[0])
				defer unix.Close(p[1])
			} else {
				// p[0] in flight in its own queue, p[1] in p[0]'s.
				if err := unix.Sendmsg(p[1], []byte{0}, unix.UnixRights(p[0], p[1]), nil, 0); err != nil {
					t.Fatal(err)
				}
				unix.Close(p[0])
				unix.Close(p[1])
			}
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			wait := 2 * time.Second
			if c.live {
				wait = 20 * time.Millisecond
			}
			err = bindFreedWithin(fd, name, wait)
			switch {
			case c.live && !errors.Is(err, unix.EADDRINUSE):
				t.Fatalf("bind of a name a live socket holds: %v, want EADDRINUSE", err)
			case !c.live && err != nil:
				t.Fatalf("bind of a name garbage in flight holds: %v", err)
			}
		})
	}
}
