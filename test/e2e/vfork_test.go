package e2e

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestVforkRefused dumps a tree in which a parent waits in vfork() for its
// child, which runs in the parent's memory: the dump must refuse at once,
// naming both (never hang: the parent cannot stop until the child calls
// exec or exits), and leave every process untraced and going on; dumping
// the child itself is refused too. Once the child has exited, the same
// tree is dumped and restored.
func TestVforkRefused(t *testing.T) {
	e := setup(t)
	v := e.startVictim(t, "tree_vfork")
	p, _ := strconv.Atoi(strings.TrimPrefix(strings.Fields(v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "start ") }))[2], "p="))
	l := v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "vfork child ") })
	var c, pp int
	if _, err := fmt.Sscanf(l, "vfork child c=%d p=%d", &c, &pp); err != nil || pp != p {
		t.Fatalf("line %q: want the vfork child of %d", l, p)
	}
	for _, tc := range []struct {
		pid  int
		want string
	}{
		{v.pid, fmt.Sprintf("process %d (tree_vfork): its child %d shares its memory", p, c)},
		{c, fmt.Sprintf("process %d (tree_vfork) shares the memory of its parent %d", c, p)},
	} {
		start := time.Now()
		res := e.runCkpt(t, nil, "dump", "--dir", filepath.Join(t.TempDir(), "img"), strconv.Itoa(tc.pid))
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("dump %d took %v", tc.pid, took)
		}
		if res.code == 0 || !strings.Contains(res.stderr, tc.want) || !strings.Contains(res.stderr, "vfork()") {
			t.Fatalf("dump %d: %v; want a refusal saying %q", tc.pid, res, tc.want)
		}
		for _, pid := range []int{v.pid, p, c} {
			if tp := statusField(pid, "TracerPid"); tp != "0" {
				t.Errorf("after the refused dump of %d: process %d has TracerPid %q", tc.pid, pid, tp)
			}
		}
		v.waitNewTicks(t, 2)
	}
	e.r.MustSignal(t, c, syscall.SIGUSR1)
	v.waitLine(t, func(l string) bool { return l == fmt.Sprintf("vfork done c=%d", c) })
	e.waitGone(t, c)
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, v, img)
	e.waitTreeGone(t, "after the dump", []int{p})
	e.restore(t, v, img)
	v.check(t)
	e.bye(t, v)
}

// waitGone waits until pid is gone (reaped).
func (e *env) waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for procState(pid) != "gone" {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still there (state %s)", pid, procState(pid))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestVforkThenExec dumps a tree whose vfork() child calls exec only 300 ms
// after it starts: the dump waits for it (a bounded wait), then dumps the
// parent, just back from vfork(), and the child, now /bin/sleep; the
// restored parent goes on from there.
func TestVforkThenExec(t *testing.T) {
	e := setup(t)
	v := e.startVictim(t, "tree_vfork", "exec")
	l := v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "vfork child ") })
	var c, p int
	if _, err := fmt.Sscanf(l, "vfork child c=%d p=%d", &c, &p); err != nil {
		t.Fatalf("line %q: %v", l, err)
	}
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, v, img)
	e.waitTreeGone(t, "after the dump", []int{p, c})
	e.restore(t, v, img)
	if got := comm(c); got != "sleep" {
		t.Errorf("restored child %d: comm %q, want sleep (the dump waited for its exec)", c, got)
	}
	// The parent, dumped as it came back from vfork(), goes on.
	v.waitLine(t, func(l string) bool { return l == fmt.Sprintf("vfork done c=%d", c) })
	v.check(t)
	e.bye(t, v)
}
