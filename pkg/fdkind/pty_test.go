package fdkind

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// readWait reads what fd has within a few seconds (fd is non-blocking).
func readWait(t *testing.T, fd int) string {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(pfd, 5000); err != nil || n != 1 {
		t.Fatalf("fd %d: nothing to read: %v", fd, err)
	}
	b := make([]byte, 256)
	n, err := unix.Read(fd, b)
	if err != nil {
		t.Fatalf("read fd %d: %v", fd, err)
	}
	return string(b[:n])
}

// TestPtyRoundTrip describes a pty pair of the test process with settings
// and bytes queued both ways, checks the dump left the bytes in place
// (a partial canonical line still partial), then rebuilds the pair with
// the same index once the original is gone.
func TestPtyRoundTrip(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.LockPtys(t)
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	m := os.NewFile(uintptr(mfd), "ptmx")
	defer m.Close()
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	idx, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	sfd, err := unix.Open(fmt.Sprintf("/dev/pts/%d", idx), unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := os.NewFile(uintptr(sfd), "pts")
	defer s.Close()
	tio, err := unix.IoctlGetTermios(sfd, unix.TCGETS2)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag &^= unix.ECHO
	tio.Lflag |= unix.ICANON
	tio.Oflag &^= unix.ONLCR
	tio.Cc[unix.VERASE] = 8
	if err := unix.IoctlSetTermios(sfd, unix.TCSETS2, tio); err != nil {
		t.Fatal(err)
	}
	ws := &unix.Winsize{Row: 33, Col: 99, Xpixel: 1, Ypixel: 2}
	if err := unix.IoctlSetWinsize(mfd, unix.TIOCSWINSZ, ws); err != nil {
		t.Fatal(err)
	}
	m.Write([]byte("line\npart"))
	s.Write([]byte("out\n"))
	// Wait until both line disciplines hold the bytes.
	deadline := time.Now().Add(5 * time.Second)
	for {
		in, _ := unix.IoctlGetInt(sfd, unix.TIOCINQ)
		out, _ := unix.IoctlGetInt(mfd, unix.TIOCINQ)
		if in == 5 && out == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queued: %d towards the slave, %d towards the master", in, out)
		}
		time.Sleep(time.Millisecond)
	}

	env := newTestEnv(t)
	fm, fs := describeOwn(t, env, mfd), describeOwn(t, env, sfd)
	if fm.Kind != image.FilePtmx || fs.Kind != image.FileTTY {
		t.Fatalf("kinds %s %s", fm.Kind, fs.Kind)
	}
	self := os.Getpid()
	if err := linkPtys(env, []Held{{PID: sys.PID(self), FD: sys.TargetFD(mfd), File: fm}, {PID: sys.PID(self), FD: sys.TargetFD(sfd), File: fs}}); err != nil {
		t.Fatal(err)
	}
	p := fm.Pty
	if p == nil || fs.Pty == nil || p.Index != idx || fs.Pty.Index != idx || fs.Pty.Master || !p.Master {
		t.Fatalf("pty state %+v / %+v, want index %d", p, fs.Pty, idx)
	}
	if p.Winsize != [4]uint16{33, 99, 1, 2} || p.Termios.Lflag != tio.Lflag || p.SlaveClosed || p.Locked || p.Packet {
		t.Errorf("pty state %+v", p)
	}
	if in, out := string(env.data[p.InputID]), string(env.data[p.OutputID]); in != "line\npart" || out != "out\n" {
		t.Errorf("queued %q towards the slave, %q towards the master; want %q, %q", in, out, "line\npart", "out\n")
	}
	if got := Show(fm); got != fmt.Sprintf("pty master of /dev/pts/%d (99x33, input queued, output queued)", idx) {
		t.Errorf("Show: %q", got)
	}
	// The dump left everything in place.
	check := func(what string, m, s int) {
		t.Helper()
		if got, err := unix.IoctlGetTermios(s, unix.TCGETS2); err != nil || *got != *tio {
			t.Errorf("%s: termios %+v, want %+v", what, got, tio)
		}
		if got := readWait(t, s); got != "line\n" {
			t.Errorf("%s: slave read %q, want the first line", what, got)
		}
		if _, err := unix.Read(s, make([]byte, 10)); err != unix.EAGAIN {
			t.Errorf("%s: the partial line is readable (%v)", what, err)
		}
		if got := readWait(t, m); got != "out\n" {
			t.Errorf("%s: master read %q", what, got)
		}
	}
	check("after the dump", mfd, sfd)
	s.Close()
	m.Close()

	// Restore, with the original gone.
	nm, ns := reopen(t, env, fm), reopen(t, env, fs)
	if n, err := unix.IoctlGetInt(int(nm.Fd()), unix.TIOCGPTN); err != nil || n != idx {
		t.Fatalf("restored index %d (%v), want %d", n, err, idx)
	}
	if got, err := unix.IoctlGetWinsize(int(ns.Fd()), unix.TIOCGWINSZ); err != nil || *got != *ws {
		t.Errorf("restored winsize %+v", got)
	}
	check("restored", int(nm.Fd()), int(ns.Fd()))
}
