package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
)

// BenchmarkMPI checkpoints a 4-rank MPI job on one node whose ranks hold
// 256 MiB of heap each (testdata/mpi/ring: every page of the heap changes
// every iteration), with each library: a --leave-running dump (the time
// the job is frozen, and the whole dump), then a dump that kills the job
// and its restore (ckpt-redo from start to the job running again). The
// images go to /dev/shm. The ranks check their heap every iteration, and
// the job must end with exit code 0.
//
//	go test ./test/bench -run '^$' -bench MPI -benchtime 1x
func BenchmarkMPI(b *testing.B) {
	testenv.RequireRoot(b)
	bin := testenv.BuildBinaries(b)
	for _, lib := range []testenv.MPILib{testenv.MPICH(), testenv.OpenMPI()} {
		b.Run(lib.Name, func(b *testing.B) {
			dir, err := os.MkdirTemp("/dev/shm", "ckpt-bench-mpi-")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			r := testenv.StartReaper(b)
			// Two new iterations a round, and the job waits before its last one.
			prog := testenv.MPIProg{Name: "ring", Iters: 2 + 2*(rounds()+1) + 3, Args: []string{"256"}}
			job := testenv.StartMPIJob(b, r, lib, 4, prog, 0)
			job.WaitIters(b, 2, 5*time.Minute)
			img := filepath.Join(dir, "img")
			var frozen, leave, dump, restore, build []float64
			var bytes int64
			for i := -1; i < rounds(); i++ {
				dr := dumpJSON(b, bin, img, job.PID, "--leave-running")
				n := job.Iters()
				job.WaitIters(b, n+1, 5*time.Minute)

				pids := treePIDs(job.PID)
				release := func() {}
				if lib.Ptys {
					release = testenv.HoldPtys(b)
				}
				dk := dumpJSON(b, bin, img, job.PID)
				r.WaitExit(b, job.PID, time.Minute)
				waitGone(b, pids)
				start := time.Now()
				rr := restoreJSON(b, r, bin, dir, img)
				rt := time.Since(start)
				release()
				n = job.Iters()
				job.WaitIters(b, n+1, 5*time.Minute)
				if i >= 0 {
					frozen = append(frozen, dr.Frozen.Seconds()*1e3)
					leave = append(leave, dr.Total.Seconds()*1e3)
					dump = append(dump, dk.Total.Seconds()*1e3)
					restore = append(restore, rt.Seconds()*1e3)
					build = append(build, rr.Build.Seconds()*1e3)
					bytes = dk.Bytes
				}
			}
			job.Release(b)
			job.WaitResult(b, 5*time.Minute)
			if es := r.WaitExit(b, job.PID, 5*time.Minute); es.Code != 0 || es.Signal != 0 {
				b.Fatalf("%s: the launcher ended with %v", lib.Name, es)
			}
			b.ReportMetric(median(frozen), "leave-running-frozen-ms")
			b.ReportMetric(median(leave), "leave-running-dump-ms")
			b.ReportMetric(median(dump), "dump-ms")
			b.ReportMetric(median(restore), "restore-ms")
			b.ReportMetric(median(build), "restore-build-ms")
			b.ReportMetric(float64(bytes)/median(dump)/1e3, "dump-MB/s")
			b.ReportMetric(float64(bytes)/median(restore)/1e3, "restore-MB/s")
			b.Logf("%s: image %.0f MiB", lib.Name, float64(bytes)/(1<<20))
		})
	}
}
