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
)

// buildNodeProgram compiles testdata/mpi/SRC with cc (gcc, or an MPI
// compiler wrapper) into a directory the cluster's nodes see.
func buildNodeProgram(t *testing.T, c *cluster, cc, src string) string {
	t.Helper()
	dir := t.TempDir()
	c.Keep = append(c.Keep, dir)
	out := filepath.Join(dir, strings.TrimSuffix(src, ".c"))
	args := []string{"-Wall", "-Werror", "-O2", "-g", "-o", out, filepath.Join(testenv.RepoRoot(t), "testdata", "mpi", src)}
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
	}
	return out
}

// inNode runs argv inside node n and returns its output, failing the
// test if it fails.
func (c *cluster) inNode(n *node, argv ...string) string {
	c.t.Helper()
	out, err := c.InNode(n, argv...)
	if err != nil {
		c.t.Fatalf("%v: %s", err, out)
	}
	return strings.TrimSpace(out)
}

// TestNodesSeparate checks that the cluster's nodes are separate machines
// the way MPI libraries look at them — each its own hostname, /tmp,
// /dev/shm, IPC namespace, and /etc/hosts naming every node — and that a
// process holding a POSIX shared-memory segment and a /tmp file open in
// its node goes through a group checkpoint (--kill) and restore by the
// nodes' agents and finds its own node's hostname, segment and file again
// (nodes_local checks that from the inside on every tick).
func TestNodesSeparate(t *testing.T) {
	e := setup(t)
	c := &cluster{testenv.NewCluster(t, e.ckpt(), e.r), t}
	prog := buildNodeProgram(t, c, "gcc", "nodes_local.c")
	nodes := []*node{c.AddNode("n1", 1), c.AddNode("n2", 2)}

	hosts := c.inNode(nodes[0], "cat", "/etc/hosts")
	for i, n := range nodes {
		if h := c.inNode(n, "hostname"); h != n.Name {
			t.Fatalf("node %s has hostname %q", n.Name, h)
		}
		if !strings.Contains(hosts, n.IP+" "+n.Name) {
			t.Fatalf("/etc/hosts of a node does not name %s: %s", n.Name, hosts)
		}
		for _, d := range []string{"/tmp", "/dev/shm"} {
			f := fmt.Sprintf("%s/only-on-%s", d, n.Name)
			c.inNode(n, "sh", "-c", "echo x > "+f)
			if _, err := os.Stat(f); err == nil {
				t.Fatalf("%s written in node %s is seen outside the nodes", f, n.Name)
			}
			other := nodes[1-i]
			if out, err := c.InNode(other, "test", "-e", f); err == nil {
				t.Fatalf("%s written in node %s is seen in node %s: %s", f, n.Name, other.Name, out)
			}
		}
	}
	ipc := func(n *node) string {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/ipc", n.Init))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if ipc(nodes[0]) == ipc(nodes[1]) {
		t.Fatalf("nodes share the IPC namespace %s", ipc(nodes[0]))
	}

	// A process in each node, checkpointed and restored by the agents.
	stop := filepath.Join(c.Dir, "stop")
	var logs []string
	var members []string
	for _, n := range nodes {
		log := filepath.Join(c.Dir, "local-"+n.Name+".log")
		out, serr, err := c.Ckpt("group", "exec", "--agent", n.Ctl, "--", prog, log, stop)
		if err != nil {
			t.Fatalf("group exec: %v: %s", err, serr)
		}
		logs = append(logs, log)
		members = append(members, strings.TrimSpace(out)+"@"+n.Ctl)
	}
	waitLocal := func(log string, from, count int) {
		t.Helper()
		deadline := time.Now().Add(wait)
		for {
			ls := testenv.ReadLines(log)
			for _, l := range ls {
				if strings.HasPrefix(l, "FAIL") {
					t.Fatalf("%s: %s", log, l)
				}
			}
			if len(ls) >= from+count {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: fewer than %d lines past %d:\n%s", log, count, from, tail(ls, 5))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, l := range logs {
		waitLocal(l, 0, 5)
	}
	manifest := filepath.Join(c.Dir, "local.json")
	c.group(nil, append([]string{"checkpoint", "--json", "--kill", "--name", "local", "--manifest", manifest}, members...)...)
	at := make([]int, len(logs))
	for i, l := range logs {
		at[i] = len(testenv.ReadLines(l))
	}
	c.group(nil, "restore", "--json", "--manifest", manifest)
	for i, l := range logs {
		waitLocal(l, at[i], 5)
	}
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, l := range logs {
		testenv.WaitForLine(t, l, func(s string) bool { return strings.HasPrefix(s, "bye ") }, wait)
		for _, s := range testenv.ReadLines(l) {
			if strings.HasPrefix(s, "tick ") && !strings.HasSuffix(s, "host="+nodes[i].Name) {
				t.Fatalf("%s: %s", l, s)
			}
		}
	}
}

// TestBatchJobScript runs examples/batch/job.sh the way a batch system
// would, twice: in the first allocation it starts a job spread over 3
// nodes (ringjob, a token ring over TCP, started on the nodes by
// testdata/launch-in-node from a launcher node) and, at the simulated
// pre-timeout signal (SIGUSR1), checkpoints it with parity and stops with
// status 99 (requeue); the job is gone. In the next allocation the same
// script restarts the job from the checkpoint and waits for it: it goes
// on from where it was checkpointed (same PIDs, same connections) and
// finishes with the checksum of an uninterrupted run.
func TestBatchJobScript(t *testing.T) {
	e := setup(t)
	ring := testenv.BuildVictim(t, "ringjob")
	c := &cluster{testenv.NewCluster(t, e.ckpt(), e.r), t}
	c.Keep = append(c.Keep, filepath.Dir(ring))
	L := c.AddNode("L", 1)
	n := []*node{c.AddNode("n1", 2), c.AddNode("n2", 3), c.AddNode("n3", 4)}
	state := filepath.Join(c.Dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	var m strings.Builder
	for _, nd := range append([]*node{L}, n...) {
		fmt.Fprintf(&m, "%s %s\n", nd.Hostname, nd.Ctl)
	}
	nodes := filepath.Join(c.Dir, "nodes")
	if err := os.WriteFile(nodes, []byte(m.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// The job: one ringjob per node, started through the ssh-like hook;
	// it ends when every process has said bye.
	launch := filepath.Join(testenv.RepoRoot(t), "testdata", "launch-in-node")
	stop := filepath.Join(c.Dir, "stop")
	var job strings.Builder
	var logs []jobLog
	for i, nd := range n {
		j := jobLog{index: i, path: filepath.Join(c.Dir, fmt.Sprintf("ring%d.log", i))}
		logs = append(logs, j)
		fmt.Fprintf(&job, "%s -x %s %s %s %d %d %s:5000 %s:5000 %s 10 4; ", launch, nd.Hostname, ring, j.path, i, len(n),
			nd.IP, n[(i+1)%len(n)].IP, stop)
	}
	job.WriteString("while :; do done=1; for f in")
	for _, j := range logs {
		job.WriteString(" " + j.path)
	}
	job.WriteString("; do grep -q '^bye' $f || done=0; done; [ $done = 1 ] && break; sleep 0.1; done")

	script := filepath.Join(testenv.RepoRoot(t), "examples", "batch", "job.sh")
	allocation := func() (*exec.Cmd, *strings.Builder) {
		cmd := exec.Command("bash", script)
		cmd.Env = append(os.Environ(), "CKPT_STATE="+state, "LAUNCHER_AGENT="+L.Ctl, "CKPT_NODES="+nodes,
			"CKPT="+e.ckpt(), "JOB="+job.String())
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	exitCode := func(cmd *exec.Cmd, out *strings.Builder) int {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("job.sh did not end: %s", out)
		}
		return cmd.ProcessState.ExitCode()
	}

	// First allocation, until the pre-timeout signal.
	first, out := allocation()
	t.Cleanup(func() {
		if t.Failed() && first.ProcessState == nil {
			// What job.sh said, once it can say no more.
			first.Process.Kill()
			first.Wait()
			t.Logf("job.sh, first allocation: %s", out)
		}
	})
	var orig []ringTick
	for _, j := range logs {
		j.waitTicks(t, 10)
		orig = append(orig, ticks(t, j.lines())[0])
	}
	if err := first.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(first, out); code != 99 {
		t.Fatalf("job.sh at the pre-timeout signal: exit %d, want 99 (requeue): %s", code, out)
	}
	t.Logf("first allocation: %s", strings.TrimSpace(out.String()))
	at := make([]int, len(logs))
	for i, j := range logs {
		if netnsOf(j.path) != 0 {
			t.Fatalf("ring process %d still runs after the checkpoint at the time limit", i)
		}
		at[i] = len(j.lines())
	}

	// Next allocation: the same script restarts the job from the
	// checkpoint and waits for its end.
	second, out := allocation()
	for i, j := range logs {
		j.waitNewTicks(t, at[i], 10)
		seg := ticks(t, j.lines()[at[i]:])
		checkSegment(t, j, len(n), seg, seg[0].k, orig[i])
		if last := ticks(t, j.lines()[:at[i]]); seg[0].k > last[len(last)-1].k+1 {
			t.Fatalf("ring process %d restarted at tick %d; it was checkpointed at or after %d", i, seg[0].k, last[len(last)-1].k)
		}
	}
	finishRing(t, stop, logs)
	if code := exitCode(second, out); code != 0 {
		t.Fatalf("job.sh in the next allocation: exit %d: %s", code, out)
	}
	t.Logf("next allocation: %s", strings.TrimSpace(out.String()))
}
