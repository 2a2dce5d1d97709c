package parity

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// encodeCases: N=3,4,5 (and a few more), sizes including 0, not multiples
// of the block size, block size smaller than the data, and the default
// 4 MiB block size.
var encodeCases = []struct {
	name  string
	bs    int
	sizes []int64
}{
	{"n3-zero-and-partial", 4096, []int64{0, 10000, 3 * 4096}},
	{"n3-all-empty", 4096, []int64{0, 0, 0}},
	{"n3-only-one-image", 512, []int64{0, 0, 100000}},
	{"n3-block-larger-than-data", 1 << 20, []int64{1, 100, 7777}},
	{"n4-odd-block", 1000, []int64{12345, 1, 999, 4000}},
	{"n4-equal", 4096, []int64{6 * 4096, 6 * 4096, 6 * 4096, 6 * 4096}},
	{"n4-near-equal", 4096, []int64{100000, 97000, 103333, 99999}},
	{"n5-mixed", 512, []int64{5000, 0, 70000, 513, 4096}},
	{"n5-default-block", 0, []int64{5<<20 + 3, 1 << 20, 0, 9 << 20, 4 << 20}},
	{"n6-tiny-blocks", 64, []int64{640, 6401, 63, 65, 0, 2000}},
	{"n7-alternating", 256, []int64{30000, 300, 30000, 300, 30000, 300, 29999}},
}

func randomBytes(r *rand.Rand, n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// makeNodes creates one directory per node under t.TempDir with a random
// image of the given size, and returns the directories and images.
func makeNodes(t testing.TB, sizes []int64, seed uint64) ([]string, [][]byte) {
	t.Helper()
	root := t.TempDir()
	r := rand.New(rand.NewPCG(seed, uint64(len(sizes))))
	dirs := make([]string, len(sizes))
	imgs := make([][]byte, len(sizes))
	for i, s := range sizes {
		dirs[i] = filepath.Join(root, fmt.Sprintf("node%d", i))
		imgs[i] = randomBytes(r, s)
		if err := os.MkdirAll(dirs[i], 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dirs[i], DefaultImageName), imgs[i], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dirs, imgs
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// referenceParity computes every node's parity payload directly from the
// images and the layout's stripes, independently of the ring code.
func referenceParity(l *Layout, imgs [][]byte) [][]byte {
	n, bs := l.N(), l.BlockSize()
	out := make([][]byte, n)
	next := make([]int, n)
	for k := range l.Stripes() {
		p, f, w := l.Stripe(k)
		blk := make([]byte, bs)
		plen := 0
		for d := range w {
			c := (f + d) % n
			j := next[c]
			next[c]++
			src := imgs[c][j*bs : min((j+1)*bs, len(imgs[c]))]
			subtle.XORBytes(blk[:len(src)], blk[:len(src)], src)
			plen = max(plen, len(src))
		}
		out[p] = append(out[p], blk[:plen]...)
	}
	return out
}

// checkNoTemps fails if a directory holds leftover temporary files.
func checkNoTemps(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("%s: leftover temporary file %s", dir, e.Name())
		}
	}
}

// TestEncodeRecover encodes each case, checks the byte invariant and the
// parity against a reference computation, then deletes every node's
// directory in turn and checks that recovery rebuilds its image and parity
// share byte-identical.
func TestEncodeRecover(t *testing.T) {
	ctx := context.Background()
	for ci, c := range encodeCases {
		t.Run(c.name, func(t *testing.T) {
			dirs, imgs := makeNodes(t, c.sizes, uint64(ci))
			opts := Options{BlockSize: c.bs, NoSync: true}
			rep, err := EncodeDirs(ctx, dirs, opts)
			if err != nil {
				t.Fatal(err)
			}
			bs := c.bs
			if bs == 0 {
				bs = DefaultBlockSize
			}
			l, err := NewLayout(bs, c.sizes)
			if err != nil {
				t.Fatal(err)
			}
			if rep.N != len(dirs) || rep.BlockSize != bs || rep.Stripes != l.Stripes() || len(rep.Nodes) != len(dirs) {
				t.Fatalf("report %+v", rep)
			}
			ref := referenceParity(l, imgs)
			shares := make([][]byte, len(dirs))
			for i, nr := range rep.Nodes {
				// Invariant: node i sends exactly its image size rounded up
				// to whole blocks, and stores exactly the parity bytes of its
				// stripes (no padding on disk).
				padded := (c.sizes[i] + int64(bs) - 1) / int64(bs) * int64(bs)
				if nr.BytesSent != padded {
					t.Errorf("node %d sent %d bytes, want exactly %d (image %d rounded up to %d-byte blocks)", i, nr.BytesSent, padded, c.sizes[i], bs)
				}
				if nr.BytesStored != int64(len(ref[i])) {
					t.Errorf("node %d stored %d bytes, want %d", i, nr.BytesStored, len(ref[i]))
				}
				path := filepath.Join(dirs[i], DefaultParityName)
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != 0o600 {
					t.Errorf("%s mode %v, want 0600", path, fi.Mode().Perm())
				}
				shares[i] = readFile(t, path)
				h, err := DecodeHeader(shares[i])
				if err != nil {
					t.Fatal(err)
				}
				if h.Index != i || h.N != len(dirs) || h.Hashes[i] != ImageDigestOf(imgs[i], bs) {
					t.Fatalf("node %d header %+v", i, h)
				}
				if got := shares[i][h.PayloadOffset():]; !bytes.Equal(got, ref[i]) {
					t.Fatalf("node %d parity payload (%d bytes) differs from reference (%d bytes)", i, len(got), len(ref[i]))
				}
				checkNoTemps(t, dirs[i])
			}

			for x := range dirs {
				if err := os.RemoveAll(dirs[x]); err != nil {
					t.Fatal(err)
				}
				var survivors []string
				for i := len(dirs) - 1; i >= 0; i-- { // any order works
					if i != x {
						survivors = append(survivors, dirs[i])
					}
				}
				rr, err := RecoverDir(ctx, dirs[x], survivors, Options{NoSync: true})
				if err != nil {
					t.Fatalf("recover node %d: %v", x, err)
				}
				if rr.Lost != x || rr.Nodes[x].BytesStored != c.sizes[x]+int64(len(ref[x])) {
					t.Errorf("recover node %d: report %+v", x, rr)
				}
				if got := readFile(t, filepath.Join(dirs[x], DefaultImageName)); !bytes.Equal(got, imgs[x]) {
					t.Fatalf("recover node %d: image differs (%d vs %d bytes)", x, len(got), len(imgs[x]))
				}
				if got := readFile(t, filepath.Join(dirs[x], DefaultParityName)); !bytes.Equal(got, shares[x]) {
					t.Fatalf("recover node %d: parity share differs (%d vs %d bytes)", x, len(got), len(shares[x]))
				}
				for _, name := range []string{DefaultImageName, DefaultParityName} {
					if fi, err := os.Stat(filepath.Join(dirs[x], name)); err != nil || fi.Mode().Perm() != 0o600 {
						t.Errorf("recovered %s: %v %v", name, fi.Mode(), err)
					}
				}
				checkNoTemps(t, dirs[x])
			}
		})
	}
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// TestRingWireBytes runs RunNode over io.Pipe links wrapped in byte
// counters — the bytes really written to each link and to each parity
// output — and proves the invariant:
//
//	bytes node i writes to its right link == ceil(size_i/B)·B   (exactly)
//	bytes node i writes as parity       == Layout.ParityBytes(i)
//	with equal sizes s: |parity_i − s/(N−1)| ≤ B, i.e. ≈ 1/(N−1) of its data.
//
// With NodeConfig.Handshake each link also carries one HelloSize frame.
func TestRingWireBytes(t *testing.T) {
	for _, hs := range []bool{false, true} {
		for _, c := range []struct {
			bs    int
			sizes []int64
		}{
			{4096, []int64{40960, 40960, 40960}},
			{4096, []int64{12 * 4096, 12 * 4096, 12 * 4096, 12 * 4096}},
			{4096, []int64{100000, 100000, 100000, 100000, 100000}},
			{1000, []int64{12345, 0, 1, 999}},
			{512, []int64{5000, 0, 70000, 513, 4096}},
		} {
			t.Run(fmt.Sprintf("hs=%v/%v", hs, c.sizes), func(t *testing.T) {
				n := len(c.sizes)
				l, err := NewLayout(c.bs, c.sizes)
				if err != nil {
					t.Fatal(err)
				}
				_, imgs := makeNodes(t, c.sizes, 1)
				wires := make([]*countingWriter, n)
				rs := make([]*io.PipeReader, n)
				for i := range n {
					r, w := io.Pipe()
					rs[i], wires[i] = r, &countingWriter{w: w}
				}
				pars := make([]bytes.Buffer, n)
				errs := make(chan error, n)
				for i := range n {
					go func() {
						cfg := NodeConfig{Layout: l, Index: i, Handshake: hs}
						st, err := RunNode(context.Background(), cfg, rs[(i+n-1)%n], wires[i], bytes.NewReader(imgs[i]), &pars[i])
						if err == nil && (st.BytesSent != l.PaddedSize(i) || st.BytesStored != l.ParityBytes(i)) {
							err = fmt.Errorf("node %d stats: sent %d stored %d", i, st.BytesSent, st.BytesStored)
						}
						errs <- err
					}()
				}
				for range n {
					if err := <-errs; err != nil {
						t.Fatal(err)
					}
				}
				ref := referenceParity(l, imgs)
				var hello int64
				if hs {
					hello = HelloSize
				}
				for i := range n {
					padded := (c.sizes[i] + int64(c.bs) - 1) / int64(c.bs) * int64(c.bs)
					if wires[i].n != padded+hello {
						t.Errorf("node %d wrote %d bytes to its link, want exactly %d + %d", i, wires[i].n, padded, hello)
					}
					if int64(pars[i].Len()) != l.ParityBytes(i) || !bytes.Equal(pars[i].Bytes(), ref[i]) {
						t.Errorf("node %d stored %d parity bytes, want %d (reference)", i, pars[i].Len(), len(ref[i]))
					}
					if c.sizes[0] == c.sizes[i] && slicesAllEqual(c.sizes) {
						ideal := float64(c.sizes[i]) / float64(n-1)
						if d := float64(pars[i].Len()) - ideal; d > float64(c.bs) || d < -float64(c.bs) {
							t.Errorf("node %d stores %d parity bytes, want %.0f ± %d", i, pars[i].Len(), ideal, c.bs)
						}
					}
				}
			})
		}
	}
}

func slicesAllEqual(s []int64) bool {
	for _, v := range s {
		if v != s[0] {
			return false
		}
	}
	return true
}

// corruptByte flips one byte of a file.
func corruptByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

func without(dirs []string, idx ...int) []string {
	var out []string
	for i, d := range dirs {
		skip := false
		for _, x := range idx {
			skip = skip || i == x
		}
		if !skip {
			out = append(out, d)
		}
	}
	return out
}

// TestRecoverCorruptBlock corrupts one parity block (then one image block)
// of a survivor that recovery needs, and checks that recovery names it and
// leaves nothing behind in the lost directory.
func TestRecoverCorruptBlock(t *testing.T) {
	ctx := context.Background()
	sizes := []int64{20000, 17000, 25000, 9000}
	const bs = 1024
	l, err := NewLayout(bs, sizes)
	if err != nil {
		t.Fatal(err)
	}
	const x = 1 // the lost node
	// Find a stripe where x holds data and another node holds parity, the
	// parity block's index on that node and its offset in the payload, and
	// the survivor data block of the same stripe.
	next := make([]int, l.N())
	pnext := make([]int, l.N())
	poff := make([]int64, l.N())
	var (
		found                  bool
		stripe, pnode, pblock  int
		pboff                  int64
		dnode, dblock, dstripe int
	)
	for k := range l.Stripes() {
		p, f, w := l.Stripe(k)
		hasX := false
		for d := range w {
			hasX = hasX || (f+d)%l.N() == x
		}
		if hasX && !found && k > 2 {
			found, stripe, pnode, pblock, pboff = true, k, p, pnext[p], poff[p]
			c := f
			if c == x {
				c = (f + 1) % l.N()
			}
			dnode, dblock, dstripe = c, next[c], k
		}
		for d := range w {
			next[(f+d)%l.N()]++
		}
		pnext[p]++
		poff[p] += int64(l.stripes[k].plen)
	}
	if !found || dnode == x || pnode == x {
		t.Fatal("no suitable stripe")
	}

	t.Run("parity", func(t *testing.T) {
		dirs, _ := makeNodes(t, sizes, 3)
		if _, err := EncodeDirs(ctx, dirs, Options{BlockSize: bs, NoSync: true}); err != nil {
			t.Fatal(err)
		}
		share := filepath.Join(dirs[pnode], DefaultParityName)
		h, err := DecodeHeader(readFile(t, share))
		if err != nil {
			t.Fatal(err)
		}
		corruptByte(t, share, h.PayloadOffset()+pboff+7)
		os.RemoveAll(dirs[x])
		_, err = RecoverDir(ctx, dirs[x], without(dirs, x), Options{NoSync: true})
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("recover with corrupt parity block: %v, want *CorruptError", err)
		}
		if ce.Node != pnode || ce.Kind != KindParity || ce.Block != pblock || ce.Stripe != stripe || ce.Offset != h.PayloadOffset()+pboff {
			t.Fatalf("corrupt block reported as %+v, want node %d parity block %d stripe %d offset %d", ce, pnode, pblock, stripe, h.PayloadOffset()+pboff)
		}
		t.Log(err)
		if ents, _ := os.ReadDir(dirs[x]); len(ents) != 0 {
			t.Fatalf("lost directory not empty after failed recovery: %v", ents)
		}
	})
	t.Run("image", func(t *testing.T) {
		dirs, _ := makeNodes(t, sizes, 4)
		if _, err := EncodeDirs(ctx, dirs, Options{BlockSize: bs, NoSync: true}); err != nil {
			t.Fatal(err)
		}
		corruptByte(t, filepath.Join(dirs[dnode], DefaultImageName), int64(dblock)*bs+3)
		os.RemoveAll(dirs[x])
		_, err := RecoverDir(ctx, dirs[x], without(dirs, x), Options{NoSync: true})
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Node != dnode || ce.Kind != KindData || ce.Block != dblock || ce.Stripe != dstripe {
			t.Fatalf("recover with corrupt image block: %v (%+v), want node %d image block %d stripe %d", err, ce, dnode, dblock, dstripe)
		}
		t.Log(err)
	})
}

// TestRecoverRefuses covers the refusals of RecoverDir.
func TestRecoverRefuses(t *testing.T) {
	ctx := context.Background()
	sizes := []int64{5000, 7000, 3000, 6000}
	opts := Options{BlockSize: 1024, NoSync: true}
	setup := func(t *testing.T) []string {
		dirs, _ := makeNodes(t, sizes, 9)
		if _, err := EncodeDirs(ctx, dirs, opts); err != nil {
			t.Fatal(err)
		}
		return dirs
	}
	check := func(t *testing.T, err, want error, what string) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s: got %v, want %v", what, err, want)
		}
		t.Logf("%s: %v", what, err)
	}

	t.Run("no-parity", func(t *testing.T) {
		dirs := setup(t)
		os.Remove(filepath.Join(dirs[2], DefaultParityName))
		os.RemoveAll(dirs[0])
		_, err := RecoverDir(ctx, dirs[0], without(dirs, 0), opts)
		check(t, err, ErrNoParity, "survivor without share")
	})
	t.Run("other-encode", func(t *testing.T) {
		dirs := setup(t)
		old := readFile(t, filepath.Join(dirs[2], DefaultParityName))
		if _, err := EncodeDirs(ctx, dirs, opts); err != nil { // same images, new encode
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dirs[2], DefaultParityName), old, 0o600)
		os.RemoveAll(dirs[0])
		_, err := RecoverDir(ctx, dirs[0], without(dirs, 0), opts)
		check(t, err, ErrMismatch, "shares of two encodes")
	})
	t.Run("image-resized", func(t *testing.T) {
		dirs := setup(t)
		f, _ := os.OpenFile(filepath.Join(dirs[3], DefaultImageName), os.O_APPEND|os.O_WRONLY, 0)
		f.Write([]byte("newer checkpoint"))
		f.Close()
		os.RemoveAll(dirs[0])
		_, err := RecoverDir(ctx, dirs[0], without(dirs, 0), opts)
		check(t, err, ErrMismatch, "image of another size")
	})
	t.Run("image-rewritten", func(t *testing.T) {
		dirs := setup(t)
		os.WriteFile(filepath.Join(dirs[3], DefaultImageName), bytes.Repeat([]byte{1}, int(sizes[3])), 0o600)
		os.RemoveAll(dirs[0])
		_, err := RecoverDir(ctx, dirs[0], without(dirs, 0), opts)
		check(t, err, ErrCorrupt, "image rewritten with same size")
	})
	t.Run("two-lost", func(t *testing.T) {
		dirs := setup(t)
		os.RemoveAll(dirs[0])
		os.RemoveAll(dirs[2])
		_, err := RecoverDir(ctx, dirs[0], without(dirs, 0, 2), opts)
		check(t, err, ErrTooManyLost, "two nodes lost")
	})
	t.Run("nothing-lost", func(t *testing.T) {
		dirs := setup(t)
		_, err := RecoverDir(ctx, filepath.Join(t.TempDir(), "spare"), dirs, opts)
		check(t, err, ErrNothingLost, "no node lost")
	})
	t.Run("duplicate", func(t *testing.T) {
		dirs := setup(t)
		os.RemoveAll(dirs[0])
		_, err := RecoverDir(ctx, dirs[0], []string{dirs[1], dirs[2], dirs[3], dirs[1]}, opts)
		check(t, err, ErrMismatch, "same survivor twice")
	})
	t.Run("corrupt-header", func(t *testing.T) {
		dirs := setup(t)
		corruptByte(t, filepath.Join(dirs[1], DefaultParityName), 100)
		os.RemoveAll(dirs[0])
		_, err := RecoverDir(ctx, dirs[0], without(dirs, 0), opts)
		check(t, err, ErrCorrupt, "corrupt share header")
	})
	t.Run("truncated-share", func(t *testing.T) {
		dirs := setup(t)
		p := filepath.Join(dirs[1], DefaultParityName)
		b := readFile(t, p)
		os.WriteFile(p, b[:len(b)-1], 0o600)
		os.RemoveAll(dirs[0])
		_, err := RecoverDir(ctx, dirs[0], without(dirs, 0), opts)
		check(t, err, ErrCorrupt, "truncated share")
	})
	t.Run("exists", func(t *testing.T) {
		dirs := setup(t)
		os.Remove(filepath.Join(dirs[0], DefaultParityName))
		want := readFile(t, filepath.Join(dirs[0], DefaultImageName))
		_, err := RecoverDir(ctx, dirs[0], without(dirs, 0), opts)
		check(t, err, ErrExists, "lost directory still has its image")
		o := opts
		o.Overwrite = true
		if _, err := RecoverDir(ctx, dirs[0], without(dirs, 0), o); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(readFile(t, filepath.Join(dirs[0], DefaultImageName)), want) {
			t.Fatal("overwritten image differs")
		}
	})
	t.Run("lost-is-survivor", func(t *testing.T) {
		dirs := setup(t)
		os.RemoveAll(dirs[0])
		_, err := RecoverDir(ctx, dirs[1], without(dirs, 0), opts)
		check(t, err, ErrInvalid, "lost directory is a survivor")
	})
}

func TestEncodeRefuses(t *testing.T) {
	ctx := context.Background()
	dirs, _ := makeNodes(t, []int64{100, 200, 300}, 1)
	if _, err := EncodeDirs(ctx, dirs[:2], Options{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("two nodes: %v", err)
	}
	if _, err := EncodeDirs(ctx, []string{dirs[0], dirs[1], dirs[0]}, Options{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("same directory twice: %v", err)
	}
	if _, err := EncodeDirs(ctx, []string{dirs[0], dirs[1], t.TempDir()}, Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing image: %v", err)
	}
	if _, err := EncodeDirs(ctx, dirs, Options{BlockSize: 10}); !errors.Is(err, ErrInvalid) {
		t.Errorf("tiny block: %v", err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, DefaultParityName)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: share written by a refused encode", d)
		}
		checkNoTemps(t, d)
	}
}

// failingReaderAt fails after serving limit bytes.
type failingReaderAt struct {
	r     io.ReaderAt
	limit int64
}

var errDisk = errors.New("simulated disk error")

func (f *failingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.limit {
		return 0, errDisk
	}
	return f.r.ReadAt(p, off)
}

// TestRingFailure: one node's disk fails mid-encode; every node stops, and
// the ring reports that node's error, not the ErrAborted echoes.
func TestRingFailure(t *testing.T) {
	sizes := []int64{1 << 20, 1 << 20, 1 << 20, 1 << 20}
	l, err := NewLayout(4096, sizes)
	if err != nil {
		t.Fatal(err)
	}
	_, imgs := makeNodes(t, sizes, 5)
	done := make(chan error, 1)
	go func() {
		_, err := runRing(context.Background(), l, -1, func(ctx context.Context, i int, left io.Reader, right io.Writer) (NodeStats, error) {
			var data io.ReaderAt = bytes.NewReader(imgs[i])
			if i == 2 {
				data = &failingReaderAt{r: data, limit: 100 * 4096}
			}
			return RunNode(ctx, NodeConfig{Layout: l, Index: i}, left, right, data, io.Discard)
		})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errDisk) || errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "node 2") {
			t.Fatalf("ring error %v, want node 2's disk error", err)
		}
		t.Log(err)
	case <-time.After(20 * time.Second):
		t.Fatal("ring hangs after a node failure")
	}
}

// TestRingCancel: cancelling the context stops a running ring promptly.
func TestRingCancel(t *testing.T) {
	sizes := []int64{64 << 20, 64 << 20, 64 << 20}
	l, err := NewLayout(1<<20, sizes)
	if err != nil {
		t.Fatal(err)
	}
	img := make([]byte, 64<<20)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := runRing(ctx, l, -1, func(ctx context.Context, i int, left io.Reader, right io.Writer) (NodeStats, error) {
			slow := &slowReaderAt{r: bytes.NewReader(img)}
			return RunNode(ctx, NodeConfig{Layout: l, Index: i}, left, right, slow, io.Discard)
		})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ring ignores cancellation")
	}
}

type slowReaderAt struct{ r io.ReaderAt }

func (s *slowReaderAt) ReadAt(p []byte, off int64) (int, error) {
	time.Sleep(5 * time.Millisecond)
	return s.r.ReadAt(p, off)
}

// TestHandshakeMismatch: nodes built with different layouts refuse to talk.
func TestHandshakeMismatch(t *testing.T) {
	a, _ := NewLayout(4096, []int64{10000, 20000, 30000})
	b, _ := NewLayout(4096, []int64{10000, 20001, 30000})
	imgs := [][]byte{make([]byte, 10000), make([]byte, 20000), make([]byte, 30000)}
	_, err := runRing(context.Background(), a, -1, func(ctx context.Context, i int, left io.Reader, right io.Writer) (NodeStats, error) {
		l := a
		if i == 1 {
			l = b
			imgs[1] = make([]byte, 20001)
		}
		return RunNode(ctx, NodeConfig{Layout: l, Index: i, Handshake: true}, left, right, bytes.NewReader(imgs[i]), io.Discard)
	})
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("got %v, want ErrMismatch", err)
	}
	t.Log(err)
}
