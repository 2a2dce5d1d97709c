package parity

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// remoteTimeout bounds one ring run over TCP: a ring that has not finished
// by then hangs, and the cancelled context makes every node fail.
const remoteTimeout = 10 * time.Second

// countConn is a TCP connection that counts the bytes written to it, so
// that a test sees what really went over the wire.
type countConn struct {
	net.Conn
	n atomic.Int64
}

// Write implements io.Writer.
func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// tcpRing links n nodes over loopback TCP as agents do: every node listens
// for its left-hand neighbour, and node i dials the listener of node i+1.
// In a recovery of node lost (lost ≥ 0), the link lost → lost+1 is not
// made: the replacement has no right link, node lost+1 no left link (both
// are nil interfaces then). wires[i] counts the bytes node i sent. All
// connections are closed when the test ends.
func tcpRing(t *testing.T, n, lost int) (lefts []io.Reader, rights []io.Writer, wires []*countConn) {
	t.Helper()
	lefts, rights, wires = make([]io.Reader, n), make([]io.Writer, n), make([]*countConn, n)
	for i := range n {
		if i == lost {
			continue
		}
		next := (i + 1) % n
		ln, err := net.Listen("tcp", "127.0.0.1:0") // node next's listener
		if err != nil {
			t.Skip("no loopback TCP:", err)
		}
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				c = nil
			}
			accepted <- c
		}()
		out, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		in := <-accepted
		ln.Close()
		if in == nil {
			t.Fatal("accept failed")
		}
		t.Cleanup(func() { out.Close(); in.Close() })
		wires[i] = &countConn{Conn: out}
		rights[i], lefts[next] = wires[i], in
	}
	return lefts, rights, wires
}

// ringNode is the half of a ring that EncodeNode and RecoverNode share.
type ringNode interface {
	Run(ctx context.Context, left io.Reader, right io.Writer) (NodeStats, error)
}

// runTCP runs nodes (nil for a position without a node) concurrently over
// the links, as one agent per node would, and returns every node's stats
// and error. A node that succeeds closes its links, as the agent does, so
// that a neighbour out of step fails instead of waiting.
func runTCP(nodes []ringNode, lefts []io.Reader, rights []io.Writer) ([]NodeStats, []error) {
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	stats := make([]NodeStats, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, node := range nodes {
		if node == nil {
			continue
		}
		wg.Go(func() {
			stats[i], errs[i] = node.Run(ctx, lefts[i], rights[i])
			if errs[i] == nil {
				for _, c := range []any{lefts[i], rights[i]} {
					if c, ok := c.(io.Closer); ok {
						c.Close()
					}
				}
			}
		})
	}
	wg.Wait()
	return stats, errs
}

// remoteSizes returns n unequal pseudo-random image sizes of up to about
// five blocks, the first one smaller than a block and one other empty or
// smaller than a block too.
func remoteSizes(seed uint64, n, bs int) []int64 {
	r := mrand.New(mrand.NewPCG(seed, 99))
	sizes := make([]int64, n)
	for i := range sizes {
		sizes[i] = 1 + r.Int64N(int64(5*bs))
	}
	sizes[0] = 1 + r.Int64N(int64(bs-1))
	sizes[1+r.IntN(n-1)] = r.Int64N(int64(bs))
	return sizes
}

// encodeTCP encodes the images of dirs with one EncodeNode per directory
// over a loopback TCP ring, finishes every node with a fresh random encode
// id and the hashes from the stats, and returns the stats, the bytes each
// node wrote to its right link and the id.
func encodeTCP(t *testing.T, dirs []string, l *Layout, opts Options) ([]NodeStats, []int64, [16]byte) {
	t.Helper()
	n := l.N()
	enc := make([]*EncodeNode, n)
	nodes := make([]ringNode, n)
	for i, dir := range dirs {
		e, err := OpenEncode(dir, l, i, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		enc[i], nodes[i] = e, e
	}
	lefts, rights, wires := tcpRing(t, n, -1)
	stats, errs := runTCP(nodes, lefts, rights)
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("encode over TCP: %v", err)
	}
	var id [16]byte
	rand.Read(id[:])
	hashes := make([][32]byte, n)
	for i, st := range stats {
		hashes[i] = st.ImageDigest
	}
	// A finish with hashes that do not match this node's run is refused
	// and leaves nothing behind.
	bad := append([][32]byte(nil), hashes...)
	bad[0][0] ^= 1
	if err := enc[0].Finish(id, bad); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Finish with another image's hash: %v, want ErrMismatch", err)
	}
	if err := enc[0].Finish(id, hashes[:n-1]); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Finish with %d hashes for %d nodes: %v, want ErrMismatch", n-1, n, err)
	}
	if _, err := os.Stat(filepath.Join(dirs[0], DefaultParityName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused Finish wrote a share: %v", err)
	}
	for i, e := range enc {
		if err := e.Finish(id, hashes); err != nil {
			t.Fatalf("finish node %d: %v", i, err)
		}
	}
	sent := make([]int64, n)
	for i, w := range wires {
		sent[i] = w.n.Load()
	}
	return stats, sent, id
}

// recoverTCP rebuilds node lost into dir with OpenSurvivor on every other
// directory and OpenReplacement (given a survivor's header) on dir, over a
// loopback TCP ring without the link lost → lost+1. It returns each node's
// error from Run, then Finish; nodes are closed before it returns.
func recoverTCP(t *testing.T, dirs []string, lost int, dir string, opts Options) (NodeStats, []error) {
	t.Helper()
	n := len(dirs)
	rec := make([]*RecoverNode, n)
	nodes := make([]ringNode, n)
	var ref *Header
	for i, d := range dirs {
		if i == lost {
			continue
		}
		s, err := OpenSurvivor(d, lost, opts)
		if err != nil {
			t.Fatalf("survivor %d: %v", i, err)
		}
		defer s.Close()
		if s.Header().Index != i {
			t.Fatalf("survivor %s says it is node %d", d, s.Header().Index)
		}
		rec[i], nodes[i], ref = s, s, s.Header()
	}
	r, err := OpenReplacement(dir, ref, lost, opts)
	if err != nil {
		t.Fatalf("replacement: %v", err)
	}
	defer r.Close()
	rec[lost], nodes[lost] = r, r
	lefts, rights, _ := tcpRing(t, n, lost)
	stats, errs := runTCP(nodes, lefts, rights)
	if errors.Join(errs...) == nil {
		for i, node := range rec {
			errs[i] = node.Finish()
		}
	}
	return stats[lost], errs
}

// TestRemoteEncodeRecover runs an encode across N ∈ {3, 4, 5} nodes of
// unequal sizes with EncodeNode over loopback TCP, checks the exact bytes
// each node sent (its image rounded up to whole blocks, plus the
// handshake) and the shares against a reference parity computation, then
// loses every node in turn and rebuilds it twice from the TCP-made
// shares: locally with RecoverDir, and with RecoverNode over TCP. Both
// rebuilds must be byte-identical to the lost image and share.
func TestRemoteEncodeRecover(t *testing.T) {
	const bs = 64 << 10
	for _, n := range []int{3, 4, 5} {
		sizes := remoteSizes(uint64(n), n, bs)
		t.Run(fmt.Sprintf("n%d-%v", n, sizes), func(t *testing.T) {
			opts := Options{NoSync: true}
			dirs, imgs := makeNodes(t, sizes, uint64(n))
			for i, d := range dirs {
				if got, err := ImageSize(d, opts); err != nil || got != sizes[i] {
					t.Fatalf("ImageSize node %d: %d, %v; want %d", i, got, err, sizes[i])
				}
			}
			l, err := NewLayout(bs, sizes)
			if err != nil {
				t.Fatal(err)
			}
			stats, sent, id := encodeTCP(t, dirs, l, opts)

			ref := referenceParity(l, imgs)
			shares := make([][]byte, n)
			for i := range n {
				if stats[i].BytesSent != l.PaddedSize(i) || sent[i] != l.PaddedSize(i)+HelloSize {
					t.Errorf("node %d sent %d block bytes, %d on the wire; want exactly %d + %d handshake",
						i, stats[i].BytesSent, sent[i], l.PaddedSize(i), HelloSize)
				}
				if stats[i].BytesStored != l.ParityBytes(i) {
					t.Errorf("node %d stored %d parity bytes, want %d", i, stats[i].BytesStored, l.ParityBytes(i))
				}
				path := filepath.Join(dirs[i], DefaultParityName)
				if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("%s: %v, mode %v; want 0600", path, err, fi.Mode())
				}
				shares[i] = readFile(t, path)
				h, err := DecodeHeader(shares[i])
				if err != nil {
					t.Fatalf("node %d share: %v", i, err)
				}
				if h.Index != i || h.N != n || h.EncodeID != id || h.Hashes[i] != ImageDigestOf(imgs[i], bs) {
					t.Fatalf("node %d share header: index %d of %d, id %x (want %x)", i, h.Index, h.N, h.EncodeID, id)
				}
				if got := shares[i][h.PayloadOffset():]; !bytes.Equal(got, ref[i]) {
					t.Fatalf("node %d parity payload (%d bytes) differs from the reference (%d bytes)", i, len(got), len(ref[i]))
				}
				if rh, err := ReadShareHeader(dirs[i], opts); err != nil || rh.EncodeID != id || rh.Index != i {
					t.Fatalf("ReadShareHeader node %d: %+v, %v", i, rh, err)
				}
				checkNoTemps(t, dirs[i])
			}

			for x := range n {
				for _, how := range []string{"local", "tcp"} {
					dir := filepath.Join(t.TempDir(), "spare")
					switch how {
					case "local":
						if _, err := RecoverDir(context.Background(), dir, without(dirs, x), opts); err != nil {
							t.Fatalf("RecoverDir node %d from TCP-made shares: %v", x, err)
						}
					case "tcp":
						st, errs := recoverTCP(t, dirs, x, dir, opts)
						if err := errors.Join(errs...); err != nil {
							t.Fatalf("recover node %d over TCP: %v", x, err)
						}
						if st.BytesStored != sizes[x]+l.ParityBytes(x) || st.ImageDigest != ImageDigestOf(imgs[x], bs) {
							t.Errorf("recover node %d over TCP: stored %d bytes, want %d", x, st.BytesStored, sizes[x]+l.ParityBytes(x))
						}
					}
					if got := readFile(t, filepath.Join(dir, DefaultImageName)); !bytes.Equal(got, imgs[x]) {
						t.Fatalf("%s recovery of node %d: image differs (%d vs %d bytes)", how, x, len(got), len(imgs[x]))
					}
					if got := readFile(t, filepath.Join(dir, DefaultParityName)); !bytes.Equal(got, shares[x]) {
						t.Fatalf("%s recovery of node %d: share differs (%d vs %d bytes)", how, x, len(got), len(shares[x]))
					}
					for _, name := range []string{DefaultImageName, DefaultParityName} {
						if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != 0o600 {
							t.Errorf("%s recovery of node %d: %s: %v, mode %v; want 0600", how, x, name, err, fi.Mode())
						}
					}
					checkNoTemps(t, dir)
				}
			}
		})
	}
}

// blockFor finds a block of survivor s that the recovery of node lost
// reads: an image block (wantParity false) or a parity block. It returns
// the block's index among s's blocks of that kind, its stripe and its
// offset in the image or in the share payload; ok is false if there is
// none.
func blockFor(l *Layout, lost, s int, wantParity bool) (block, stripe int, off int64, ok bool) {
	n := l.N()
	var dj, pj int
	var poff int64
	for k := range l.Stripes() {
		p, f, w := l.Stripe(k)
		inArc := func(i int) bool { return (i-f+n)%n < w }
		involved := p == lost || inArc(lost)
		switch {
		case s == p:
			if involved && wantParity {
				return pj, k, poff, true
			}
			pj++
			poff += int64(l.stripes[k].plen)
		case inArc(s):
			if involved && !wantParity {
				return dj, k, int64(dj) * int64(l.BlockSize()), true
			}
			dj++
		}
	}
	return 0, 0, 0, false
}

// TestRemoteRecoverCorrupt flips one byte of a block that a survivor
// contributes to a recovery over TCP: the survivor must name it with a
// *CorruptError, the ring must fail everywhere (nothing hangs), and the
// spare directory must be left without an image or share.
func TestRemoteRecoverCorrupt(t *testing.T) {
	const bs = 4096
	sizes := []int64{9 * bs, 7*bs + 100, 8 * bs, 3*bs + 1}
	tests := []struct {
		lost, survivor int
		parity         bool // corrupt a parity block, not an image block
	}{
		{lost: 0, survivor: 1},
		{lost: 2, survivor: 0},
		{lost: 3, survivor: 2},
		{lost: 1, survivor: 3, parity: true},
		{lost: 0, survivor: 2, parity: true},
	}
	l, err := NewLayout(bs, sizes)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		kind := map[bool]BlockKind{false: KindData, true: KindParity}[tt.parity]
		t.Run(fmt.Sprintf("lost%d-%s-of-%d", tt.lost, kind, tt.survivor), func(t *testing.T) {
			block, stripe, off, ok := blockFor(l, tt.lost, tt.survivor, tt.parity)
			if !ok {
				t.Fatalf("node %d has no %s block in the stripes of node %d", tt.survivor, kind, tt.lost)
			}
			dirs, _ := makeNodes(t, sizes, 5)
			if _, err := EncodeDirs(context.Background(), dirs, Options{BlockSize: bs, NoSync: true}); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dirs[tt.survivor], DefaultImageName)
			if tt.parity {
				path = filepath.Join(dirs[tt.survivor], DefaultParityName)
				h, err := ReadShareHeader(dirs[tt.survivor], Options{})
				if err != nil {
					t.Fatal(err)
				}
				off += h.PayloadOffset()
			}
			corruptByte(t, path, off+11)

			spare := filepath.Join(t.TempDir(), "spare")
			_, errs := recoverTCP(t, dirs, tt.lost, spare, Options{NoSync: true})
			var ce *CorruptError
			if !errors.As(errs[tt.survivor], &ce) {
				t.Fatalf("survivor %d: %v, want a *CorruptError", tt.survivor, errs[tt.survivor])
			}
			if ce.Node != tt.survivor || ce.Kind != kind || ce.Block != block || ce.Stripe != stripe || ce.Offset != off {
				t.Errorf("corrupt block reported as %+v, want node %d %s block %d stripe %d offset %d",
					ce, tt.survivor, kind, block, stripe, off)
			}
			// Survivors that sent all their blocks before the failure may
			// succeed; the replacement must not.
			if errs[tt.lost] == nil {
				t.Errorf("replacement of node %d succeeded with a corrupt block in the ring", tt.lost)
			}
			if names, _ := os.ReadDir(spare); len(names) != 0 {
				t.Errorf("spare directory holds %v after a failed recovery, want nothing", names)
			}
		})
	}
}

// TestRemoteRefuses covers what OpenEncode, ImageSize, ReadShareHeader,
// OpenSurvivor and OpenReplacement refuse before any ring runs, and checks
// that a refusal leaves the directory as it was.
func TestRemoteRefuses(t *testing.T) {
	const bs = 1024
	sizes := []int64{5000, 7000, 3000}
	opts := Options{BlockSize: bs, NoSync: true}
	tests := []struct {
		name string
		// damage, if set, changes the node directories before open.
		damage func(t *testing.T, dirs []string)
		// open gets node directories with images and shares of one encode,
		// and a spare directory that does not exist yet.
		open func(t *testing.T, dirs []string, spare string) error
		want error
	}{
		{"encode: image larger than the layout says", nil, func(t *testing.T, dirs []string, _ string) error {
			l, _ := NewLayout(bs, []int64{5000, 7000, 2999})
			return openEncode(dirs[2], l, 2)
		}, ErrMismatch},
		{"encode: image smaller than the layout says", nil, func(t *testing.T, dirs []string, _ string) error {
			l, _ := NewLayout(bs, []int64{5001, 7000, 3000})
			return openEncode(dirs[0], l, 0)
		}, ErrMismatch},
		{"encode: index outside the ring", nil, func(t *testing.T, dirs []string, _ string) error {
			l, _ := NewLayout(bs, sizes)
			return openEncode(dirs[0], l, 3)
		}, ErrInvalid},
		{"encode: no image", nil, func(t *testing.T, _ []string, spare string) error {
			l, _ := NewLayout(bs, sizes)
			os.MkdirAll(spare, 0o700)
			return openEncode(spare, l, 0)
		}, os.ErrNotExist},
		{"image size: no image", nil, func(t *testing.T, _ []string, spare string) error {
			_, err := ImageSize(spare, Options{})
			return err
		}, os.ErrNotExist},
		{"share header: no share", removeFile(1, DefaultParityName), func(t *testing.T, dirs []string, _ string) error {
			_, err := ReadShareHeader(dirs[1], Options{})
			return err
		}, ErrNoParity},
		{"survivor: no share", removeFile(1, DefaultParityName), func(t *testing.T, dirs []string, _ string) error {
			return openSurvivor(dirs[1], 0)
		}, ErrNoParity},
		{"survivor: lost node is itself", nil, func(t *testing.T, dirs []string, _ string) error {
			return openSurvivor(dirs[1], 1)
		}, ErrInvalid},
		{"survivor: lost node outside the ring", nil, func(t *testing.T, dirs []string, _ string) error {
			return openSurvivor(dirs[1], 3)
		}, ErrInvalid},
		{"survivor: image resized since the encode", func(t *testing.T, dirs []string) {
			f, err := os.OpenFile(filepath.Join(dirs[2], DefaultImageName), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte{0})
			f.Close()
		}, func(t *testing.T, dirs []string, _ string) error {
			return openSurvivor(dirs[2], 0)
		}, ErrMismatch},
		{"survivor: corrupt share header", func(t *testing.T, dirs []string) {
			corruptByte(t, filepath.Join(dirs[2], DefaultParityName), 30)
		}, func(t *testing.T, dirs []string, _ string) error {
			return openSurvivor(dirs[2], 0)
		}, ErrCorrupt},
		{"replacement: image exists", removeFile(0, DefaultParityName), func(t *testing.T, dirs []string, _ string) error {
			return openReplacement(t, dirs, dirs[0], 0, false)
		}, ErrExists},
		{"replacement: share exists", removeFile(0, DefaultImageName), func(t *testing.T, dirs []string, _ string) error {
			return openReplacement(t, dirs, dirs[0], 0, false)
		}, ErrExists},
		{"replacement: overwrite allowed", nil, func(t *testing.T, dirs []string, _ string) error {
			return openReplacement(t, dirs, dirs[0], 0, true)
		}, nil},
		{"replacement: lost node outside the ring", nil, func(t *testing.T, dirs []string, spare string) error {
			return openReplacement(t, dirs, spare, -1, false)
		}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dirs, _ := makeNodes(t, sizes, 21)
			if _, err := EncodeDirs(context.Background(), dirs, opts); err != nil {
				t.Fatal(err)
			}
			if tt.damage != nil {
				tt.damage(t, dirs)
			}
			before := snapshot(t, dirs)
			err := tt.open(t, dirs, filepath.Join(t.TempDir(), "spare"))
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("got %v, want nil", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			// Opening (and closing) a node never changes a file it found.
			after := snapshot(t, dirs)
			for path, b := range after {
				if old, ok := before[path]; ok && !bytes.Equal(old, b) {
					t.Errorf("%s changed", path)
				}
			}
			for _, d := range dirs {
				checkNoTemps(t, d)
			}
		})
	}
}

// removeFile returns a damage function that removes file name of node i.
func removeFile(i int, name string) func(t *testing.T, dirs []string) {
	return func(t *testing.T, dirs []string) {
		if err := os.Remove(filepath.Join(dirs[i], name)); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshot returns the content of every file in dirs, by path.
func snapshot(t *testing.T, dirs []string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			p := filepath.Join(d, e.Name())
			files[p] = readFile(t, p)
		}
	}
	return files
}

// openEncode opens and closes an EncodeNode, returning OpenEncode's error.
func openEncode(dir string, l *Layout, index int) error {
	e, err := OpenEncode(dir, l, index, Options{NoSync: true})
	if err == nil {
		e.Close()
	}
	return err
}

// openSurvivor opens and closes a survivor, returning OpenSurvivor's error.
func openSurvivor(dir string, lost int) error {
	s, err := OpenSurvivor(dir, lost, Options{NoSync: true})
	if err == nil {
		s.Close()
	}
	return err
}

// openReplacement opens and closes the replacement of node lost in dir,
// with the share header of the first other node of dirs, returning
// OpenReplacement's error.
func openReplacement(t *testing.T, dirs []string, dir string, lost int, overwrite bool) error {
	t.Helper()
	h, err := ReadShareHeader(dirs[(max(lost, 0)+1)%len(dirs)], Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenReplacement(dir, h, lost, Options{NoSync: true, Overwrite: overwrite})
	if err == nil {
		r.Close()
	}
	return err
}

// TestMappedImageTruncated truncates an image while its node is reading it
// mapped: the node fails with ErrCorrupt instead of crashing the process.
func TestMappedImageTruncated(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, DefaultImageName)
	const bs = 64 << 10
	if err := os.WriteFile(path, make([]byte, 8*bs), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src := mapImage(f, 8*bs)
	defer unmapImage(src)
	m, ok := src.(*mappedFile)
	if !ok {
		t.Fatal("the image was not mapped")
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	err = guardFaults(func() error {
		var sum byte
		for _, c := range m.block(4*bs, bs) {
			sum += c
		}
		return fmt.Errorf("read %d from a truncated mapping without a fault", sum)
	})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reading a truncated mapped image: %v, want ErrCorrupt", err)
	}
}
