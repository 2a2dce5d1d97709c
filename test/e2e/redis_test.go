package e2e

import (
	"fmt"
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

// TestRedis checkpoints and restores redis-server (background threads,
// epoll, pipes, an IPv4 and an IPv6 listener) twice while a client holds
// one connection: after each restore the same connection — same CLIENT ID,
// same local port, no reconnect — reads every key back and writes new ones,
// and a new connection sees them all. Thread count and TIDs are unchanged.
func TestRedis(t *testing.T) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed (make deps / .ci/run install it): %v", err)
	}
	e := setup(t)
	port := freePort(t)
	dir := t.TempDir()
	v := &victim{name: "redis-server", dir: dir, log: filepath.Join(dir, "log"), stderr: filepath.Join(dir, "stderr")}
	v.pid = e.r.Run(t, testenv.RunOpts{Stdout: v.log, Stderr: v.stderr, Dir: dir}, server,
		"--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--daemonize", "no")
	v.waitLine(t, func(l string) bool { return strings.Contains(l, "Ready to accept connections") })
	v.comm, v.exe = comm(v.pid), exeOf(v.pid)
	v.cmd = readFile(fmt.Sprintf("/proc/%d/cmdline", v.pid))
	tids := taskList(t, v.pid)

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "client")
	cli := e.r.Run(t, testenv.RunOpts{Stdout: out, Stderr: out}, "python3",
		filepath.Join(testenv.RepoRoot(t), "test", "e2e", "testdata", "rediscli.py"), strconv.Itoa(port), fifo)
	ctl, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	waitOut := func(prefix string) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			for _, l := range testenv.ReadLines(out) {
				if strings.HasPrefix(l, prefix) {
					return l
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("redis client: no %q line; output:\n%s", prefix, readFile(out))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	loaded := strings.Fields(waitOut("loaded "))
	for i := 1; i <= 2; i++ {
		img := filepath.Join(t.TempDir(), "img")
		e.dumpKill(t, v, img)
		if res := e.runRedo(t, nil, img); res.code != 0 {
			t.Fatalf("cycle %d: ckpt-redo: %v", i, res)
		}
		if got := taskList(t, v.pid); fmt.Sprint(got) != fmt.Sprint(tids) {
			t.Fatalf("cycle %d: threads %v after restore, want %v", i, got, tids)
		}
		fmt.Fprintf(ctl, "check %d\n", i)
		ok := strings.Fields(waitOut(fmt.Sprintf("ok %d ", i)))
		if ok[2] != loaded[1] || ok[3] != loaded[2] {
			t.Fatalf("cycle %d: client id/port %v, want %v: the connection was not kept", i, ok[2:], loaded[1:])
		}
		// A new connection sees every key.
		keys, err := exec.Command("redis-cli", "-p", strconv.Itoa(port), "dbsize").Output()
		if err != nil {
			t.Fatalf("cycle %d: redis-cli: %v", i, err)
		}
		if want := strconv.Itoa(1000 + 100*i); strings.TrimSpace(string(keys)) != want {
			t.Fatalf("cycle %d: dbsize %q over a new connection, want %s", i, keys, want)
		}
		// The next dump must not catch the server between redis-cli's FIN
		// and its own close of that connection (CLOSE_WAIT is refused).
		waitClosed(t, port)
	}
	ctl.Close()
	if st := e.r.WaitExit(t, cli, 20*time.Second); st.Code != 0 {
		t.Fatalf("redis client: %v: %s", st, readFile(out))
	}
	e.killAndReap(t, v)
}

// taskList lists the TIDs of a process.
func taskList(t *testing.T, pid int) []string {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// waitClosed waits until no TCP connection on local port is in CLOSE_WAIT
// (the peer closed, the server has not yet), as /proc/net/tcp shows.
func waitClosed(t *testing.T, port int) {
	t.Helper()
	local := fmt.Sprintf(":%04X ", port)
	deadline := time.Now().Add(wait)
	for {
		busy := ""
		for _, l := range strings.Split(readFile("/proc/net/tcp"), "\n") {
			f := strings.Fields(l)
			if len(f) > 3 && strings.HasSuffix(f[1]+" ", local) && f[3] == "08" {
				busy = l
			}
		}
		if busy == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connection to port %d stays in CLOSE_WAIT: %s", port, busy)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
