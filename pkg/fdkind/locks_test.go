package fdkind

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

func TestParseLockLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want image.Lock
		pid  sys.PID
		ok   bool
		err  error
	}{
		{"1: POSIX  ADVISORY  WRITE 29036 fe:00:9978949 0 9", image.Lock{Kind: image.LockPOSIX, Write: true, End: 9}, 29036, true, nil},
		{"\t2: POSIX  ADVISORY  READ 29036 fe:00:9978949 100 EOF", image.Lock{Kind: image.LockPOSIX, Start: 100, End: -1}, 29036, true, nil},
		{"1: OFDLCK ADVISORY  WRITE -1 fe:00:9978949 50 54", image.Lock{Kind: image.LockOFD, Write: true, Start: 50, End: 54}, -1, true, nil},
		{"3: FLOCK  ADVISORY  READ 77 08:01:12 0 EOF", image.Lock{Kind: image.LockFlock, End: -1}, 77, true, nil},
		{"1: -> POSIX  ADVISORY  WRITE 5 fe:00:1 0 EOF", image.Lock{}, 0, false, nil},
		{"1: LEASE  ACTIVE    READ 5 fe:00:1 0 EOF", image.Lock{Kind: image.LockLease, End: -1}, 5, true, nil},
		{"2: LEASE  ACTIVE    WRITE 5 fe:00:1 0 EOF", image.Lock{Kind: image.LockLease, Write: true, End: -1}, 5, true, nil},
		{"1: LEASE  BREAKING  READ 5 fe:00:1 0 EOF", image.Lock{}, 0, false, ErrUnsupported},
		{"1: POSIX  MANDATORY WRITE 5 fe:00:1 0 EOF", image.Lock{}, 0, false, ErrUnsupported},
	} {
		l, ok, err := parseLockLine(tc.line)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%q: %v, want %v", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil || ok != tc.ok || (ok && (l.lock != tc.want || l.pid != tc.pid)) {
			t.Errorf("%q: %+v %v %v, want %+v pid %d", tc.line, l, ok, err, tc.want, tc.pid)
		}
	}
}

// TestLocksRoundTrip: the OFD and flock locks of a description are saved
// with it and taken again on the rebuilt one, where they lock out others.
func TestLocksRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Start: 10, Len: 5}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	f := describeOwn(t, env, fd)
	want := map[image.Lock]bool{{Kind: image.LockOFD, Write: true, Start: 10, End: 14}: true, {Kind: image.LockFlock, End: -1, PID: sys.Getpid()}: true}
	if len(f.Locks) != 2 || !want[f.Locks[0]] || !want[f.Locks[1]] || f.Locks[0] == f.Locks[1] {
		t.Fatalf("locks %+v, want %+v", f.Locks, want)
	}
	// The rebuilt description cannot take them while the old one holds
	// them (the write lock conflicts), and can once it is gone.
	k, _ := Lookup(f.Kind)
	d, err := k.Open(restoreEnv{env}, f, Where{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.File.Close()
	noOwner := func(sys.PID) bool { return false }
	if err := TakeLocks(f, d.File, noOwner); !errors.Is(err, ErrLockTaken) {
		t.Fatalf("locks taken while held elsewhere: %v", err)
	}
	unix.Close(fd)
	if err := TakeLocks(f, d.File, noOwner); err != nil {
		t.Fatal(err)
	}
	other, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(other)
	if err := unix.FcntlFlock(uintptr(other), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_RDLCK, Start: 12, Len: 1}); err == nil {
		t.Error("another description got a read lock inside the restored write lock")
	}
	if err := unix.Flock(other, unix.LOCK_EX|unix.LOCK_NB); err == nil {
		t.Error("another description got an exclusive flock")
	}
}
