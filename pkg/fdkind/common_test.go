package fdkind

import (
	"os"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// TestOwnerRoundTrip: the F_SETOWN_EX owner and F_SETSIG signal of a
// description, and O_ASYNC, come back.
func TestOwnerRoundTrip(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	ow := sys.FOwner{Type: 1 /* F_OWNER_PID */, PID: int32(os.Getpid())}
	if err := sys.SetOwner(p[0], ow); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETSIG, int(unix.SIGUSR1)); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETFL, unix.O_ASYNC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	f := describeOwn(t, env, p[0])
	if f.Owner == nil || f.Owner.PID != os.Getpid() || f.Owner.Sig != int(unix.SIGUSR1) {
		t.Fatalf("owner %+v", f.Owner)
	}
	f.Pipe.External = false
	// A pipe of its own: the other end does not matter here.
	nf := reopen(t, env, f)
	got, err := sys.GetOwner(int(nf.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if got != ow {
		t.Errorf("owner %+v, want %+v", got, ow)
	}
	if sig, _ := unix.FcntlInt(nf.Fd(), unix.F_GETSIG, 0); sig != int(unix.SIGUSR1) {
		t.Errorf("signal %d", sig)
	}
	if fl := getfl(t, nf.Fd()); fl != unix.O_RDONLY|unix.O_ASYNC|unix.O_NONBLOCK {
		t.Errorf("flags %#o", fl)
	}
}

// TestSettleRefusesWrongFlags: flags F_SETFL cannot give (an access mode
// the open did not give) make the restore fail, never a silent difference.
func TestSettleRefusesWrongFlags(t *testing.T) {
	env := newTestEnv(t)
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	f := describeOwn(t, env, fd)
	of, err := os.OpenFile("/dev/null", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer of.Close()
	if err := Settle(f, of); err == nil {
		t.Fatal("wrong access mode accepted")
	}
}
