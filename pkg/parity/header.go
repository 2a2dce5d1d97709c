package parity

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Share file format constants.
const (
	// Magic opens every parity share file.
	Magic = "CKPTPAR\x00"
	// formatVersion is the share format and schedule version written.
	formatVersion = 2
	// headerFixed is the size of the fixed part of the header.
	headerFixed = 72
	// PayloadAlign is the alignment of the parity payload in a share file.
	PayloadAlign = 4096
	// MaxHeaderSize bounds the header of a share file.
	MaxHeaderSize = 512 << 20
)

// castagnoli returns the crc32c table. crc32 caches it internally, so this
// is cheap and keeps the package free of mutable globals.
func castagnoli() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) }

// Header is the self-describing header of a parity share file. All shares of
// one encode carry the same N, BlockSize, EncodeID, Sizes and Hashes; Index,
// DataCRC, ParityCRC and ParityBytes are the node's own.
//
// Encoding (little-endian, H = header length):
//
//	0    [8]byte  magic "CKPTPAR\x00"
//	8    uint16   format version (2)
//	10   uint16   flags (0)
//	12   uint32   H, including the trailing checksum
//	16   uint32   N, nodes in the ring
//	20   uint32   this node's ring index
//	24   uint32   block size
//	28   uint32   D, blocks of this node's image
//	32   uint32   P, parity blocks stored by this node
//	36   uint32   reserved (0)
//	40   [16]byte encode ID, random per encode
//	56   uint64   payload offset: H rounded up to 4096
//	64   uint64   payload length: bytes of parity stored
//	72   N×uint64 image sizes, ring order
//	     N×[32]byte digest of each image (ImageDigestOf)
//	     D×uint32 crc32c of each block of this node's image
//	     P×uint32 crc32c of each parity block, in payload order
//	H-4  uint32   crc32c of bytes [0, H-4)
//
// Zeros pad the header to the payload offset; the parity blocks follow back
// to back, each as long as the longest data block of its stripe.
type Header struct {
	Version     int        // format version, 2
	N           int        // nodes in the ring
	Index       int        // this node's ring index
	BlockSize   int        // bytes per block
	EncodeID    [16]byte   // random identifier shared by all shares of one encode
	Sizes       []int64    // image size of every node, ring order
	Hashes      [][32]byte // digest of every node's image (ImageDigestOf), ring order
	DataCRC     []uint32   // crc32c of each block of this node's image
	ParityCRC   []uint32   // crc32c of each parity block this node stores
	ParityBytes int64      // bytes of parity payload
}

// Len returns the encoded header length in bytes.
func (h *Header) Len() int {
	return headerFixed + h.N*(8+32) + 4*(len(h.DataCRC)+len(h.ParityCRC)) + 4
}

// PayloadOffset returns the file offset of the parity payload.
func (h *Header) PayloadOffset() int64 { return alignUp(int64(h.Len())) }

func alignUp(v int64) int64 { return (v + PayloadAlign - 1) &^ (PayloadAlign - 1) }

// headerLen is Header.Len for a node of layout l, before the CRCs are known.
func headerLen(l *Layout, i int) int {
	return headerFixed + l.N()*(8+32) + 4*(l.DataBlocks(i)+l.ParityBlocks(i)) + 4
}

// MarshalBinary encodes the header. It fails with ErrInvalid if the header
// is inconsistent (slice lengths not matching N).
func (h *Header) MarshalBinary() ([]byte, error) {
	if h.N < MinNodes || h.N > MaxNodes || len(h.Sizes) != h.N || len(h.Hashes) != h.N ||
		h.Index < 0 || h.Index >= h.N || h.BlockSize < MinBlockSize || h.BlockSize > MaxBlockSize {
		return nil, fmt.Errorf("%w: inconsistent parity header (N=%d, index %d, %d sizes, %d hashes, block size %d)",
			ErrInvalid, h.N, h.Index, len(h.Sizes), len(h.Hashes), h.BlockSize)
	}
	if h.Len() > MaxHeaderSize {
		return nil, fmt.Errorf("%w: parity header of %d bytes exceeds %d", ErrInvalid, h.Len(), MaxHeaderSize)
	}
	n := h.Len()
	b := make([]byte, headerFixed, n)
	le := binary.LittleEndian
	copy(b, Magic)
	le.PutUint16(b[8:], formatVersion)
	le.PutUint32(b[12:], uint32(n))
	le.PutUint32(b[16:], uint32(h.N))
	le.PutUint32(b[20:], uint32(h.Index))
	le.PutUint32(b[24:], uint32(h.BlockSize))
	le.PutUint32(b[28:], uint32(len(h.DataCRC)))
	le.PutUint32(b[32:], uint32(len(h.ParityCRC)))
	copy(b[40:56], h.EncodeID[:])
	le.PutUint64(b[56:], uint64(h.PayloadOffset()))
	le.PutUint64(b[64:], uint64(h.ParityBytes))
	for _, s := range h.Sizes {
		b = le.AppendUint64(b, uint64(s))
	}
	for _, s := range h.Hashes {
		b = append(b, s[:]...)
	}
	for _, c := range h.DataCRC {
		b = le.AppendUint32(b, c)
	}
	for _, c := range h.ParityCRC {
		b = le.AppendUint32(b, c)
	}
	b = le.AppendUint32(b, crc32.Checksum(b, castagnoli()))
	return b, nil
}

// DecodeHeader decodes a share header from the start of b (b may continue
// with padding and payload). Any malformed, truncated or mis-checksummed
// header yields an error wrapping ErrCorrupt; a header of another format
// version yields ErrMismatch. Allocation is bounded by len(b).
func DecodeHeader(b []byte) (*Header, error) {
	le := binary.LittleEndian
	hl, err := parsePrefix(b)
	if err != nil {
		return nil, err
	}
	if hl > uint64(len(b)) {
		return nil, fmt.Errorf("%w: parity header truncated: %d of %d bytes", ErrCorrupt, len(b), hl)
	}
	b = b[:hl]
	if got, want := crc32.Checksum(b[:hl-4], castagnoli()), le.Uint32(b[hl-4:]); got != want {
		return nil, fmt.Errorf("%w: parity header checksum %08x, recorded %08x", ErrCorrupt, got, want)
	}
	n := uint64(le.Uint32(b[16:]))
	idx := uint64(le.Uint32(b[20:]))
	bs := uint64(le.Uint32(b[24:]))
	nd := uint64(le.Uint32(b[28:]))
	np := uint64(le.Uint32(b[32:]))
	switch {
	case n < MinNodes || n > MaxNodes:
		return nil, fmt.Errorf("%w: parity header: %d nodes", ErrCorrupt, n)
	case idx >= n:
		return nil, fmt.Errorf("%w: parity header: node index %d of %d", ErrCorrupt, idx, n)
	case bs < MinBlockSize || bs > MaxBlockSize:
		return nil, fmt.Errorf("%w: parity header: block size %d", ErrCorrupt, bs)
	case le.Uint32(b[36:]) != 0:
		return nil, fmt.Errorf("%w: parity header: reserved field set", ErrCorrupt)
	case hl != headerFixed+n*40+4*(nd+np)+4:
		return nil, fmt.Errorf("%w: parity header length %d does not match its tables", ErrCorrupt, hl)
	}
	h := &Header{
		Version:     formatVersion,
		N:           int(n),
		Index:       int(idx),
		BlockSize:   int(bs),
		Sizes:       make([]int64, n),
		Hashes:      make([][32]byte, n),
		DataCRC:     make([]uint32, nd),
		ParityCRC:   make([]uint32, np),
		ParityBytes: int64(le.Uint64(b[64:])),
	}
	copy(h.EncodeID[:], b[40:56])
	if off := le.Uint64(b[56:]); off != uint64(h.PayloadOffset()) {
		return nil, fmt.Errorf("%w: parity header: payload offset %d, want %d", ErrCorrupt, off, h.PayloadOffset())
	}
	if pb := le.Uint64(b[64:]); pb < np || pb > np*bs {
		return nil, fmt.Errorf("%w: parity header: %d payload bytes for %d blocks of at most %d bytes", ErrCorrupt, pb, np, bs)
	}
	p := b[headerFixed:]
	for i := range h.Sizes {
		s := le.Uint64(p)
		if s > MaxImageSize {
			return nil, fmt.Errorf("%w: parity header: image %d size %d", ErrCorrupt, i, s)
		}
		h.Sizes[i] = int64(s)
		p = p[8:]
	}
	for i := range h.Hashes {
		copy(h.Hashes[i][:], p)
		p = p[32:]
	}
	for i := range h.DataCRC {
		h.DataCRC[i] = le.Uint32(p)
		p = p[4:]
	}
	for i := range h.ParityCRC {
		h.ParityCRC[i] = le.Uint32(p)
		p = p[4:]
	}
	if want := (uint64(h.Sizes[idx]) + bs - 1) / bs; nd != want {
		return nil, fmt.Errorf("%w: parity header: %d image block checksums for an image of %d bytes", ErrCorrupt, nd, h.Sizes[idx])
	}
	return h, nil
}

// ReadHeader reads and decodes a share header from r, consuming exactly the
// header bytes (not the padding after it).
func ReadHeader(r io.Reader) (*Header, error) {
	var fixed [16]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: parity header truncated", ErrCorrupt)
		}
		return nil, fmt.Errorf("parity: read header: %w", err)
	}
	hl, err := parsePrefix(fixed[:])
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Write(fixed[:])
	if _, err := io.CopyN(&buf, r, int64(hl)-16); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: parity header truncated: %d of %d bytes", ErrCorrupt, buf.Len(), hl)
		}
		return nil, fmt.Errorf("parity: read header: %w", err)
	}
	return DecodeHeader(buf.Bytes())
}

// parsePrefix checks the first 16 bytes of a header (magic, version,
// flags) and returns the header length they announce.
func parsePrefix(b []byte) (uint64, error) {
	le := binary.LittleEndian
	if len(b) < 16 {
		return 0, fmt.Errorf("%w: parity header truncated: %d bytes", ErrCorrupt, len(b))
	}
	if string(b[:8]) != Magic {
		return 0, fmt.Errorf("%w: not a parity share (bad magic %q)", ErrCorrupt, b[:8])
	}
	if v := le.Uint16(b[8:]); v != formatVersion {
		return 0, fmt.Errorf("%w: parity share format version %d, this build reads %d", ErrMismatch, v, formatVersion)
	}
	if f := le.Uint16(b[10:]); f != 0 {
		return 0, fmt.Errorf("%w: unknown parity header flags %#x", ErrCorrupt, f)
	}
	hl := uint64(le.Uint32(b[12:]))
	if hl < headerFixed+4 || hl > MaxHeaderSize {
		return 0, fmt.Errorf("%w: parity header length %d out of range", ErrCorrupt, hl)
	}
	return hl, nil
}

// check verifies that h describes node h.Index of layout l.
func (h *Header) check(l *Layout) error {
	i := h.Index
	switch {
	case h.N != l.N() || h.BlockSize != l.BlockSize():
		return fmt.Errorf("%w: share of node %d: N=%d block size %d, expected N=%d block size %d",
			ErrMismatch, i, h.N, h.BlockSize, l.N(), l.BlockSize())
	case len(h.DataCRC) != l.DataBlocks(i):
		return fmt.Errorf("%w: share of node %d: %d image block checksums, layout has %d blocks",
			ErrCorrupt, i, len(h.DataCRC), l.DataBlocks(i))
	case len(h.ParityCRC) != l.ParityBlocks(i) || h.ParityBytes != l.ParityBytes(i):
		return fmt.Errorf("%w: share of node %d: %d parity blocks / %d bytes, layout has %d / %d",
			ErrCorrupt, i, len(h.ParityCRC), h.ParityBytes, l.ParityBlocks(i), l.ParityBytes(i))
	}
	for j, s := range h.Sizes {
		if s != l.Size(j) {
			return fmt.Errorf("%w: share of node %d records image %d as %d bytes, expected %d", ErrMismatch, i, j, s, l.Size(j))
		}
	}
	return nil
}

// Share is an opened parity share: its header and its parity payload.
type Share struct {
	Header  *Header
	payload io.ReaderAt
}

// OpenShare reads the header of the share file r of the given size and
// checks that the file holds the whole payload.
func OpenShare(r io.ReaderAt, size int64) (*Share, error) {
	h, err := ReadHeader(io.NewSectionReader(r, 0, size))
	if err != nil {
		return nil, err
	}
	if want := h.PayloadOffset() + h.ParityBytes; size != want {
		return nil, fmt.Errorf("%w: parity share of node %d is %d bytes, header says %d", ErrCorrupt, h.Index, size, want)
	}
	return &Share{Header: h, payload: io.NewSectionReader(r, h.PayloadOffset(), h.ParityBytes)}, nil
}

// Payload returns a reader over the share's parity blocks.
func (s *Share) Payload() io.ReaderAt { return s.payload }
