package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/netlock"
)

// TestGroupMemberSilentUntilRelease restores the two ends of a ring
// job's TCP connections in two network namespaces one after the other,
// as a group migration does when its members' images reach their nodes
// at different times. The first member is held built (ckpt-redo
// --control, as an agent runs it) while the other's node has neither its
// sockets nor its lock yet. Nothing of the first member may reach that
// node before the release: its kernel would answer with a reset, which
// the first member's lock holds and lets through at the release (the ring
// job then fails with "connection reset by peer", as
// TestGroupJobMovedWhileRunning did 1 time in 4 when the machine was
// busy). So the first member's lock still drops its own packets while it
// waits built, and after both releases the job goes on.
func TestGroupMemberSilentUntilRelease(t *testing.T) {
	e := setup(t)
	job := testenv.BuildVictim(t, "ringjob")
	dir := t.TempDir()
	tag := os.Getpid() % 10000
	nsX, nsY := fmt.Sprintf("ckmx%d", tag), fmt.Sprintf("ckmy%d", tag)
	ipX, ipY := fmt.Sprintf("10.229.%d.1", tag%250), fmt.Sprintf("10.229.%d.2", tag%250)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// link joins namespace x (address ipX) and y (ipY) by a veth pair.
	link := func(x, vx, vy string) {
		ip("link", "add", vx, "netns", x, "type", "veth", "peer", "name", vy, "netns", nsY)
		ip("-n", x, "addr", "add", ipX+"/24", "dev", vx)
		ip("-n", nsY, "addr", "add", ipY+"/24", "dev", vy)
		for _, l := range [][2]string{{x, vx}, {nsY, vy}, {x, "lo"}, {nsY, "lo"}} {
			ip("-n", l[0], "link", "set", l[1], "up")
		}
	}
	for _, ns := range []string{nsX, nsY} {
		ip("netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	link(nsX, "vmx", "vmy")

	stop := filepath.Join(dir, "stop")
	var logs []jobLog
	var pids []int
	for i, n := range []struct{ ns, me, right string }{{nsX, ipX, ipY}, {nsY, ipY, ipX}} {
		j := jobLog{index: i, path: filepath.Join(dir, fmt.Sprintf("job%d.log", i))}
		pid := e.r.Run(t, testenv.RunOpts{Stdout: j.path + ".out", Stderr: j.path + ".out", Setsid: true},
			"ip", "netns", "exec", n.ns, job, j.path, strconv.Itoa(i), "2", n.me+":5000", n.right+":5000", stop, "10", "1")
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
		logs, pids = append(logs, j), append(pids, pid)
	}
	for _, j := range logs {
		j.waitTicks(t, 5)
	}
	mssBefore := segmentSizes(t, nsY)

	// Both dumped (each keeps its lock), then node X is lost: its
	// processes (the lock's holder) die with it, and a new node takes
	// its address.
	imgs := []string{filepath.Join(dir, "img0"), filepath.Join(dir, "img1")}
	for i, pid := range pids {
		if res := e.runCkpt(t, nil, "dump", "--dir", imgs[i], strconv.Itoa(pid)); res.code != 0 {
			t.Fatalf("dump job %d: %v", i, res)
		}
	}
	out, _ := exec.Command("ip", "netns", "pids", nsX).Output()
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
	ip("-n", nsY, "link", "del", "vmy")
	ip("netns", "del", nsX)
	nsX2 := nsX + "b"
	ip("netns", "add", nsX2)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nsX2).Run() })
	link(nsX2, "vmx2", "vmy2")

	// Member 1 first, held built; member 0's node has nothing yet.
	m1 := e.startHeld(t, nsY, imgs[1])
	m1.await(t, "built")
	yfd, err := os.Open("/run/netns/" + nsY)
	if err != nil {
		t.Fatal(err)
	}
	defer yfd.Close()
	list, err := exec.Command("ip", "netns", "exec", nsY, e.ckpt(), "unlock", "--list").Output()
	if err != nil {
		t.Fatalf("ckpt unlock --list in node Y: %v", err)
	}
	tables := strings.Fields(string(list))
	if len(tables) != 1 {
		t.Fatalf("node Y has lock tables %q while member 1 waits built, want the dump's", tables)
	}
	if held, err := netlock.OutgoingHeld(tables[0], int(yfd.Fd())); err != nil || !held {
		t.Fatalf("member 1 waits built, and its lock %s lets its sockets' packets out already (%v): they may reach node X before its lock", tables[0], err)
	}
	m0 := e.startHeld(t, nsX2, imgs[0])
	m0.await(t, "built")
	for _, m := range []*heldRedo{m1, m0} {
		m.send(t, "release")
	}
	for _, m := range []*heldRedo{m1, m0} {
		m.await(t, "released")
		m.wait(t)
	}
	for i, j := range logs {
		n := len(j.lines())
		j.waitNewTicks(t, n, 10)
		for _, l := range j.lines() {
			if strings.Contains(l, "FAIL") {
				t.Fatalf("job %d: %s", i, l)
			}
		}
	}
	// The restored connections send segments of the size the path
	// allows (the veth's MTU), as before the dump.
	if got := segmentSizes(t, nsY); got != mssBefore {
		t.Errorf("node Y's connections send segments of %s bytes after the restore, %s before", got, mssBefore)
	}
	finishRing(t, stop, logs)
}

// segmentSizes lists the MSS in use of the established TCP connections
// of network namespace ns (ss -i), sorted.
func segmentSizes(t *testing.T, ns string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "ss", "-Htni", "state", "established").Output()
	if err != nil {
		t.Fatalf("ss in %s: %v", ns, err)
	}
	var mss []string
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "mss:"); ok {
			mss = append(mss, v)
		}
	}
	slices.Sort(mss)
	return strings.Join(mss, " ")
}

// heldRedo is a ckpt-redo run as an agent runs it for a group restore:
// with a control channel (internal/control), held built until told.
type heldRedo struct {
	cmd  *exec.Cmd
	ctl  *os.File
	r    *bufio.Reader
	errf string
}

// startHeld runs ckpt-redo --control in network namespace ns on image
// dir.
func (e *env) startHeld(t *testing.T, ns, dir string) *heldRedo {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control-child")
	errf := filepath.Join(t.TempDir(), "redo.err")
	ef, err := os.Create(errf)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	cmd := exec.Command("ip", "netns", "exec", ns, e.redo(), "--json", "--control", "3", dir)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = ef
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	h := &heldRedo{cmd: cmd, ctl: mine, r: bufio.NewReader(mine), errf: errf}
	t.Cleanup(func() {
		mine.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return h
}

// await waits for the event line want (progress lines are skipped).
func (h *heldRedo) await(t *testing.T, want string) {
	t.Helper()
	h.ctl.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		l, err := h.r.ReadString('\n')
		if err != nil {
			b, _ := os.ReadFile(h.errf)
			t.Fatalf("ckpt-redo: no %q event: %v; stderr: %s", want, err, b)
		}
		if f := strings.Fields(l); len(f) > 0 && f[0] == want {
			return
		}
	}
}

func (h *heldRedo) send(t *testing.T, word string) {
	t.Helper()
	if _, err := fmt.Fprintln(h.ctl, word); err != nil {
		t.Fatal(err)
	}
}

// wait waits for ckpt-redo to exit, successfully.
func (h *heldRedo) wait(t *testing.T) {
	t.Helper()
	if err := h.cmd.Wait(); err != nil {
		b, _ := os.ReadFile(h.errf)
		t.Fatalf("ckpt-redo: %v: %s", err, b)
	}
}
