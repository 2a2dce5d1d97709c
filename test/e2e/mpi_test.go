package e2e

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
)

// mpiWait bounds every wait on an MPI job: 4 ranks busy-polling on 2
// shared cores make progress slowly.
const mpiWait = 90 * time.Second

// mpiSoak reports CKPT_MPI_SOAK=1 (make mpi-soak): the ten cycles
// of each kind, five runs per library, instead of make test's short runs.
func mpiSoak() bool { return os.Getenv("CKPT_MPI_SOAK") == "1" }

// mpiCase is one MPI program run by one library.
type mpiCase struct {
	lib   testenv.MPILib
	prog  testenv.MPIProg
	delay int // ms every rank sleeps after each iteration
	runs  int
}

// mpiCases are the programs of testdata/mpi with each library. The soak
// gives each library 5 runs, the programs taking turns (ring, allreduce,
// cg, ring, allreduce), with MPICH on huge pages too; make test runs one
// program per library once (each program with one library; MPICH's CG,
// slow with 4 ranks spinning on 2 cores, only in the soak). A run does 3
// iterations, then one or more between each two checkpoints, and waits
// before its last one until the test is done.
func mpiCases(soak bool, cycles int) []mpiCase {
	iters := 3 + cycles + 3
	progs := []testenv.MPIProg{
		{Name: "ring", Iters: iters, Args: []string{"16"}},
		{Name: "allreduce", Iters: iters, Args: []string{"65536"}},
		{Name: "cg", Iters: iters, Args: []string{"48"}},
	}
	short := map[string]string{"mpich": "allreduce", "mpich-tcp": "ring", "openmpi": "cg"}
	libs := []testenv.MPILib{testenv.MPICH(), testenv.MPICHOverTCP(), testenv.OpenMPI()}
	if soak {
		libs = append(libs, testenv.MPICHHugePages())
	}
	var out []mpiCase
	for _, lib := range libs {
		for k, p := range progs {
			switch {
			case soak:
				out = append(out, mpiCase{lib, p, 10, (5 - k + len(progs) - 1) / len(progs)})
			case short[lib.Name] == p.Name:
				out = append(out, mpiCase{lib, p, 10, 1})
			}
		}
	}
	return out
}

// TestMPI checkpoints whole MPI jobs on one node: the launcher's tree
// (mpiexec.hydra, its proxy and 4 ranks; mpirun.openmpi and 4 ranks) is
// dumped and killed, then restored, and dumped with --leave-running, in
// turns, while the job runs. Every run must log exactly what a run
// without checkpoints logs (a ring's heap checksums, all-reduce results
// each rank checks itself, a CG solver's residual history bit for bit),
// end with exit code 0 after MPI_Finalize (MPICH over TCP hangs there in
// most runs without checkpoints too: see testenv.MPICHOverTCP), and the
// library must not notice: after each restore every fd of the tree is the
// same kind of socket with the same TCP 4-tuple and options or the same
// UNIX peer and name, the same status flags, and every epoll fd watches
// the same fds with the same data (testenv.Sockets); after each
// --leave-running dump these are the very same sockets (inodes).
//
// make test runs one program per library, once, with 2 cycles of each
// kind; CKPT_MPI_SOAK=1 (make mpi-soak) runs 5 runs per library (the
// programs taking turns) of 10 + 10 cycles each.
func TestMPI(t *testing.T) {
	e := setup(t)
	soak := mpiSoak()
	kills, leaves := 2, 2
	if soak {
		kills, leaves = 10, 10
	}
	for _, c := range mpiCases(soak, kills+leaves) {
		t.Run(c.lib.Name+"/"+c.prog.Name, func(t *testing.T) {
			c.lib.Require(t)
			start := time.Now()
			ref := testenv.Results(testenv.MPIReference(t, c.lib, 4, c.prog, 5*time.Minute))
			t.Logf("reference run: %d lines in %v", len(ref), time.Since(start).Round(time.Millisecond))
			for run := 1; run <= c.runs; run++ {
				start := time.Now()
				st := e.mpiRun(t, c, ref, kills, leaves)
				t.Logf("run %d: %d restores, %d --leave-running dumps, exact results; %s; %v",
					run, kills, leaves, st, time.Since(start).Round(time.Millisecond))
			}
		})
	}
}

// mpiRun runs one job of c with kills dump-and-restore cycles and leaves
// --leave-running dumps (alternating, kills first), and checks it against
// the reference lines ref. It returns a summary of what it saw.
func (e *env) mpiRun(t *testing.T, c mpiCase, ref []string, kills, leaves int) string {
	t.Helper()
	job := testenv.StartMPIJob(t, e.r, c.lib, 4, c.prog, c.delay)
	job.WaitIters(t, 3, mpiWait)
	tree := treeSnapshot(job.PID)
	if len(tree) != 5 && len(tree) != 6 {
		t.Fatalf("%s: the launcher's tree has %d processes, want the launcher (and a proxy) and 4 ranks:%s",
			c.lib.Name, len(tree), fmtTree(tree))
	}
	pids := slices.Sorted(maps.Keys(tree))
	var frozen []time.Duration
	var summary string
	for cycle, k, l := 1, 0, 0; k < kills || l < leaves; cycle++ {
		leave := k >= kills || (l < k && l < leaves)
		before, err := testenv.Sockets(pids)
		if err != nil {
			t.Fatal(err)
		}
		if summary == "" {
			estab, listen, unix := before.Count()
			summary = fmt.Sprintf("%d processes, %d TCP connection fds, %d TCP listener fds, %d UNIX socket fds",
				len(pids), estab, listen, unix)
		}
		n := job.Iters()
		dir := t.TempDir()
		why := fmt.Sprintf("cycle %d (after iteration %d)", cycle, n)
		if leave {
			l++
			why += ", --leave-running"
			dr := e.dump(t, job.PID, dir, "--leave-running")
			frozen = append(frozen, time.Duration(dr.FrozenNs))
			e.checkMPISockets(t, why, pids, before, true)
		} else {
			k++
			why += ", restore"
			release := func() {}
			if c.lib.Ptys {
				release = testenv.HoldPtys(t)
			}
			dr := e.dump(t, job.PID, dir)
			frozen = append(frozen, time.Duration(dr.FrozenNs))
			e.waitTreeGone(t, why, pids)
			if res := e.runRedo(t, nil, dir); res.code != 0 {
				// The dump's network lock would black-hole the
				// next runs' listeners (Open MPI's use fixed ports).
				e.runCkpt(t, nil, "unlock", dir)
				t.Fatalf("%s: ckpt-redo: %v; job log ends with:\n%s", why, res, tail(job.Lines(), 5))
			}
			release()
			compareTree(t, why, tree, treeSnapshot(job.PID), nil)
			e.checkMPISockets(t, why, pids, before, false)
		}
		job.WaitIters(t, n+1, mpiWait)
	}
	job.Release(t)
	job.WaitResult(t, mpiWait)
	if e.mpiEnd(t, job, pids) {
		summary += "; hung in MPI_Finalize (killed)"
	}
	got := testenv.Results(job.Lines())
	if !slices.Equal(got, ref) {
		i := 0
		for i < len(got) && i < len(ref) && got[i] == ref[i] {
			i++
		}
		t.Fatalf("%s %s: the checkpointed run's log differs from the reference run's at line %d of %d/%d:\n got %q\nwant %q",
			c.lib.Name, c.prog.Name, i+1, len(got), len(ref), at(got, i), at(ref, i))
	}
	slices.Sort(frozen)
	return fmt.Sprintf("%s; frozen min %v median %v max %v", summary, frozen[0].Round(time.Millisecond),
		frozen[len(frozen)/2].Round(time.Millisecond), frozen[len(frozen)-1].Round(time.Millisecond))
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(end)"
}

// checkMPISockets compares the sockets of pids now with before.
func (e *env) checkMPISockets(t *testing.T, why string, pids []int, before testenv.SocketView, sameInodes bool) {
	t.Helper()
	after, err := testenv.Sockets(pids)
	if err != nil {
		t.Fatalf("%s: %v", why, err)
	}
	if d := before.Diff(after, sameInodes); len(d) > 0 {
		t.Fatalf("%s: the job's sockets changed:\n%s", why, strings.Join(d, "\n"))
	}
}

// mpiEnd waits for the job to end after its result: the launcher exits 0
// and rank 0 logs "done" after MPI_Finalize. A library whose jobs hang in
// MPI_Finalize without any checkpoint too (testenv.MPILib.FinalizeHangs)
// gets a few seconds, then its tree is killed: mpiEnd returns true then.
func (e *env) mpiEnd(t *testing.T, job *testenv.MPIJob, pids []int) bool {
	t.Helper()
	if job.Lib.FinalizeHangs {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if es, ok := e.r.Poll(job.PID); ok {
				if es.Code != 0 || es.Signal != 0 {
					t.Fatalf("%s: the launcher ended with %v", job.Lib.Name, es)
				}
				e.waitTreeGone(t, "the job's end", pids)
				return false
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("%s: the job hangs in MPI_Finalize (as without checkpoints); killing it", job.Lib.Name)
		for _, pid := range pids {
			// Through the reaper: a process of the job that has ended
			// (reaped) may have left its PID to another test's process.
			e.r.Signal(t, pid, syscall.SIGKILL)
		}
		e.waitTreeGone(t, "the killed job", pids)
		return true
	}
	if es := e.r.WaitExit(t, job.PID, mpiWait); es.Code != 0 || es.Signal != 0 {
		out, _ := os.ReadFile(job.Stdout)
		t.Fatalf("%s: the launcher ended with %v; output:\n%s", job.Lib.Name, es, testenv.Tail(string(out), 2000))
	}
	if lines := job.Lines(); len(lines) == 0 || lines[len(lines)-1] != "done" {
		t.Fatalf("%s: the log ends with %q, want done", job.Lib.Name, tail(lines, 2))
	}
	e.waitTreeGone(t, "the job's end", pids)
	return false
}
