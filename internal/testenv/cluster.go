package testenv

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
)

// Cluster is a set of "nodes" made of namespaces, the way the tests of
// group operations see machines: each node has its own network namespace
// (a veth link to a bridge in a switch namespace, an address in a private
// /24 that exists only inside these namespaces), its own PID namespace, a
// mount namespace with its own /proc, /tmp and /dev/shm, its own hostname
// and IPC namespace (nodens.go), and a ckpt agent as its PID 1.
// Everything is removed when the test ends.
type Cluster struct {
	t    testing.TB
	ckpt string
	r    *Reaper
	id   int
	Dir  string // short, so that agents' UNIX socket paths fit
	// Storage is where the nodes' image roots are made (default Dir);
	// benchmarks set a tmpfs so that the disk is not what they measure.
	Storage string
	// Keep lists directories of the host under /tmp or /dev/shm that the
	// nodes made after must see at the same path (executables, inputs);
	// Dir, Storage, ckpt's directory and the repository are always kept.
	Keep []string
	// ToolPIDBase, if not 0, is the agents' --tool-pid-base for the nodes
	// made after: spares and migration destinations get another one than
	// the nodes whose jobs they receive (see pkg/agent).
	ToolPIDBase int
	sw          string // the switch namespace
	Prefix      string // "10.232.ID."
}

// Node is one node of a Cluster.
type Node struct {
	Name     string
	Hostname string // its UTS namespace's hostname (see nodens.go)
	NS       string // network namespace (ip netns)
	IP       string
	Ctl      string // agent control address
	Root     string // agent's image storage
	Agent    int    // pid of the unshare process running the agent
	Init     int    // pid of the agent, the node's PID 1 (in the caller's PID namespace)
	MAC      string // its link's MAC address
}

// NewCluster makes the switch namespace with its bridge. ckpt is the ckpt
// executable; agents run under r.
func NewCluster(t testing.TB, ckpt string, r *Reaper) *Cluster {
	t.Helper()
	id := int(time.Now().UnixNano()%200) + 20
	dir, err := os.MkdirTemp("", "ckg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := &Cluster{t: t, ckpt: ckpt, r: r, id: id, Dir: dir, sw: fmt.Sprintf("ck%dsw", id), Prefix: fmt.Sprintf("10.232.%d.", id)}
	c.ip("netns", "add", c.sw)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", c.sw).Run() })
	c.ip("-n", c.sw, "link", "add", "br0", "type", "bridge")
	c.ip("-n", c.sw, "link", "set", "br0", "up")
	return c
}

func (c *Cluster) ip(args ...string) {
	c.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		c.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// AddNode makes node name (its hostname too) with address PREFIX.host
// and starts its agent.
func (c *Cluster) AddNode(name string, host int) *Node {
	c.t.Helper()
	return c.addNode(name, name, host, "")
}

// Replace makes node name as the replacement of a lost node: it takes
// over the lost node's hostname, address and MAC address (a spare machine
// configured as the one that died: the other nodes' ARP caches, which
// still hold the lost node's entry, reach the spare at once).
func (c *Cluster) Replace(lost *Node, name string) *Node {
	c.t.Helper()
	host, err := strconv.Atoi(strings.TrimPrefix(lost.IP, c.Prefix))
	if err != nil {
		c.t.Fatalf("node %s: address %s is not in %s*", lost.Name, lost.IP, c.Prefix)
	}
	return c.addNode(name, lost.Hostname, host, lost.MAC)
}

func (c *Cluster) addNode(name, hostname string, host int, mac string) *Node {
	c.t.Helper()
	n := &Node{Name: name, Hostname: hostname, NS: fmt.Sprintf("ck%d%s", c.id, name), IP: fmt.Sprintf("%s%d", c.Prefix, host),
		Ctl: "unix:" + filepath.Join(c.Dir, name+".sock"), Root: filepath.Join(cmp.Or(c.Storage, c.Dir), name)}
	veth, peer := fmt.Sprintf("v%d%s", c.id, name), fmt.Sprintf("p%d%s", c.id, name)
	c.ip("netns", "add", n.NS)
	c.t.Cleanup(func() { exec.Command("ip", "netns", "del", n.NS).Run() })
	c.t.Cleanup(func() { c.showNetwork(n) })
	link := []string{"link", "add", veth, "netns", n.NS}
	if mac != "" {
		link = append(link, "address", mac)
	}
	c.ip(append(link, "type", "veth", "peer", "name", peer, "netns", c.sw)...)
	n.MAC = c.mac(n.NS, veth)
	c.ip("-n", c.sw, "link", "set", peer, "master", "br0", "up")
	c.ip("-n", n.NS, "addr", "add", n.IP+"/24", "dev", veth)
	c.ip("-n", n.NS, "link", "set", veth, "up")
	c.ip("-n", n.NS, "link", "set", "lo", "up")
	c.addHost(n.IP, hostname)
	out := filepath.Join(c.Dir, name+".out")
	argv := []string{c.ckpt, "agent", "--listen", n.Ctl, "--root", n.Root, "--data-ip", n.IP, "--log", filepath.Join(c.Dir, name+".log")}
	if c.ToolPIDBase != 0 {
		argv = append(argv, "--tool-pid-base", strconv.Itoa(c.ToolPIDBase))
	}
	n.Agent = c.r.Run(c.t, RunOpts{Stdout: out, Stderr: out}, c.nodeCommand(n, argv)...)
	var err error
	if n.Init, err = initPID(n.Agent); err != nil {
		c.t.Fatalf("node %s: %v", name, err)
	}
	if os.Getenv("GOCOVERDIR") != "" {
		c.t.Cleanup(func() { c.stopAgent(n.Init) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, _, err := c.Ckpt("group", "kill", "999999@"+n.Ctl); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(out)
			c.t.Fatalf("agent of node %s did not come up: %s", name, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// mac returns the MAC address of link dev in network namespace ns.
func (c *Cluster) mac(ns, dev string) string {
	c.t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-o", "link", "show", "dev", dev).CombinedOutput()
	if err != nil {
		c.t.Fatalf("ip link show %s: %v: %s", dev, err, out)
	}
	_, rest, ok := strings.Cut(string(out), "link/ether ")
	if f := strings.Fields(rest); ok && len(f) > 0 {
		return f[0]
	}
	c.t.Fatalf("no MAC address in %q", out)
	return ""
}

// Lose destroys a node the way a machine dies: its agent, and with it
// every process of its PID namespace, its network and its disk.
func (c *Cluster) Lose(n *Node) {
	c.t.Helper()
	c.r.Signal(c.t, n.Agent, syscall.SIGKILL)
	c.r.WaitExit(c.t, n.Agent, 10*time.Second)
	exec.Command("ip", "netns", "del", n.NS).Run()
	if err := os.RemoveAll(n.Root); err != nil {
		c.t.Fatal(err)
	}
}

// Locks lists the ckpt network lock tables in node n's namespace.
func (c *Cluster) Locks(n *Node) string {
	c.t.Helper()
	out, err := exec.Command("ip", "netns", "exec", n.NS, c.ckpt, "unlock", "--list").CombinedOutput()
	if err != nil {
		c.t.Fatalf("ckpt unlock --list in %s: %v: %s", n.NS, err, out)
	}
	return strings.TrimSpace(string(out))
}

// WaitListening waits until a TCP socket listens on ip:port in node n's
// network namespace (or on the wildcard address with that port).
func (c *Cluster) WaitListening(n *Node, ip string, port int, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := listening(n.NS, ip, port)
		if err != nil {
			c.t.Fatalf("node %s: %v", n.Name, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %s: nothing listens on %s:%d after %v", n.Name, ip, port, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// listening reads /proc/thread-self/net/tcp in network namespace ns and
// reports whether a socket in state LISTEN (0A) has local address ip:port
// or 0.0.0.0:port. Addresses there are the IPv4 address as a little-endian
// hex word and the port in hex.
func listening(ns, ip string, port int) (bool, error) {
	addr := net.ParseIP(ip).To4()
	if addr == nil {
		return false, fmt.Errorf("%q is not an IPv4 address", ip)
	}
	want := map[string]bool{
		fmt.Sprintf("%02X%02X%02X%02X:%04X", addr[3], addr[2], addr[1], addr[0], port): true,
		fmt.Sprintf("00000000:%04X", port):                                             true,
	}
	found := false
	err := InNetNS(ns, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/tcp")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(l)
			if len(f) > 3 && want[f[1]] && f[3] == "0A" {
				found = true
			}
		}
		return nil
	})
	return found, err
}

// Ckpt runs ckpt args (outside every node) and returns its stdout and
// stderr; err is non-nil if it failed.
func (c *Cluster) Ckpt(args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(c.ckpt, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// InNetNS runs fn on a thread that has entered the network namespace ns
// (sockets fn creates belong to it; see sys.InNetns).
func InNetNS(ns string, fn func() error) error {
	f, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return err
	}
	defer f.Close()
	return sys.InNetns(int(f.Fd()), fn)
}

// ErrShort means a raw TCP measurement moved fewer bytes than asked.
var ErrShort = errors.New("short transfer")

// FindPID returns the PID (in the caller's PID namespace) of a process
// whose command line holds every one of words, or 0: how a test finds a
// process running inside a node.
func FindPID(words ...string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		found := true
		for _, w := range words {
			found = found && strings.Contains(string(b), w)
		}
		if found {
			return pid
		}
	}
	return 0
}

// stopAgent asks a node's agent to end (SIGTERM) and waits up to 10 s for
// it, so that a command built for coverage writes its counters (a Go
// program killed by SIGKILL, as the reaper ends what is left, writes
// none). Only under $GOCOVERDIR: the tests' teardown is otherwise the
// reaper's.
func (c *Cluster) stopAgent(pid int) {
	if !c.r.Signal(c.t, pid, syscall.SIGTERM) {
		return // lost already
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return
		}
	}
}

// showNetwork logs, for a failed test, what node n's network holds: its
// TCP sockets with their timers and retransmissions, and its nftables
// tables (a lock left behind). It runs before the node's namespace is
// deleted.
func (c *Cluster) showNetwork(n *Node) {
	if !c.t.Failed() {
		return
	}
	for _, argv := range [][]string{{"ss", "-tanoie"}, {"nft", "list", "tables"}} {
		out, err := exec.Command("ip", append([]string{"netns", "exec", n.NS}, argv...)...).CombinedOutput()
		c.t.Logf("node %s: %s (%v):\n%s", n.Name, strings.Join(argv, " "), err, out)
	}
}
