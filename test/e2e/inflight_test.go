package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSkipInFlight: a server (testdata/gated_server.py) holds a TCP
// connection in its listener's accept queue, with data the client sent.
// Without --skip-in-flight the dump retries, then refuses naming the
// listener and the flag, and the server goes on untouched. With it, the
// dump drops the waiting connection (saying so) and goes on: the restored
// server serves new clients, and the dropped client sees nothing until it
// sends, then a reset (ECONNRESET). With --leave-running the running
// server keeps the connection and serves it. Each with a TCP listener and
// with an MPTCP one.
func TestSkipInFlight(t *testing.T) {
	e := setup(t)
	for _, tc := range []struct{ name, mode, proto string }{
		{"refused", "refused", "tcp"}, {"redo", "redo", "tcp"}, {"leave-running", "leave-running", "tcp"},
		// An MPTCP listener (Go's since 1.24): its queue is its TCP
		// subflow listener's, dropped the same way.
		{"mptcp-refused", "refused", "mptcp"}, {"mptcp-redo", "redo", "mptcp"}, {"mptcp-leave-running", "leave-running", "mptcp"},
	} {
		mode := tc.mode
		t.Run(tc.name, func(t *testing.T) {
			if tc.proto == "mptcp" {
				requireMPTCP(t)
			}
			gate := filepath.Join(t.TempDir(), "gate")
			v := e.startLogged(t, "gated_server", func(log string) []string {
				return []string{"python3", script(t, "gated_server.py"), log, gate, tc.proto}
			})
			var port int
			fmt.Sscanf(v.lines()[0], "start pid=%d port=%d", new(int), &port)
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			waiting, err := net.DialTimeout("tcp4", addr, wait)
			if err != nil {
				t.Fatal(err)
			}
			defer waiting.Close()
			if _, err := waiting.Write([]byte("early\n")); err != nil {
				t.Fatal(err)
			}
			img := filepath.Join(t.TempDir(), "img")
			switch mode {
			case "refused":
				res := e.runCkpt(t, nil, "dump", "--dir", img, fmt.Sprint(v.pid))
				for _, want := range []string{fmt.Sprintf("process %d fd", v.pid), "connections not accepted yet", "--skip-in-flight"} {
					if res.code == 0 || !strings.Contains(res.stderr, want) {
						t.Fatalf("dump: %v; want it refused, saying %q", res, want)
					}
				}
				noImage(t, img)
				openGate(t, gate)
				echo(t, waiting, "after the refused dump")
				return
			case "redo":
				res := e.runCkpt(t, nil, "dump", "--skip-in-flight", "--dir", img, fmt.Sprint(v.pid))
				if res.code != 0 || !strings.Contains(res.stderr, "dropping the connections waiting in its accept queue") {
					t.Fatalf("dump --skip-in-flight: %v; want success and a warning naming the listener", res)
				}
				if es := e.r.WaitExit(t, v.pid, wait); es.Signal != int(syscall.SIGKILL) {
					t.Fatalf("after the dump: %v, want killed", es)
				}
				if res := e.runRedo(t, nil, img); res.code != 0 {
					t.Fatalf("ckpt-redo: %v", res)
				}
				openGate(t, gate)
				fresh, err := net.DialTimeout("tcp4", addr, wait)
				if err != nil {
					t.Fatal(err)
				}
				defer fresh.Close()
				echo(t, fresh, "a new client of the restored server")
				// The dropped client: silence, then a reset once it sends.
				waiting.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				if n, err := waiting.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("dropped client before it sends: read %d, %v; want nothing", n, err)
				}
				waiting.SetDeadline(time.Now().Add(wait))
				waiting.Write([]byte("late\n"))
				if _, err := io.ReadAll(waiting); !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("dropped client after it sent: %v; want ECONNRESET", err)
				}
			case "leave-running":
				res := e.runCkpt(t, nil, "dump", "--skip-in-flight", "--leave-running", "--dir", img, fmt.Sprint(v.pid))
				if res.code != 0 {
					t.Fatalf("dump --skip-in-flight --leave-running: %v", res)
				}
				openGate(t, gate)
				echo(t, waiting, "the running server keeps its queue")
			}
		})
	}
}

// requireMPTCP skips a test on a machine that cannot make MPTCP sockets.
func requireMPTCP(t *testing.T) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 262) // IPPROTO_MPTCP
	if err != nil {
		t.Skipf("no MPTCP here: %v", err)
	}
	syscall.Close(fd)
}

// openGate lets testdata/gated_server.py accept.
func openGate(t *testing.T, gate string) {
	t.Helper()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// echo checks that the server echoes what c sent (or sends now): the
// "early" line sent before, else a new one.
func echo(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatalf("%s: write: %v", what, err)
	}
	var got []byte
	buf := make([]byte, 256)
	for !strings.Contains(string(got), "ping\n") {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("%s: read after %q: %v", what, got, err)
		}
		got = append(got, buf[:n]...)
	}
	if !strings.HasPrefix(string(got), "echo:") {
		t.Fatalf("%s: got %q, want the echo", what, got)
	}
}
