package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// MPILib is an MPI implementation installed on the machine. With MPICH and
// Open MPI both installed, the plain mpicc/mpirun/mpiexec names are whichever
// the alternatives system chose, so each is called by its suffixed names.
type MPILib struct {
	Name     string   // "mpich", "mpich-tcp", "openmpi"
	CC       string   // compiler wrapper
	Launcher []string // the launcher and its options; "-n RANKS PROG ARGS" follow
	Env      []string // added to the launcher's environment
	// Ptys says that the launcher gives every rank a pseudo-terminal
	// (Open MPI's mpirun does, for its output): StartMPIJob and
	// MPIReference hold HoldPtys while the job starts, and a test holds it
	// from a dump that kills such a job until its restore is done, so that
	// the restore gets the ptys' indexes back.
	Ptys bool
	// FinalizeHangs says that jobs of this library hang in MPI_Finalize in
	// some runs whether or not they were checkpointed (see MPICHOverTCP):
	// a job's results are checked, and a job that logged its result but
	// is still in MPI_Finalize is then killed instead of waited for.
	FinalizeHangs bool
}

// MPICH is MPICH 4 with hydra and its default transport (ch4:ucx, which on
// one node moves data through shared memory), its SysV segments kept off
// huge pages (UCX_SYSV_HUGETLB_MODE=n): with huge pages free, UCX takes
// them all for SHM_HUGETLB segments, and tests running beside it that need
// huge pages (the fidelity suite's) would find none, or take those a
// killed job freed before its restore could. MPICHHugePages has them.
func MPICH() MPILib {
	l := MPICHHugePages()
	l.Name, l.Env = "mpich", []string{"UCX_SYSV_HUGETLB_MODE=n"}
	return l
}

// MPICHHugePages is MPICH with UCX's defaults untouched: its shared memory
// is SHM_HUGETLB segments when the machine has huge pages free.
func MPICHHugePages() MPILib {
	return MPILib{Name: "mpich-hugepages", CC: "mpicc.mpich", Launcher: []string{"mpiexec.hydra"}}
}

// MPICHOverTCP is MPICH with UCX restricted to TCP (UCX_TLS=tcp,self): the
// ranks exchange every message over TCP connections between each other.
// Debian's MPICH 4.0.2 with UCX 1.13.1 then hangs in MPI_Finalize in most
// runs without any checkpoint: one rank spins in uct_tcp_iface_progress,
// waiting for its endpoints' close to complete, while the peers it sent
// its last bytes to (unread in their receive queues) already wait in the
// PMI barrier and never progress UCX again (openucx/ucx#8738).
func MPICHOverTCP() MPILib {
	l := MPICH()
	l.Name, l.Env, l.FinalizeHangs = "mpich-tcp", []string{"UCX_TLS=tcp,self"}, true
	return l
}

// OpenMPI is Open MPI 4.1 with mpirun and its default transports (vader
// shared memory between the ranks of a node, TCP to mpirun). As root it
// needs --allow-run-as-root, and more ranks than cores --oversubscribe.
func OpenMPI() MPILib {
	return MPILib{Name: "openmpi", CC: "mpicc.openmpi",
		Launcher: []string{"mpirun.openmpi", "--allow-run-as-root", "--oversubscribe"}, Ptys: true}
}

// Argv is the command line that runs prog with args as ranks processes.
func (l MPILib) Argv(ranks int, prog string, args ...string) []string {
	argv := append(append([]string(nil), l.Launcher...), "-n", strconv.Itoa(ranks), prog)
	return append(argv, args...)
}

// Require fails the test if the library's compiler or launcher is missing
// (make deps and .ci/run install them).
func (l MPILib) Require(t testing.TB) {
	t.Helper()
	for _, c := range []string{l.CC, l.Launcher[0]} {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("%s is not installed (make deps / .ci/run install mpich, libmpich-dev, openmpi-bin, libopenmpi-dev): %v", c, err)
		}
	}
}

// MPIDir returns testdata/mpi of the repository.
func MPIDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(RepoRoot(t), "testdata", "mpi")
}

// BuildMPI compiles testdata/mpi/NAME.c with the library's compiler and
// returns the binary's path, cached like BuildVictim's (the key covers the
// source, mpitest.h and the compiler).
func BuildMPI(t testing.TB, l MPILib, name string) string {
	t.Helper()
	l.Require(t)
	dir := MPIDir(t)
	return buildCached(t, "ckpt-mpi-", dir, []string{name + ".c", "mpitest.h"}, name, l.CC, func(out string) []string {
		return []string{"-Wall", "-Werror", "-O2", "-g", "-o", out, filepath.Join(dir, name+".c"), "-lm"}
	})
}

// MPIProg is one run's program of testdata/mpi and its arguments (see
// mpitest.h): PROG LOG ITERS DELAY_MS HOLDFILE ARGS...
type MPIProg struct {
	Name  string   // ring, allreduce, cg
	Iters int      // ITERS
	Args  []string // the program's own arguments
}

// String renders the program as NAME ITERS ARGS.
func (p MPIProg) String() string {
	return fmt.Sprintf("%s %d %s", p.Name, p.Iters, strings.Join(p.Args, " "))
}

// MPIJob is an MPI job started under a reaper: its launcher is the reaper's
// child, and the root of the tree a checkpoint takes.
type MPIJob struct {
	Lib    MPILib
	Prog   MPIProg
	PID    int    // the launcher's
	Dir    string // private directory: the launcher's cwd
	Log    string // rank 0's log (mpitest.h)
	Hold   string // the job waits before its last iteration until this exists
	Stdout string // the launcher's stdout and stderr
}

// StartMPIJob runs prog as ranks processes of lib under r, every rank
// sleeping delayMs after each iteration and the job waiting before its last
// iteration for Release, and waits for its start line.
func StartMPIJob(t testing.TB, r *Reaper, lib MPILib, ranks int, prog MPIProg, delayMs int) *MPIJob {
	t.Helper()
	bin := BuildMPI(t, lib, prog.Name)
	dir := t.TempDir()
	j := &MPIJob{Lib: lib, Prog: prog, Dir: dir, Log: filepath.Join(dir, "log"),
		Hold: filepath.Join(dir, "hold"), Stdout: filepath.Join(dir, "stdout")}
	args := append([]string{j.Log, strconv.Itoa(prog.Iters), strconv.Itoa(delayMs), j.Hold}, prog.Args...)
	env := append(os.Environ(), lib.Env...)
	if lib.Ptys {
		defer HoldPtys(t)()
	}
	j.PID = r.Run(t, RunOpts{Stdout: j.Stdout, Stderr: j.Stdout, Dir: dir, Env: env}, lib.Argv(ranks, bin, args...)...)
	j.waitFor(t, "its start line", 30*time.Second, func(l string) bool { return strings.HasPrefix(l, "start ") })
	return j
}

// Lines returns the complete lines of the job's log.
func (j *MPIJob) Lines() []string { return ReadLines(j.Log) }

// Iters returns how many iterations the job has logged.
func (j *MPIJob) Iters() int {
	n := 0
	for _, l := range j.Lines() {
		if strings.HasPrefix(l, "iter ") {
			n++
		}
	}
	return n
}

// WaitIters waits until the log holds n iteration lines or more (or the
// job waits for Release: it then logs no more); it fails on a FAIL line.
func (j *MPIJob) WaitIters(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	n = min(n, j.Prog.Iters-1)
	j.waitFor(t, fmt.Sprintf("%d iterations", n), timeout, func(l string) bool {
		return strings.HasPrefix(l, fmt.Sprintf("iter %d ", n-1))
	})
}

// Release lets the job do its last iteration and end.
func (j *MPIJob) Release(t testing.TB) {
	t.Helper()
	if err := os.WriteFile(j.Hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// WaitResult waits for the log's "result" line and returns it.
func (j *MPIJob) WaitResult(t testing.TB, timeout time.Duration) string {
	t.Helper()
	return j.waitFor(t, "the result", timeout, func(l string) bool { return strings.HasPrefix(l, "result ") })
}

// waitFor polls the log for a line satisfying pred; a FAIL line, or no
// such line within timeout, fails the test.
func (j *MPIJob) waitFor(t testing.TB, what string, timeout time.Duration, pred func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		lines := j.Lines()
		for _, l := range lines {
			if strings.HasPrefix(l, "FAIL") {
				t.Fatalf("%s %s: %s", j.Lib.Name, j.Prog.Name, l)
			}
			if pred(l) {
				return l
			}
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(j.Stdout)
			t.Fatalf("%s %s: no %s in %v; log ends with:\n%s\nlauncher output:\n%s", j.Lib.Name, j.Prog.Name, what,
				timeout, strings.Join(lines[max(0, len(lines)-5):], "\n"), Tail(string(out), 2000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Tail returns the last n bytes of s.
func Tail(s string, n int) string {
	return s[max(0, len(s)-n):]
}

// MPIReference runs prog as ranks processes of lib without any checkpoint,
// as fast as it goes, and returns the lines of its log: what every
// checkpointed run of the same program must log. A library whose jobs may
// hang in MPI_Finalize is killed once it logged its result; others must
// end by themselves with exit code 0 and log "done".
func MPIReference(t testing.TB, lib MPILib, ranks int, prog MPIProg, timeout time.Duration) []string {
	t.Helper()
	bin := BuildMPI(t, lib, prog.Name)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	if lib.Ptys {
		defer HoldPtys(t)()
	}
	args := append([]string{log, strconv.Itoa(prog.Iters), "0", "-"}, prog.Args...)
	argv := lib.Argv(ranks, bin, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), lib.Env...)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	// The launcher is reaped (cmd.Wait) only once it has exited by itself
	// or its group has been killed: while it is not, its PID, hence the
	// group's, is nobody else's, and killing the group by number is safe.
	killGroup := func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	deadline := time.Now().Add(timeout)
	var hangSince time.Time
	for {
		if exitedUnreaped(cmd.Process.Pid) {
			err := cmd.Wait()
			lines := ReadLines(log)
			if err != nil || len(lines) == 0 || lines[len(lines)-1] != "done" {
				if !hangSince.IsZero() {
					return lines
				}
				t.Fatalf("reference run %s: %v; log ends with:\n%s\noutput:\n%s", strings.Join(argv, " "), err,
					strings.Join(lines[max(0, len(lines)-5):], "\n"), Tail(out.String(), 2000))
			}
			return lines
		}
		if time.Now().After(deadline) {
			killGroup()
			err := cmd.Wait()
			t.Fatalf("reference run %s: not done in %v (killed: %v); output:\n%s", strings.Join(argv, " "), timeout, err, Tail(out.String(), 2000))
		}
		time.Sleep(50 * time.Millisecond)
		lines := ReadLines(log)
		for _, l := range lines {
			if strings.HasPrefix(l, "FAIL") {
				killGroup()
				cmd.Wait()
				t.Fatalf("reference run %s: %s", strings.Join(argv, " "), l)
			}
		}
		if lib.FinalizeHangs && len(lines) > 0 && strings.HasPrefix(lines[len(lines)-1], "result ") {
			// Give MPI_Finalize a moment, then end the job if it hangs.
			if hangSince.IsZero() {
				hangSince = time.Now()
			} else if time.Since(hangSince) > 2*time.Second {
				killGroup()
				cmd.Wait()
				return ReadLines(log)
			}
		}
	}
}

// exitedUnreaped tells whether child pid has exited, without reaping it
// (waitid WNOWAIT): its PID stays its own until it is waited for.
func exitedUnreaped(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo != 0
}

// Results returns the lines of an MPI log that a run without checkpoints
// determines: the iteration lines and the result, without start and done.
func Results(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "iter ") || strings.HasPrefix(l, "result ") {
			out = append(out, l)
		}
	}
	return out
}
