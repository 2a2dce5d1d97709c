// Package bench measures dump and restore throughput against ceilings
// measured in the same run on the same paths:
//
//   - dump ceiling: process_vm_readv of the same memory, plus writing the same
//     number of bytes to a file on the same tmpfs;
//   - restore ceiling: reading that file, plus copying it into freshly
//     mmap'd anonymous memory (first-touch included, as a restore pays it).
//
// Memory on these VMs is much slower cold than warm, so every round runs
// the ceilings, the dump and the restore interleaved, after the same
// warm-up, and the medians are reported.
//
//	go test ./test/bench -run '^$' -bench . -benchtime 1x
//	CKPT_BENCH_SIZES=64,1024 CKPT_BENCH_ROUNDS=3 go test ./test/bench ...
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

const chunk = 16 << 20

func sizes() []int {
	s := os.Getenv("CKPT_BENCH_SIZES")
	if s == "" {
		s = "64,1024,4096"
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func rounds() int {
	if n, err := strconv.Atoi(os.Getenv("CKPT_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 3
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// bigVMA finds the victim's largest anonymous mapping.
func bigVMA(t testing.TB, pid int) (uint64, uint64) {
	maps, err := proc.ReadSmaps(sys.PID(pid))
	if err != nil {
		t.Fatal(err)
	}
	var lo, hi uint64
	for _, m := range maps {
		if m.Inode == 0 && m.End-m.Start > hi-lo {
			lo, hi = m.Start, m.End
		}
	}
	return lo, hi
}

// dumpCeiling reads the victim's memory with process_vm_readv and writes as
// many bytes to a file in dir; it returns MB/s for the two in sequence.
func dumpCeiling(t testing.TB, pid int, dir string, size int64) (float64, string) {
	lo, _ := bigVMA(t, pid)
	buf := make([]byte, chunk)
	start := time.Now()
	for off := int64(0); off < size; off += chunk {
		l := []unix.Iovec{{Base: &buf[0], Len: chunk}}
		r := []unix.RemoteIovec{{Base: uintptr(lo + uint64(off)), Len: chunk}}
		if _, err := unix.ProcessVMReadv(pid, l, r, 0); err != nil {
			t.Fatal(err)
		}
	}
	tr := time.Since(start)
	f, err := os.Create(filepath.Join(dir, "ceiling"))
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	for off := int64(0); off < size; off += chunk {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	tw := time.Since(start)
	return float64(size) / (tr + tw).Seconds() / 1e6,
		fmt.Sprintf("readv %.0f MB/s, write %.0f MB/s", float64(size)/tr.Seconds()/1e6, float64(size)/tw.Seconds()/1e6)
}

// restoreCeiling reads the ceiling file and copies it into fresh anonymous
// memory.
func restoreCeiling(t testing.TB, dir string, size int64) (float64, string) {
	f, err := os.Open(filepath.Join(dir, "ceiling"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defer os.Remove(f.Name())
	buf := make([]byte, chunk)
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	var tr, tc time.Duration
	for off := int64(0); off < size; off += chunk {
		s := time.Now()
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
		m := time.Now()
		copy(mem[off:off+chunk], buf)
		tr += m.Sub(s)
		tc += time.Since(m)
	}
	return float64(size) / (tr + tc).Seconds() / 1e6,
		fmt.Sprintf("read %.0f MB/s, copy into fresh memory %.0f MB/s", float64(size)/tr.Seconds()/1e6, float64(size)/tc.Seconds()/1e6)
}

type dumpResult struct {
	Bytes  int64         `json:"bytes"`
	Frozen time.Duration `json:"frozen_ns"`
	Total  time.Duration `json:"total_ns"`
}

type restoreResult struct {
	PID   int           `json:"pid"`
	Bytes int64         `json:"bytes"`
	Build time.Duration `json:"build_ns"`
}

// dumpJSON runs ckpt dump --json with flags on pid.
func dumpJSON(b *testing.B, bin, img string, pid int, flags ...string) dumpResult {
	b.Helper()
	// A dump never overwrites an image: each round writes a fresh one.
	if err := os.RemoveAll(img); err != nil {
		b.Fatal(err)
	}
	args := append(append([]string{"dump", "--json", "--dir", img}, flags...), strconv.Itoa(pid))
	cmd := exec.Command(filepath.Join(bin, "ckpt"), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("ckpt dump: %v: %s", err, stderr.String())
	}
	var dr dumpResult
	if err := json.Unmarshal(out, &dr); err != nil {
		b.Fatal(err)
	}
	return dr
}

// restoreJSON runs ckpt-redo --json under the reaper (so that the restored
// process is the reaper's) and returns its result.
func restoreJSON(b *testing.B, r *testenv.Reaper, bin, dir, img string) restoreResult {
	b.Helper()
	return restoreJSONArgv(b, r, dir, filepath.Join(bin, "ckpt-redo"), "--json", img)
}

// restoreJSONArgv is restoreJSON with the command line given (ckpt-redo
// --json IMG, after a command it runs under).
func restoreJSONArgv(b *testing.B, r *testenv.Reaper, dir string, argv ...string) restoreResult {
	b.Helper()
	jf, ef := filepath.Join(dir, "restore.json"), filepath.Join(dir, "redo.err")
	defer os.Remove(jf)
	redo := r.Run(b, testenv.RunOpts{Stdout: jf, Stderr: ef}, argv...)
	if st := r.WaitExit(b, redo, 5*time.Minute); st.Code != 0 {
		msg, _ := os.ReadFile(ef)
		b.Fatalf("ckpt-redo: %v: %s", st, msg)
	}
	data, _ := os.ReadFile(jf)
	var rr restoreResult
	if err := json.Unmarshal(data, &rr); err != nil {
		b.Fatalf("ckpt-redo output %q: %v", data, err)
	}
	return rr
}

func BenchmarkDumpRestore(b *testing.B) {
	testenv.RequireRoot(b)
	bin := testenv.BuildBinaries(b)
	hog := testenv.BuildVictim(b, "memhog")
	for _, mib := range sizes() {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			size := int64(mib) << 20
			dir, err := os.MkdirTemp("/dev/shm", "ckpt-bench-")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			r := testenv.StartReaper(b)
			log := filepath.Join(dir, "log")
			pid := r.Run(b, testenv.RunOpts{}, hog, log, strconv.Itoa(mib))
			testenv.WaitForLine(b, log, func(l string) bool { return strings.HasPrefix(l, "ready") }, 5*time.Minute)
			img := filepath.Join(dir, "img")
			var dumpMB, dumpCeil, restMB, restCeil, frozen []float64
			var dumpNote, restNote string
			// Round -1 warms memory (tmpfs pages, fresh anonymous memory)
			// the same way for everything measured; it is not recorded.
			for i := -1; i < rounds(); i++ {
				dc, dn := dumpCeiling(b, pid, dir, size)
				rc, rn := restoreCeiling(b, dir, size)

				// A --leave-running dump: its rate and the frozen time.
				dr := dumpJSON(b, bin, img, pid, "--leave-running")
				if i >= 0 {
					dumpCeil, restCeil = append(dumpCeil, dc), append(restCeil, rc)
					dumpNote, restNote = dn, rn
					dumpMB = append(dumpMB, float64(dr.Bytes)/dr.Total.Seconds()/1e6)
					frozen = append(frozen, float64(dr.Frozen.Microseconds())/1e3)
				}

				// Kill the original, restore it, until every page is resident.
				testenv.Signal(pid, unix.SIGKILL)
				r.WaitExit(b, pid, time.Minute)
				rr := restoreJSON(b, r, bin, dir, img)
				if i >= 0 {
					restMB = append(restMB, float64(rr.Bytes)/rr.Build.Seconds()/1e6)
				}
			}
			// The restored process must hold the right memory.
			testenv.Signal(pid, unix.SIGUSR1)
			line := testenv.WaitForLine(b, log, func(l string) bool { return strings.HasPrefix(l, "check") }, 5*time.Minute)
			if line != "check ok" {
				b.Fatalf("restored memhog: %s", line)
			}
			b.ReportMetric(median(dumpMB), "dump-MB/s")
			b.ReportMetric(median(dumpCeil), "dump-ceiling-MB/s")
			b.ReportMetric(100*median(dumpMB)/median(dumpCeil), "dump-%-of-ceiling")
			b.ReportMetric(median(restMB), "restore-MB/s")
			b.ReportMetric(median(restCeil), "restore-ceiling-MB/s")
			b.ReportMetric(100*median(restMB)/median(restCeil), "restore-%-of-ceiling")
			b.ReportMetric(median(frozen), "frozen-ms")
			b.Logf("dump ceiling: %s; restore ceiling: %s", dumpNote, restNote)
		})
	}
}

// BenchmarkTasks dumps and restores many threads and many processes, to
// show that the freeze grows with memory and tasks, not with the square of
// the number of tasks: compare the 1/16/64-thread and 8/32-process rows.
func BenchmarkTasks(b *testing.B) {
	testenv.RequireRoot(b)
	bin := testenv.BuildBinaries(b)
	hog := testenv.BuildVictim(b, "memhog")
	cases := []struct {
		name                string
		mib, threads, procs int
	}{
		{"1thread", 64, 1, 1},
		{"16threads", 64, 16, 1},
		{"64threads", 64, 64, 1},
		{"8procs-32MiB", 32, 1, 8},
		{"32procs-32MiB", 32, 1, 32},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			dir, err := os.MkdirTemp("/dev/shm", "ckpt-bench-")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			r := testenv.StartReaper(b)
			log := filepath.Join(dir, "log")
			pid := r.Run(b, testenv.RunOpts{}, hog, log, strconv.Itoa(tc.mib), strconv.Itoa(tc.threads), strconv.Itoa(tc.procs))
			testenv.WaitForLine(b, log, func(string) bool {
				n := 0
				for _, l := range testenv.ReadLines(log) {
					if strings.HasPrefix(l, "ready") {
						n++
					}
				}
				return n == tc.procs
			}, 5*time.Minute)
			img := filepath.Join(dir, "img")
			var frozen, dumpT, restT []float64
			for i := -1; i < rounds(); i++ {
				dr := dumpJSON(b, bin, img, pid, "--leave-running")
				pids := treePIDs(pid)
				for _, p := range pids {
					testenv.Signal(p, unix.SIGKILL)
				}
				testenv.Signal(pid, unix.SIGKILL)
				r.WaitExit(b, pid, time.Minute)
				waitGone(b, pids)
				rr := restoreJSON(b, r, bin, dir, img)
				if i >= 0 {
					frozen = append(frozen, float64(dr.Frozen.Microseconds())/1e3)
					dumpT = append(dumpT, float64(dr.Total.Microseconds())/1e3)
					restT = append(restT, float64(rr.Build.Microseconds())/1e3)
				}
			}
			tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
			if tc.threads > 1 && len(tasks) != tc.threads {
				b.Fatalf("restored process has %d threads, want %d", len(tasks), tc.threads)
			}
			if n := len(treePIDs(pid)) + 1; n != tc.procs {
				b.Fatalf("restored tree has %d processes, want %d", n, tc.procs)
			}
			b.ReportMetric(median(frozen), "frozen-ms")
			b.ReportMetric(median(dumpT), "dump-ms")
			b.ReportMetric(median(restT), "restore-ms")
			for _, p := range append(treePIDs(pid), pid) {
				testenv.Signal(p, unix.SIGKILL)
			}
		})
	}
}

// BenchmarkCOWTree dumps and restores a tree of 4 processes sharing 64 MiB
// copy-on-write (memhog cow: the parent fills it, then forks 3 children
// that never write it): the image holds it once, and the restored
// children share it again. It reports the image size, the dump and
// restore times and the memory the restored tree holds (the sum of the
// processes' Pss).
func BenchmarkCOWTree(b *testing.B) {
	testenv.RequireRoot(b)
	bin := testenv.BuildBinaries(b)
	hog := testenv.BuildVictim(b, "memhog")
	const mib, procs = 64, 4
	dir, err := os.MkdirTemp("/dev/shm", "ckpt-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	r := testenv.StartReaper(b)
	log := filepath.Join(dir, "log")
	pid := r.Run(b, testenv.RunOpts{}, hog, log, strconv.Itoa(mib), "1", strconv.Itoa(procs), "cow")
	testenv.WaitForLine(b, log, func(string) bool {
		n := 0
		for _, l := range testenv.ReadLines(log) {
			if strings.HasPrefix(l, "ready") {
				n++
			}
		}
		return n == procs
	}, 5*time.Minute)
	img := filepath.Join(dir, "img")
	var dumpT, restT, imgMiB, pssMiB []float64
	for i := -1; i < rounds(); i++ {
		dr := dumpJSON(b, bin, img, pid, "--leave-running")
		fi, err := os.Stat(filepath.Join(img, "image.ckpt"))
		if err != nil {
			b.Fatal(err)
		}
		pids := treePIDs(pid)
		for _, p := range pids {
			testenv.Signal(p, unix.SIGKILL)
		}
		testenv.Signal(pid, unix.SIGKILL)
		r.WaitExit(b, pid, time.Minute)
		waitGone(b, pids)
		rr := restoreJSON(b, r, bin, dir, img)
		if i >= 0 {
			dumpT = append(dumpT, float64(dr.Total.Microseconds())/1e3)
			restT = append(restT, float64(rr.Build.Microseconds())/1e3)
			imgMiB = append(imgMiB, float64(fi.Size())/(1<<20))
			pssMiB = append(pssMiB, float64(treePss(b, pid))/(1<<10))
		}
	}
	all := append(treePIDs(pid), pid)
	if len(all) != procs {
		b.Fatalf("restored tree has %d processes, want %d", len(all), procs)
	}
	for _, p := range all {
		testenv.Signal(p, unix.SIGUSR1)
	}
	testenv.WaitForLine(b, log, func(string) bool {
		n := 0
		for _, l := range testenv.ReadLines(log) {
			if strings.HasPrefix(l, "check") {
				if l != "check ok" {
					b.Fatalf("restored memhog: %s", l)
				}
				n++
			}
		}
		return n == procs
	}, 5*time.Minute)
	b.ReportMetric(median(imgMiB), "image-MiB")
	b.ReportMetric(median(pssMiB), "restored-Pss-MiB")
	b.ReportMetric(median(dumpT), "dump-ms")
	b.ReportMetric(median(restT), "restore-ms")
	for _, p := range all {
		testenv.Signal(p, unix.SIGKILL)
	}
}

// treePss is the sum of the Pss (KiB) of pid and its descendants: the
// memory they hold, shared pages counted once.
func treePss(b *testing.B, pid int) int64 {
	var sum int64
	for _, p := range append(treePIDs(pid), pid) {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", p))
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				sum += kb
			}
		}
	}
	return sum
}

// treePIDs lists the descendants of pid.
func treePIDs(pid int) []int {
	var out []int
	kids, _ := proc.Children(sys.PID(pid))
	for _, k := range kids {
		out = append(out, int(k))
		out = append(out, treePIDs(int(k))...)
	}
	return out
}

// waitGone waits until none of pids exists (killed children are reaped by
// the reaper once their parent is gone).
func waitGone(t testing.TB, pids []int) {
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range pids {
		for {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %d still exists", p)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// BenchmarkConnections dumps an epoll server holding N established TCP
// connections (N = 0 and 1000) with --leave-running, and restores it:
// the difference is what the connections cost.
func BenchmarkConnections(b *testing.B) {
	testenv.RequireRoot(b)
	bin := testenv.BuildBinaries(b)
	script := filepath.Join(testenv.RepoRoot(b), "test", "e2e", "testdata", "manyconns.py")
	for _, n := range []int{0, 1000} {
		b.Run(fmt.Sprintf("%dconns", n), func(b *testing.B) {
			dir := b.TempDir()
			r := testenv.StartReaper(b)
			l, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			log := filepath.Join(dir, "log")
			pid := r.Run(b, testenv.RunOpts{}, "python3", script, log, strconv.Itoa(port))
			testenv.WaitForLine(b, log, func(l string) bool { return strings.HasPrefix(l, "start") }, time.Minute)
			var conns []net.Conn
			for i := 0; i < n; i++ {
				c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				conns = append(conns, c)
			}
			if n > 0 {
				testenv.WaitForLine(b, log, func(l string) bool { return l == fmt.Sprintf("conns %d", n) }, time.Minute)
			}
			img := filepath.Join(dir, "img")
			var frozen, total, rest []float64
			for i := -1; i < rounds(); i++ {
				dr := dumpJSON(b, bin, img, pid)
				r.WaitExit(b, pid, time.Minute)
				rr := restoreJSON(b, r, bin, dir, img)
				if i >= 0 {
					frozen = append(frozen, float64(dr.Frozen.Microseconds())/1e3)
					total = append(total, float64(dr.Total.Microseconds())/1e3)
					rest = append(rest, float64(rr.Build.Microseconds())/1e3)
				}
			}
			// Every connection still answers.
			for i, c := range conns {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				msg := []byte(fmt.Sprintf("ping %d\n", i))
				if _, err := c.Write(msg); err != nil {
					b.Fatalf("connection %d after restore: %v", i, err)
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
					b.Fatalf("connection %d after restore: %q, %v", i, got, err)
				}
			}
			b.ReportMetric(median(total), "dump-ms")
			b.ReportMetric(median(frozen), "frozen-ms")
			b.ReportMetric(median(rest), "restore-ms")
			testenv.Signal(pid, unix.SIGKILL)
		})
	}
}
