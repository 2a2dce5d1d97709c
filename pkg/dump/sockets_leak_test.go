package dump_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/dump"
	"github.com/ckpt/ckpt/pkg/image"
)

// socketHolder is a python3 program holding UNIX sockets of every shape
// the dump copies and reads: stream, datagram and seqpacket pairs with
// queued data, files in flight (a pipe, a socket it still holds, a socket
// only in flight), a named listener with an accepted connection and one
// waiting in its queue, a UDP socket with a datagram queued. With an
// argument, it also connects to that path (a peer outside the dump). It
// prints "ready" once everything is in place.
const socketHolder = `
import os, socket, sys, time
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
a.send(b"to b"); b.send(b"to a")
c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
c.send(b"dgram 1"); c.send(b"dgram 2")
e, f = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
r, w = os.pipe()
socket.send_fds(e, [b"a pipe"], [r, w])
g, h = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
socket.send_fds(e, [b"a socket"], [g.fileno()])
i, j = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
j.send(b"in flight")
socket.send_fds(e, [b"only in flight"], [i.fileno()])
i.close()
name = "\0ckpt-leak-%d" % os.getpid()
l = socket.socket(socket.AF_UNIX); l.bind(name); l.listen(4)
cl = socket.socket(socket.AF_UNIX); cl.connect(name)
s, _ = l.accept(); s.send(b"accepted")
waiting = socket.socket(socket.AF_UNIX); waiting.connect(name)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", 0))
u.sendto(b"udp", u.getsockname())
if len(sys.argv) > 1:
    o = socket.socket(socket.AF_UNIX); o.connect(sys.argv[1])
print("ready", flush=True)
time.sleep(1000)
`

// ownFDs lists this process's open fds with what they are.
func ownFDs(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // the directory's own fd, closed meanwhile
		}
		fds = append(fds, e.Name()+" "+link)
	}
	return fds
}

// TestDumpSocketsNoLeak dumps a process holding many sockets in-process
// and checks that the dump closed every fd it took (its copies of the
// sockets, of the files in flight, the pidfds): the same fds are open in
// this process before and after, whether the dump succeeds (the process
// left running) or refuses (a peer outside the dump).
func TestDumpSocketsNoLeak(t *testing.T) {
	testenv.RequireRoot(t)
	r := testenv.StartReaper(t)
	for _, tc := range []struct {
		name    string
		outside bool
	}{
		{"dumped", false},
		{"refused", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"python3", "-c", socketHolder}
			if tc.outside {
				path := filepath.Join(dir, "outside.sock")
				ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				args = append(args, path)
			}
			out := filepath.Join(dir, "out")
			pid := r.Run(t, testenv.RunOpts{Stdout: out, Stderr: filepath.Join(dir, "err")}, args...)
			deadline := time.Now().Add(20 * time.Second)
			for {
				b, _ := os.ReadFile(out)
				if strings.Contains(string(b), "ready") {
					break
				}
				if es, gone := r.Poll(pid); gone {
					e, _ := os.ReadFile(filepath.Join(dir, "err"))
					t.Fatalf("socket holder %d ended before ready: %v: %s", pid, es, e)
				}
				if time.Now().After(deadline) {
					t.Fatalf("socket holder %d: not ready in 20s", pid)
				}
				time.Sleep(10 * time.Millisecond)
			}
			before := ownFDs(t) // the image's file too is closed by the end of Run
			sink, err := image.CreateDir(filepath.Join(dir, "img"))
			if err != nil {
				t.Fatal(err)
			}
			runtime.LockOSThread()
			_, err = dump.Run(sys.PID(pid), sink, dump.Options{LeaveRunning: true})
			runtime.UnlockOSThread()
			after := ownFDs(t)
			switch {
			case tc.outside && !errors.Is(err, dump.ErrUnsupported):
				t.Fatalf("dump of %d: %v; want a refusal", pid, err)
			case !tc.outside && err != nil:
				t.Fatalf("dump of %d: %v", pid, err)
			}
			if !slices.Equal(before, after) {
				t.Errorf("fds of this process before the dump:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
			}
			if _, gone := r.Poll(pid); gone {
				t.Errorf("socket holder %d ended after the dump", pid)
			}
		})
	}
}
