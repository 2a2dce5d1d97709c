package fdkind

import (
	"os"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

func TestPidfdRoundTrip(t *testing.T) {
	fd, err := unix.PidfdOpen(os.Getpid(), unix.PIDFD_NONBLOCK)
	if err != nil {
		t.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(fd)
	f, nf := roundTrip(t, fd)
	if f.Event.PID != sys.Getpid() {
		t.Errorf("pid %d, want %d", f.Event.PID, os.Getpid())
	}
	if got := fdinfo(t, nf.Fd(), "Pid"); got != fdinfo(t, uintptr(fd), "Pid") {
		t.Errorf("restored pidfd of %q", got)
	}
}
