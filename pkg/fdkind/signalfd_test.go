package fdkind

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestSignalfdRoundTrip(t *testing.T) {
	mask := unix.Sigset_t{Val: [16]uint64{1<<(unix.SIGUSR1-1) | 1<<(unix.SIGUSR2-1)}}
	fd, err := unix.Signalfd(-1, &mask, unix.SFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	f, nf := roundTrip(t, fd)
	if f.Event.SigMask != mask.Val[0] {
		t.Errorf("mask %#x, want %#x", f.Event.SigMask, mask.Val[0])
	}
	if got, want := fdinfo(t, nf.Fd(), "sigmask"), fdinfo(t, uintptr(fd), "sigmask"); got != want {
		t.Errorf("sigmask %q, want %q", got, want)
	}
}
