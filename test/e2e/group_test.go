package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/agent"
)

// cluster is testenv.Cluster with the e2e helpers' conventions.
type cluster struct {
	*testenv.Cluster
	t *testing.T
}

type node = testenv.Node

// group runs `ckpt group ARGS` and decodes its output (--json) into v.
func (c *cluster) group(v any, args ...string) {
	c.t.Helper()
	out, serr, err := c.Ckpt(append([]string{"group"}, args...)...)
	if err != nil {
		c.t.Fatalf("ckpt group %s: %v: %s", strings.Join(args, " "), err, serr)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(out), v); err != nil {
			c.t.Fatalf("ckpt group %s: output %q: %v", args[0], out, err)
		}
	}
}

// startRing starts ringjob on every node (process i listens on node i's
// address, port 5000, and connects to node i+1's), with delayMs between
// hops and memMB of checked heap, and waits until every process has
// ticked past ticks. It returns the stop file, the logs, the members
// (PID@AGENT) and every process's first tick (its PID and ports).
func (c *cluster) startRing(job string, nodes []*node, delayMs, memMB, ticksPast int) (stop string, logs []jobLog, members []string, first []ringTick) {
	t := c.t
	t.Helper()
	n := len(nodes)
	stop = filepath.Join(c.Dir, "stop")
	for i, nd := range nodes {
		j := jobLog{index: i, path: filepath.Join(c.Dir, fmt.Sprintf("job%d.log", i))}
		out, serr, err := c.Ckpt("group", "exec", "--agent", nd.Ctl, "--", job, j.path, strconv.Itoa(i), strconv.Itoa(n),
			nd.IP+":5000", nodes[(i+1)%n].IP+":5000", stop, strconv.Itoa(delayMs), strconv.Itoa(memMB))
		if err != nil {
			t.Fatalf("group exec: %v: %s", err, serr)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil || pid < agent.JobPIDBase {
			t.Fatalf("job %d got pid %q in its node: want one from the job range (%d up)", i, out, agent.JobPIDBase)
		}
		logs = append(logs, j)
		members = append(members, fmt.Sprintf("%d@%s", pid, nd.Ctl))
	}
	for _, j := range logs {
		j.waitTicks(t, ticksPast)
		first = append(first, ticks(t, j.lines())[0])
	}
	return stop, logs, members, first
}

// finishRing stops the ring job, waits until every process has said bye,
// and checks that the final checksum is the one of an uninterrupted run of
// as many rounds.
func finishRing(t *testing.T, stop string, logs []jobLog) {
	t.Helper()
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for i, j := range logs {
		for {
			ls := j.lines()
			if len(ls) > 0 && strings.HasPrefix(ls[len(ls)-1], "bye ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %d did not finish; log ends:\n%s", i, tail(ls, 5))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var rounds int
	var sum uint64
	for _, l := range logs[0].lines() {
		fmt.Sscanf(l, "done rounds=%d sum=%d", &rounds, &sum)
	}
	n := len(logs)
	if rounds == 0 || sum != ringSum(n, n-1, rounds) {
		t.Fatalf("job finished with rounds=%d sum=%d, want sum %d", rounds, sum, ringSum(n, n-1, rounds))
	}
	t.Logf("job finished after %d rounds with the right checksum %d", rounds, sum)
}

// ringMix is ringjob's mix.
func ringMix(sum, index, round uint64) uint64 {
	x := sum ^ ((index + 1) * 0x9E3779B97F4A7C15) ^ (round << 17)
	x ^= x >> 31
	x *= 0xff51afd7ed558ccd
	x ^= x >> 29
	return x
}

// ringSum is the token's sum after process index handled round.
func ringSum(n, index, round int) uint64 {
	var s uint64
	for r := 1; r <= round; r++ {
		for i := 0; i < n; i++ {
			s = ringMix(s, uint64(i), uint64(r))
			if r == round && i == index {
				return s
			}
		}
	}
	return s
}

// ringTick is one "tick" line of ringjob.
type ringTick struct {
	k, round     int
	sum          uint64
	pid          int
	lport, rport int
}

// jobLog is the log of one ringjob process.
type jobLog struct {
	index int
	path  string
}

func (j jobLog) lines() []string { return testenv.ReadLines(j.path) }

// ticks parses the tick lines of lines.
func ticks(t *testing.T, lines []string) []ringTick {
	t.Helper()
	var out []ringTick
	for _, l := range lines {
		if !strings.HasPrefix(l, "tick ") {
			continue
		}
		var k ringTick
		if _, err := fmt.Sscanf(l, "tick %d round=%d sum=%d pid=%d lport=%d rport=%d", &k.k, &k.round, &k.sum, &k.pid, &k.lport, &k.rport); err != nil {
			t.Fatalf("tick line %q: %v", l, err)
		}
		out = append(out, k)
	}
	return out
}

func (j jobLog) last(t *testing.T) int {
	ts := ticks(t, j.lines())
	if len(ts) == 0 {
		return 0
	}
	return ts[len(ts)-1].k
}

// waitTicks waits until the job's last tick is past than.
func (j jobLog) waitTicks(t *testing.T, than int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for j.last(t) <= than {
		if time.Now().After(deadline) {
			t.Fatalf("job %d: no tick past %d; log ends:\n%s", j.index, than, tail(j.lines(), 5))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitNewTicks waits until the log has count tick lines past its line
// from.
func (j jobLog) waitNewTicks(t *testing.T, from, count int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ls := j.lines()
		if len(ls) >= from && len(ticks(t, ls[from:])) >= count {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d: fewer than %d ticks past line %d; log ends:\n%s", j.index, count, from, tail(ls, 5))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkSegment checks the tick lines of one run of a process (from its
// start, or from a restore): consecutive counters from first, each with the
// round equal to the counter, the right sum, and the PID and ports of the
// original process.
func checkSegment(t *testing.T, j jobLog, n int, ts []ringTick, first int, orig ringTick) {
	t.Helper()
	for i, k := range ts {
		switch {
		case k.k != first+i:
			t.Fatalf("job %d: tick %d where %d was due (a restart, or a lost or repeated token)", j.index, k.k, first+i)
		case k.round != k.k:
			t.Fatalf("job %d: tick %d in round %d", j.index, k.k, k.round)
		case k.sum != ringSum(n, j.index, k.round):
			t.Fatalf("job %d: round %d sum %d, want %d", j.index, k.round, k.sum, ringSum(n, j.index, k.round))
		case k.pid != orig.pid || k.lport != orig.lport || k.rport != orig.rport:
			t.Fatalf("job %d: tick %d from pid %d ports %d/%d; the job started as pid %d ports %d/%d",
				j.index, k.k, k.pid, k.lport, k.rport, orig.pid, orig.lport, orig.rport)
		}
	}
}

// netnsOf returns the network namespace inode of the ringjob process whose
// command line holds arg, or 0.
func netnsOf(arg string) uint64 {
	var st syscall.Stat_t
	if pid := testenv.FindPID("ringjob", arg); pid == 0 || syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) != nil {
		return 0
	}
	return st.Ino
}

func nsIno(t *testing.T, ns string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+ns, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// groupReport is the part of `ckpt group ... --json` the test reads.
type groupReport struct {
	Report struct {
		Op      string `json:"op"`
		Members []struct {
			Member struct {
				Agent string `json:"agent"`
				PID   int    `json:"pid"`
			} `json:"member"`
		} `json:"members"`
		Parity *struct {
			N         int     `json:"n"`
			BlockSize int     `json:"block_size"`
			Lost      int     `json:"lost"`
			Sizes     []int64 `json:"sizes"`
			Nodes     []struct {
				BytesSent, BytesStored int64
			} `json:"nodes"`
		} `json:"parity"`
	} `json:"report"`
}

// TestGroupJobMovedWhileRunning is the test of the coordinator layer: a
// parallel job of 4 processes on 4 nodes, a ring over TCP passing a token
// whose checksum every process logs, goes through a group checkpoint with
// XOR parity, the loss of a whole node (its process, its network, its
// disk), the recovery of the lost image on a spare node from the parity,
// the restore of the whole group (the lost member on the spare, its
// endpoints moved by a rules file), a migration that fails and must leave
// the job running where it was, and a migration of the whole running job
// to 4 other nodes with other addresses by peer-to-peer transfer. The
// processes keep their PIDs (inside their nodes), their connections (the
// same local ports) and their counters all along, and the final checksum
// is the one of an uninterrupted run.
func TestGroupJobMovedWhileRunning(t *testing.T) {
	e := setup(t)
	job := testenv.BuildVictim(t, "ringjob")
	c := &cluster{testenv.NewCluster(t, e.ckpt(), e.r), t}
	c.Keep = append(c.Keep, filepath.Dir(job))
	const n = 4
	a := make([]*node, n)
	for i := range a {
		a[i] = c.AddNode(fmt.Sprintf("a%d", i), i+1)
	}
	stop, logs, members, orig := c.startRing(job, a, 15, 8, 10)

	// A group checkpoint that cannot succeed (a member that does not
	// exist) aborts everywhere: nobody stays frozen or locked, no image.
	bad := append([]string{"checkpoint", "--name", "bad", "--manifest", filepath.Join(c.Dir, "bad.json")}, members[:3]...)
	bad = append(bad, "4242@"+a[3].Ctl)
	if res := e.runCkpt(t, nil, append([]string{"group"}, bad...)...); res.code == 0 || !strings.Contains(res.stderr, "aborted") {
		t.Fatalf("group checkpoint with a missing member: %v", res)
	}
	for i, j := range logs {
		j.waitTicks(t, j.last(t)+3)
		if l := c.Locks(a[i]); l != "" {
			t.Fatalf("node %s keeps a lock after an aborted checkpoint: %s", a[i].Name, l)
		}
		if _, err := os.Stat(filepath.Join(a[i].Root, "bad")); err == nil {
			if ents, _ := os.ReadDir(filepath.Join(a[i].Root, "bad")); len(ents) > 0 {
				t.Fatalf("node %s keeps images of an aborted checkpoint: %v", a[i].Name, ents)
			}
		}
	}

	// Group checkpoint with parity, while the job runs on.
	manifest := filepath.Join(c.Dir, "ck.json")
	before := make([]int, n)
	for i, j := range logs {
		before[i] = j.last(t)
	}
	const block = 1 << 20
	var ck groupReport
	c.group(&ck, append([]string{"checkpoint", "--json", "--name", "ck", "--manifest", manifest, "--parity",
		"--block-size", strconv.Itoa(block)}, members...)...)
	after := make([]int, n)
	for i, j := range logs {
		after[i] = j.last(t)
	}
	p := ck.Report.Parity
	if p == nil || p.N != n || len(p.Nodes) != n {
		t.Fatalf("checkpoint report has no parity of %d nodes: %+v", n, ck.Report)
	}
	var total, stored int64
	for i, st := range p.Nodes {
		padded := (p.Sizes[i] + block - 1) / block * block
		if st.BytesSent != padded {
			t.Errorf("node %d sent %d bytes in the parity ring, want its image size rounded to blocks, %d", i, st.BytesSent, padded)
		}
		if share := p.Sizes[i] / (n - 1); st.BytesStored < share-block || st.BytesStored > share+block {
			t.Errorf("node %d stored %d bytes of parity, want 1/(N-1) of its image (%d) within a block", i, st.BytesStored, share)
		}
		total += p.Sizes[i]
		stored += st.BytesStored
	}
	t.Logf("parity: images %v, %d bytes stored for %d of images", p.Sizes, stored, total)
	for _, j := range logs {
		j.waitTicks(t, j.last(t)+5) // the job went on
	}

	// Lose node 1 entirely; the others fail (their ring is broken).
	lostImage := filepath.Join(a[1].Root, "ck", strconv.Itoa(orig[1].pid))
	saved := t.TempDir()
	for _, f := range []string{"image.ckpt", "parity.ckpt"} {
		b, err := os.ReadFile(filepath.Join(lostImage, f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(saved, f), b, 0o600)
	}
	c.Lose(a[1])
	survivors := []string{members[0], members[2], members[3]}
	c.group(nil, append([]string{"kill"}, survivors...)...)

	// Recover its image on a spare node from the others' parity.
	spare := c.AddNode("s", 5)
	var rec groupReport
	c.group(&rec, "recover", "--json", "--manifest", manifest, "--lost", "1", "--spare", spare.Ctl)
	for _, f := range []string{"image.ckpt", "parity.ckpt"} {
		got := fileHash(t, filepath.Join(spare.Root, "ck", strconv.Itoa(orig[1].pid), f))
		if want := fileHash(t, filepath.Join(saved, f)); got != want {
			t.Fatalf("recovered %s differs from the lost one", f)
		}
	}
	if rp := rec.Report.Parity; rp == nil || rp.Lost != 1 || rp.Nodes[1].BytesSent != 0 {
		t.Fatalf("recover report: %+v", rec.Report.Parity)
	}

	// Restore the whole group, member 1 on the spare with its endpoints
	// moved there.
	// A rules file with a syntax error is refused, with its line, before
	// any node is asked to do anything.
	badRules := filepath.Join(c.Dir, "bad-rules")
	os.WriteFile(badRules, []byte(fmt.Sprintf("%s %s\n%s to %s\n", a[1].IP, spare.IP, a[1].IP, spare.IP)), 0o600)
	if _, serr, err := c.Ckpt("group", "restore", "--manifest", manifest, "--rules", badRules); err == nil || !strings.Contains(serr, badRules+":2:") {
		t.Fatalf("group restore with a bad rules file: %v: %s", err, serr)
	}
	rules1 := filepath.Join(c.Dir, "rules1")
	os.WriteFile(rules1, []byte(fmt.Sprintf("# node a1 is lost: its member runs on the spare\n%s %s\n", a[1].IP, spare.IP)), 0o600)
	restoredAt := make([]int, n)
	for i, j := range logs {
		restoredAt[i] = len(j.lines())
	}
	c.group(nil, "restore", "--json", "--manifest", manifest, "--rules", rules1)
	for i, j := range logs {
		j.waitNewTicks(t, restoredAt[i], 10)
	}
	check := func(what string) {
		t.Helper()
		for i, j := range logs {
			ls := j.lines()
			ts := ticks(t, ls[:restoredAt[i]])
			checkSegment(t, j, n, ts, 1, orig[i])
			for _, l := range ls[restoredAt[i]:] {
				if strings.Contains(l, "FAIL") {
					t.Fatalf("job %d %s: %s", i, what, l)
				}
			}
			seg := ticks(t, ls[restoredAt[i]:])
			if len(seg) == 0 {
				t.Fatalf("job %d: no tick after the restore (line %d of %d):\n%s", i, restoredAt[i], len(ls), tail(ls, 8))
			}
			if first := seg[0].k; first < before[i]+1 || first > after[i]+1 {
				t.Fatalf("job %d: first tick after the restore is %d; the checkpoint was taken between ticks %d and %d",
					i, first, before[i], after[i])
			}
			checkSegment(t, j, n, seg, seg[0].k, orig[i])
		}
	}
	check("after the group restore")
	where := []*node{a[0], spare, a[2], a[3]}
	members = []string{members[0], fmt.Sprintf("%d@%s", orig[1].pid, spare.Ctl), members[2], members[3]}

	// A migration that fails (no rules: the destinations do not have the
	// sources' addresses) leaves the job running where it was.
	b := make([]*node, n)
	for i := range b {
		b[i] = c.AddNode(fmt.Sprintf("b%d", i), 11+i)
	}
	migrate := []string{"migrate"}
	for _, d := range b {
		migrate = append(migrate, "--to", d.Ctl)
	}
	res := e.runCkpt(t, nil, append(append([]string{"group"}, migrate...), members...)...)
	if res.code == 0 || !strings.Contains(res.stderr, "aborted") {
		t.Fatalf("migration without rules: %v", res)
	}
	t.Logf("migration without rules fails as it should: %s", strings.TrimSpace(res.stderr))
	for i, j := range logs {
		j.waitTicks(t, j.last(t)+3)
		if ino := netnsOf(j.path); ino != nsIno(t, where[i].NS) {
			t.Fatalf("job %d is no longer on node %s after a failed migration", i, where[i].Name)
		}
		for _, d := range []*node{where[i], b[i]} {
			if l := c.Locks(d); l != "" {
				t.Fatalf("node %s keeps a lock after a failed migration: %s", d.Name, l)
			}
		}
	}
	check("after a failed migration")

	// Migrate the running job to the b nodes, endpoints moved by rules.
	var rules strings.Builder
	for i := range b {
		fmt.Fprintf(&rules, "%s %s\n", where[i].IP, b[i].IP)
	}
	rules2 := filepath.Join(c.Dir, "rules2")
	os.WriteFile(rules2, []byte(rules.String()), 0o600)
	var mig struct {
		Members []struct {
			Agent string `json:"agent"`
			PID   int    `json:"pid"`
		} `json:"members"`
	}
	c.group(&mig, append(append([]string{}, migrate...), append([]string{"--json", "--rules", rules2}, members...)...)...)
	for i, j := range logs {
		j.waitTicks(t, j.last(t)+10)
		if ino := netnsOf(j.path); ino != nsIno(t, b[i].NS) {
			t.Fatalf("job %d did not move to node %s", i, b[i].Name)
		}
		if mig.Members[i].Agent != b[i].Ctl || mig.Members[i].PID != orig[i].pid {
			t.Fatalf("migrated member %d: %+v, want pid %d on %s", i, mig.Members[i], orig[i].pid, b[i].Ctl)
		}
		for _, d := range []*node{where[i], b[i]} {
			if l := c.Locks(d); l != "" {
				t.Fatalf("node %s keeps a lock after the migration: %s", d.Name, l)
			}
		}
	}
	check("after the migration")

	// Finish: the checksum is the one of an uninterrupted run.
	finishRing(t, stop, logs)
	check("at the end")
}

// TestGroupRestoreAborts restores a group whose last member cannot come
// back (its listening address is taken on its node): the members already
// built are discarded, so nothing of the job runs and no node keeps a
// lock; once the address is free, the same images restore and the job
// finishes with the right checksum.
func TestGroupRestoreAborts(t *testing.T) {
	e := setup(t)
	job := testenv.BuildVictim(t, "ringjob")
	c := &cluster{testenv.NewCluster(t, e.ckpt(), e.r), t}
	c.Keep = append(c.Keep, filepath.Dir(job))
	const n = 3
	nodes := make([]*node, n)
	for i := range nodes {
		nodes[i] = c.AddNode(fmt.Sprintf("g%d", i), i+1)
	}
	stop, logs, members, orig := c.startRing(job, nodes, 10, 1, 5)
	manifest := filepath.Join(c.Dir, "ck.json")
	c.group(nil, append([]string{"checkpoint", "--json", "--kill", "--name", "ck", "--manifest", manifest}, members...)...)
	locks := make([]string, n)
	for i, j := range logs {
		if netnsOf(j.path) != 0 {
			t.Fatalf("job %d still runs after a checkpoint with --kill", i)
		}
		// The dumps keep their connections locked until the restore.
		if locks[i] = c.Locks(nodes[i]); locks[i] == "" {
			t.Fatalf("node %s has no lock after a checkpoint with --kill", nodes[i].Name)
		}
	}
	restoredAt := make([]int, n)
	for i, j := range logs {
		restoredAt[i] = len(j.lines())
	}

	// Something else listens on the last member's address.
	blocker, serr, err := c.Ckpt("group", "exec", "--agent", nodes[n-1].Ctl, "--", "python3", "-c",
		fmt.Sprintf("import socket,time\ns=socket.socket()\ns.bind(('%s',5000))\ns.listen()\nprint('listening',flush=True)\ntime.sleep(600)", nodes[n-1].IP))
	if err != nil {
		t.Fatalf("start the blocker: %v: %s", err, serr)
	}
	c.WaitListening(nodes[n-1], nodes[n-1].IP, 5000, wait)
	_, serr, err = c.Ckpt("group", "restore", "--manifest", manifest)
	if err == nil || !strings.Contains(serr, "aborted") || !strings.Contains(serr, "already in use") {
		t.Fatalf("group restore with a taken address: %v: %s", err, serr)
	}
	// Processes an aborted restore built are killed: wait until none is
	// left, then check that none of them ran.
	deadline := time.Now().Add(wait)
	for i, j := range logs {
		for netnsOf(j.path) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("job %d runs %v after an aborted group restore", i, wait)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for i, j := range logs {
		if len(j.lines()) != restoredAt[i] {
			t.Fatalf("job %d wrote after an aborted group restore:\n%s", i, tail(j.lines(), 3))
		}
		if l := c.Locks(nodes[i]); l != locks[i] {
			t.Fatalf("node %s: lock %q after an aborted restore; the dump left %q, which must stay for a retry", nodes[i].Name, l, locks[i])
		}
	}

	// Free the address: the same images restore.
	c.group(nil, "kill", strings.TrimSpace(blocker)+"@"+nodes[n-1].Ctl)
	c.group(nil, "restore", "--json", "--manifest", manifest)
	for i, j := range logs {
		j.waitNewTicks(t, restoredAt[i], 5)
		seg := ticks(t, j.lines()[restoredAt[i]:])
		checkSegment(t, j, n, seg, seg[0].k, orig[i])
		if l := c.Locks(nodes[i]); l != "" {
			t.Fatalf("node %s keeps a lock after the restore: %s", nodes[i].Name, l)
		}
	}
	finishRing(t, stop, logs)
}
