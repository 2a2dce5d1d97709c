package fdkind

import (
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// TestChangedFileRefused: a file opened by path that changed between the
// dump and the restore is refused by name, saying how; a log the process
// only wrote may have grown; on another machine only size, time and
// content count.
func TestChangedFileRefused(t *testing.T) {
	keepTimes := func(t *testing.T, path string, change func()) {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		change()
		if err := unix.UtimesNano(path, []unix.Timespec{st.Atim, st.Mtim}); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, s string, flag int) {
		f, err := os.OpenFile(path, flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		flags     int
		otherBoot bool
		change    func(t *testing.T, path string)
		want      string // "" if it must open
	}{
		{"unchanged", unix.O_RDONLY, false, func(*testing.T, string) {}, ""},
		{"appended", unix.O_RDONLY, false, func(t *testing.T, p string) { write(p, "more", os.O_WRONLY|os.O_APPEND) },
			"was 10 bytes modified at"},
		{"same size and time, rewritten", unix.O_RDWR, false, func(t *testing.T, p string) {
			keepTimes(t, p, func() { write(p, "X", os.O_WRONLY) })
		}, "its inode changed at"},
		{"replaced by a copy with its time", unix.O_RDONLY, false, func(t *testing.T, p string) {
			if out, err := exec.Command("cp", "-p", p, p+".new").CombinedOutput(); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
			if err := os.Rename(p+".new", p); err != nil {
				t.Fatal(err)
			}
		}, "is another file than at the dump"},
		{"replaced by a copy, other machine", unix.O_RDONLY, true, func(t *testing.T, p string) {
			if out, err := exec.Command("cp", "-p", p, p+".new").CombinedOutput(); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
			if err := os.Rename(p+".new", p); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"write-only log grown", unix.O_WRONLY | unix.O_APPEND, false, func(t *testing.T, p string) {
			write(p, "more", os.O_WRONLY|os.O_APPEND)
		}, ""},
		{"write-only log truncated", unix.O_WRONLY | unix.O_APPEND, false, func(t *testing.T, p string) {
			if err := os.Truncate(p, 2); err != nil {
				t.Fatal(err)
			}
		}, "was 10 bytes at the dump, now 2 (truncated)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			if err := os.WriteFile(path, []byte("0123456789"), 0o640); err != nil {
				t.Fatal(err)
			}
			fd, err := unix.Open(path, tc.flags|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			env := newTestEnv(t)
			f := describeOwn(t, env, fd)
			waitFileClockPast(t, f.Ref.CtimeNs) // a later change has a later time stamp
			tc.change(t, path)
			env.otherBoot = tc.otherBoot
			k, _ := Lookup(f.Kind)
			d, err := k.Open(restoreEnv{env}, f, Where{PID: sys.Getpid(), FD: sys.TargetFD(fd)})
			if d.File != nil {
				d.File.Close()
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !errors.Is(err, ErrFileChanged) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path)):
				t.Fatalf("open: %v; want ErrFileChanged naming %s and saying %q", err, path, tc.want)
			}
		})
	}
}

// TestMappedContentChanged: a mapped file rewritten with the same size
// and modification time is refused on another machine too, by its ELF
// build-id or its content hash.
func TestMappedContentChanged(t *testing.T) {
	elfData, err := os.ReadFile("/usr/bin/true") // a C program, with a GNU build-id
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"data file", []byte(strings.Repeat("data ", 1000)), "content hash (SHA-256)"},
		{"ELF file", elfData, "ELF build-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "mapped")
			if err := os.WriteFile(path, tc.data, 0o755); err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			if err := unix.Stat(path, &st); err != nil {
				t.Fatal(err)
			}
			ref := StatRef(path, &st)
			if err := IdentifyContent(path, &ref, []image.Extent{{Off: 0, Len: int64(len(tc.data))}}); err != nil {
				t.Fatal(err)
			}
			isELF := tc.name == "ELF file"
			if isELF && (ref.BuildID == "" || ref.SHA256 != "") || !isELF && (ref.SHA256 == "" || ref.BuildID != "") {
				t.Fatalf("identified as build-id %q sha256 %q", ref.BuildID, ref.SHA256)
			}
			env := newTestEnv(t)
			env.otherBoot = true
			f, err := OpenRef(restoreEnv{env}, &ref, unix.O_RDONLY, true)
			if err != nil {
				t.Fatalf("unchanged file refused: %v", err)
			}
			f.Close()
			// Change the content in the middle of the build-id or data,
			// keep size and times.
			b := append([]byte(nil), tc.data...)
			at := len(b) / 2
			if isELF {
				id, err := hex.DecodeString(ref.BuildID)
				if err != nil {
					t.Fatal(err)
				}
				at = strings.Index(string(b), string(id))
			}
			b[at] ^= 0xff
			if err := os.WriteFile(path, b, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := unix.UtimesNano(path, []unix.Timespec{st.Atim, st.Mtim}); err != nil {
				t.Fatal(err)
			}
			_, err = OpenRef(restoreEnv{env}, &ref, unix.O_RDONLY, true)
			if !errors.Is(err, ErrFileChanged) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("changed file: %v; want ErrFileChanged saying %q", err, tc.want)
			}
		})
	}
}

// waitFileClockPast waits until the clock file systems stamp inodes with
// (coarse: one tick) is past ns.
func waitFileClockPast(t *testing.T, ns int64) {
	t.Helper()
	probe := filepath.Join(t.TempDir(), "clock")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := os.WriteFile(probe, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(probe, &st); err != nil {
			t.Fatal(err)
		}
		if st.Ctim.Sec*1e9+st.Ctim.Nsec > ns {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("file time stamps stay at %d", ns)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMappedPartHashed: of a file mapped in part, only that part is
// hashed: a change elsewhere (same size and times, another machine) is
// accepted, one in the mapped part refused.
func TestMappedPartHashed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	data := []byte(strings.Repeat("0123456789abcdef", 1024)) // 16 KiB
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	ref := StatRef(path, &st)
	if err := IdentifyContent(path, &ref, []image.Extent{{Off: 4096, Len: 4096}}); err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	env.otherBoot = true
	for _, tc := range []struct {
		at     int64
		refuse bool
	}{{100, false}, {12000, false}, {5000, true}} {
		b := append([]byte(nil), data...)
		b[tc.at] ^= 0xff
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := unix.UtimesNano(path, []unix.Timespec{st.Atim, st.Mtim}); err != nil {
			t.Fatal(err)
		}
		f, err := OpenRef(restoreEnv{env}, &ref, unix.O_RDONLY, true)
		if f != nil {
			f.Close()
		}
		if got := errors.Is(err, ErrFileChanged); got != tc.refuse {
			t.Errorf("byte %d changed: %v, want refused %v", tc.at, err, tc.refuse)
		}
	}
}

// TestDirReplacedRefused: a directory the process had open, removed and
// made again at its path, is refused on the machine of the dump.
func TestDirReplacedRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	env := newTestEnv(t)
	f := describeOwn(t, env, fd)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	k, _ := Lookup(f.Kind)
	d, err := k.Open(restoreEnv{env}, f, Where{PID: sys.Getpid(), FD: sys.TargetFD(fd)})
	if d.File != nil {
		d.File.Close()
	}
	if !errors.Is(err, ErrFileChanged) || !strings.Contains(err.Error(), "is another directory than at the dump") {
		t.Fatalf("open: %v; want ErrFileChanged", err)
	}
}
