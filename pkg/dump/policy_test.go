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

	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/dump"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/sockets"
)

// slowAcceptor listens on a free port of 127.0.0.1 and accepts each
// connection half a second after it arrives.
const slowAcceptor = `
import os, select, socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
conns = []
with open(sys.argv[1], "a") as f:
    f.write("start pid=%d port=%d\n" % (os.getpid(), s.getsockname()[1]))
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
// and --to, a library user) gets it; with retries off, or for a group
// member (AfterFreeze), it fails at once with ErrAcceptQueue, leaving no
// image and the process running.
func TestAcceptQueueRetry(t *testing.T) {
	testenv.RequireRoot(t)
	r := testenv.StartReaper(t)
	log := filepath.Join(t.TempDir(), "log")
	pid := r.Run(t, testenv.RunOpts{}, "python3", "-c", slowAcceptor, log)
	var port int
	start := testenv.WaitForLine(t, log, func(l string) bool { return strings.HasPrefix(l, "start ") }, 10*time.Second)
	fmt.Sscanf(start, "start pid=%d port=%d", new(int), &port)
	tests := []struct {
		name string
		opts dump.Options
		ok   bool
	}{
		{"no retries", dump.Options{AcceptRetries: -1}, false},
		{"group member", dump.Options{AfterFreeze: func() error { return nil }}, false},
		{"retried", dump.Options{AcceptRetries: 100}, true},
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
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
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
			_, err = dump.Run(pid, sink, tc.opts)
			runtime.UnlockOSThread()
			if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, sockets.ErrAcceptQueue)) {
				t.Fatalf("dump with a connection in the accept queue: %v; want success %v (else ErrAcceptQueue)", err, tc.ok)
			}
			if _, err := os.Stat(filepath.Join(dir, image.FileName)); (err == nil) != tc.ok {
				t.Errorf("image after the dump: %v; want one: %v", err, tc.ok)
			}
			// The process goes on: it accepts the connection.
			accepted++
			want := fmt.Sprintf("accepted %d", accepted)
			testenv.WaitForLine(t, log, func(l string) bool { return l == want }, 10*time.Second)
		})
	}
}
