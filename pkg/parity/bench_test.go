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

// BenchmarkRingRecover: rebuild node 1 of 4 × 256 MiB in memory over
// io.Pipe (survivors' images and parity in memory, rebuilt image and parity
// discarded). MB/s is rebuilt bytes (image + parity) per second.
func BenchmarkRingRecover(b *testing.B) {
	const n, size, lost = 4, 256 << 20, 1
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
	pars := make([]bytes.Buffer, n)
	stats, err := runRing(context.Background(), l, -1, func(ctx context.Context, i int, left io.Reader, right io.Writer) (NodeStats, error) {
		return RunNode(ctx, NodeConfig{Layout: l, Index: i}, left, right, bytes.NewReader(imgs[i]), &pars[i])
	})
	if err != nil {
		b.Fatal(err)
	}
	shares := make([]*Share, n)
	for i := range n {
		shares[i] = &Share{Header: &Header{Version: formatVersion, N: n, Index: i, BlockSize: benchBlock,
			Sizes: l.Sizes(), Hashes: make([][32]byte, n), DataCRC: stats[i].DataCRC, ParityCRC: stats[i].ParityCRC,
			ParityBytes: l.ParityBytes(i)}, payload: bytes.NewReader(pars[i].Bytes())}
	}
	b.SetBytes(size + l.ParityBytes(lost))
	for b.Loop() {
		_, err := runRing(context.Background(), l, lost, func(ctx context.Context, i int, left io.Reader, right io.Writer) (NodeStats, error) {
			cfg := RecoverConfig{NodeConfig: NodeConfig{Layout: l, Index: i}, Lost: lost}
			if i == lost {
				return RunReplacement(ctx, cfg, left, io.Discard, io.Discard)
			}
			return RunSurvivor(ctx, cfg, left, right, bytes.NewReader(imgs[i]), shares[i])
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
