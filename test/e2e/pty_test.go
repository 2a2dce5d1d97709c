package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
	"golang.org/x/sys/unix"
)

// Pseudo-terminals whose master is in the dump (pkg/fdkind/pty.go,
// pkg/restore/ctty.go), with real programs: script and tmux. Each test
// holds testenv.LockPtys: a restored pty needs its index back.

// countLoop is the shell loop the pty tests run on the slave: one
// numbered line every 20 ms.
const countLoop = `i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo n $i; sleep 0.02; done`

// counted returns the numbers of the "n N" lines of a typescript, in
// order.
func counted(path string) []int {
	var out []int
	for _, m := range regexp.MustCompile(`n (\d+)\r?\n`).FindAllStringSubmatch(readFile(path), -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	return out
}

// waitTypescript waits until the typescript counts past than, and returns the
// last number.
func waitTypescript(t *testing.T, path string, than int) int {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		if c := counted(path); len(c) > 0 && c[len(c)-1] > than {
			return c[len(c)-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no count past %d in %v; it ends with %q", path, than, wait, tail(strings.Split(readFile(path), "\n"), 3))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startScript runs `script -q -f -c countLoop TYPESCRIPT` under the
// reaper and waits for it to count; it returns script's PID and the
// typescript.
func startScript(t *testing.T, e *env) (int, string) {
	t.Helper()
	bin, err := exec.LookPath("script")
	if err != nil {
		t.Fatalf("script is not installed (bsdutils; make deps / .ci/run install it): %v", err)
	}
	dir := t.TempDir()
	ts := filepath.Join(dir, "typescript")
	pid := e.r.Run(t, testenv.RunOpts{Stdout: filepath.Join(dir, "out"), Stderr: filepath.Join(dir, "err"), Dir: dir},
		bin, "-q", "-f", "-c", countLoop, ts)
	waitTypescript(t, ts, 3)
	return pid, ts
}

// ptyOf returns N of the /dev/ptmx fd of pid (its fdinfo's tty-index).
func ptyOf(t *testing.T, pid int) int {
	t.Helper()
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, ent := range ents {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, ent.Name())); l == "/dev/ptmx" || l == "/dev/pts/ptmx" {
			for _, line := range strings.Split(readFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, ent.Name())), "\n") {
				if v, ok := strings.CutPrefix(line, "tty-index:"); ok {
					n, err := strconv.Atoi(strings.TrimSpace(v))
					if err == nil {
						return n
					}
				}
			}
		}
	}
	t.Fatalf("process %d holds no /dev/ptmx with a tty-index", pid)
	return -1
}

// ttyNr is field 7 of /proc/PID/stat: the controlling terminal.
func ttyNr(pid int) int {
	f := stat(pid) // from field 3 (state)
	if len(f) < 5 {
		return -1
	}
	n, _ := strconv.Atoi(f[4])
	return n
}

// slaveRdev is the device number of /dev/pts/n.
func slaveRdev(t *testing.T, n int) int {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/dev/pts/%d", n), &st); err != nil {
		t.Fatal(err)
	}
	return int(st.Rdev)
}

// childrenOf lists the children of pid.
func childrenOf(pid int) []int {
	var out []int
	for _, s := range strings.Fields(readFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))) {
		n, _ := strconv.Atoi(s)
		out = append(out, n)
	}
	return out
}

// checkTypescript fails unless the typescript counts 1, 2, 3... without a
// gap or a repeat: no byte queued in the pty was lost or doubled.
func checkTypescript(t *testing.T, ts string) {
	t.Helper()
	for i, n := range counted(ts) {
		if n != i+1 {
			t.Fatalf("%s: line %d says n %d, want %d (lost or doubled output)", ts, i+1, n, i+1)
		}
	}
}

// TestPtyScript checkpoints `script` running a counting shell loop on
// its pty (script holds the master, the shell leads a session whose
// controlling terminal is the slave), once with --leave-running, then
// kills it and restores it twice:
// the loop goes on counting on the same /dev/pts/N, as its controlling
// terminal, and the typescript shows every number once.
func TestPtyScript(t *testing.T) {
	e := setup(t)
	testenv.LockPtys(t)
	pid, ts := startScript(t, e)
	n := ptyOf(t, pid)
	// A --leave-running dump first: script and its shell go on, without a
	// byte lost or doubled in the pty (the dump reads the queues and puts
	// them back).
	e.dump(t, pid, filepath.Join(t.TempDir(), "img"), "--leave-running")
	waitTypescript(t, ts, waitTypescript(t, ts, 0)+3)
	for round := 1; round <= 2; round++ {
		img := filepath.Join(t.TempDir(), "img")
		e.dump(t, pid, img)
		if es := e.r.WaitExit(t, pid, wait); es.Signal != int(unix.SIGKILL) {
			t.Fatalf("script after dump %d: %v, want killed", round, es)
		}
		last := waitTypescript(t, ts, 0)
		if res := e.runRedo(t, nil, img); res.code != 0 {
			t.Fatalf("round %d: ckpt-redo: %v", round, res)
		}
		waitTypescript(t, ts, last+5)
		if got := ptyOf(t, pid); got != n {
			t.Errorf("round %d: script's pty is /dev/pts/%d, want /dev/pts/%d", round, got, n)
		}
		kids := childrenOf(pid)
		if len(kids) != 1 {
			t.Fatalf("round %d: script has children %v, want its shell", round, kids)
		}
		if got, want := ttyNr(kids[0]), slaveRdev(t, n); got != want {
			t.Errorf("round %d: the shell's controlling terminal is %#x, want /dev/pts/%d (%#x)", round, got, n, want)
		}
	}
	checkTypescript(t, ts)
}

// TestPtyIndexTaken: a restore whose pty index is in use fails naming it,
// leaves nothing behind, and succeeds once the index is free again.
func TestPtyIndexTaken(t *testing.T) {
	e := setup(t)
	testenv.LockPtys(t)
	pid, ts := startScript(t, e)
	n := ptyOf(t, pid)
	img := filepath.Join(t.TempDir(), "img")
	e.dump(t, pid, img)
	e.r.WaitExit(t, pid, wait)
	// Take /dev/pts/n (and whatever lower index is free) ourselves.
	var held []*os.File
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	for {
		m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, m)
		k, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
		if err != nil {
			t.Fatal(err)
		}
		if k == n {
			break
		}
		if k > n || len(held) > n+1 {
			t.Fatalf("could not take /dev/pts/%d (got %d)", n, k)
		}
	}
	res := e.runRedo(t, nil, img)
	want := fmt.Sprintf("pty /dev/pts/%d: the index is in use: /dev/pts/%d exists (held by process %d (", n, n, os.Getpid())
	if res.code == 0 || !strings.Contains(res.stderr, want) || !strings.Contains(res.stderr, "the master): pty index taken") {
		t.Fatalf("ckpt-redo with /dev/pts/%d taken: %v; want a failure saying %q... the master", n, res, want)
	}
	t.Logf("refused: %s", strings.TrimSpace(res.stderr))
	e.expectGone(t, pid, "a restore refused for a taken pty")
	for _, f := range held {
		f.Close()
	}
	held = nil
	if res := e.runRedo(t, nil, img); res.code != 0 {
		t.Fatalf("ckpt-redo once /dev/pts/%d is free: %v", n, res)
	}
	last := waitTypescript(t, ts, 0)
	waitTypescript(t, ts, last+3)
	checkTypescript(t, ts)
}

// TestPtySlaveOutside: a pty whose slave is open in a process outside the
// dump is refused by name at dump time, and the program goes on.
func TestPtySlaveOutside(t *testing.T) {
	e := setup(t)
	testenv.LockPtys(t)
	pid, ts := startScript(t, e)
	n := ptyOf(t, pid)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	res := e.runCkpt(t, nil, "dump", "--dir", filepath.Join(t.TempDir(), "img"), strconv.Itoa(pid))
	s.Close()
	want := fmt.Sprintf("pseudo-terminal master of /dev/pts/%d: its slave is open in process %d", n, os.Getpid())
	if res.code == 0 || !strings.Contains(res.stderr, want) {
		t.Fatalf("dump: %v; want a refusal saying %q", res, want)
	}
	last := waitTypescript(t, ts, 0)
	waitTypescript(t, ts, last+3)
	checkTypescript(t, ts)
}

// tmux runs a tmux command on the server at sock.
func tmux(t *testing.T, sock string, args ...string) string {
	t.Helper()
	cmd := exec.Command("tmux", append([]string{"-S", sock, "-f", "/dev/null"}, args...)...)
	cmd.Env = append(os.Environ(), "TERM=xterm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitPane waits until the pane shows every one of want.
func waitPane(t *testing.T, sock string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		pane := tmux(t, sock, "capture-pane", "-p", "-t", "t")
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(pane, w)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tmux pane does not show %q after %v:\n%s", want, wait, pane)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPtyTmux checkpoints a tmux server with a session running a shell
// (the server holds the pty master and its socket, the shell leads a
// session on the slave and holds /dev/tty), kills it and restores it:
// the stale socket file is taken over, the pane keeps what it showed, and
// keys sent after the restore reach the same shell, whose controlling
// terminal is the same /dev/pts/N.
func TestPtyTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatalf("tmux is not installed (make deps / .ci/run install it): %v", err)
	}
	e := setup(t)
	testenv.LockPtys(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "sock")
	client := e.r.Run(t, testenv.RunOpts{Dir: dir, Stdout: filepath.Join(dir, "out"), Stderr: filepath.Join(dir, "err"),
		Env: append(os.Environ(), "TERM=xterm")},
		"tmux", "-S", sock, "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "80", "-y", "24", "sh")
	if es := e.r.WaitExit(t, client, wait); es.Code != 0 || es.Signal != 0 {
		t.Fatalf("tmux new-session: %v: %s", es, readFile(filepath.Join(dir, "err")))
	}
	server, err := strconv.Atoi(strings.TrimSpace(tmux(t, sock, "display", "-p", "#{pid}")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("tmux", "-S", sock, "kill-server").Run() })
	tmux(t, sock, "send-keys", "-t", "t", "echo before-$((6*7))", "Enter")
	waitPane(t, sock, "before-42")
	n := ptyOf(t, server)
	shell := childrenOf(server)
	if len(shell) != 1 {
		t.Fatalf("tmux server has children %v, want its pane's shell", shell)
	}
	img := filepath.Join(t.TempDir(), "img")
	e.dump(t, server, img)
	e.expectGone(t, server, "the dumped tmux server")
	e.expectGone(t, shell[0], "the dumped pane shell")
	show := e.runCkpt(t, nil, "show", img)
	for _, want := range []string{fmt.Sprintf("ptmx     pty master of /dev/pts/%d (80x24, terminal of session %d, foreground group %d)", n, shell[0], shell[0]),
		fmt.Sprintf("tty      pty slave /dev/pts/%d (master in the dump)", n),
		fmt.Sprintf("tty      /dev/tty: the controlling terminal /dev/pts/%d (master in the dump)", n)} {
		if !strings.Contains(show.stdout, want) {
			t.Errorf("ckpt show does not say %q:\n%s", want, show.stdout)
		}
	}
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("the killed server's socket file: %v (want it left behind, stale)", err)
	}
	if res := e.runRedo(t, nil, img); res.code != 0 {
		t.Fatalf("ckpt-redo: %v", res)
	}
	tmux(t, sock, "send-keys", "-t", "t", "echo after-$((7*8))", "Enter")
	waitPane(t, sock, "before-42", "after-56")
	if got := ptyOf(t, server); got != n {
		t.Errorf("the server's pty is /dev/pts/%d, want /dev/pts/%d", got, n)
	}
	if got, want := ttyNr(shell[0]), slaveRdev(t, n); got != want {
		t.Errorf("the shell's controlling terminal is %#x, want /dev/pts/%d (%#x)", got, n, want)
	}
}
