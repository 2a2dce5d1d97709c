package parity

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkRingTCP encodes 4 images over a loopback TCP ring in one
// process (the agents' data path without namespaces), to tell the ring's
// own efficiency from the network's.
func BenchmarkRingTCP(b *testing.B) {
	const n = 4
	size := int64(256 << 20)
	dirs := make([]string, n)
	sizes := make([]int64, n)
	buf := make([]byte, size)
	for i := range dirs {
		dirs[i] = b.TempDir()
		rand.Read(buf)
		os.WriteFile(filepath.Join(dirs[i], DefaultImageName), buf, 0o600)
		sizes[i] = size
	}
	// Block size and depth barely matter here (1 MiB to 16 MiB, depth 2
	// to 16 were within noise of each other on the 2-core VM): the ring
	// is CPU-bound.
	for _, c := range []struct{ bs, depth int }{{DefaultBlockSize, DefaultDepth}} {
		depth := c.depth
		b.Run(fmt.Sprintf("bs%dK-depth%d", c.bs>>10, depth), func(b *testing.B) {
			l, _ := NewLayout(c.bs, sizes)
			for range b.N {
				t := &testing.T{}
				lefts, rights, _ := tcpRing(t, n, -1)
				nodes := make([]ringNode, n)
				for i := range nodes {
					en, err := OpenEncode(dirs[i], l, i, Options{Depth: depth, NoSync: true})
					if err != nil {
						b.Fatal(err)
					}
					defer en.Close()
					nodes[i] = en
				}
				start := time.Now()
				_, errs := runTCP(nodes, lefts, rights)
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(size*n)/time.Since(start).Seconds()/1e6, "MB/s")
			}
		})
	}
}
