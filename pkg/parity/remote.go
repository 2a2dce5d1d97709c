package parity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// EncodeNode is one node's part of an encode whose ring crosses machines:
// an agent opens it on its node directory, runs it over its two TCP links,
// and finishes it with the hashes of every node's image, which only the
// coordinator knows. Until Finish the node's old share (if any) is intact.
type EncodeNode struct {
	dir   string
	opts  Options
	l     *Layout
	index int
	image *os.File
	src   io.ReaderAt // the image, mapped if it could be
	share *tempFile
	out   io.Writer
	stats NodeStats
}

// ImageSize is the size of the image in dir, what the coordinator needs
// from every node to make the Layout.
func ImageSize(dir string, opts Options) (int64, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return 0, err
	}
	f, fi, err := openRegular(filepath.Join(dir, opts.ImageName))
	if err != nil {
		return 0, fmt.Errorf("parity: %w", err)
	}
	f.Close()
	return fi.Size(), nil
}

// OpenEncode prepares node index of layout l in dir.
func OpenEncode(dir string, l *Layout, index int, opts Options) (*EncodeNode, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if index < 0 || index >= l.N() {
		return nil, fmt.Errorf("%w: node index %d of %d", ErrInvalid, index, l.N())
	}
	f, fi, err := openRegular(filepath.Join(dir, opts.ImageName))
	if err != nil {
		return nil, fmt.Errorf("parity: node %d: %w", index, err)
	}
	if fi.Size() != l.Size(index) {
		f.Close()
		return nil, fmt.Errorf("%w: node %d: image is %d bytes, the layout says %d", ErrMismatch, index, fi.Size(), l.Size(index))
	}
	t, err := createTemp(dir, opts.ParityName)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("parity: node %d: %w", index, err)
	}
	return &EncodeNode{dir: dir, opts: opts, l: l, index: index, image: f, src: mapImage(f, fi.Size()), share: t,
		out: io.NewOffsetWriter(t.f, alignUp(int64(headerLen(l, index))))}, nil
}

// Run runs the node's part of the ring (RunNode with the link handshake).
func (n *EncodeNode) Run(ctx context.Context, left io.Reader, right io.Writer) (NodeStats, error) {
	st, err := RunNode(ctx, NodeConfig{Layout: n.l, Index: n.index, Depth: n.opts.Depth, Handshake: true}, left, right, n.src, n.out)
	n.stats = st
	return st, err
}

// Finish writes the share header, with the encode id and every node's image
// hash, and commits the share.
func (n *EncodeNode) Finish(id [16]byte, hashes [][32]byte) error {
	if len(hashes) != n.l.N() || hashes[n.index] != n.stats.ImageDigest {
		return fmt.Errorf("%w: node %d: hashes do not match this node's run", ErrMismatch, n.index)
	}
	h := &Header{
		Version: formatVersion, N: n.l.N(), Index: n.index, BlockSize: n.l.BlockSize(), EncodeID: id,
		Sizes: n.l.Sizes(), Hashes: hashes, DataCRC: n.stats.DataCRC, ParityCRC: n.stats.ParityCRC,
		ParityBytes: n.l.ParityBytes(n.index),
	}
	if err := n.share.finishShare(h, n.opts.NoSync); err != nil {
		return fmt.Errorf("parity: node %d: %w", n.index, err)
	}
	if err := n.share.commit(filepath.Join(n.dir, n.opts.ParityName), n.opts.NoSync); err != nil {
		return fmt.Errorf("parity: node %d: %w", n.index, err)
	}
	return nil
}

// Close releases the node; an unfinished share is discarded.
func (n *EncodeNode) Close() {
	unmapImage(n.src)
	n.image.Close()
	n.share.discard()
}

// ReadShareHeader reads the share header of the node directory dir.
func ReadShareHeader(dir string, opts Options) (*Header, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, opts.ParityName)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no %s", ErrNoParity, dir, opts.ParityName)
	}
	if err != nil {
		return nil, fmt.Errorf("parity: %w", err)
	}
	defer f.Close()
	h, err := ReadHeader(f)
	if err != nil {
		return nil, fmt.Errorf("parity: %s: %w", path, err)
	}
	return h, nil
}

// RecoverNode is one node's part of a recovery ring that crosses machines:
// a survivor, or the replacement that rebuilds the lost node.
type RecoverNode struct {
	dir    string
	opts   Options
	cfg    RecoverConfig
	ref    *Header
	image  *os.File
	src    io.ReaderAt // the image, mapped if it could be
	share  *Share
	shareF *os.File
	// replacement only
	img, shr *tempFile
	out      io.Writer
	stats    NodeStats
}

// OpenSurvivor prepares a survivor of a recovery of node lost. ref is the
// share header the coordinator collected; the survivor's own must belong
// to the same encode.
func OpenSurvivor(dir string, lost int, opts Options) (*RecoverNode, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	sf, fi, err := openRegular(filepath.Join(dir, opts.ParityName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no %s", ErrNoParity, dir, opts.ParityName)
	}
	if err != nil {
		return nil, fmt.Errorf("parity: %w", err)
	}
	sh, err := OpenShare(sf, fi.Size())
	if err != nil {
		sf.Close()
		return nil, fmt.Errorf("parity: %s: %w", dir, err)
	}
	h := sh.Header
	l, err := NewLayout(h.BlockSize, h.Sizes)
	if err != nil {
		sf.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, dir, err)
	}
	if lost < 0 || lost >= h.N || lost == h.Index {
		sf.Close()
		return nil, fmt.Errorf("%w: node %d cannot survive the loss of node %d of %d", ErrInvalid, h.Index, lost, h.N)
	}
	img, ifi, err := openRegular(filepath.Join(dir, opts.ImageName))
	if err != nil {
		sf.Close()
		return nil, fmt.Errorf("parity: survivor %s: %w", dir, err)
	}
	if ifi.Size() != l.Size(h.Index) {
		sf.Close()
		img.Close()
		return nil, fmt.Errorf("%w: survivor %s (node %d): image is %d bytes but the parity was encoded for %d",
			ErrMismatch, dir, h.Index, ifi.Size(), l.Size(h.Index))
	}
	return &RecoverNode{dir: dir, opts: opts, ref: h, image: img, src: mapImage(img, ifi.Size()), share: sh, shareF: sf,
		cfg: RecoverConfig{NodeConfig: NodeConfig{Layout: l, Index: h.Index, Depth: opts.Depth, Handshake: true}, Lost: lost}}, nil
}

// OpenReplacement prepares the node that rebuilds node ref.Index... of the
// encode described by ref (any survivor's header) into dir.
func OpenReplacement(dir string, ref *Header, lost int, opts Options) (*RecoverNode, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l, err := NewLayout(ref.BlockSize, ref.Sizes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if lost < 0 || lost >= ref.N {
		return nil, fmt.Errorf("%w: lost node %d of %d", ErrInvalid, lost, ref.N)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("parity: %w", err)
	}
	for _, name := range []string{opts.ImageName, opts.ParityName} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil && !opts.Overwrite {
			return nil, fmt.Errorf("%w: %s", ErrExists, filepath.Join(dir, name))
		}
	}
	n := &RecoverNode{dir: dir, opts: opts, ref: ref,
		cfg: RecoverConfig{NodeConfig: NodeConfig{Layout: l, Index: lost, Depth: opts.Depth, Handshake: true}, Lost: lost}}
	if n.img, err = createTemp(dir, opts.ImageName); err != nil {
		return nil, fmt.Errorf("parity: %w", err)
	}
	if n.shr, err = createTemp(dir, opts.ParityName); err != nil {
		n.img.discard()
		return nil, fmt.Errorf("parity: %w", err)
	}
	n.out = io.NewOffsetWriter(n.shr.f, alignUp(int64(headerLen(l, lost))))
	return n, nil
}

// Header is the share header this node read (survivor) or was given
// (replacement).
func (n *RecoverNode) Header() *Header { return n.ref }

// Run runs the node's part of the recovery ring. The replacement needs
// only left; the lost node's right-hand neighbour needs only right.
func (n *RecoverNode) Run(ctx context.Context, left io.Reader, right io.Writer) (NodeStats, error) {
	var st NodeStats
	var err error
	if n.img != nil {
		st, err = RunReplacement(ctx, n.cfg, left, n.img.f, n.out)
	} else {
		st, err = RunSurvivor(ctx, n.cfg, left, right, n.src, n.share)
	}
	n.stats = st
	return st, err
}

// Finish checks the rebuilt image against its recorded digest and commits
// it and its share (replacement); a survivor has nothing to finish.
func (n *RecoverNode) Finish() error {
	if n.img == nil {
		return nil
	}
	x := n.cfg.Lost
	if n.stats.ImageDigest != n.ref.Hashes[x] {
		return fmt.Errorf("%w: rebuilt image of node %d has digest %x, the encode recorded %x", ErrCorrupt, x, n.stats.ImageDigest, n.ref.Hashes[x])
	}
	h := &Header{
		Version: formatVersion, N: n.ref.N, Index: x, BlockSize: n.ref.BlockSize, EncodeID: n.ref.EncodeID,
		Sizes: n.ref.Sizes, Hashes: n.ref.Hashes, DataCRC: n.stats.DataCRC, ParityCRC: n.stats.ParityCRC,
		ParityBytes: n.cfg.Layout.ParityBytes(x),
	}
	if err := n.img.finish(n.opts.NoSync); err != nil {
		return fmt.Errorf("parity: %w", err)
	}
	if err := n.shr.finishShare(h, n.opts.NoSync); err != nil {
		return fmt.Errorf("parity: %w", err)
	}
	if err := n.img.commit(filepath.Join(n.dir, n.opts.ImageName), n.opts.NoSync); err != nil {
		return fmt.Errorf("parity: %w", err)
	}
	if err := n.shr.commit(filepath.Join(n.dir, n.opts.ParityName), n.opts.NoSync); err != nil {
		return fmt.Errorf("parity: %w", err)
	}
	return nil
}

// Close releases the node; an unfinished rebuild is discarded.
func (n *RecoverNode) Close() {
	unmapImage(n.src)
	if n.image != nil {
		n.image.Close()
	}
	if n.shareF != nil {
		n.shareF.Close()
	}
	n.img.discard()
	n.shr.discard()
}
