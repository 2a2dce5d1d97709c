package e2e

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestSCMRights: a server (testdata/scmserver.py) whose acceptor hands
// each accepted TCP connection to a worker process over a UNIX socket
// (SCM_RIGHTS). Connections the worker took are its own fds: after a
// dump and a restore both clients still get their echoes, and a new
// client is accepted and handed over again. A connection still in
// flight in the UNIX socket's queue at dump time cannot be restored (a TCP
// socket in flight; UNIX ones are): the
// dump refuses naming SCM_RIGHTS, the server goes on untouched and
// serves it once the worker takes it.
func TestSCMRights(t *testing.T) {
	e := setup(t)
	for _, mode := range []string{"taken", "in-flight"} {
		t.Run(mode, func(t *testing.T) {
			gate := filepath.Join(t.TempDir(), "gate")
			if mode == "taken" {
				openGate(t, gate)
			}
			v := e.startLogged(t, "scmserver", func(log string) []string {
				return []string{"python3", script(t, "scmserver.py"), log, gate}
			})
			var port int
			fmt.Sscanf(v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "start ") }), "start pid=%d port=%d", new(int), &port)
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			dial := func() net.Conn {
				c, err := net.DialTimeout("tcp4", addr, wait)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			img := filepath.Join(t.TempDir(), "img")
			if mode == "in-flight" {
				c := dial()
				v.waitLine(t, func(l string) bool { return l == "passed 1" })
				res := e.runCkpt(t, nil, "dump", "--dir", img, strconv.Itoa(v.pid))
				for _, want := range []string{"process ", "a file in flight in its queue (SCM_RIGHTS)", "only UNIX sockets can be restored in flight"} {
					if res.code == 0 || !strings.Contains(res.stderr, want) {
						t.Fatalf("dump: %v; want it refused, saying %q", res, want)
					}
				}
				noImage(t, img)
				openGate(t, gate)
				echo(t, c, "the connection in flight, once the worker takes it")
				return
			}
			c1, c2 := dial(), dial()
			v.waitLine(t, func(l string) bool { return l == "worker took 2" })
			echo(t, c1, "client 1 before the dump")
			echo(t, c2, "client 2 before the dump")
			if res := e.runCkpt(t, nil, "dump", "--dir", img, strconv.Itoa(v.pid)); res.code != 0 {
				t.Fatalf("dump: %v", res)
			}
			if es := e.r.WaitExit(t, v.pid, wait); es.Signal != int(syscall.SIGKILL) {
				t.Fatalf("after the dump: %v, want killed", es)
			}
			if res := e.runRedo(t, nil, img); res.code != 0 {
				t.Fatalf("ckpt-redo: %v", res)
			}
			echo(t, c1, "client 1 after the restore")
			echo(t, c2, "client 2 after the restore")
			echo(t, dial(), "a new client, handed over after the restore")
		})
	}
}
