package proc

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// These read this test process's own /proc files.

func TestReadSelf(t *testing.T) {
	pid := sys.Getpid()
	st, err := ReadStat(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != pid || st.PPID != sys.PID(os.Getppid()) || (st.State != 'R' && st.State != 'S') || st.Threads < 1 || st.StartBrk == 0 || st.ArgEnd <= st.ArgStart {
		t.Errorf("stat = %+v", st)
	}
	tids, err := Tasks(pid)
	if err != nil || len(tids) < 1 || tids[0] != pid.Leader() {
		t.Fatalf("Tasks = %v, %v", tids, err)
	}
	if !slices.IsSorted(tids[1:]) {
		t.Errorf("Tasks not sorted: %v", tids)
	}
	if ts, err := ReadStat(pid, tids[len(tids)-1]); err != nil || ts.PID != sys.PID(tids[len(tids)-1]) {
		t.Errorf("thread stat = %+v, %v", ts, err)
	}
	status, err := ReadStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	if status.TGID != pid || status.UID[0] != os.Getuid() || status.GID[1] != os.Getegid() || status.Umask != unix.Umask(0o22) {
		t.Errorf("status = %+v", status)
	}
	unix.Umask(status.Umask)
	// VmLck counts a locked page (in bytes).
	page, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_LOCKED)
	if err != nil {
		t.Fatal(err)
	}
	locked, err := ReadStatus(pid)
	unix.Munmap(page)
	if err != nil || locked.VmLck < 4096 || locked.VmLck%1024 != 0 {
		t.Errorf("VmLck %d with a page locked, %v", locked.VmLck, err)
	}
	// The Go runtime catches (almost) every signal.
	if status.SigCgt&(1<<(unix.SIGURG-1)) == 0 {
		t.Errorf("SigCgt %#x lacks SIGURG", status.SigCgt)
	}
	lims, err := ReadLimits(pid)
	if err != nil {
		t.Fatal(err)
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if l := lims[unix.RLIMIT_NOFILE]; l.Cur != rl.Cur || l.Max != rl.Max {
		t.Errorf("RLIMIT_NOFILE = %+v, getrlimit says %+v", l, rl)
	}
	maps, err := ReadSmaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range maps {
		found = found || m.Path == "[stack]" && m.VmFlags["gd"]
	}
	if !found {
		t.Error("no growing-down [stack] mapping")
	}
	mounts, err := ReadMountInfo(pid)
	if err != nil || len(mounts) == 0 {
		t.Fatalf("mountinfo: %d, %v", len(mounts), err)
	}
	for _, missing := range []func() error{
		func() error { _, err := ReadStat(1<<30, 0); return err },
		func() error { _, err := ReadStatus(1 << 30); return err },
		func() error { _, err := ReadLimits(1 << 30); return err },
		func() error { _, err := ReadSmaps(1 << 30); return err },
		func() error { _, err := ReadMountInfo(1 << 30); return err },
		func() error { _, err := ReadFDInfo(1<<30, 0); return err },
		func() error { _, err := Tasks(1 << 30); return err },
		func() error { _, err := Children(1 << 30); return err },
		func() error { _, err := FDs(1 << 30); return err },
	} {
		if err := missing(); !os.IsNotExist(err) {
			t.Errorf("missing process: %v, want not-exist", err)
		}
	}
}

func TestFDsAndFDInfo(t *testing.T) {
	efd, err := unix.Eventfd(3, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	fds, err := FDs(sys.Getpid())
	if err != nil || !slices.Contains(fds, sys.TargetFD(efd)) || !slices.IsSorted(fds) {
		t.Fatalf("FDs = %v, %v (eventfd %d)", fds, err, efd)
	}
	fi, err := ReadFDInfo(sys.Getpid(), sys.TargetFD(efd))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Flags&unix.O_NONBLOCK == 0 || fi.Flags&unix.O_CLOEXEC == 0 {
		t.Errorf("flags %#o", fi.Flags)
	}
	if e, err := fi.Eventfd(); err != nil || e.Count != 3 || e.Semaphore {
		t.Errorf("Eventfd() = %+v, %v", e, err)
	}
}

func TestChildren(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	kids, err := Children(sys.Getpid())
	if err != nil || !slices.Contains(kids, sys.PID(cmd.Process.Pid)) {
		t.Fatalf("Children = %v, %v; want %d among them", kids, err, cmd.Process.Pid)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := ReadStat(sys.PID(cmd.Process.Pid), 0)
		if err != nil {
			t.Fatal(err)
		}
		if st.Comm == "sleep" && st.State == 'S' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child never slept: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestReadLinkedFile(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) *os.File {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	plain := open("plain")
	tricky := open("tricky (deleted)")
	gone := open("gone")
	os.Remove(filepath.Join(dir, "gone"))
	reused := open("reused")
	os.Remove(filepath.Join(dir, "reused"))
	open("reused") // another file under the old name
	mfd, err := unix.MemfdCreate("ckpt-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(mfd)
	tests := []struct {
		name     string
		fd       int
		path     string
		unlinked bool
	}{
		{"plain", int(plain.Fd()), filepath.Join(dir, "plain"), false},
		{"name ending in (deleted)", int(tricky.Fd()), filepath.Join(dir, "tricky (deleted)"), false},
		{"deleted", int(gone.Fd()), filepath.Join(dir, "gone"), true},
		{"deleted, name reused", int(reused.Fd()), filepath.Join(dir, "reused"), true},
		{"memfd", mfd, "/memfd:ckpt-test", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lf, err := ReadLinkedFile(Path(sys.Getpid(), "fd", strconv.Itoa(tt.fd)))
			if err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			if err := unix.Fstat(tt.fd, &st); err != nil {
				t.Fatal(err)
			}
			if lf.Path != tt.path || lf.Unlinked != tt.unlinked || lf.Stat.Ino != st.Ino || lf.Stat.Dev != st.Dev {
				t.Errorf("got %q unlinked=%v ino %d; want %q unlinked=%v ino %d", lf.Path, lf.Unlinked, lf.Stat.Ino, tt.path, tt.unlinked, st.Ino)
			}
		})
	}
	if _, err := ReadLinkedFile(Path(sys.Getpid(), "fd", "999999")); err == nil {
		t.Error("a closed fd read without error")
	}
}

func TestScanGroupsSelf(t *testing.T) {
	self := sys.Getpid()
	sid, err := unix.Getsid(int(self))
	if err != nil {
		t.Fatal(err)
	}
	want := Groups{PID: self, PGRP: sys.PID(unix.Getpgrp()), Session: sys.PID(sid)}
	var got []Groups
	if err := ScanGroups(func(g Groups) error {
		if g.PID == self {
			g.Comm = ""
			got = append(got, g)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("own entry %+v, want [%+v]", got, want)
	}
	stop := errors.New("stop")
	n := 0
	if err := ScanGroups(func(Groups) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("a callback's error: %v after %d calls, want it after 1", err, n)
	}
}

func TestReadSmallGrows(t *testing.T) {
	want, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	got, err := readSmall("/proc/self/status", make([]byte, 4))
	if err != nil {
		t.Fatal(err)
	}
	// Both show the same fields (values such as the context switches
	// may differ between two reads).
	if len(bytes.Split(got, []byte("\n"))) != len(bytes.Split(want, []byte("\n"))) {
		t.Fatalf("read %d bytes (%q...), want the %d of the whole file", len(got), got[:min(len(got), 40)], len(want))
	}
}

func TestReadMapsSelfVDSO(t *testing.T) {
	find := func(ms []Mapping) *Mapping {
		for i := range ms {
			if ms[i].Path == "[vdso]" {
				return &ms[i]
			}
		}
		return nil
	}
	sm, err := ReadSmaps(sys.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadMaps(sys.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	a, b := find(sm), find(m)
	if a == nil || b == nil || a.Start != b.Start || a.End != b.End || a.Perms != b.Perms {
		t.Fatalf("vdso in smaps %+v, in maps %+v", a, b)
	}
}

func TestReadFileAsOS(t *testing.T) {
	for _, name := range []string{"/proc/self/auxv", "/proc/self/cmdline", "/proc/self/personality", "/proc/self/no-such-file"} {
		want, werr := os.ReadFile(name)
		got, err := ReadFile(name)
		if (werr == nil) != (err == nil) || (err != nil && err.Error() != werr.Error()) || !bytes.Equal(got, want) {
			t.Errorf("%s: read %q, %v; os.ReadFile %q, %v", name, got, err, want, werr)
		}
		if werr != nil && !os.IsNotExist(err) {
			t.Errorf("%s: %v is not a not-exist error", name, err)
		}
	}
}

// TestKthreaddChildren: the children of kthreadd are in session 0 or lead
// a session of their own (what makes ScanGroupsExcept sound for the
// dump's scan of outside session members), and ScanGroupsExcept leaves
// them out but still gives this process.
func TestKthreaddChildren(t *testing.T) {
	kids, err := KthreaddChildren()
	if err != nil {
		t.Fatal(err)
	}
	if len(kids) == 0 {
		t.Fatal("no child of kthreadd found (PID 2 is the kernel's thread creator on this machine)")
	}
	for pid := range kids {
		st, err := ReadStat(pid, 0)
		if err != nil {
			continue // gone meanwhile
		}
		if st.Session != 0 && st.Session != pid {
			t.Errorf("kthreadd's child %d (%s) is in session %d, neither 0 nor its own", pid, st.Comm, st.Session)
		}
	}
	self, seen := sys.Getpid(), false
	if err := ScanGroupsExcept(kids, func(g Groups) error {
		if kids[g.PID] {
			t.Errorf("process %d was to be left out", g.PID)
		}
		seen = seen || g.PID == self
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !seen {
		t.Error("the scan left out this process")
	}
}
