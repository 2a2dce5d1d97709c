package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
)

// groupTimes is the part of a `ckpt group ... --json` report the
// benchmark reads.
type groupTimes struct {
	Report struct {
		Duration time.Duration `json:"duration_ns"`
		Frozen   time.Duration `json:"frozen_ns"`
		Parity   *struct {
			Duration time.Duration `json:"duration_ns"`
			Bytes    int64         `json:"bytes"`
		} `json:"parity"`
	} `json:"report"`
}

// BenchmarkMPIJobOverNodes measures an MPICH job of 4 ranks with
// CKPT_BENCH_MPI_MIB (default 256) MiB of heap each, one rank per
// namespace node, launched by mpiexec.hydra from a 5th node through
// testdata/launch-in-node: a group checkpoint with XOR parity while the
// job runs (its time, the time the job was frozen, the parity ring's
// time), a group restore of the whole job from a checkpoint taken with
// --kill, and the migration of the running job (5 members) to 5 other
// nodes with other addresses (end-to-end and frozen time). Images live in
// tmpfs. It needs MPICH; UCX is kept off huge pages (see mpiNoHugePages
// in test/e2e).
func BenchmarkMPIJobOverNodes(b *testing.B) {
	testenv.RequireRoot(b)
	for _, p := range []string{"mpicc.mpich", "mpiexec.hydra"} {
		if _, err := exec.LookPath(p); err != nil {
			b.Skipf("%s is missing: %v", p, err)
		}
	}
	mib := 256
	if s := os.Getenv("CKPT_BENCH_MPI_MIB"); s != "" {
		var err error
		if mib, err = strconv.Atoi(s); err != nil {
			b.Fatalf("CKPT_BENCH_MPI_MIB=%q: %v", s, err)
		}
	}
	bin := testenv.BuildBinaries(b)
	ckpt := filepath.Join(bin, "ckpt")
	r := testenv.StartReaper(b)
	c := testenv.NewCluster(b, ckpt, r)
	c.Storage = shmDir(b)
	progDir := b.TempDir()
	c.Keep = append(c.Keep, progDir)
	prog := filepath.Join(progDir, "nodes_bench")
	if out, err := exec.Command("mpicc.mpich", "-O2", "-o", prog, filepath.Join(testenv.RepoRoot(b), "testdata", "mpi", "nodes_bench.c")).CombinedOutput(); err != nil {
		b.Fatalf("mpicc: %v: %s", err, out)
	}
	const ranks = 4
	L := c.AddNode("L", 1)
	var hosts []string
	var nodes []*testenv.Node
	for i := 0; i < ranks; i++ {
		nodes = append(nodes, c.AddNode(fmt.Sprintf("n%d", i+1), i+2))
		hosts = append(hosts, nodes[i].Hostname)
	}
	var m strings.Builder
	for _, n := range append([]*testenv.Node{L}, nodes...) {
		fmt.Fprintf(&m, "%s %s\n", n.Hostname, n.Ctl)
	}
	nodeMap := filepath.Join(c.Dir, "nodes")
	os.WriteFile(nodeMap, []byte(m.String()), 0o644)
	log, stop := filepath.Join(c.Dir, "bench.log"), filepath.Join(c.Dir, "stop")
	cmd := fmt.Sprintf("mpiexec.hydra -launcher ssh -launcher-exec %s -hosts %s -n %d %s %s %s %d",
		filepath.Join(testenv.RepoRoot(b), "testdata", "launch-in-node"), strings.Join(hosts, ","), ranks, prog, log, stop, mib)
	out, serr, err := c.Ckpt("group", "exec", "--agent", L.Ctl, "--stdout", filepath.Join(c.Dir, "mpiexec.out"), "--",
		"env", "UCX_SYSV_HUGETLB_MODE=n", "CKPT_NODES="+nodeMap, "CKPT="+ckpt, "sh", "-c", cmd)
	if err != nil {
		b.Fatalf("start the job: %v: %s", err, serr)
	}
	members := []string{strings.TrimSpace(out) + "@" + L.Ctl}
	progress := func(what string) {
		b.Helper()
		from := len(testenv.ReadLines(log))
		deadline := time.Now().Add(120 * time.Second)
		for len(testenv.ReadLines(log)) < from+2 {
			if time.Now().After(deadline) {
				b.Fatalf("the job does not progress %s: %s", what, strings.Join(testenv.ReadLines(log), "\n"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	progress("at the start")
	for _, n := range nodes {
		pid, err := c.InNode(n, "pgrep", "-x", "hydra_pmi_proxy")
		if err != nil {
			b.Fatal(err)
		}
		members = append(members, strings.TrimSpace(pid)+"@"+n.Ctl)
	}
	group := func(args ...string) (groupTimes, time.Duration) {
		b.Helper()
		start := time.Now()
		out, serr, err := c.Ckpt(append([]string{"group"}, args...)...)
		took := time.Since(start)
		if err != nil {
			b.Fatalf("ckpt group %s: %v: %s", args[0], err, serr)
		}
		var g groupTimes
		if err := json.Unmarshal([]byte(out), &g); err != nil {
			b.Fatalf("ckpt group %s: %q: %v", args[0], out, err)
		}
		return g, took
	}

	ck, _ := group(append([]string{"checkpoint", "--json", "--parity", "--name", "ck", "--manifest", filepath.Join(c.Dir, "ck.json")}, members...)...)
	progress("after the checkpoint")
	group(append([]string{"checkpoint", "--json", "--kill", "--name", "ck2", "--manifest", filepath.Join(c.Dir, "ck2.json")}, members...)...)
	rs, _ := group("restore", "--json", "--manifest", filepath.Join(c.Dir, "ck2.json"))
	progress("after the restore")

	c.ToolPIDBase = 40000
	var rules strings.Builder
	migrate := []string{"migrate", "--json"}
	for i, from := range append([]*testenv.Node{L}, nodes...) {
		to := c.AddNode(fmt.Sprintf("m%d", i), 11+i)
		fmt.Fprintf(&rules, "%s %s\n", from.IP, to.IP)
		migrate = append(migrate, "--to", to.Ctl)
	}
	rulesFile := filepath.Join(c.Dir, "rules")
	os.WriteFile(rulesFile, []byte(rules.String()), 0o600)
	mg, mgWall := group(append(append(migrate, "--rules", rulesFile), members...)...)
	progress("after the migration")
	os.WriteFile(stop, nil, 0o600)
	testenv.WaitForLine(b, log, func(l string) bool { return l == "done" }, 60*time.Second)

	total := float64(ranks*mib) / 1024
	b.Logf("%d ranks x %d MiB: checkpoint with parity %v (frozen %v, parity ring %v), restore %v, migration %v end to end (frozen %v)",
		ranks, mib, ck.Report.Duration.Round(time.Millisecond), ck.Report.Frozen.Round(time.Millisecond),
		ck.Report.Parity.Duration.Round(time.Millisecond), rs.Report.Duration.Round(time.Millisecond),
		mgWall.Round(time.Millisecond), mg.Report.Frozen.Round(time.Millisecond))
	b.ReportMetric(ck.Report.Duration.Seconds(), "checkpoint-s")
	b.ReportMetric(ck.Report.Frozen.Seconds(), "checkpoint-frozen-s")
	b.ReportMetric(ck.Report.Parity.Duration.Seconds(), "parity-s")
	b.ReportMetric(rs.Report.Duration.Seconds(), "restore-s")
	b.ReportMetric(mgWall.Seconds(), "migrate-s")
	b.ReportMetric(mg.Report.Frozen.Seconds(), "migrate-frozen-s")
	b.ReportMetric(total/mgWall.Seconds(), "migrate-GiB/s")
}
