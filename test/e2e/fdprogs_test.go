package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
	"golang.org/x/sys/unix"
)

// Real programs holding the kinds of files of issue 11, and files that
// changed behind an image's back.

// startProg runs argv under the reaper in a new session, in dir, with its
// output to files there, and waits until ready says it is set up.
func (e *env) startProg(t *testing.T, dir string, ready func(pid int) bool, argv ...string) int {
	t.Helper()
	pid := e.r.Run(t, testenv.RunOpts{Stdout: filepath.Join(dir, "stdout"), Stderr: filepath.Join(dir, "stderr"), Dir: dir}, argv...)
	deadline := time.Now().Add(wait)
	for !ready(pid) {
		if es, ok := e.r.Poll(pid); ok {
			t.Fatalf("%s ended before it was ready: %v; stderr %q", argv[0], es, readFile(filepath.Join(dir, "stderr")))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) not ready in %v; stdout %q stderr %q", argv[0], pid, wait,
				readFile(filepath.Join(dir, "stdout")), readFile(filepath.Join(dir, "stderr")))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return pid
}

// dumpKillPID dumps pid (and its descendants), killing them, and restores
// the image; the program must come back under the same PID.
func (e *env) dumpRestorePID(t *testing.T, pid int) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "img")
	e.dump(t, pid, img)
	if es := e.r.WaitExit(t, pid, wait); es.Signal != int(syscall.SIGKILL) {
		t.Fatalf("pid %d after dump: %v, want killed by SIGKILL", pid, es)
	}
	if res := e.runRedo(t, nil, img); res.code != 0 {
		t.Fatalf("ckpt-redo %s: %v", img, res)
	}
	if !e.r.Alive(pid) {
		t.Fatalf("restored pid %d is not a process under the reaper", pid)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not in %v", what, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hasFD tells whether process pid has an fd whose link contains s.
func hasFD(pid int, s string) bool {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, e := range ents {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// TestTailFollow: `tail -f` on a log (which follows it with inotify) is
// checkpointed and restored; a line appended after the restore is printed.
func TestTailFollow(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	log, out := filepath.Join(dir, "app.log"), filepath.Join(dir, "stdout")
	if err := os.WriteFile(log, []byte("first line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pid := e.startProg(t, dir, func(pid int) bool {
		return strings.Contains(readFile(out), "first line") && hasFD(pid, "inotify")
	}, "tail", "-n", "+1", "-f", log)
	defer func() {
		e.r.Signal(t, pid, syscall.SIGKILL)
		e.r.WaitExit(t, pid, wait)
	}()
	t0 := time.Now()
	e.dumpRestorePID(t, pid)
	t.Logf("restored after %v", time.Since(t0))
	if !hasFD(pid, "inotify") {
		t.Fatalf("restored tail has no inotify fd")
	}
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("after the restore\n"); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	waitFor(t, "restored tail -f prints the appended line", func() bool { return strings.Contains(readFile(out), "after the restore") })
	t.Logf("printed after %v", time.Since(t1))
	if got := readFile(out); got != "first line\nafter the restore\n" {
		t.Errorf("tail -f printed %q", got)
	}
}

// TestFlockWork: `flock FILE cmd` holds the lock while cmd works; after a
// checkpoint and restore the lock is held again by the restored flock (a
// second `flock -n` fails) and the work goes on.
func TestFlockWork(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	lock, work := filepath.Join(dir, "lock"), filepath.Join(dir, "work")
	ticks := func() int { return strings.Count(readFile(work), "tick\n") }
	pid := e.startProg(t, dir, func(int) bool { return ticks() >= 2 },
		"flock", lock, "sh", "-c", fmt.Sprintf("while :; do echo tick >> %s; sleep 0.05; done", work))
	defer func() {
		e.r.Signal(t, -pid, syscall.SIGKILL) // flock's group, while flock is not reaped
		e.r.WaitExit(t, pid, wait)
	}()
	tryLock := func() error { return exec.Command("flock", "-n", lock, "true").Run() }
	if tryLock() == nil {
		t.Fatalf("flock -n got the lock while the first flock holds it")
	}
	e.dumpRestorePID(t, pid)
	if err := tryLock(); err == nil {
		t.Errorf("flock -n got the lock after the restore: the restored flock does not hold it")
	}
	n := ticks()
	waitFor(t, "the restored work goes on", func() bool { return ticks() >= n+3 })
	// The lock is on the description flock opened (flock(2) lock on it).
	var st unix.Stat_t
	if err := unix.Stat(lock, &st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(readFile("/proc/locks"), fmt.Sprintf("FLOCK  ADVISORY  WRITE %d ", pid)) &&
		!strings.Contains(readFile("/proc/locks"), fmt.Sprintf(":%d ", st.Ino)) {
		t.Errorf("/proc/locks shows no flock lock on inode %d:\n%s", st.Ino, readFile("/proc/locks"))
	}
}

// TestRestoreRefusesChangedFiles: a file the process had open or mapped
// that changed between the dump and the restore makes the restore fail,
// naming the file and how it changed, and nothing of the process stays.
func TestRestoreRefusesChangedFiles(t *testing.T) {
	e := setup(t)
	for _, tc := range []struct {
		name, file string
		change     func(t *testing.T, path string)
		want       string
	}{
		{"opened file appended", "read", func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			f.WriteString("more")
		}, "(rewritten since the dump)"},
		{"mapped file rewritten with its old size and time", "mapped", func(t *testing.T, p string) {
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt([]byte("Z"), 10)
			f.Close()
			if err := unix.UtimesNano(p, []unix.Timespec{st.Atim, st.Mtim}); err != nil {
				t.Fatal(err)
			}
		}, "its inode changed at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			v := e.startFidelity(t, "fd_mtime.c", dir)
			img := filepath.Join(t.TempDir(), "img")
			e.dumpKill(t, v, img)
			path := filepath.Join(dir, tc.file)
			tc.change(t, path)
			res := e.runRedo(t, nil, img)
			if res.code == 0 {
				t.Fatalf("ckpt-redo succeeded although %s changed", path)
			}
			for _, want := range []string{path, tc.want, "file changed since the dump", fmt.Sprintf("process %d", v.pid)} {
				if !strings.Contains(res.stderr, want) {
					t.Errorf("ckpt-redo: stderr %q, want it to say %q", res.stderr, want)
				}
			}
			t.Logf("refused: %s", res.stderr)
			e.expectGone(t, v.pid, "after the refused restore")
		})
	}
}

// TestRestoreRefusesReplacedCwd: a working directory removed and made
// again at its path between the dump and the restore (its files moved
// over) is another directory: the restore fails naming it.
func TestRestoreRefusesReplacedCwd(t *testing.T) {
	e := setup(t)
	v := e.startVictim(t, "dynamic_counter")
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, v, img)
	if err := os.Rename(v.dir, v.dir+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(v.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(v.dir + ".tmp")
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range ents {
		if err := os.Rename(filepath.Join(v.dir+".tmp", en.Name()), filepath.Join(v.dir, en.Name())); err != nil {
			t.Fatal(err)
		}
	}
	defer os.RemoveAll(v.dir + ".tmp")
	res := e.runRedo(t, nil, img)
	if res.code == 0 {
		t.Fatalf("ckpt-redo succeeded although the working directory %s was made again", v.dir)
	}
	for _, want := range []string{"working directory " + v.dir + " is another directory than at the dump", "file changed since the dump"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("ckpt-redo: stderr %q, want it to say %q", res.stderr, want)
		}
	}
	e.expectGone(t, v.pid, "after the refused restore")
}

// TestSqliteCLITransaction: the sqlite3 shell, fed through a FIFO, holds
// a write transaction across a checkpoint and restore: a second writer
// started after the restore is locked out, and the restored COMMIT
// succeeds with exactly the rows of the transaction.
func TestSqliteCLITransaction(t *testing.T) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("no sqlite3")
	}
	e := setup(t)
	dir := t.TempDir()
	db, fifo := filepath.Join(dir, "db"), filepath.Join(dir, "in")
	sql := func(q string) (string, error) {
		out, err := exec.Command("sqlite3", "-batch", "-cmd", ".timeout 0", db, q).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := sql("CREATE TABLE t(x); INSERT INTO t VALUES(0);"); err != nil {
		t.Fatalf("create: %v %s", err, out)
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Read-write: never blocks, and keeps the FIFO open for the shell.
	in, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	send := func(s string) {
		t.Helper()
		if _, err := in.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	// The shell waits out the brief locks of the test's own writer.
	send(".timeout 5000\nBEGIN IMMEDIATE; INSERT INTO t VALUES(1);\n")
	locked := func() bool {
		out, err := sql("INSERT INTO t VALUES(99);")
		return err != nil && strings.Contains(out, "locked")
	}
	// Ready once the shell holds its write lock (RESERVED: a POSIX lock).
	pid := e.startProg(t, dir, func(pid int) bool { return holdsPOSIXWriteLock(pid) },
		"sh", "-c", fmt.Sprintf("exec sqlite3 -batch %s < %s", db, fifo))
	if !locked() {
		t.Fatalf("a second writer got in before the dump")
	}
	defer func() {
		e.r.Signal(t, pid, syscall.SIGKILL)
		e.r.WaitExit(t, pid, wait)
	}()
	t0 := time.Now()
	e.dumpRestorePID(t, pid)
	t.Logf("checkpointed and restored in %v", time.Since(t0))
	if !locked() {
		t.Fatalf("a second writer got in after the restore")
	}
	t1 := time.Now()
	send("COMMIT;\n")
	defer func() { t.Logf("committed %v after the restore", time.Since(t1)) }()
	waitFor(t, "the restored shell commits its row", func() bool {
		out, err := sql("SELECT group_concat(x) FROM t;")
		return err == nil && out == "0,1"
	})
	if out, err := sql("INSERT INTO t VALUES(2);"); err != nil {
		t.Errorf("a writer after the COMMIT: %v %s", err, out)
	}
	if s := readFile(filepath.Join(dir, "stderr")); s != "" {
		t.Errorf("sqlite3 stderr: %q", s)
	}
}

// holdsPOSIXWriteLock tells whether /proc/locks shows a POSIX write lock
// held by pid.
func holdsPOSIXWriteLock(pid int) bool {
	for _, l := range strings.Split(readFile("/proc/locks"), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && f[1] == "POSIX" && f[3] == "WRITE" && f[4] == fmt.Sprint(pid) {
			return true
		}
	}
	return false
}
