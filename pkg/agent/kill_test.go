package agent

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKillTakesDescendants kills a process tree (a shell whose children
// are running) by its root: every process of it is gone afterwards.
func TestKillTakesDescendants(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	a, err := New(Config{Root: t.TempDir(), Ckpt: "ckpt", Redo: "ckpt-redo", ToolPIDBase: 30000})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	pid, _, err := a.start([]string{"/bin/sh", "-c", "sleep 100 & sleep 100 & echo $! >&3; wait"}, nil, "/",
		[]uintptr{0, 1, 2, pw.Fd()}, false)
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 32)
	k, _ := pr.Read(b)
	child, err := strconv.Atoi(strings.TrimSpace(string(b[:k])))
	if err != nil {
		t.Fatalf("child pid %q", b[:k])
	}
	if got := tree(pid); len(got) != 3 || got[0] != pid {
		t.Fatalf("tree(%d) = %v, want the shell and its 2 children", pid, got)
	}
	if err := a.kill([]int{pid}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for unix.Kill(child, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("child %d of the killed shell still runs", child)
		}
		a.reapOnce()
		time.Sleep(5 * time.Millisecond)
	}
}

// TestNewToolPIDBase refuses a tool range that is not above the job range.
func TestNewToolPIDBase(t *testing.T) {
	for _, tt := range []struct {
		base int
		ok   bool
	}{{0, true}, {30000, true}, {JobPIDBase, false}, {5, false}} {
		_, err := New(Config{Root: t.TempDir(), Ckpt: "ckpt", Redo: "ckpt-redo", ToolPIDBase: tt.base})
		if (err == nil) != tt.ok {
			t.Errorf("tool PID base %d: err %v", tt.base, err)
		}
	}
}
