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

// TestVforkRestore dumps a tree in which a parent P waits in vfork() for
// its child C, which runs in P's memory and waits for SIGUSR1: the dump
// must not hang (P cannot stop until C calls exec or exits), with
// --leave-running (of the tree, or of P and C alone) everything goes on
// untraced, and after a dump and a
// restore P still waits in vfork() for C; once C exits, P's vfork()
// returns C's PID (P logs it) and P goes on. Dumping C alone is refused:
// its memory is its parent's.
func TestVforkRestore(t *testing.T) {
	e := setup(t)
	v := e.startVictim(t, "tree_vfork")
	p, _ := strconv.Atoi(strings.TrimPrefix(strings.Fields(v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "start ") }))[2], "p="))
	l := v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "vfork child ") })
	var c, pp int
	if _, err := fmt.Sscanf(l, "vfork child c=%d p=%d", &c, &pp); err != nil || pp != p {
		t.Fatalf("line %q: want the vfork child of %d", l, p)
	}
	res := e.runCkpt(t, nil, "dump", "--dir", filepath.Join(t.TempDir(), "img"), strconv.Itoa(c))
	want := fmt.Sprintf("process %d (tree_vfork) shares the memory of its parent %d", c, p)
	if res.code == 0 || !strings.Contains(res.stderr, want) || !strings.Contains(res.stderr, "vfork()") {
		t.Fatalf("dump %d: %v; want a refusal saying %q", c, res, want)
	}
	// The whole tree twice, then P (waiting in vfork()) as the root.
	for _, root := range []int{v.pid, v.pid, p} {
		start := time.Now()
		e.dump(t, root, filepath.Join(t.TempDir(), "img"), "--leave-running", "--shell-job") // P's session is R's
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("dump --leave-running took %v", took)
		}
		for _, pid := range []int{v.pid, p, c} {
			if tp := statusField(pid, "TracerPid"); tp != "0" {
				t.Errorf("after dump --leave-running: process %d has TracerPid %q", pid, tp)
			}
		}
		if st := procState(p); st != "D" {
			t.Errorf("after dump --leave-running: P %d in state %s, want D (in vfork())", p, st)
		}
		v.waitNewTicks(t, 2)
	}
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, v, img)
	e.waitTreeGone(t, "after the dump", []int{p, c})
	e.restore(t, v, img)
	if st := procState(p); st != "D" {
		t.Errorf("restored P %d in state %s, want D (in vfork())", p, st)
	}
	if pp := ppid(c); pp != p {
		t.Errorf("restored C %d: parent %d, want %d", c, pp, p)
	}
	// Nothing of the restore's own left in P: no signal, no other child.
	for _, f := range []string{"SigPnd", "ShdPnd"} {
		if v := statusField(p, f); strings.Trim(v, "0") != "" {
			t.Errorf("restored P %d: %s %s, want none", p, f, v)
		}
	}
	if kids := strings.Fields(readFile(fmt.Sprintf("/proc/%d/task/%d/children", p, p))); len(kids) != 1 || kids[0] != strconv.Itoa(c) {
		t.Errorf("restored P %d: children %v, want [%d]", p, kids, c)
	}
	e.r.MustSignal(t, c, syscall.SIGUSR1)
	v.waitLine(t, func(l string) bool { return l == fmt.Sprintf("vfork done c=%d", c) })
	e.waitGone(t, c)
	v.check(t)
	e.bye(t, v)
}

// TestVforkChildDiffers dumps a tree whose vfork() child renamed itself:
// the restore makes the child again with vfork() from its parent, which
// would give it the parent's name, so the dump refuses naming the child
// and what differs, and everything goes on untraced; once the child has
// exited, the tree is dumped and restored.
func TestVforkChildDiffers(t *testing.T) {
	vforkRefusedThenDumped(t, "rename", func(c, p int) []string {
		return []string{fmt.Sprintf("process %d: name (comm): differs from its parent's (%d, waiting in vfork() for it)", c, p)}
	}, nil)
}

// vforkRefusedThenDumped runs tree_vfork in mode, whose parent P waits in
// vfork() for its child C: a dump must fail saying each of want(C, P) and
// leave every process untraced; once C has exited (SIGUSR1), the tree is
// dumped and restored, after (if set) checks the restored tree, and the
// victim checks itself.
func vforkRefusedThenDumped(t *testing.T, mode string, want func(c, p int) []string, after func(e *env, v *victim, p int)) {
	t.Helper()
	e := setup(t)
	v := e.startVictim(t, "tree_vfork", mode)
	l := v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "vfork child ") })
	var c, p int
	if _, err := fmt.Sscanf(l, "vfork child c=%d p=%d", &c, &p); err != nil {
		t.Fatalf("line %q: %v", l, err)
	}
	res := e.runCkpt(t, nil, "dump", "--dir", filepath.Join(t.TempDir(), "img"), strconv.Itoa(v.pid))
	if res.code == 0 {
		t.Fatalf("dump: %v; want a refusal saying %q", res, want(c, p))
	}
	for _, w := range want(c, p) {
		if !strings.Contains(res.stderr, w) {
			t.Fatalf("dump: %v; want a refusal saying %q", res, w)
		}
	}
	for _, pid := range []int{v.pid, p, c} {
		if tp := statusField(pid, "TracerPid"); tp != "0" {
			t.Errorf("after the refused dump: process %d has TracerPid %q", pid, tp)
		}
	}
	v.waitNewTicks(t, 2)
	e.r.MustSignal(t, c, syscall.SIGUSR1)
	v.waitLine(t, func(l string) bool { return l == fmt.Sprintf("vfork done c=%d", c) })
	e.waitGone(t, c)
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, v, img)
	e.waitTreeGone(t, "after the dump", []int{p})
	e.restore(t, v, img)
	if after != nil {
		after(e, v, p)
	}
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
// after it starts: the dump waits a little for it, then dumps the parent
// either just back from vfork() with the child now /bin/sleep, or still
// in vfork() with the child about to call exec; either way the restored
// child becomes /bin/sleep and the parent goes on.
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
	deadline := time.Now().Add(wait)
	for comm(c) != "sleep" {
		if time.Now().After(deadline) {
			t.Fatalf("restored child %d: comm %q, want sleep (it calls exec)", c, comm(c))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The parent, dumped as it came back from vfork(), goes on.
	v.waitLine(t, func(l string) bool { return l == fmt.Sprintf("vfork done c=%d", c) })
	v.check(t)
	e.bye(t, v)
}

// TestVforkParentMbind dumps a tree whose parent P waiting in vfork() has
// a page with a NUMA policy of its own (mbind MPOL_BIND, node 0): read
// from outside, P cannot be asked it, so the dump refuses naming P and
// the mapping, and everything goes on untraced; once the child has
// exited, the tree is dumped and restored, and P finds the policy again
// (get_mempolicy MPOL_F_ADDR, logged when told with SIGUSR1).
func TestVforkParentMbind(t *testing.T) {
	vforkRefusedThenDumped(t, "mbind", func(_, p int) []string {
		return []string{fmt.Sprintf("process %d: thread %d, waiting in vfork(): mapping ", p, p), "has a NUMA memory policy in numa_maps"}
	}, func(e *env, v *victim, p int) {
		e.r.MustSignal(t, p, syscall.SIGUSR1)
		v.waitLine(t, func(l string) bool { return l == "policy r=0 mode=2 nodes=0x1" })
	})
}
