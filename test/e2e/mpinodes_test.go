package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
