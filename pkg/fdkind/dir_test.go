package fdkind

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestDirRoundTrip: a directory fd comes back with its flags.
func TestDirRoundTrip(t *testing.T) {
	fd, err := unix.Open(t.TempDir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	roundTrip(t, fd)
}
