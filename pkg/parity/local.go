package parity

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// File names inside a node directory.
const (
	// DefaultImageName is the checkpoint image of a node directory.
	DefaultImageName = "image.ckpt"
	// DefaultParityName is the parity share of a node directory.
	DefaultParityName = "parity.ckpt"
)

// Options tunes EncodeDirs and RecoverDir. The zero value is ready to use.
type Options struct {
	// BlockSize is the ring block size for EncodeDirs; 0 means
	// DefaultBlockSize. RecoverDir uses the block size recorded in the
	// shares and ignores it.
	BlockSize int
	// Depth is the per-stage pipeline depth (NodeConfig.Depth).
	Depth int
	// ImageName and ParityName override DefaultImageName and
	// DefaultParityName.
	ImageName, ParityName string
	// Overwrite lets RecoverDir replace an existing image or share in the
	// lost node's directory.
	Overwrite bool
	// NoSync skips fsync of files and directories (tests, benchmarks).
	NoSync bool
}

func (o Options) withDefaults() (Options, error) {
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.ImageName == "" {
		o.ImageName = DefaultImageName
	}
	if o.ParityName == "" {
		o.ParityName = DefaultParityName
	}
	if o.ImageName == o.ParityName || filepath.Base(o.ImageName) != o.ImageName || filepath.Base(o.ParityName) != o.ParityName {
		return o, fmt.Errorf("%w: image name %q and parity name %q must be distinct plain file names", ErrInvalid, o.ImageName, o.ParityName)
	}
	return o, nil
}

// NodeReport is one node's part of a Report.
type NodeReport struct {
	Index         int           // ring index
	Dir           string        // node directory
	ImageSize     int64         // bytes of the node's image
	BytesSent     int64         // block payload sent to the right-hand neighbour
	BytesReceived int64         // block payload received from the left-hand neighbour
	BytesRead     int64         // bytes read from the node's image and share
	BytesStored   int64         // bytes written: parity (encode), image and parity (recovered node)
	Duration      time.Duration // time the node's pipeline ran
	MBps          float64       // (BytesSent+BytesStored)/Duration in MB/s (10^6 bytes)
}

// Report describes an EncodeDirs or RecoverDir run.
type Report struct {
	Op        string        // "encode" or "recover"
	N         int           // nodes in the ring
	BlockSize int           // bytes per block
	Stripes   int           // stripes (parity blocks) in the layout
	Lost      int           // recovered node, -1 for an encode
	Bytes     int64         // encode: sum of image sizes; recover: rebuilt image + parity bytes
	Duration  time.Duration // wall time, including opening and renaming files
	MBps      float64       // Bytes/Duration in MB/s (10^6 bytes)
	Nodes     []NodeReport  // ring order
}

func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / d.Seconds() / 1e6
}

func nodeReport(i int, dir string, size int64, st NodeStats) NodeReport {
	return NodeReport{
		Index: i, Dir: dir, ImageSize: size,
		BytesSent: st.BytesSent, BytesReceived: st.BytesReceived,
		BytesRead: st.BytesRead, BytesStored: st.BytesStored,
		Duration: st.Duration, MBps: mbps(st.BytesSent+st.BytesStored, st.Duration),
	}
}

// EncodeDirs computes XOR parity over the images DIR/image.ckpt of dirs,
// whose order is the ring order, and writes each node's parity share to
// DIR/parity.ckpt (mode 0600, written under a temporary name, synced, then
// renamed; an existing share is replaced only after every node succeeded).
//
// Local mode: one goroutine per node running RunNode, neighbours linked by
// io.Pipe, so the data path is exactly the one agents use over TCP.
func EncodeDirs(ctx context.Context, dirs []string, opts Options) (Report, error) {
	start := time.Now()
	opts, err := opts.withDefaults()
	if err != nil {
		return Report{}, err
	}
	n := len(dirs)
	if n < MinNodes {
		return Report{}, fmt.Errorf("%w: parity needs at least %d node directories, got %d", ErrInvalid, MinNodes, n)
	}
	images := make([]*os.File, n)
	defer closeAll(images)
	infos := make([]os.FileInfo, n)
	sizes := make([]int64, n)
	for i, dir := range dirs {
		f, fi, err := openRegular(filepath.Join(dir, opts.ImageName))
		if err != nil {
			return Report{}, fmt.Errorf("parity: node %d: %w", i, err)
		}
		images[i], infos[i], sizes[i] = f, fi, fi.Size()
		for j := range i {
			if os.SameFile(infos[j], fi) {
				return Report{}, fmt.Errorf("%w: nodes %d (%s) and %d (%s) have the same image", ErrInvalid, j, dirs[j], i, dir)
			}
		}
	}
	l, err := NewLayout(opts.BlockSize, sizes)
	if err != nil {
		return Report{}, err
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return Report{}, fmt.Errorf("parity: encode id: %w", err)
	}

	shares := make([]*tempFile, n)
	defer func() {
		for _, t := range shares {
			t.discard()
		}
	}()
	outs := make([]io.Writer, n)
	for i, dir := range dirs {
		t, err := createTemp(dir, opts.ParityName)
		if err != nil {
			return Report{}, fmt.Errorf("parity: node %d: %w", i, err)
		}
		shares[i] = t
		outs[i] = io.NewOffsetWriter(t.f, alignUp(int64(headerLen(l, i))))
	}

	stats, err := runRing(ctx, l, -1, func(ctx context.Context, i int, left io.Reader, right io.Writer) (NodeStats, error) {
		src := mapImage(images[i], sizes[i])
		defer unmapImage(src)
		st, err := RunNode(ctx, NodeConfig{Layout: l, Index: i, Depth: opts.Depth}, left, right, src, outs[i])
		if err != nil {
			err = fmt.Errorf("%s: %w", dirs[i], err)
		}
		return st, err
	})
	if err != nil {
		return Report{}, err
	}

	hashes := make([][32]byte, n)
	for i, st := range stats {
		hashes[i] = st.ImageDigest
	}
	for i, st := range stats {
		h := &Header{
			Version: formatVersion, N: n, Index: i, BlockSize: l.BlockSize(), EncodeID: id,
			Sizes: l.Sizes(), Hashes: hashes, DataCRC: st.DataCRC, ParityCRC: st.ParityCRC,
			ParityBytes: l.ParityBytes(i),
		}
		if err := shares[i].finishShare(h, opts.NoSync); err != nil {
			return Report{}, fmt.Errorf("parity: node %d (%s): %w", i, dirs[i], err)
		}
	}
	for i, dir := range dirs {
		if err := shares[i].commit(filepath.Join(dir, opts.ParityName), opts.NoSync); err != nil {
			return Report{}, fmt.Errorf("parity: node %d: %w", i, err)
		}
	}

	r := Report{Op: "encode", N: n, BlockSize: l.BlockSize(), Stripes: l.Stripes(), Lost: -1}
	for i, st := range stats {
		r.Nodes = append(r.Nodes, nodeReport(i, dirs[i], sizes[i], st))
		r.Bytes += sizes[i]
	}
	r.Duration = time.Since(start)
	r.MBps = mbps(r.Bytes, r.Duration)
	return r, nil
}

// RecoverDir rebuilds the image and parity share of the one node missing
// from survivors into the directory lost, byte-identical to what the encode
// produced, so that the set is complete again. The survivors may be given in
// any order: each share header names its ring index.
//
// It refuses, before writing anything, with ErrNoParity if a survivor has no
// share, ErrMismatch if the shares come from different encodes or a
// survivor's image size differs from the one recorded, ErrTooManyLost if
// more than one node is missing, ErrNothingLost if none is, and ErrExists if
// lost already holds an image or share (unless Options.Overwrite). During the
// rebuild every block read is checked against its recorded crc32c (a
// *CorruptError names the node, file and block) and the rebuilt image
// against its recorded digest.
//
// Local mode runs the same ring as agents would: one goroutine per survivor
// (RunSurvivor) and one for the replacement (RunReplacement) at the lost
// node's ring position, linked by io.Pipe.
func RecoverDir(ctx context.Context, lost string, survivors []string, opts Options) (Report, error) {
	start := time.Now()
	opts, err := opts.withDefaults()
	if err != nil {
		return Report{}, err
	}
	if len(survivors) == 0 {
		return Report{}, fmt.Errorf("%w: no surviving node directories given", ErrInvalid)
	}
	type survivor struct {
		dir   string
		share *Share
		file  *os.File
		image *os.File
	}
	var files []*os.File
	defer func() { closeAll(files) }()
	var ref *Header
	refDir := ""
	byIndex := map[int]*survivor{}
	for _, dir := range survivors {
		path := filepath.Join(dir, opts.ParityName)
		f, fi, err := openRegular(path)
		if errors.Is(err, os.ErrNotExist) {
			return Report{}, fmt.Errorf("%w: survivor %s has no %s: run parity encode first", ErrNoParity, dir, opts.ParityName)
		}
		if err != nil {
			return Report{}, fmt.Errorf("parity: survivor %s: %w", dir, err)
		}
		files = append(files, f)
		sh, err := OpenShare(f, fi.Size())
		if err != nil {
			return Report{}, fmt.Errorf("parity: survivor %s: %s: %w", dir, path, err)
		}
		h := sh.Header
		if ref == nil {
			ref, refDir = h, dir
		} else if err := sameEncode(ref, h); err != nil {
			return Report{}, fmt.Errorf("%w: shares of %s and %s come from different encodes: %v", ErrMismatch, refDir, dir, err)
		}
		if prev, ok := byIndex[h.Index]; ok {
			return Report{}, fmt.Errorf("%w: %s and %s both hold the share of node %d", ErrMismatch, prev.dir, dir, h.Index)
		}
		byIndex[h.Index] = &survivor{dir: dir, share: sh, file: f}
	}
	var missing []string
	x := -1
	for i := range ref.N {
		if byIndex[i] == nil {
			missing = append(missing, fmt.Sprint(i))
			x = i
		}
	}
	switch {
	case len(missing) == 0:
		return Report{}, fmt.Errorf("%w: all %d nodes of the ring are among the survivors", ErrNothingLost, ref.N)
	case len(missing) > 1:
		return Report{}, fmt.Errorf("%w: %d of %d nodes are missing (ring indices %s); XOR parity rebuilds only one",
			ErrTooManyLost, len(missing), ref.N, strings.Join(missing, ", "))
	}
	l, err := NewLayout(ref.BlockSize, ref.Sizes)
	if err != nil {
		return Report{}, fmt.Errorf("%w: share of %s: %v", ErrCorrupt, refDir, err)
	}
	for i, s := range byIndex {
		if err := s.share.Header.check(l); err != nil {
			return Report{}, fmt.Errorf("parity: survivor %s: %w", s.dir, err)
		}
		f, fi, err := openRegular(filepath.Join(s.dir, opts.ImageName))
		if err != nil {
			return Report{}, fmt.Errorf("parity: survivor %s (node %d): %w", s.dir, i, err)
		}
		files = append(files, f)
		s.image = f
		if fi.Size() != l.Size(i) {
			return Report{}, fmt.Errorf("%w: survivor %s (node %d): image is %d bytes but the parity was encoded for %d: it belongs to another checkpoint",
				ErrMismatch, s.dir, i, fi.Size(), l.Size(i))
		}
	}

	if err := os.MkdirAll(lost, 0o700); err != nil {
		return Report{}, fmt.Errorf("parity: %w", err)
	}
	if li, err := os.Stat(lost); err == nil {
		for _, s := range byIndex {
			if si, err := os.Stat(s.dir); err == nil && os.SameFile(li, si) {
				return Report{}, fmt.Errorf("%w: lost directory %s is also survivor %s", ErrInvalid, lost, s.dir)
			}
		}
	}
	imagePath, sharePath := filepath.Join(lost, opts.ImageName), filepath.Join(lost, opts.ParityName)
	if !opts.Overwrite {
		for _, p := range []string{imagePath, sharePath} {
			if _, err := os.Lstat(p); err == nil {
				return Report{}, fmt.Errorf("%w: %s (set Overwrite to replace it)", ErrExists, p)
			}
		}
	}
	img, err := createTemp(lost, opts.ImageName)
	if err != nil {
		return Report{}, fmt.Errorf("parity: %w", err)
	}
	defer img.discard()
	shr, err := createTemp(lost, opts.ParityName)
	if err != nil {
		return Report{}, fmt.Errorf("parity: %w", err)
	}
	defer shr.discard()
	parityOut := io.NewOffsetWriter(shr.f, alignUp(int64(headerLen(l, x))))

	stats, err := runRing(ctx, l, x, func(ctx context.Context, i int, left io.Reader, right io.Writer) (NodeStats, error) {
		cfg := RecoverConfig{NodeConfig: NodeConfig{Layout: l, Index: i, Depth: opts.Depth}, Lost: x}
		if i == x {
			return RunReplacement(ctx, cfg, left, img.f, parityOut)
		}
		s := byIndex[i]
		src := mapImage(s.image, l.Size(i))
		defer unmapImage(src)
		st, err := RunSurvivor(ctx, cfg, left, right, src, s.share)
		if err != nil {
			err = fmt.Errorf("survivor %s: %w", s.dir, err)
		}
		return st, err
	})
	if err != nil {
		return Report{}, err
	}
	st := stats[x]
	if st.ImageDigest != ref.Hashes[x] {
		return Report{}, fmt.Errorf("%w: rebuilt image of node %d has digest %x, the encode recorded %x", ErrCorrupt, x, st.ImageDigest, ref.Hashes[x])
	}
	h := &Header{
		Version: formatVersion, N: ref.N, Index: x, BlockSize: ref.BlockSize, EncodeID: ref.EncodeID,
		Sizes: ref.Sizes, Hashes: ref.Hashes, DataCRC: st.DataCRC, ParityCRC: st.ParityCRC,
		ParityBytes: l.ParityBytes(x),
	}
	if err := img.finish(opts.NoSync); err != nil {
		return Report{}, fmt.Errorf("parity: %w", err)
	}
	if err := shr.finishShare(h, opts.NoSync); err != nil {
		return Report{}, fmt.Errorf("parity: %w", err)
	}
	if err := img.commit(imagePath, opts.NoSync); err != nil {
		return Report{}, fmt.Errorf("parity: %w", err)
	}
	if err := shr.commit(sharePath, opts.NoSync); err != nil {
		return Report{}, fmt.Errorf("parity: %w", err)
	}

	r := Report{Op: "recover", N: ref.N, BlockSize: ref.BlockSize, Stripes: l.Stripes(), Lost: x,
		Bytes: l.Size(x) + l.ParityBytes(x)}
	for i, st := range stats {
		dir := lost
		if i != x {
			dir = byIndex[i].dir
		}
		r.Nodes = append(r.Nodes, nodeReport(i, dir, l.Size(i), st))
	}
	r.Duration = time.Since(start)
	r.MBps = mbps(r.Bytes, r.Duration)
	return r, nil
}

// sameEncode reports how two share headers disagree about the encode.
func sameEncode(a, b *Header) error {
	switch {
	case a.EncodeID != b.EncodeID:
		return fmt.Errorf("encode id %x vs %x", a.EncodeID, b.EncodeID)
	case a.N != b.N:
		return fmt.Errorf("%d vs %d nodes", a.N, b.N)
	case a.BlockSize != b.BlockSize:
		return fmt.Errorf("block size %d vs %d", a.BlockSize, b.BlockSize)
	case !slices.Equal(a.Sizes, b.Sizes):
		return fmt.Errorf("image sizes %v vs %v", a.Sizes, b.Sizes)
	case !slices.Equal(a.Hashes, b.Hashes):
		return errors.New("image digests differ")
	}
	return nil
}

// nodeFunc runs node i of a local ring on the given links.
type nodeFunc func(ctx context.Context, i int, left io.Reader, right io.Writer) (NodeStats, error)

// runRing links N nodes with io.Pipe (node i → node i+1; in a recovery of
// node lost, the link lost → lost+1 is left out), runs them concurrently and
// returns their stats. On failure it returns the root-cause error, not the
// ErrAborted echoes it caused on the other nodes.
func runRing(ctx context.Context, l *Layout, lost int, run nodeFunc) ([]NodeStats, error) {
	n := l.N()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	rs := make([]*io.PipeReader, n)
	ws := make([]*io.PipeWriter, n)
	for i := range n {
		if i != lost {
			rs[i], ws[i] = io.Pipe()
		}
	}
	stats := make([]NodeStats, n)
	var (
		mu   sync.Mutex
		errs []error // in order of failure
		wg   sync.WaitGroup
	)
	for i := range n {
		var left io.Reader
		var right io.Writer
		if r := rs[(i+n-1)%n]; r != nil {
			left = r
		}
		if w := ws[i]; w != nil {
			right = w
		}
		wg.Go(func() {
			st, err := run(ctx, i, left, right)
			stats[i] = st
			if err == nil {
				// Done: a neighbour that still expects blocks from this
				// node, or still sends some, is out of step; closing the
				// links makes it fail instead of waiting forever.
				if w := ws[i]; w != nil {
					w.Close()
				}
				if r := rs[(i+n-1)%n]; r != nil {
					r.Close()
				}
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				cancel(err)
			}
		})
	}
	wg.Wait()
	for i := range n {
		if rs[i] != nil {
			rs[i].Close()
			ws[i].Close()
		}
	}
	if len(errs) == 0 {
		return stats, nil
	}
	for _, err := range errs {
		if !errors.Is(err, ErrAborted) && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	return nil, errs[0]
}

// openRegular opens path for reading and checks that it is a regular file.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s is not a regular file", ErrInvalid, path)
	}
	return f, fi, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// tempFile is a file being written under a temporary name (mode 0600) in
// the directory of its final name.
type tempFile struct {
	f    *os.File
	done bool
}

func createTemp(dir, name string) (*tempFile, error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &tempFile{f: f}, nil
}

// finishShare writes header h at the start of the share (the payload is
// already at h.PayloadOffset()), sets the exact file size and syncs.
func (t *tempFile) finishShare(h *Header, noSync bool) error {
	b, err := h.MarshalBinary()
	if err != nil {
		return err
	}
	if _, err := t.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write share header: %w", err)
	}
	if err := t.f.Truncate(h.PayloadOffset() + h.ParityBytes); err != nil {
		return fmt.Errorf("size share: %w", err)
	}
	return t.finish(noSync)
}

func (t *tempFile) finish(noSync bool) error {
	if noSync {
		return nil
	}
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", t.f.Name(), err)
	}
	return nil
}

// commit renames the file to path and syncs the directory.
func (t *tempFile) commit(path string, noSync bool) error {
	if err := t.f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", t.f.Name(), err)
	}
	if err := os.Rename(t.f.Name(), path); err != nil {
		return err
	}
	t.done = true
	if noSync {
		return nil
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory of %s: %w", path, err)
	}
	return nil
}

// discard removes the temporary file unless it was committed.
func (t *tempFile) discard() {
	if t == nil || t.done {
		return
	}
	t.f.Close()
	os.Remove(t.f.Name())
	t.done = true
}
