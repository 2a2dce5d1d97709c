package fdkind

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestEventfdRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		init  uint
		flags int
	}{
		{"plain", 7, 0},
		{"nonblocking semaphore", 3, unix.EFD_NONBLOCK | unix.EFD_SEMAPHORE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd, err := unix.Eventfd(tc.init, tc.flags|unix.EFD_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			f, nf := roundTrip(t, fd)
			if f.Event.Count != uint64(tc.init) {
				t.Errorf("count %d, want %d", f.Event.Count, tc.init)
			}
			for _, k := range []string{"eventfd-count", "eventfd-semaphore"} {
				if got, want := fdinfo(t, nf.Fd(), k), fdinfo(t, uintptr(fd), k); got != want {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
		})
	}
}
