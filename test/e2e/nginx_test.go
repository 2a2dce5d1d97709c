package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
)

// nginxConf is a minimal nginx configuration serving "ok URI" on
// 127.0.0.1:PORT with long keep-alive, everything under DIR.
const nginxConf = `daemon off;
master_process on;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 128; }
http {
	access_log off;
	keepalive_timeout 300s;
	keepalive_requests 100000;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	server {
		listen 127.0.0.1:%[2]d;
		location / { return 200 "ok $request_uri\n"; }
	}
}
`

// keepAlive is one HTTP/1.1 connection reused for every request.
type keepAlive struct {
	c net.Conn
	r *bufio.Reader
	n int
}

// get sends the next request on the connection and checks its response.
func (k *keepAlive) get(t *testing.T, what string) {
	t.Helper()
	k.n++
	uri := fmt.Sprintf("/%d", k.n)
	k.c.SetDeadline(time.Now().Add(wait))
	if _, err := fmt.Fprintf(k.c, "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", uri); err != nil {
		t.Fatalf("%s: request %s: %v", what, uri, err)
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		t.Fatalf("%s: response to %s: %v", what, uri, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(body) != "ok "+uri+"\n" || resp.Close {
		t.Fatalf("%s: %s: status %d, body %q, close %v, %v", what, uri, resp.StatusCode, body, resp.Close, err)
	}
}

// TestNginx: nginx (a master and its worker, which talk over a socket
// pair the master made) serves keep-alive clients. After a dump and a
// restore, or two --leave-running dumps, every client goes on on its same
// connection and every response is checked; a new client is served too.
func TestNginx(t *testing.T) {
	if _, err := exec.LookPath("nginx"); err != nil {
		t.Skip("nginx is not installed (make deps installs nginx-light)")
	}
	e := setup(t)
	for _, mode := range []string{"redo", "leave-running-twice", "accept-queue"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			l, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			conf := filepath.Join(dir, "nginx.conf")
			if err := os.WriteFile(conf, []byte(fmt.Sprintf(nginxConf, dir, port)), 0o644); err != nil {
				t.Fatal(err)
			}
			pid := e.r.Run(t, testenv.RunOpts{Dir: dir, Stderr: filepath.Join(dir, "stderr")}, "nginx", "-c", conf, "-p", dir)
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			dial := func() *keepAlive {
				deadline := time.Now().Add(wait)
				for {
					c, err := net.Dial("tcp4", addr)
					if err == nil {
						t.Cleanup(func() { c.Close() })
						return &keepAlive{c: c, r: bufio.NewReader(c)}
					}
					if time.Now().After(deadline) {
						t.Fatalf("nginx does not listen on %s: %v; error.log %q", addr, err, readFile(filepath.Join(dir, "error.log")))
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			var clients []*keepAlive
			for i := 0; i < 4; i++ {
				k := dial()
				for j := 0; j < 5; j++ {
					k.get(t, "before the dump")
				}
				clients = append(clients, k)
			}
			switch mode {
			case "accept-queue":
				// The worker stopped, a new connection waits in the
				// accept queue with its request: --skip-in-flight drops
				// it, the others go on.
				worker := childOf(t, pid)
				e.r.MustSignal(t, worker, syscall.SIGSTOP)
				for deadline := time.Now().Add(wait); !strings.HasPrefix(procState(worker), "T"); time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("worker %d: state %q, want stopped", worker, procState(worker))
					}
				}
				waiting := dial()
				fmt.Fprintf(waiting.c, "GET /queued HTTP/1.1\r\nHost: localhost\r\n\r\n")
				img := filepath.Join(t.TempDir(), "img")
				if res := e.runCkpt(t, nil, "dump", "--skip-in-flight", "--dir", img, strconv.Itoa(pid)); res.code != 0 {
					t.Fatalf("dump --skip-in-flight: %v", res)
				}
				if es := e.r.WaitExit(t, pid, wait); es.Signal != int(syscall.SIGKILL) {
					t.Fatalf("after the dump: %v, want killed", es)
				}
				if res := e.runRedo(t, nil, img); res.code != 0 {
					t.Fatalf("ckpt-redo: %v; error.log %q", res, readFile(filepath.Join(dir, "error.log")))
				}
				e.r.MustSignal(t, worker, syscall.SIGCONT)
				waiting.c.SetDeadline(time.Now().Add(wait))
				fmt.Fprintf(waiting.c, "GET /again HTTP/1.1\r\nHost: localhost\r\n\r\n")
				if _, err := io.ReadAll(waiting.c); !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("the dropped client: %v; want ECONNRESET", err)
				}
			case "redo":
				img := filepath.Join(t.TempDir(), "img")
				if res := e.runCkpt(t, nil, "dump", "--dir", img, strconv.Itoa(pid)); res.code != 0 {
					t.Fatalf("dump: %v", res)
				}
				if es := e.r.WaitExit(t, pid, wait); es.Signal != int(syscall.SIGKILL) {
					t.Fatalf("after the dump: %v, want killed", es)
				}
				if res := e.runRedo(t, nil, img); res.code != 0 {
					t.Fatalf("ckpt-redo: %v; error.log %q", res, readFile(filepath.Join(dir, "error.log")))
				}
			case "leave-running-twice":
				for i := 0; i < 2; i++ {
					if res := e.runCkpt(t, nil, "dump", "--leave-running", "--dir", filepath.Join(t.TempDir(), "img"), strconv.Itoa(pid)); res.code != 0 {
						t.Fatalf("dump %d --leave-running: %v", i+1, res)
					}
					for _, k := range clients {
						k.get(t, fmt.Sprintf("after dump %d", i+1))
					}
				}
			}
			for _, k := range clients {
				for j := 0; j < 5; j++ {
					k.get(t, "after "+mode)
				}
			}
			dial().get(t, "a new client after "+mode)
			e.r.Signal(t, pid, syscall.SIGKILL)
		})
	}
}

// childOf returns the one child of pid (nginx's worker).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	var kid int
	if _, err := fmt.Sscan(readFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)), &kid); err != nil {
		t.Fatalf("process %d has no child: %v", pid, err)
	}
	return kid
}
