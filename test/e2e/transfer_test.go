package e2e

import (
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTransferErrors checks that a migration that cannot complete is a
// clear error on both sides and leaves the source running untouched: a
// receiver that is not there, a receiver that hangs up in the middle of
// the image, and a receiver fed something that is not an image.
func TestTransferErrors(t *testing.T) {
	e := setup(t)
	v := e.startVictim(t, "static_counter")

	// Nobody listens.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	res := e.runCkpt(t, nil, "dump", "--to", closed, strconv.Itoa(v.pid))
	if res.code == 0 || !strings.Contains(res.stderr, "connect to "+closed) {
		t.Fatalf("dump --to a closed port: %v", res)
	}
	e.expectAlive(t, v, "after a dump to nobody")

	// A receiver that reads a little of the image and hangs up.
	l, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		io.CopyN(io.Discard, c, 64<<10)
		c.Close()
	}()
	res = e.runCkpt(t, nil, "dump", "--to", l.Addr().String(), strconv.Itoa(v.pid))
	if res.code == 0 || !strings.Contains(res.stderr, "transfer") {
		t.Fatalf("dump --to a receiver that hangs up: %v", res)
	}
	e.expectAlive(t, v, "after a receiver hung up")

	// A receiver fed garbage says so.
	redo := exec.Command(e.redo(), "--listen", "127.0.0.1:0")
	stderr, _ := redo.StderrPipe()
	if err := redo.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, _ := stderr.Read(buf)
	addr := strings.TrimSpace(strings.TrimPrefix(string(buf[:n]), "ckpt-redo: listening on "))
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatalf("connect to ckpt-redo --listen (%q): %v", buf[:n], err)
	}
	c.Write([]byte(strings.Repeat("not an image at all\n", 100)))
	c.(*net.TCPConn).CloseWrite()
	reply, _ := io.ReadAll(c)
	c.Close()
	rest, _ := io.ReadAll(stderr)
	done := make(chan error, 1)
	go func() { done <- redo.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(string(rest), "not a ckpt image") || !strings.HasPrefix(string(reply), "fail ") {
			t.Fatalf("ckpt-redo --listen fed garbage: %v; stderr %q; reply %q", err, rest, reply)
		}
	case <-time.After(wait):
		redo.Process.Kill()
		t.Fatal("ckpt-redo --listen fed garbage did not exit")
	}
	e.killAndReap(t, v)
}
