package e2e

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal and returns its master and the path of its
// slave. Whatever is written to the terminal is drained and discarded.
func openPTY(t *testing.T) (*os.File, string) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, m)
	return m, fmt.Sprintf("/dev/pts/%d", n)
}

// TestShellJob checkpoints a program whose stdout is a terminal: ckpt-redo
// refuses to guess without --shell-job, and with it attaches the program to
// the terminal ckpt-redo runs on.
func TestShellJob(t *testing.T) {
	e := setup(t)
	testenv.LockPtys(t) // it opens ptys
	_, tty1 := openPTY(t)
	_, tty2 := openPTY(t)
	dir := t.TempDir()
	v := &victim{name: "dynamic_counter", dir: dir, log: filepath.Join(dir, "log"), stderr: filepath.Join(dir, "stderr")}
	v.pid = e.r.Run(t, testenv.RunOpts{Stdout: tty1, Stderr: v.stderr, Dir: dir}, testenv.VictimArgv(t, v.name, v.log)...)
	v.waitTick(t, 2)
	v.comm, v.exe = comm(v.pid), exeOf(v.pid)
	if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", v.pid)); link != tty1 {
		t.Fatalf("victim stdout is %q, want the terminal %s", link, tty1)
	}
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, v, img)

	res := e.runRedo(t, nil, img)
	if res.code == 0 || !strings.Contains(res.stderr, "terminal") || !strings.Contains(res.stderr, "--shell-job") {
		t.Fatalf("ckpt-redo without --shell-job: %v; want a refusal that names the terminal and --shell-job", res)
	}
	e.expectGone(t, v.pid, "a refused restore")

	redo := e.r.Run(t, testenv.RunOpts{Stdout: tty2, Stderr: filepath.Join(dir, "redo.err")}, e.redo(), "--shell-job", img)
	if st := e.r.WaitExit(t, redo, 30*time.Second); st.Code != 0 {
		t.Fatalf("ckpt-redo --shell-job: %v: %s", st, readFile(filepath.Join(dir, "redo.err")))
	}
	if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", v.pid)); link != tty2 {
		t.Errorf("restored stdout is %q, want ckpt-redo's terminal %s", link, tty2)
	}
	v.waitNewTicks(t, 3)
	v.check(t)
	testenv.CheckTicks(t, e.bye(t, v))
}
