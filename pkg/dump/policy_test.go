package dump_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/dump"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/sockets"
)

// slowAcceptor listens on a free port of 127.0.0.1 (or on the UNIX
// socket path argv[2]) and accepts each connection half a second after it
// arrives.
const slowAcceptor = `
import os, select, socket, sys, time
if len(sys.argv) > 2:
    s = socket.socket(socket.AF_UNIX)
    s.bind(sys.argv[2])
    port = 0
else:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
s.listen(8)
conns = []
with open(sys.argv[1], "a") as f:
    f.write("start pid=%d port=%d\n" % (os.getpid(), port))
while True:
    select.select([s], [], [])
    time.sleep(0.5)
    c, _ = s.accept()
    conns.append(c)
    with open(sys.argv[1], "a") as f:
        f.write("accepted %d\n" % len(conns))
`

// TestAcceptQueueRetry: a dump that meets a connection waiting in a
// listener's accept queue is tried again, into the same sink, until the
// process has accepted it, as every caller of dump.Run (ckpt dump --dir
// and --to, a group member through the agent, a library user) gets it;
// the queue is seen before a group's barrier, which only the last try
// reaches. With retries off it fails at once with ErrAcceptQueue, leaving
// no image and the process running.
func TestAcceptQueueRetry(t *testing.T) {
	testenv.RequireRoot(t)
	for _, family := range []string{"tcp", "unix"} {
		t.Run(family, func(t *testing.T) { testAcceptQueueRetry(t, family) })
	}
}

func testAcceptQueueRetry(t *testing.T, family string) {
	r := testenv.StartReaper(t)
	log := filepath.Join(t.TempDir(), "log")
	argv := []string{"python3", "-c", slowAcceptor, log}
	addr := filepath.Join(t.TempDir(), "sock")
	if family == "unix" {
		argv = append(argv, addr)
	}
	pid := r.Run(t, testenv.RunOpts{}, argv...)
	var port int
	start := testenv.WaitForLine(t, log, func(l string) bool { return strings.HasPrefix(l, "start ") }, 10*time.Second)
	fmt.Sscanf(start, "start pid=%d port=%d", new(int), &port)
	if family == "tcp" {
		addr = fmt.Sprintf("127.0.0.1:%d", port)
	}
	barriers := 0 // AfterFreeze calls: once, for the try that went on
	tests := []struct {
		name string
		opts dump.Options
		ok   bool
	}{
		{"no retries", dump.Options{AcceptRetries: -1}, false},
		{"retried", dump.Options{AcceptRetries: 100}, true},
		{"group member", dump.Options{AcceptRetries: 100, AfterFreeze: func() error { barriers++; return nil }}, true},
	}
	// A UNIX connection to a process outside the dump cannot be saved:
	// once the retries have seen the connection accepted, that is what
	// the dump refuses.
	refusedOutside := func(err error) bool {
		return err != nil && !errors.Is(err, sockets.ErrAcceptQueue) && strings.Contains(err.Error(), "of a process outside the dump")
	}
	accepted := 0
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial(family, addr)
			if err != nil {
				t.Fatal(err)
			}
			// Open until the end: a connection its client closed could
			// not be dumped.
			clients = append(clients, c)
			dir := filepath.Join(t.TempDir(), "img")
			sink, err := image.CreateDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			tc.opts.LeaveRunning = true
			runtime.LockOSThread()
			_, err = dump.Run(sys.PID(pid), sink, tc.opts)
			runtime.UnlockOSThread()
			ok := tc.ok
			switch {
			case family == "unix" && ok:
				ok = false
				if !refusedOutside(err) {
					t.Fatalf("dump with a UNIX connection in the accept queue: %v; want the retries to see it accepted, then its refusal", err)
				}
			case ok != (err == nil) || (!ok && !errors.Is(err, sockets.ErrAcceptQueue)):
				t.Fatalf("dump with a connection in the accept queue: %v; want success %v (else ErrAcceptQueue)", err, tc.ok)
			}
			if _, err := os.Stat(filepath.Join(dir, image.FileName)); (err == nil) != ok {
				t.Errorf("image after the dump: %v; want one: %v", err, ok)
			}
			if tc.opts.AfterFreeze != nil && barriers != 1 {
				t.Errorf("AfterFreeze called %d times, want once: a try is repeated only before the barrier", barriers)
			}
			// The process goes on: it accepts the connection.
			accepted++
			want := fmt.Sprintf("accepted %d", accepted)
			testenv.WaitForLine(t, log, func(l string) bool { return l == want }, 10*time.Second)
		})
	}
}
