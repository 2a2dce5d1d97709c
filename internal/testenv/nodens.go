package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A node of a Cluster is separate the way MPI libraries look at machines:
// besides its network and PID namespaces it has its own UTS namespace (its
// hostname is the node's name), its own IPC namespace, and a mount
// namespace where /tmp and /dev/shm are fresh tmpfs of its own and
// /etc/hosts is the cluster's hosts file (every node's name and address).
// The cluster's directory (control sockets, logs, images) is mounted back
// at the same path inside the node, so that the tests and the nodes see
// the same files there.

// nodeInit is the shell program that runs as PID 1 of a new node: it
// sets the node up and then becomes the node's agent (exec keeps PID 1).
// Its arguments: hostname, hosts file, the number of directories to keep
// visible, those directories, then the agent's command line.
const nodeInit = `set -e
host=$1 hosts=$2 nkeep=$3
shift 3
hostname "$host"
mount -t tmpfs ckstage /mnt
i=0
while [ $i -lt $nkeep ]; do
	mkdir -p "$1"
	mkdir /mnt/$i
	mount --rbind "$1" /mnt/$i
	eval "keep$i=\$1"
	i=$((i+1))
	shift
done
mount -t tmpfs -o mode=1777 cktmp /tmp
mount -t tmpfs -o mode=1777 ckshm /dev/shm
i=0
while [ $i -lt $nkeep ]; do
	eval "k=\$keep$i"
	mkdir -p "$k"
	mount --move /mnt/$i "$k"
	i=$((i+1))
done
umount /mnt
mount --bind "$hosts" /etc/hosts
exec "$@"
`

// nodeCommand is the command line that makes node n's namespaces and
// runs its agent (argv) as PID 1 there.
func (c *Cluster) nodeCommand(n *Node, argv []string) []string {
	var keep []string
	always := []string{c.Dir, c.Storage, filepath.Dir(c.ckpt)}
	if root, err := repoRoot(); err == nil {
		// The repository itself (testdata's scripts run in the nodes),
		// for a clone under /tmp.
		always = append(always, root)
	}
	for _, d := range append(always, c.Keep...) {
		if d != "" && hiddenInNode(d) && !slices.Contains(keep, d) {
			keep = append(keep, d)
		}
	}
	cmd := []string{"ip", "netns", "exec", n.NS, "unshare", "--pid", "--fork", "--mount-proc", "--uts", "--ipc", "--kill-child",
		"sh", "-c", nodeInit, "node-init", n.Hostname, c.hostsFile(), strconv.Itoa(len(keep))}
	cmd = append(cmd, keep...)
	return append(cmd, argv...)
}

// hiddenInNode reports whether directory d of the host is under /tmp or
// /dev/shm, which a node replaces by its own.
func hiddenInNode(d string) bool {
	if r, err := filepath.EvalSymlinks(d); err == nil {
		d = r
	}
	return strings.HasPrefix(d, "/tmp/") || strings.HasPrefix(d, "/dev/shm/")
}

func (c *Cluster) hostsFile() string { return filepath.Join(c.Dir, "hosts") }

// addHost appends "IP hostname" to the cluster's hosts file (every node
// has it as its /etc/hosts: a bind mount of the file, so that appending
// in place reaches nodes made before).
func (c *Cluster) addHost(ip, hostname string) {
	c.t.Helper()
	f, err := os.OpenFile(c.hostsFile(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s %s\n", ip, hostname); err != nil {
		c.t.Fatal(err)
	}
}

// initPID returns the PID (in the caller's PID namespace) of node n's
// PID 1, the agent: the child of the unshare process n.Agent.
func initPID(agent int) (int, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", agent, agent))
		if err != nil {
			return 0, fmt.Errorf("children of %d: %w", agent, err)
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			return strconv.Atoi(f[0])
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("unshare %d has no child", agent)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// InNode runs argv inside every namespace of node n (network, PID, mount,
// UTS, IPC: as a process of the node would) and returns its combined
// output.
func (c *Cluster) InNode(n *Node, argv ...string) (string, error) {
	args := append([]string{"-t", strconv.Itoa(n.Init), "--net", "--pid", "--mount", "--uts", "--ipc", "--"}, argv...)
	out, err := exec.Command("nsenter", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in node %s: %s: %w", n.Name, strings.Join(argv, " "), err)
	}
	return string(out), nil
}
