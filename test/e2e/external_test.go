package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestExternalUnix: a client (testdata/unixticker.py) connected to a UNIX
// stream server outside the dump (the test) sends numbered ticks. Without
// --external the dump refuses, naming the socket and the flag, and the
// client goes on. With `--external unix` a dump that kills it and a
// restore connect it again to the server's path: the server reads every
// tick sent before the dump on the old connection, up to its end, and the
// next ones on the new connection, none lost or repeated, and the client
// hears what the server sends on the new one, whose SO_PEERCRED names the
// client. Two --leave-running dumps
// leave the old connection as it is.
func TestExternalUnix(t *testing.T) {
	e := setup(t)
	for _, mode := range []string{"refused", "redo", "leave-running-twice"} {
		t.Run(mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "server.sock")
			ln, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			v := e.startLogged(t, "unixticker", func(log string) []string {
				return []string{"python3", script(t, "unixticker.py"), log, path}
			})
			conn := acceptWithin(t, ln)
			defer conn.Close()
			r := &tickReader{t: t, r: bufio.NewReader(conn)}
			conn.SetReadDeadline(time.Now().Add(wait))
			r.next(5)
			img := filepath.Join(t.TempDir(), "img")
			switch mode {
			case "refused":
				res := e.runCkpt(t, nil, "dump", "--dir", img, strconv.Itoa(v.pid))
				for _, want := range []string{fmt.Sprintf("process %d", v.pid), "of a process outside the dump", "--external unix:"} {
					if res.code == 0 || !strings.Contains(res.stderr, want) {
						t.Fatalf("dump: %v; want it refused, saying %q", res, want)
					}
				}
				noImage(t, img)
				conn.SetReadDeadline(time.Now().Add(wait))
				r.next(5)
				hello(t, v, conn, "hello-1")
			case "redo":
				if res := e.runCkpt(t, nil, "dump", "--external", "unix", "--dir", img, strconv.Itoa(v.pid)); res.code != 0 {
					t.Fatalf("dump --external unix: %v", res)
				}
				if es := e.r.WaitExit(t, v.pid, wait); es.Signal != int(syscall.SIGKILL) {
					t.Fatalf("after the dump: %v, want killed", es)
				}
				conn.SetReadDeadline(time.Now().Add(wait))
				r.toEOF()
				if res := e.runRedo(t, nil, img); res.code != 0 {
					t.Fatalf("ckpt-redo: %v", res)
				}
				again := acceptWithin(t, ln)
				defer again.Close()
				// The server's new end names the restored client
				// (which connected again from inside), not ckpt-redo.
				var uc *unix.Ucred
				rc, err := again.(*net.UnixConn).SyscallConn()
				if err == nil {
					rc.Control(func(fd uintptr) { uc, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
				}
				if err != nil || uc.Pid != int32(v.pid) {
					t.Errorf("the new connection's SO_PEERCRED: %+v, %v; want pid %d", uc, err, v.pid)
				}
				r.r = bufio.NewReader(again)
				again.SetReadDeadline(time.Now().Add(wait))
				r.next(10)
				hello(t, v, again, "hello-2")
			case "leave-running-twice":
				for i := 0; i < 2; i++ {
					if res := e.runCkpt(t, nil, "dump", "--external", "unix", "--leave-running", "--dir", filepath.Join(t.TempDir(), "img"), strconv.Itoa(v.pid)); res.code != 0 {
						t.Fatalf("dump %d --external unix --leave-running: %v", i+1, res)
					}
					conn.SetReadDeadline(time.Now().Add(wait))
					r.next(5)
				}
				hello(t, v, conn, "hello-3")
			}
		})
	}
}

// acceptWithin accepts one connection on ln within the test's timeout.
func acceptWithin(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	ln.(*net.UnixListener).SetDeadline(time.Now().Add(wait))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	return c
}

// tickReader reads "tick N" lines and checks that they follow each other.
type tickReader struct {
	t    *testing.T
	r    *bufio.Reader
	last int
}

// line reads one tick; ok is false at end of file.
func (tr *tickReader) line() bool {
	tr.t.Helper()
	l, err := tr.r.ReadString('\n')
	if err == io.EOF && l == "" {
		return false
	}
	if err != nil {
		tr.t.Fatalf("after tick %d: %v", tr.last, err)
	}
	var n int
	if _, err := fmt.Sscanf(l, "tick %d\n", &n); err != nil || n != tr.last+1 {
		tr.t.Fatalf("after tick %d: got %q, want tick %d", tr.last, l, tr.last+1)
	}
	tr.last = n
	return true
}

// next reads n ticks.
func (tr *tickReader) next(n int) {
	tr.t.Helper()
	for i := 0; i < n; i++ {
		if !tr.line() {
			tr.t.Fatalf("end of file after tick %d", tr.last)
		}
	}
}

// toEOF reads ticks up to the end of the connection.
func (tr *tickReader) toEOF() {
	tr.t.Helper()
	for tr.line() {
	}
}

// hello sends a line to the client and waits until it logs it.
func hello(t *testing.T, v *victim, c net.Conn, line string) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatalf("write to the client: %v", err)
	}
	v.waitLine(t, func(l string) bool { return l == "heard "+line })
}
