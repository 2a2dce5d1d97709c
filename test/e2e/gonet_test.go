package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func init() {
	tickFormat["gonet"] = regexp.MustCompile(`^tick \d+ http=127\.0\.0\.1:\d+ echo=127\.0\.0\.1:\d+$`)
}

// TestGoNet restores a Go program's TCP connections, made the Go way (a
// non-blocking connect, then the runtime's edge-triggered epoll): gonet's
// kept-alive HTTP client connection to its own server and its line echo
// connection. Through two dumps that kill and restore it and one that
// leaves it running, every answer must be right and the connections must
// be the same ones (Go's HTTP transport would make a new connection,
// silently, if the kept-alive one had been lost: gonet fails on that).
// Its listeners are MPTCP sockets (Go's default since 1.24, when
// net.mptcp.enabled allows it): gonet checks every tick that they still
// are, and after every step a new plain TCP client and a new MPTCP client
// each exchange a line with the restored echo listener.
func TestGoNet(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	v := &victim{name: "gonet", dir: dir, log: filepath.Join(dir, "log"), stderr: filepath.Join(dir, "stderr")}
	e.startArgv(t, v, []string{buildGoVictim(t, "gonet"), v.log})
	v.waitTick(t, 5)
	conns := func() string {
		lines := v.lines()
		for i := len(lines) - 1; i >= 0; i-- {
			if _, ok := tickOf(lines[i]); ok {
				return strings.Join(strings.Fields(lines[i])[2:], " ")
			}
		}
		return ""
	}
	first := conns()
	var proto, echoAddr string
	for _, l := range v.lines() {
		if strings.HasPrefix(l, "start ") {
			for _, f := range strings.Fields(l) {
				if k, val, ok := strings.Cut(f, "="); ok && k == "proto" {
					proto = val
				} else if ok && k == "echo" {
					echoAddr = val
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/net/mptcp/enabled"); err == nil && strings.TrimSpace(string(b)) == "1" && proto != "262,262" {
		t.Fatalf("gonet's listeners have SO_PROTOCOL %q, want MPTCP (262,262) with net.mptcp.enabled=1", proto)
	}
	for _, step := range []string{"redo", "leave", "redo"} {
		img := filepath.Join(t.TempDir(), "img")
		if step == "leave" {
			e.dump(t, v.pid, img, "--leave-running")
			v.waitNewTicks(t, 5)
		} else {
			e.dumpKill(t, v, img)
			e.restore(t, v, img)
			v.waitNewTicks(t, 10)
		}
		if c := conns(); c != first {
			t.Fatalf("after %s: connections %s, want the first ones, %s", step, c, first)
		}
		for _, mp := range []bool{false, true} {
			if err := echoOnce(echoAddr, mp, step); err != nil {
				t.Fatalf("after %s: a new client (MPTCP %v) of gonet's echo listener: %v", step, mp, err)
			}
		}
	}
	e.bye(t, v)
	checkLogFile(t, v, 0)
}

// echoOnce connects to an echo server (with MPTCP if mp), sends a line,
// reads it back, shuts its sending side and waits for the server's end of
// file: the server has closed its connection by then (none is left in
// the process for a next dump).
func echoOnce(addr string, mp bool, what string) error {
	d := &net.Dialer{Timeout: 5 * time.Second}
	d.SetMultipathTCP(mp)
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line := fmt.Sprintf("new client after %s, MPTCP %v\n", what, mp)
	if _, err := io.WriteString(c, line); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	back, err := r.ReadString('\n')
	if err != nil || back != line {
		return fmt.Errorf("read %q, %v; want %q", back, err, line)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) > 0 {
		return fmt.Errorf("after shutdown: read %q, %v; want the end of file", rest, err)
	}
	return nil
}
