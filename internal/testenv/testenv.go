// Package testenv holds helpers for ckpt's integration tests: building the
// commands and the victim programs of testdata/victims, running victims
// under a reaping child subreaper (cmd/ckpt-reaper), and reading the
// progress logs the victims write.
//
// Victims and restored processes must run under a reaper (see StartReaper),
// never as direct children of the test binary: PID 1 on these machines never
// reaps zombies, and the test binary itself must not wait4(-1), which would
// steal the exits that os/exec waits for.
//
// Package-level state is limited to the build caches (sync.OnceValues), so
// that one test binary builds the commands once however many tests use them.
package testenv

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequireRoot fails the test unless it runs as root. ckpt needs root
// (ptrace of other processes, clone3 set_tid, PR_SET_MM_MAP); a skip would
// hide failures, so this is a hard failure.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test must run as root (euid is %d): ckpt needs ptrace, clone3 set_tid and PR_SET_MM_MAP", os.Geteuid())
	}
}

// RepoRoot returns the directory holding go.mod, walking up from the
// current directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod in %s or any parent", dir)
		}
	}
}

// Build caches: one build per test binary process, shared by all tests.
var (
	buildAll    = sync.OnceValues(func() (string, error) { return goBuild("./cmd/...") })
	buildReaper = sync.OnceValues(func() (string, error) { return goBuild("./cmd/ckpt-reaper") })
)

// BuildBinaries builds every command of the repository (go build ./cmd/...)
// once per test binary process and returns the directory holding them:
// DIR/ckpt, DIR/ckpt-redo, DIR/ckpt-reaper.
func BuildBinaries(t testing.TB) string {
	t.Helper()
	dir, err := buildAll()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// ReaperBinary builds only cmd/ckpt-reaper (once per process) and returns
// its path, so that the reaper works even while other commands don't build.
func ReaperBinary(t testing.TB) string {
	t.Helper()
	dir, err := buildReaper()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "ckpt-reaper")
}

// goBuild builds pkgs into a fresh directory ckpt-bin-PID-* under
// os.TempDir(), after removing such directories left by dead processes.
// With $GOCOVERDIR set, the commands are built for coverage of every
// package of the module, and write it into that directory.
func goBuild(pkgs ...string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	removeStaleBinDirs()
	dir, err := os.MkdirTemp("", fmt.Sprintf("ckpt-bin-%d-", os.Getpid()))
	if err != nil {
		return "", err
	}
	// go test puts $GOROOT/bin first in $PATH, so this is the same go.
	args := []string{"build", "-o", dir + "/"}
	if os.Getenv("GOCOVERDIR") != "" {
		// `make cover`: the commands write their coverage there as they exit.
		args = append(args, "-cover", "-coverpkg=github.com/ckpt/ckpt/...")
	}
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("go build %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	return dir, nil
}

// removeStaleBinDirs removes ckpt-bin-PID-* directories whose PID is gone.
func removeStaleBinDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "ckpt-bin-*-*"))
	for _, d := range dirs {
		f := strings.Split(filepath.Base(d), "-")
		if len(f) != 4 {
			continue
		}
		if _, err := os.Stat("/proc/" + f[2]); os.IsNotExist(err) {
			os.RemoveAll(d)
		}
	}
}

// victimSpec says how to build one victim of testdata/victims.
type victimSpec struct {
	src    string   // file name in testdata/victims
	cflags []string // gcc flags besides -Wall -Werror -o
}

// victims is the table of victim programs. Python victims have no flags
// and are not compiled.
var victims = map[string]victimSpec{
	"static_counter":  {"static_counter.c", []string{"-static", "-O1", "-g"}},
	"dynamic_counter": {"dynamic_counter.c", []string{"-O1", "-g"}},
	"filemap":         {"filemap.c", []string{"-O1", "-g"}},
	"vector":          {"vector.c", []string{"-O2", "-g", "-mavx2", "-ffp-contract=off"}},
	"pyheap":          {"pyheap.py", nil},
	"sockets":         {"sockets.py", nil},
	"memhog":          {"memhog.c", []string{"-O2", "-pthread"}},
	"mthreads":        {"mthreads.c", []string{"-O1", "-g", "-pthread"}},
	"evloop":          {"evloop.c", []string{"-O1", "-g"}},
	"tree":            {"tree.c", []string{"-O1", "-g"}},
	"tree_session":    {"tree_session.c", []string{"-O1", "-g"}},
	"tree_stopped":    {"tree_stopped.c", []string{"-O1", "-g", "-pthread"}},
	"tree_vfork":      {"tree_vfork.c", []string{"-O1", "-g"}},
	"miscstate":       {"miscstate.c", []string{"-O1", "-g"}},
	"ringjob":         {"ringjob.c", []string{"-O2", "-g"}},
	"sigstorm":        {"sigstorm.c", []string{"-O1", "-g"}},
	"mem_sysv":        {"mem_sysv.c", []string{"-O1", "-g"}},
}

// victimHeaders are included by the C victims and so part of the cache key.
var victimHeaders = []string{"victim.h"}

// VictimsDir returns testdata/victims of the repository.
func VictimsDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(RepoRoot(t), "testdata", "victims")
}

// BuildVictim compiles testdata/victims/NAME.c with the flags of the victim
// table and returns the binary's path. Binaries are cached under
// os.TempDir()/ckpt-victims-HASH, HASH covering the sources, the headers
// and the flags, so reruns don't recompile. For a Python victim (pyheap) it
// returns the script's path; run it with VictimArgv, which adds python3.
func BuildVictim(t testing.TB, name string) string {
	t.Helper()
	spec, ok := victims[name]
	if !ok {
		t.Fatalf("BuildVictim: unknown victim %q", name)
	}
	dir := VictimsDir(t)
	src := filepath.Join(dir, spec.src)
	if strings.HasSuffix(spec.src, ".py") {
		return src
	}
	args := append([]string{"-Wall", "-Werror"}, spec.cflags...)
	return buildCached(t, "ckpt-victims-", dir, append([]string{spec.src}, victimHeaders...), name, "gcc",
		func(out string) []string { return slices.Concat(args, []string{"-o", out, src}) })
}

// buildCached compiles with cc, args(out) being its arguments for output
// file out, into os.TempDir()/PREFIX-HASH/name and returns the binary's
// path. HASH covers the files of dir (the source and its headers) and the
// compiler's command line, so a rerun with nothing changed does not
// compile again. The binary is written under a private name and renamed,
// so that concurrent tests (in this process or others) never see a
// half-written one.
func buildCached(t testing.TB, prefix, dir string, files []string, name, cc string, args func(out string) []string) string {
	t.Helper()
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "%s %q\n", cc, args(""))
	cache := filepath.Join(os.TempDir(), prefix+hex.EncodeToString(h.Sum(nil))[:16])
	bin := filepath.Join(cache, name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	tf, err := os.CreateTemp(cache, name+".tmp*")
	if err != nil {
		t.Fatal(err)
	}
	tf.Close()
	tmp := tf.Name()
	a := args(tmp)
	if out, err := exec.Command(cc, a...).CombinedOutput(); err != nil {
		os.Remove(tmp)
		t.Fatalf("%s %s: %v\n%s", cc, strings.Join(a, " "), err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// VictimArgv returns the command line that runs victim NAME with args:
// the compiled binary for a C victim, python3 and the script for a Python
// one. Paths are absolute, as the reaper's run needs no $PATH lookup then.
func VictimArgv(t testing.TB, name string, args ...string) []string {
	t.Helper()
	p := BuildVictim(t, name)
	if !strings.HasSuffix(p, ".py") {
		return append([]string{p}, args...)
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed for victim %s: %v", name, err)
	}
	return append([]string{py, p}, args...)
}

// ReadLines returns the complete (newline-terminated) lines of file, without
// the newlines. A trailing partial line is left out; a missing or unreadable
// file reads as no lines.
func ReadLines(file string) []string {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, '\n')
	if i < 0 {
		return nil
	}
	return strings.Split(string(b[:i]), "\n")
}

// WaitForLine polls file every 10 ms until one of its lines satisfies pred
// and returns the first such line. It fails the test, showing the end of the
// file, if none does within timeout.
func WaitForLine(t testing.TB, file string, pred func(line string) bool, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		lines := ReadLines(file)
		for _, l := range lines {
			if pred(l) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("WaitForLine: no matching line in %s after %v; it ends with:\n%s",
				file, timeout, strings.Join(lines[max(0, len(lines)-10):], "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CheckTicks checks a victim's log: the "tick N ..." lines must count
// 1, 2, 3, ... with no gap and no repeat, and no line may contain FAIL.
// It reports every problem with t.Errorf and returns the last N (0 if there
// is no tick line).
func CheckTicks(t testing.TB, lines []string) int {
	t.Helper()
	last := 0
	for i, l := range lines {
		if strings.Contains(l, "FAIL") {
			t.Errorf("log line %d: %s", i+1, l)
		}
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "tick" {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			t.Errorf("log line %d: bad tick line %q", i+1, l)
			continue
		}
		if n != last+1 {
			t.Errorf("log line %d: tick %d follows tick %d", i+1, n, last)
		}
		last = n
	}
	return last
}
