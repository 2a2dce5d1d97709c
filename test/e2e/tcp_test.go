package e2e

import (
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/netlock"
	"golang.org/x/sys/unix"
)

// lockTables lists the network lock tables ckpt made for a dump of pid.
func lockTables(t *testing.T, pid int) []string {
	t.Helper()
	ts, err := netlock.Tables()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range ts {
		if strings.HasPrefix(name, fmt.Sprintf("%s%d-", netlock.TablePrefix, pid)) {
			out = append(out, name)
		}
	}
	return out
}

func waitNoLock(t *testing.T, pid int, why string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(lockTables(t, pid)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: network lock tables remain: %v", why, lockTables(t, pid))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type tcpJob struct {
	port    int // the server's
	server  *victim
	clients []int
	outs    []string
}

// startTCP starts the echo server and n clients streaming for secs seconds.
func (e *env) startTCP(t *testing.T, n int, secs float64) *tcpJob {
	t.Helper()
	port := freePort(t)
	v := e.startLogged(t, "tcpserver", func(log string) []string {
		return []string{"python3", script(t, "tcpserver.py"), log, strconv.Itoa(port)}
	})
	j := &tcpJob{port: port, server: v}
	for i := 0; i < n; i++ {
		out := filepath.Join(v.dir, fmt.Sprintf("client%d", i))
		j.outs = append(j.outs, out)
		j.clients = append(j.clients, e.r.Run(t, testenv.RunOpts{Stdout: out, Stderr: out}, "python3", script(t, "tcpclient.py"), strconv.Itoa(port), fmt.Sprint(secs)))
	}
	waitSockets(t, v.pid, n+1, "the echo server's listener and client connections")
	return j
}

// finish waits for the clients: each must have seen every answer.
func (e *env) finish(t *testing.T, j *tcpJob) {
	t.Helper()
	for i, c := range j.clients {
		st := e.r.WaitExit(t, c, 60*time.Second)
		out := readFile(j.outs[i])
		if st.Code != 0 || !strings.HasPrefix(out, "ok ") {
			t.Errorf("client %d: %v: %s", i, st, out)
		}
	}
}

// restoreTCP restores the server; it must get its PID back.
func (e *env) restoreServer(t *testing.T, v *victim, img string) {
	t.Helper()
	res := e.runRedo(t, nil, img)
	if res.code != 0 {
		t.Fatalf("ckpt-redo: %v", res)
	}
	if c := comm(v.pid); c != v.comm {
		t.Fatalf("restored server: comm %q, want %q", c, v.comm)
	}
}

// TestTCPServer checkpoints and restores an echo server three times while
// three external clients stream checksummed messages through it: every
// answer arrives once, in order, with no reset; the lock is there while the
// server is down and gone once it is back.
func TestTCPServer(t *testing.T) {
	e := setup(t)
	j := e.startTCP(t, 3, 4)
	pid := j.server.pid
	for i := 0; i < 3; i++ {
		img := filepath.Join(t.TempDir(), "img")
		e.dumpKill(t, j.server, img)
		if ts := lockTables(t, pid); len(ts) != 1 {
			t.Fatalf("cycle %d: after the dump, lock tables %v, want one", i, ts)
		}
		time.Sleep(200 * time.Millisecond) // the clients' packets are dropped meanwhile
		e.restoreServer(t, j.server, img)
		waitNoLock(t, pid, fmt.Sprintf("cycle %d: after the restore", i))
		time.Sleep(300 * time.Millisecond) // deliberately: the clients talk to the restored server before the next cycle
	}
	e.finish(t, j)
	e.killAndReap(t, j.server)
}

// TestNetLockLifetime: a dump that dies leaves no lock (its guard removes
// it) and the connections go on; a restore that dies leaves the lock (the
// peers see silence, not resets) until a retry succeeds, and a restore
// that fails with an error says so and how to lift it.
func TestNetLockLifetime(t *testing.T) {
	e := setup(t)
	j := e.startTCP(t, 1, 4)
	pid := j.server.pid
	img := filepath.Join(t.TempDir(), "img")
	for _, phase := range []string{"collected", "memory", "written"} {
		res := e.runCkpt(t, []string{"CKPT_FAULT=" + phase}, "dump", "--dir", img, strconv.Itoa(j.server.pid))
		if res.signal != 9 {
			t.Fatalf("ckpt dump with CKPT_FAULT=%s: %v, want it killed", phase, res)
		}
		waitNoLock(t, pid, "after ckpt died at "+phase)
		if st := procState(j.server.pid); st != "S" && st != "R" {
			t.Fatalf("server after ckpt died at %s: state %q", phase, st)
		}
	}
	e.dumpKill(t, j.server, img)
	res := e.runRedo(t, []string{"CKPT_FAULT=built"}, img)
	if res.signal != 9 {
		t.Fatalf("ckpt-redo with CKPT_FAULT=built: %v, want it killed", res)
	}
	e.expectGone(t, j.server.pid, "a restore that died")
	if ts := lockTables(t, pid); len(ts) != 1 {
		t.Fatalf("after a failed restore: lock tables %v, want the dump's lock still there", ts)
	}
	// A restore that fails with an error (the listener's address taken
	// meanwhile) says that the lock stays, and how to lift it.
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", j.port))
	if err != nil {
		t.Fatal(err)
	}
	res = e.runRedo(t, nil, img)
	l.Close()
	if res.code == 0 || !strings.Contains(res.stderr, "the network lock ckpt-lock-") || !strings.Contains(res.stderr, "ckpt unlock "+img) {
		t.Fatalf("ckpt-redo with the listener's address taken: %v; want it to fail naming the lock and ckpt unlock %s", res, img)
	}
	e.expectGone(t, j.server.pid, "a restore that failed")
	if ts := lockTables(t, pid); len(ts) != 1 {
		t.Fatalf("after a failed restore: lock tables %v, want the dump's lock still there", ts)
	}
	e.restoreServer(t, j.server, img)
	waitNoLock(t, pid, "after the retried restore")
	e.finish(t, j)
	e.killAndReap(t, j.server)
}

// TestUnlock: ckpt unlock lifts an image's lock. While the lock stays, a
// new server on the locked port is black-holed by it: its dump fails,
// naming the lock and how to lift it, and leaves the server running.
func TestUnlock(t *testing.T) {
	e := setup(t)
	j := e.startTCP(t, 1, 1)
	pid := j.server.pid
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, j.server, img)
	ts := lockTables(t, pid)
	if len(ts) != 1 {
		t.Fatalf("after the dump: lock tables %v, want one", ts)
	}
	again := e.startLogged(t, "tcpserver", func(log string) []string {
		return []string{"python3", script(t, "tcpserver.py"), log, strconv.Itoa(j.port)}
	})
	waitSockets(t, again.pid, 1, "the new server's listener")
	res := e.runCkpt(t, nil, "dump", "--leave-running", "--dir", filepath.Join(t.TempDir(), "img"), strconv.Itoa(again.pid))
	if res.code == 0 || !strings.Contains(res.stderr, "dropped by the network lock "+ts[0]) || !strings.Contains(res.stderr, "ckpt unlock --table "+ts[0]) {
		t.Fatalf("dump of a server on a port the stale lock %s holds: %v; want it refused naming the lock", ts[0], res)
	}
	if st := procState(again.pid); st != "S" && st != "R" {
		t.Fatalf("the new server after the refused dump: state %q", st)
	}
	// A lock is lifted by its image, or by its table's name (--table,
	// once the image is gone); a name that is no lock table is an error.
	if res := e.runCkpt(t, nil, "unlock", "--table", "no-such-table"); res.code == 0 || !strings.Contains(res.stderr, "not a ckpt lock table") {
		t.Fatalf("ckpt unlock --table of a table that does not exist: %v", res)
	}
	if res := e.runCkpt(t, nil, "unlock", img); res.code != 0 || !strings.Contains(res.stdout, "lifted") {
		t.Fatalf("ckpt unlock: %v", res)
	}
	waitNoLock(t, pid, "after ckpt unlock")
	e.dump(t, again.pid, filepath.Join(t.TempDir(), "img"), "--leave-running")
	e.killAndReap(t, again)
	// Without its server the client fails: that is what the lock was for.
	for _, c := range j.clients {
		e.r.WaitExit(t, c, 30*time.Second)
	}
}

// TestHTTPKeepAlive checkpoints a python3 HTTP/1.1 server (a thread per
// connection) twice while a client keeps one keep-alive connection busy:
// every request is answered once, on the same connection.
func TestHTTPKeepAlive(t *testing.T) {
	e := setup(t)
	port := freePort(t)
	v := e.startLogged(t, "httpserver", func(log string) []string {
		return []string{"python3", script(t, "httpserver.py"), log, strconv.Itoa(port)}
	})
	out := filepath.Join(v.dir, "client")
	cli := e.r.Run(t, testenv.RunOpts{Stdout: out, Stderr: out}, "python3", script(t, "httpclient.py"), strconv.Itoa(port), "3")
	waitSockets(t, v.pid, 2, "the HTTP server's listener and the client's connection")
	for i := 0; i < 2; i++ {
		img := filepath.Join(t.TempDir(), "img")
		e.dumpKill(t, v, img)
		e.restoreServer(t, v, img)
		waitNoLock(t, v.pid, fmt.Sprintf("cycle %d", i))
		time.Sleep(400 * time.Millisecond) // deliberately: the client sends requests to the restored server before the next cycle
	}
	if st := e.r.WaitExit(t, cli, 30*time.Second); st.Code != 0 || !strings.HasPrefix(readFile(out), "ok ") {
		t.Fatalf("http client: %v: %s", st, readFile(out))
	}
	e.killAndReap(t, v)
}

// TestUDP restores a bound UDP socket and a connected one: after each of
// two restores the bound one still answers on its port and the connected
// one still sends to its peer, with the beat counter going on.
func TestUDP(t *testing.T) {
	e := setup(t)
	peer, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	port := freePort(t)
	v := e.startLogged(t, "udpserver", func(log string) []string {
		return []string{"python3", script(t, "udpserver.py"), log, strconv.Itoa(port), strconv.Itoa(peer.LocalAddr().(*net.UDPAddr).Port)}
	})
	beat := func() int {
		t.Helper()
		buf := make([]byte, 100)
		peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := peer.ReadFrom(buf)
		if err != nil {
			t.Fatalf("no beat from the connected socket: %v", err)
		}
		var b int
		fmt.Sscanf(string(buf[:n]), "beat %d", &b)
		return b
	}
	echo := func(msg string) {
		t.Helper()
		c, err := net.Dial("udp4", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		for try := 0; ; try++ {
			c.Write([]byte(msg))
			buf := make([]byte, 100)
			n, err := c.Read(buf)
			if err == nil && string(buf[:n]) == "echo "+msg {
				return
			}
			if try == 20 {
				t.Fatalf("no echo of %q from the bound socket: %v %q", msg, err, buf[:n])
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	echo("hello")
	b0 := beat()
	for i := 0; i < 2; i++ {
		img := filepath.Join(t.TempDir(), "img")
		e.dumpKill(t, v, img)
		e.restoreServer(t, v, img)
		echo(fmt.Sprintf("after restore %d", i))
		// Drain the beats queued while the server was down, then one more.
		var b int
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
			if b = beat(); b > b0+5 {
				break
			}
		}
		if b <= b0 {
			t.Fatalf("cycle %d: beat %d after restore, want past %d", i, b, b0)
		}
		b0 = b
		// The buffer size the program set is back (fd 4, after the log at
		// fd 3); the other socket (fd 5) keeps the default.
		if got := sockOpt(t, v.pid, 4, unix.SOL_SOCKET, unix.SO_RCVBUF); got != 131072 {
			t.Errorf("cycle %d: bound socket SO_RCVBUF %d, want the 131072 set by the program", i, got)
		}
		if got := sockOpt(t, v.pid, 5, unix.SOL_SOCKET, unix.SO_RCVBUF); got != 212992 {
			t.Errorf("cycle %d: connected socket SO_RCVBUF %d, want the default 212992", i, got)
		}
	}
	e.killAndReap(t, v)
}

// sockOpt reads an integer option of socket fd of process pid, through a
// copy taken with pidfd_getfd.
func sockOpt(t *testing.T, pid, fd, level, opt int) int {
	t.Helper()
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	s, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		t.Fatalf("pidfd_getfd %d of %d: %v", fd, pid, err)
	}
	defer unix.Close(s)
	v, err := unix.GetsockoptInt(s, level, opt)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestEpollSockets restores an epoll server (its listener and 20 accepted
// connections registered in one epoll set): after each of two restores the
// server, blocked in epoll_wait, wakes up for every connection and for a
// new one.
func TestEpollSockets(t *testing.T) {
	e := setup(t)
	port := freePort(t)
	v := e.startLogged(t, "manyconns", func(log string) []string {
		return []string{"python3", script(t, "manyconns.py"), log, strconv.Itoa(port)}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var conns []net.Conn
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	ping := func(c net.Conn, msg string) {
		t.Helper()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
	for i, c := range conns {
		ping(c, fmt.Sprintf("before %d\n", i))
	}
	for cycle := 0; cycle < 2; cycle++ {
		img := filepath.Join(t.TempDir(), "img")
		e.dumpKill(t, v, img)
		e.restoreServer(t, v, img)
		for i, c := range conns {
			ping(c, fmt.Sprintf("cycle %d conn %d\n", cycle, i))
		}
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatalf("cycle %d: new connection: %v", cycle, err)
		}
		defer c.Close()
		ping(c, "new\n")
		conns = append(conns, c)
	}
	e.killAndReap(t, v)
}
