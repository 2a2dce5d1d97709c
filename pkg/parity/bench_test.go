package parity

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"io"
	"testing"
)

const benchBlock = 4 << 20

// BenchmarkXOR: crypto/subtle.XORBytes in place on 4 MiB blocks (bytes of
// dst per second).
func BenchmarkXOR(b *testing.B) {
	dst, src := make([]byte, benchBlock), make([]byte, benchBlock)
	for i := range src {
		src[i] = byte(i)
	}
	b.SetBytes(benchBlock)
	for b.Loop() {
		subtle.XORBytes(dst, dst, src)
	}
}

// BenchmarkMemmove is the ceiling the ring is measured against: one copy of
// a 4 MiB block, as io.Pipe does per hop.
func BenchmarkMemmove(b *testing.B) {
	dst, src := make([]byte, benchBlock), make([]byte, benchBlock)
	b.SetBytes(benchBlock)
	for b.Loop() {
		copy(dst, src)
	}
}

// BenchmarkSHA256 is the cost of hashing each image once during an encode.
func BenchmarkSHA256(b *testing.B) {
	buf := make([]byte, benchBlock)
	b.SetBytes(benchBlock)
	for b.Loop() {
		sha256.Sum256(buf)
	}
}

// BenchmarkRingEncode: 4 nodes × 256 MiB in memory, linked by io.Pipe, 4 MiB
// blocks, parity discarded. MB/s is image bytes of the whole ring per second.
func BenchmarkRingEncode(b *testing.B) {
	const n, size = 4, 256 << 20
	imgs := make([][]byte, n)
	for i := range imgs {
		imgs[i] = make([]byte, size)
		for j := 0; j < size; j += 4096 {
			imgs[i][j] = byte(i + j)
		}
	}
	l, err := NewLayout(benchBlock, []int64{size, size, size, size})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(n * size)
	for b.Loop() {
		_, err := runRing(context.Background(), l, -1, func(ctx context.Context, i int, left io.Reader, right io.Writer) (NodeStats, error) {
			return RunNode(ctx, NodeConfig{Layout: l, Index: i}, left, right, bytes.NewReader(imgs[i]), io.Discard)
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
