package fdkind

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestCharDevRoundTrip: a character device (/dev/null) comes back as
// the same device, with its flags.
func TestCharDevRoundTrip(t *testing.T) {
	fd, err := unix.Open("/dev/null", unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	f, _ := roundTrip(t, fd)
	if f.Kind != "chr" || f.Rdev != unix.Mkdev(1, 3) {
		t.Errorf("described %s %x", f.Kind, f.Rdev)
	}
}
