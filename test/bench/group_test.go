package bench

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
)

// link is one TCP path between two nodes of a cluster.
type link struct{ from, to *testenv.Node }

// rawTCP moves size bytes over every link at once (a listener in the
// destination's namespace, a connection from the source's), the way the
// transfer and the ring do but with nothing else to do, and returns the
// aggregate MB/s and the time it took.
func rawTCP(t testing.TB, links []link, size int64) (float64, time.Duration) {
	t.Helper()
	type pair struct{ w, r net.Conn }
	pairs := make([]pair, len(links))
	for i, l := range links {
		var ln net.Listener
		if err := testenv.InNetNS(l.to.NS, func() (err error) {
			ln, err = net.Listen("tcp", l.to.IP+":0")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		accepted := make(chan net.Conn, 1)
		go func() {
			c, _ := ln.Accept()
			accepted <- c
		}()
		if err := testenv.InNetNS(l.from.NS, func() (err error) {
			pairs[i].w, err = net.Dial("tcp", ln.Addr().String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		pairs[i].r = <-accepted
		ln.Close()
	}
	var wg sync.WaitGroup
	start := time.Now()
	for _, p := range pairs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for left := size; left > 0; left -= int64(len(buf)) {
				if _, err := p.w.Write(buf[:min(int64(len(buf)), left)]); err != nil {
					t.Error(err)
					return
				}
			}
			p.w.Close()
		}()
		go func() {
			defer wg.Done()
			n, err := io.CopyBuffer(io.Discard, p.r, make([]byte, 1<<20))
			if err != nil || n != size {
				t.Errorf("raw TCP: %d of %d bytes: %v", n, size, err)
			}
			p.r.Close()
		}()
	}
	wg.Wait()
	d := time.Since(start)
	return float64(size) * float64(len(links)) / d.Seconds() / 1e6, d
}

// BenchmarkMigrate moves a memhog of each size between two namespace
// nodes with `ckpt group migrate` (peer-to-peer: the destination restores
// while the image arrives), back and forth, and compares with raw TCP
// between the same namespaces in the same run both the end-to-end rate
// (image bytes / wall time of the whole command: starting the tools,
// freezing, streaming, building, killing the source and waiting for its
// memory to be freed) and the rate at which the pages streamed.
func BenchmarkMigrate(b *testing.B) {
	testenv.RequireRoot(b)
	bin := testenv.BuildBinaries(b)
	hog := testenv.BuildVictim(b, "memhog")
	for _, mib := range groupSizes() {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			r := testenv.StartReaper(b)
			c := testenv.NewCluster(b, filepath.Join(bin, "ckpt"), r)
			c.Storage = shmDir(b)
			c.Keep = append(c.Keep, filepath.Dir(hog))
			nodes := []*testenv.Node{c.AddNode("x", 1), c.AddNode("y", 2)}
			log := filepath.Join(c.Dir, "hog.log")
			out, serr, err := c.Ckpt("group", "exec", "--agent", nodes[0].Ctl, "--", hog, log, strconv.Itoa(mib))
			if err != nil {
				b.Fatalf("group exec: %v: %s", err, serr)
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(out))
			waitLine(b, log, "ready", 0)
			size := int64(mib) << 20
			var mig, raw, stream []float64
			var frozen []float64
			for round := 0; round <= rounds(); round++ {
				from, to := nodes[round%2], nodes[(round+1)%2]
				rawMB, _ := rawTCP(b, []link{{from, to}}, size)
				start := time.Now()
				out, serr, err := c.Ckpt("group", "migrate", "--json", "--to", to.Ctl, fmt.Sprintf("%d@%s", pid, from.Ctl))
				d := time.Since(start)
				if err != nil {
					b.Fatalf("migrate: %v: %s", err, serr)
				}
				var rep struct {
					Report struct {
						Frozen  time.Duration `json:"frozen_ns"`
						Members []struct {
							Result struct {
								Bytes      int64   `json:"bytes"`
								MemoryRate float64 `json:"memory_mb_per_s"`
							} `json:"result"`
						} `json:"members"`
					} `json:"report"`
				}
				if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Report.Members) != 1 {
					b.Fatalf("migrate output %q: %v", out, err)
				}
				bytes := rep.Report.Members[0].Result.Bytes
				if round == 0 {
					continue // warm-up
				}
				mig = append(mig, float64(bytes)/d.Seconds()/1e6)
				stream = append(stream, rep.Report.Members[0].Result.MemoryRate)
				raw = append(raw, rawMB)
				frozen = append(frozen, float64(rep.Report.Frozen.Milliseconds()))
				b.Logf("round %d %s→%s: %.0f MiB in %v = %.0f MB/s end to end, pages streamed at %.0f MB/s; raw TCP %.0f MB/s (%.0f%%, %.0f%%); frozen %v",
					round, from.Name, to.Name, float64(bytes)/(1<<20), d.Round(time.Millisecond), mig[len(mig)-1], stream[len(stream)-1],
					rawMB, 100*mig[len(mig)-1]/rawMB, 100*stream[len(stream)-1]/rawMB, rep.Report.Frozen.Round(time.Millisecond))
			}
			// The memory arrived intact.
			lines := len(testenv.ReadLines(log))
			hogPID := testenv.FindPID("memhog", log)
			if hogPID == 0 {
				b.Fatalf("no memhog with %s", log)
			}
			testenv.Signal(hogPID, syscall.SIGUSR1)
			if l := waitLine(b, log, "check", lines); l != "check ok" {
				b.Fatalf("migrated memhog: %s", l)
			}
			b.ReportMetric(median(mig), "migrate-MB/s")
			b.ReportMetric(median(stream), "stream-MB/s")
			b.ReportMetric(100*median(stream)/median(raw), "stream-%-of-raw")
			b.ReportMetric(median(raw), "rawTCP-MB/s")
			b.ReportMetric(100*median(mig)/median(raw), "%-of-raw")
			b.ReportMetric(median(frozen), "frozen-ms")
		})
	}
}

// waitLine waits for a line starting with prefix past line from of log.
func waitLine(t testing.TB, log, prefix string, from int) string {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		ls := testenv.ReadLines(log)
		for _, l := range ls[min(from, len(ls)):] {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q line", log, prefix)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkParityRing encodes N=4 images of each size through the ring
// across 4 namespace nodes (agents linked by TCP over the bridge) with
// `ckpt group parity`, and compares it with raw TCP on the same 4 links
// (i → i+1) busy at once, in the same run: the ring sends exactly one
// image size per link, so the two move the same bytes per link.
func BenchmarkParityRing(b *testing.B) {
	testenv.RequireRoot(b)
	bin := testenv.BuildBinaries(b)
	for _, mib := range groupSizes() {
		b.Run(fmt.Sprintf("4x%dMiB", mib), func(b *testing.B) {
			r := testenv.StartReaper(b)
			c := testenv.NewCluster(b, filepath.Join(bin, "ckpt"), r)
			c.Storage = shmDir(b)
			const n = 4
			size := int64(mib) << 20
			nodes := make([]*testenv.Node, n)
			var members []map[string]any
			for i := range nodes {
				nodes[i] = c.AddNode(fmt.Sprintf("r%d", i), i+1)
				dir := filepath.Join(nodes[i].Root, "bench", "100")
				if err := os.MkdirAll(dir, 0o700); err != nil {
					b.Fatal(err)
				}
				f, err := os.Create(filepath.Join(dir, "image.ckpt"))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.CopyN(f, rand.Reader, size); err != nil {
					b.Fatal(err)
				}
				f.Close()
				members = append(members, map[string]any{"agent": nodes[i].Ctl, "pid": 100})
			}
			manifest := filepath.Join(c.Dir, "m.json")
			mj, _ := json.Marshal(map[string]any{"name": "bench", "members": members})
			os.WriteFile(manifest, mj, 0o600)
			links := make([]link, n)
			for i := range links {
				links[i] = link{nodes[i], nodes[(i+1)%n]}
			}
			var enc, raw []float64
			for round := 0; round <= rounds(); round++ {
				rawMB, _ := rawTCP(b, links, size)
				// Writing into memory this VM has not touched lately runs at
				// ~0.5 GB/s against ~4 GB/s into pages it just freed (dd to
				// tmpfs): free the last round's parity first, so that every
				// round writes its parity into the same warm pages.
				for _, nd := range nodes {
					os.Remove(filepath.Join(nd.Root, "bench", "100", "parity.ckpt"))
				}
				out, serr, err := c.Ckpt("group", "parity", "--json", "--manifest", manifest)
				if err != nil {
					b.Fatalf("group parity: %v: %s", err, serr)
				}
				var rep struct {
					Report struct {
						Parity struct {
							MBps  float64 `json:"mb_per_s"`
							Nodes []struct{ BytesSent, BytesStored int64 }
						} `json:"parity"`
					} `json:"report"`
				}
				if err := json.Unmarshal([]byte(out), &rep); err != nil {
					b.Fatalf("parity output %q: %v", out, err)
				}
				if round == 0 {
					continue
				}
				enc = append(enc, rep.Report.Parity.MBps)
				raw = append(raw, rawMB)
				b.Logf("round %d: encode %.0f MB/s (of images), raw TCP on the 4 links at once %.0f MB/s (%.0f%%)",
					round, rep.Report.Parity.MBps, rawMB, 100*rep.Report.Parity.MBps/rawMB)
			}
			b.ReportMetric(median(enc), "encode-MB/s")
			b.ReportMetric(median(raw), "rawTCP-MB/s")
			b.ReportMetric(100*median(enc)/median(raw), "%-of-raw")
		})
	}
}

// shmDir is a temporary directory on tmpfs: the nodes' "disks" in the
// benchmarks, as in the dump/restore ones, so that this VM's disk is not
// what is measured.
func shmDir(t testing.TB) string {
	d, err := os.MkdirTemp("/dev/shm", "ckpt-bench")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// groupSizes are the sizes of CKPT_BENCH_SIZES up to 1 GiB: the ring
// benchmark holds 4 images and their parity in tmpfs (RAM), and 1 GiB is
// the size the targets are stated for.
func groupSizes() []int {
	var out []int
	for _, s := range sizes() {
		if s <= 1024 {
			out = append(out, s)
		}
	}
	return out
}
