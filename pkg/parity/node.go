package parity

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"time"
)

// DefaultDepth is the default number of blocks each pipeline stage of a node
// may run ahead of the next one.
const DefaultDepth = 2

// HelloSize is the size of the optional link handshake (NodeConfig.Handshake)
// each node sends to its right-hand neighbour before any block: the magic and
// a SHA-256 fingerprint of the layout and operation.
const HelloSize = 8 + 32

const helloMagic = "CKPTRING"

// NodeConfig configures one node of a ring.
type NodeConfig struct {
	// Layout is the schedule; every node of the ring must use an identical
	// one (same block size and sizes).
	Layout *Layout
	// Index is this node's position in the ring.
	Index int
	// Depth is the number of blocks each pipeline stage (disk read, link
	// receive, XOR, link send, disk write) may run ahead; 0 means
	// DefaultDepth. A node holds about 2·(Depth+1) blocks in memory.
	Depth int
	// Handshake makes every link start with a HelloSize-byte frame carrying
	// a fingerprint of the layout, checked by the receiver, so that nodes
	// configured with different layouts fail with ErrMismatch instead of
	// producing garbage parity. Use it when the ring crosses processes or
	// machines; it adds HelloSize bytes per link to the traffic.
	Handshake bool
}

// RecoverConfig configures one node of a recovery ring.
type RecoverConfig struct {
	NodeConfig
	// Lost is the ring index of the node being rebuilt.
	Lost int
}

// NodeStats reports what one node did.
type NodeStats struct {
	Index int // ring index

	BytesSent      int64 // block payload bytes written to the right-hand link
	BytesReceived  int64 // block payload bytes read from the left-hand link
	HandshakeBytes int64 // handshake bytes sent (0 unless NodeConfig.Handshake)
	BytesRead      int64 // bytes read from the node's own image and parity share
	BytesStored    int64 // bytes written to the node's outputs (parity, rebuilt image)
	BlocksSent     int
	BlocksReceived int
	BlocksStored   int
	XORs           int // blocks XORed into a received partial parity

	Duration time.Duration

	// ImageDigest is the digest (see ImageDigestOf) of the node's image
	// (encode) or of the rebuilt image (replacement); zero for a recovery
	// survivor.
	ImageDigest [32]byte
	// DataCRC holds the crc32c of each image block (encode, replacement).
	DataCRC []uint32
	// ParityCRC holds the crc32c of each parity block stored (encode,
	// replacement).
	ParityCRC []uint32
}

// RunNode runs one node of an encode ring. It reads its image from data
// (Layout.Size(Index) bytes), exchanges partial parity blocks with its
// neighbours — receiving from left, sending to right — and writes the parity
// blocks it must store, back to back, to parityOut. It returns once its
// part of every stripe is done.
//
// The links carry raw blocks of exactly BlockSize bytes in stripe order
// (after the optional handshake); nothing else, so any reliable byte stream
// works: io.Pipe, net.Pipe, TCP. Every node of the ring must run RunNode
// concurrently with the same Layout.
//
// If ctx is cancelled or the node fails, RunNode unblocks its pending link
// I/O by closing left and right (CloseWithError(ErrAborted) if they have it,
// else Close if they are io.Closers), which also tells the neighbours. On
// success it leaves both open; the caller should then close them, so that a
// neighbour that is out of step (still expecting or sending blocks) fails
// instead of waiting forever.
//
// The returned stats carry the image digest and the crc32c of every image
// and parity block: what the caller needs to write the share header.
func RunNode(ctx context.Context, cfg NodeConfig, left io.Reader, right io.Writer, data io.ReaderAt, parityOut io.Writer) (NodeStats, error) {
	if err := cfg.check(); err != nil {
		return NodeStats{}, err
	}
	if data == nil || parityOut == nil {
		return NodeStats{}, fmt.Errorf("%w: node %d: nil image reader or parity writer", ErrInvalid, cfg.Index)
	}
	e := &engine{
		cfg: cfg, lost: -1, left: left, right: right,
		data: data, parityOut: parityOut, hashOwn: true,
	}
	return e.run(ctx)
}

// RunSurvivor runs a surviving node of a recovery ring that rebuilds node
// cfg.Lost. It contributes the blocks of its image (data) and of its parity
// share that the lost node's stripes need, verifying each against the crc32c
// recorded in the share header (a mismatch is a *CorruptError naming the
// block), and forwards partial XORs from left to right.
//
// Links and cancellation behave as for RunNode. In a recovery ring the link
// from the lost node to its right-hand neighbour is unused: that neighbour
// may pass a nil left.
func RunSurvivor(ctx context.Context, cfg RecoverConfig, left io.Reader, right io.Writer, data io.ReaderAt, share *Share) (NodeStats, error) {
	if err := cfg.check(); err != nil {
		return NodeStats{}, err
	}
	if cfg.Index == cfg.Lost {
		return NodeStats{}, fmt.Errorf("%w: node %d is the lost node, not a survivor", ErrInvalid, cfg.Index)
	}
	if data == nil || share == nil {
		return NodeStats{}, fmt.Errorf("%w: node %d: nil image reader or parity share", ErrInvalid, cfg.Index)
	}
	h := share.Header
	if h.Index != cfg.Index {
		return NodeStats{}, fmt.Errorf("%w: parity share of node %d given to node %d", ErrMismatch, h.Index, cfg.Index)
	}
	if err := h.check(cfg.Layout); err != nil {
		return NodeStats{}, err
	}
	e := &engine{
		cfg: cfg.NodeConfig, lost: cfg.Lost, left: left, right: right,
		data: data, parity: share.payload, wantData: h.DataCRC, wantParity: h.ParityCRC,
		parityBase: h.PayloadOffset(),
	}
	return e.run(ctx)
}

// RunReplacement runs the node that replaces lost node cfg.Lost (cfg.Index
// must equal cfg.Lost) in a recovery ring. It receives the rebuilt blocks
// from its left-hand neighbour and writes the lost image to imageOut and the
// lost parity payload to parityOut, both sequentially. It has no right-hand
// link.
//
// The stats carry the rebuilt image's digest and the block checksums; the
// caller compares the hash with the one recorded in the surviving shares
// (Header.Hashes) before trusting the image, and writes the share header.
func RunReplacement(ctx context.Context, cfg RecoverConfig, left io.Reader, imageOut, parityOut io.Writer) (NodeStats, error) {
	if err := cfg.check(); err != nil {
		return NodeStats{}, err
	}
	if cfg.Index != cfg.Lost {
		return NodeStats{}, fmt.Errorf("%w: replacement index %d differs from lost node %d", ErrInvalid, cfg.Index, cfg.Lost)
	}
	if imageOut == nil || parityOut == nil {
		return NodeStats{}, fmt.Errorf("%w: node %d: nil image or parity writer", ErrInvalid, cfg.Index)
	}
	e := &engine{
		cfg: cfg.NodeConfig, lost: cfg.Lost, left: left,
		dataOut: imageOut, parityOut: parityOut,
	}
	return e.run(ctx)
}

func (c *NodeConfig) check() error {
	switch {
	case c.Layout == nil:
		return fmt.Errorf("%w: nil layout", ErrInvalid)
	case c.Index < 0 || c.Index >= c.Layout.N():
		return fmt.Errorf("%w: node index %d outside ring of %d", ErrInvalid, c.Index, c.Layout.N())
	case c.Depth < 0:
		return fmt.Errorf("%w: negative pipeline depth %d", ErrInvalid, c.Depth)
	}
	return nil
}

func (c *RecoverConfig) check() error {
	if err := c.NodeConfig.check(); err != nil {
		return err
	}
	if c.Lost < 0 || c.Lost >= c.Layout.N() {
		return fmt.Errorf("%w: lost node %d outside ring of %d", ErrInvalid, c.Lost, c.Layout.N())
	}
	return nil
}

// engine runs one node: five goroutines connected by bounded channels.
//
//	loader: own image/parity blocks from disk ──ownQ──┐
//	reader: partial XORs from the left link ──recvQ──►main (XOR) ──sendQ──► writer: right link
//	                                                        └──storeQ──► store: parity / rebuilt image
//
// Every stage walks the same per-node plan in stripe order, so stages never
// need to tell each other which block comes next. Buffers come from two
// bounded pools (own blocks, received blocks), so neither producer can
// starve the other.
type engine struct {
	cfg         NodeConfig
	lost        int
	left        io.Reader
	right       io.Writer
	data        io.ReaderAt // own image
	parity      io.ReaderAt // own parity payload (recovery survivor)
	wantData    []uint32    // survivor: recorded crc32c of own image blocks
	wantParity  []uint32    // survivor: recorded crc32c of own parity blocks
	parityBase  int64       // survivor: file offset of the parity payload, for error reports
	hashOwn     bool        // encode: hash and checksum own image blocks
	dataOut     io.Writer   // replacement: rebuilt image
	parityOut   io.Writer   // encode, replacement: parity payload
	ownBytes    int64       // loader's counters …
	dataCRC     []uint32
	ownHash     hash.Hash
	recvBytes   int64 // reader's
	recvBlocks  int
	xors        int   // main's
	sentBytes   int64 // writer's
	sentBlocks  int
	hsBytes     int64
	storedBytes int64 // store's
	stored      int
	outDataCRC  []uint32
	outParCRC   []uint32
	outHash     hash.Hash
}

type item struct {
	buf  []byte
	pool *pool // nil: buf is a mapped block, not the pool's
	st   step
}

// blockSource is a data source whose blocks can be used in place (a
// mapped image file), saving the copy into a pool buffer.
type blockSource interface {
	io.ReaderAt
	block(off int64, n int) []byte
}

// pool is a bounded set of block buffers, allocated on first use.
type pool struct {
	ch   chan []byte
	size int
}

func newPool(n, size int) *pool {
	p := &pool{ch: make(chan []byte, n), size: size}
	for range n {
		p.ch <- nil
	}
	return p
}

func (p *pool) get(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.ch:
		if b == nil {
			b = make([]byte, p.size)
		}
		return b, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (p *pool) put(b []byte) {
	if p != nil {
		p.ch <- b
	}
}

func send[T any](ctx context.Context, ch chan<- T, v T) error {
	select {
	case ch <- v:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func recv[T any](ctx context.Context, ch <-chan T) (T, bool, error) {
	select {
	case v, ok := <-ch:
		return v, ok, nil
	case <-ctx.Done():
		var zero T
		return zero, false, context.Cause(ctx)
	}
}

// interrupt tears a link down so that blocked I/O on it returns and the
// peer learns about the failure.
func interrupt(x any) {
	switch c := x.(type) {
	case interface{ CloseWithError(error) error }:
		c.CloseWithError(ErrAborted)
	case io.Closer:
		c.Close()
	}
}

func (e *engine) run(parent context.Context) (NodeStats, error) {
	start := time.Now()
	l := e.cfg.Layout
	bs := l.BlockSize()
	depth := e.cfg.Depth
	if depth == 0 {
		depth = DefaultDepth
	}
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)

	errc := make(chan error, 5) // one per stage
	fail := func(err error) {
		errc <- err
		cancel(err)
	}
	stop := context.AfterFunc(ctx, func() {
		if e.left != nil {
			interrupt(e.left)
		}
		if e.right != nil {
			interrupt(e.right)
		}
	})

	if e.hashOwn {
		e.ownHash = sha256.New()
	}
	if e.dataOut != nil {
		e.outHash = sha256.New()
	}
	ownPool, recvPool := newPool(depth+1, bs), newPool(depth+1, bs)
	ownQ := make(chan item, depth)
	recvQ := make(chan item, depth)
	sendQ := make(chan item, depth)
	storeQ := make(chan item, depth)

	stages := []func(context.Context) error{
		func(ctx context.Context) error { return e.loader(ctx, ownPool, ownQ) },
		func(ctx context.Context) error { return e.reader(ctx, recvPool, recvQ) },
		func(ctx context.Context) error { return e.main(ctx, ownQ, recvQ, sendQ, storeQ) },
		func(ctx context.Context) error { return e.writer(ctx, sendQ) },
		func(ctx context.Context) error { return e.store(ctx, storeQ) },
	}
	done := make(chan struct{}, len(stages))
	for _, f := range stages {
		go func() {
			if err := guardFaults(func() error { return f(ctx) }); err != nil && ctx.Err() == nil {
				fail(err)
			}
			done <- struct{}{}
		}()
	}
	for range stages {
		<-done
	}
	stop()
	close(errc)
	firstErr := <-errc
	if firstErr == nil && parent.Err() != nil {
		firstErr = context.Cause(parent)
	}
	st := NodeStats{
		Index:          e.cfg.Index,
		BytesSent:      e.sentBytes,
		BytesReceived:  e.recvBytes,
		HandshakeBytes: e.hsBytes,
		BytesRead:      e.ownBytes,
		BytesStored:    e.storedBytes,
		BlocksSent:     e.sentBlocks,
		BlocksReceived: e.recvBlocks,
		BlocksStored:   e.stored,
		XORs:           e.xors,
		Duration:       time.Since(start),
		ParityCRC:      e.outParCRC,
	}
	switch {
	case e.hashOwn:
		e.ownHash.Sum(st.ImageDigest[:0])
		st.DataCRC = e.dataCRC
	case e.dataOut != nil:
		e.outHash.Sum(st.ImageDigest[:0])
		st.DataCRC = e.outDataCRC
	}
	if firstErr != nil {
		if _, ok := firstErr.(*CorruptError); !ok { // a CorruptError names its node
			firstErr = fmt.Errorf("parity: node %d: %w", e.cfg.Index, firstErr)
		}
		return st, firstErr
	}
	return st, nil
}

func (e *engine) plan() func(func(step) bool) {
	return e.cfg.Layout.plan(e.cfg.Index, e.lost)
}

// loader reads the node's own blocks, in plan order, and checks or records
// their checksums.
func (e *engine) loader(ctx context.Context, p *pool, out chan<- item) error {
	tab := castagnoli()
	if e.hashOwn {
		e.dataCRC = make([]uint32, 0, e.cfg.Layout.DataBlocks(e.cfg.Index))
	}
	for st := range e.plan() {
		if st.role == roleSink || st.own.kind == kindNone {
			continue
		}
		ref := st.own
		src, what := e.data, KindData
		if ref.kind == kindParity {
			src, what = e.parity, KindParity
		}
		// A whole block of a mapped file is used where it lies; a short
		// one is copied, for its padding.
		var buf []byte
		var bp *pool
		if m, ok := src.(blockSource); ok && ref.len == p.size {
			buf = m.block(ref.off, ref.len) // nil if the file is short
		}
		n := ref.len
		var err error
		if buf == nil {
			bp = p
			if buf, err = p.get(ctx); err != nil {
				return err
			}
			n, err = src.ReadAt(buf[:ref.len], ref.off)
		}
		if n < ref.len {
			if err == nil || errors.Is(err, io.EOF) {
				return fmt.Errorf("%w: %s ends at %d bytes, layout needs %d", ErrMismatch, what, ref.off+int64(n), ref.off+int64(ref.len))
			}
			return fmt.Errorf("read %s block %d at offset %d: %w", what, ref.index, ref.off, err)
		}
		e.ownBytes += int64(n)
		clear(buf[ref.len:])
		crc := crc32.Checksum(buf[:ref.len], tab)
		want, fileOff := e.wantData, ref.off
		if ref.kind == kindParity {
			want, fileOff = e.wantParity, e.parityBase+ref.off
		}
		switch {
		case e.hashOwn:
			writeCRC(e.ownHash, crc)
			e.dataCRC = append(e.dataCRC, crc)
		case want[ref.index] != crc:
			return &CorruptError{Node: e.cfg.Index, Kind: what, Block: ref.index, Stripe: st.stripe,
				Offset: fileOff, Length: ref.len, Want: want[ref.index], Got: crc}
		}
		if err := send(ctx, out, item{buf: buf, pool: bp, st: st}); err != nil {
			return err
		}
	}
	close(out) // only on success: on failure the cancelled context stops main
	return nil
}

// reader receives partial XORs from the left-hand link.
func (e *engine) reader(ctx context.Context, p *pool, out chan<- item) error {
	bs := e.cfg.Layout.BlockSize()
	if e.cfg.Handshake && e.left != nil {
		var hello [HelloSize]byte
		if _, err := io.ReadFull(e.left, hello[:]); err != nil {
			return fmt.Errorf("receive handshake from node %d: %w", e.leftIndex(), err)
		}
		fp := e.cfg.Layout.fingerprint(e.lost)
		if string(hello[:8]) != helloMagic || string(hello[8:]) != string(fp[:]) {
			return fmt.Errorf("%w: node %d runs a different layout or operation (handshake fingerprint differs)", ErrMismatch, e.leftIndex())
		}
	}
	for st := range e.plan() {
		if st.role == roleStart {
			continue
		}
		if e.left == nil {
			return fmt.Errorf("%w: stripe %d needs a link from node %d but none was given", ErrInvalid, st.stripe, e.leftIndex())
		}
		buf, err := p.get(ctx)
		if err != nil {
			return err
		}
		if _, err := io.ReadFull(e.left, buf); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("link closed early: %w", err)
			}
			return fmt.Errorf("receive stripe %d from node %d after %d blocks: %w", st.stripe, e.leftIndex(), e.recvBlocks, err)
		}
		e.recvBytes += int64(bs)
		e.recvBlocks++
		if err := send(ctx, out, item{buf: buf, pool: p, st: st}); err != nil {
			return err
		}
	}
	close(out) // only on success: on failure the cancelled context stops main
	return nil
}

func (e *engine) leftIndex() int  { return (e.cfg.Index + e.cfg.Layout.N() - 1) % e.cfg.Layout.N() }
func (e *engine) rightIndex() int { return (e.cfg.Index + 1) % e.cfg.Layout.N() }

// main XORs own blocks into received partial XORs and routes the results.
func (e *engine) main(ctx context.Context, ownQ, recvQ <-chan item, sendQ, storeQ chan<- item) error {
	defer close(sendQ)
	defer close(storeQ)
	// A closed input channel means a producer finished its plan while main
	// still expects a block: the stages disagree, which is a bug.
	ended := func(what string, st step) error {
		return fmt.Errorf("internal error: stripe %d: no %s block left for role %d", st.stripe, what, st.role)
	}
	for st := range e.plan() {
		var it item
		var ok bool
		var err error
		if st.role == roleStart {
			if st.own.kind == kindNone {
				return fmt.Errorf("internal error: stripe %d: chain starts at a node without a block", st.stripe)
			}
			if it, ok, err = recv(ctx, ownQ); err != nil || !ok {
				return cmp.Or(err, ended("own", st))
			}
			if err := send(ctx, sendQ, it); err != nil {
				return err
			}
			continue
		}
		if it, ok, err = recv(ctx, recvQ); err != nil || !ok {
			return cmp.Or(err, ended("received", st))
		}
		if st.role == roleSink {
			if err := send(ctx, storeQ, it); err != nil {
				return err
			}
			continue
		}
		if st.own.kind != kindNone {
			own, ok, err := recv(ctx, ownQ)
			if err != nil || !ok {
				return cmp.Or(err, ended("own", st))
			}
			n := st.own.len
			subtle.XORBytes(it.buf[:n], it.buf[:n], own.buf[:n])
			own.pool.put(own.buf)
			e.xors++
		}
		if err := send(ctx, sendQ, it); err != nil {
			return err
		}
	}
	return nil
}

// writer sends blocks to the right-hand link.
func (e *engine) writer(ctx context.Context, in <-chan item) error {
	if e.cfg.Handshake && e.right != nil {
		fp := e.cfg.Layout.fingerprint(e.lost)
		hello := append([]byte(helloMagic), fp[:]...)
		if _, err := e.right.Write(hello); err != nil {
			return fmt.Errorf("send handshake to node %d: %w", e.rightIndex(), err)
		}
		e.hsBytes += HelloSize
	}
	for {
		it, ok, err := recv(ctx, in)
		if err != nil || !ok {
			return err
		}
		if e.right == nil {
			return fmt.Errorf("%w: stripe %d needs a link to node %d but none was given", ErrInvalid, it.st.stripe, e.rightIndex())
		}
		n, err := e.right.Write(it.buf)
		e.sentBytes += int64(n)
		if err != nil {
			return fmt.Errorf("send stripe %d to node %d: %w", it.st.stripe, e.rightIndex(), err)
		}
		e.sentBlocks++
		it.pool.put(it.buf)
	}
}

// store writes finished blocks: parity blocks (encode and replacement) and
// rebuilt image blocks (replacement), each truncated to its length on disk.
func (e *engine) store(ctx context.Context, in <-chan item) error {
	tab := castagnoli()
	var parOff, dataOff int64
	for {
		it, ok, err := recv(ctx, in)
		if err != nil || !ok {
			return err
		}
		ref := it.st.out
		tail := it.buf[ref.len:]
		for i, b := range tail {
			if b != 0 {
				return fmt.Errorf("%w: stripe %d: rebuilt %s block %d has non-zero byte at %d, past its length %d: the surviving blocks are inconsistent",
					ErrCorrupt, it.st.stripe, kindName(ref.kind), ref.index, ref.len+i, ref.len)
			}
		}
		blk := it.buf[:ref.len]
		crc := crc32.Checksum(blk, tab)
		var w io.Writer
		switch ref.kind {
		case kindParity:
			if ref.off != parOff {
				return fmt.Errorf("internal error: parity block %d at %d, expected %d", ref.index, ref.off, parOff)
			}
			w, parOff = e.parityOut, parOff+int64(ref.len)
			e.outParCRC = append(e.outParCRC, crc)
		case kindData:
			if ref.off != dataOff || e.dataOut == nil {
				return fmt.Errorf("internal error: image block %d at %d, expected %d", ref.index, ref.off, dataOff)
			}
			w, dataOff = e.dataOut, dataOff+int64(ref.len)
			writeCRC(e.outHash, crc)
			e.outDataCRC = append(e.outDataCRC, crc)
		}
		if _, err := w.Write(blk); err != nil {
			return fmt.Errorf("store %s block %d (stripe %d): %w", kindName(ref.kind), ref.index, it.st.stripe, err)
		}
		e.storedBytes += int64(ref.len)
		e.stored++
		it.pool.put(it.buf)
	}
}

func kindName(k kind) BlockKind {
	if k == kindParity {
		return KindParity
	}
	return KindData
}

// writeCRC adds one block checksum to an image digest.
func writeCRC(h hash.Hash, crc uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], crc)
	h.Write(b[:])
}

// ImageDigestOf computes the digest the share headers record for an image
// cut into blocks of blockSize bytes: the SHA-256 of the crc32c of every
// block, little-endian, in order (the last block not padded). It costs a
// CRC pass, not a SHA-256 pass over the image — the difference between a
// ring that runs near network speed and one that does not — and with
// every block's checksum in it, a rebuilt image that differs in any block
// is still caught (to the strength of crc32c per block; the image's own
// records carry crc32c too, checked again by ckpt-redo).
func ImageDigestOf(image []byte, blockSize int) [32]byte {
	h := sha256.New()
	tab := castagnoli()
	for off := 0; off < len(image); off += blockSize {
		writeCRC(h, crc32.Checksum(image[off:min(off+blockSize, len(image))], tab))
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}
