package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Victim is a victim program of testdata/victims (see victim.h for its log
// protocol) seen by an in-process test: one that calls dump and restore as
// a library instead of running the commands.
type Victim struct {
	Name string
	PID  int
	Log  string // the progress log
	// R is the reaper the victim was started under: Check signals it
	// through R while it is under R, else (restored as this binary's
	// child) through Signal.
	R *Reaper
}

// StartVictim runs victim name under r with argv LOG args... ("DIR/" at the
// start of an arg is replaced by a private temporary directory) and waits
// for its start line and first tick.
func StartVictim(t testing.TB, r *Reaper, name string, args ...string) *Victim {
	t.Helper()
	dir := t.TempDir()
	v := &Victim{Name: name, Log: filepath.Join(dir, "log"), R: r}
	argv := []string{v.Log}
	for _, a := range args {
		if rest, ok := strings.CutPrefix(a, "DIR/"); ok {
			a = filepath.Join(dir, rest)
		}
		argv = append(argv, a)
	}
	v.PID = r.Run(t, RunOpts{Stderr: filepath.Join(dir, "stderr"), Dir: dir}, VictimArgv(t, name, argv...)...)
	WaitForLine(t, v.Log, func(l string) bool { return strings.HasPrefix(l, "start ") }, 10*time.Second)
	v.WaitTicks(t, 1)
	return v
}

// LastTick returns the number of the last tick line of the log, 0 if none.
func (v *Victim) LastTick() int {
	lines := ReadLines(v.Log)
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) >= 2 && f[0] == "tick" {
			if n, err := strconv.Atoi(f[1]); err == nil {
				return n
			}
		}
	}
	return 0
}

// WaitTicks waits for n tick lines after the last one in the log now.
func (v *Victim) WaitTicks(t testing.TB, n int) {
	t.Helper()
	want := v.LastTick() + n
	v.waitFor(t, fmt.Sprintf("tick %d", want), 0, func(l string) (bool, error) {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "tick" {
			k, err := strconv.Atoi(f[1])
			return err == nil && k >= want, nil
		}
		return false, nil
	})
}

// Check sends SIGUSR1 and waits for the victim's own check: it must say
// "check ok".
func (v *Victim) Check(t testing.TB) {
	t.Helper()
	from := len(ReadLines(v.Log))
	if v.R == nil || !v.R.Signal(t, v.PID, syscall.SIGUSR1) {
		if err := Signal(v.PID, syscall.SIGUSR1); err != nil {
			t.Fatalf("%s: kill -USR1 %d: %v", v.Name, v.PID, err)
		}
	}
	v.waitFor(t, "check ok", from, func(l string) (bool, error) {
		if !strings.HasPrefix(l, "check ") {
			return false, nil
		}
		if strings.HasPrefix(l, "check ok ") {
			return true, nil
		}
		return false, fmt.Errorf("after SIGUSR1: %s", l)
	})
}

// waitFor polls the log until match accepts one of its lines after the
// first from, or returns an error for one; a FAIL line anywhere fails too.
func (v *Victim) waitFor(t testing.TB, what string, from int, match func(line string) (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines := ReadLines(v.Log)
		for _, l := range lines {
			if strings.Contains(l, "FAIL") {
				t.Fatalf("%s (pid %d): %s", v.Name, v.PID, l)
			}
		}
		for _, l := range lines[min(from, len(lines)):] {
			ok, err := match(l)
			if err != nil {
				t.Fatalf("%s (pid %d): %v", v.Name, v.PID, err)
			}
			if ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d): no %q in the log after 10s; it ends with:\n%s",
				v.Name, v.PID, what, strings.Join(lines[max(0, len(lines)-8):], "\n"))
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", v.PID)); err != nil {
			t.Fatalf("%s (pid %d) is gone before %q; log ends with:\n%s",
				v.Name, v.PID, what, strings.Join(lines[max(0, len(lines)-8):], "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
