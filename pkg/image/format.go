// Package image defines the on-disk and on-the-wire format of a ckpt
// checkpoint image, and a Writer and Reader for it.
//
// An image is one stream of bytes, written in one pass and readable in one
// pass, so that it can live in a file, go through a pipe or cross a socket.
// In an image directory the stream is the file "image.ckpt".
//
// # Layout
//
// The stream starts with a 16-byte file header:
//
//	offset size
//	0      8    magic "CKPTIMG\x00"
//	8      4    format version, little endian (currently 1)
//	12     4    reserved, zero
//
// followed by records. Every record is a 32-byte record header, a metadata
// part and an optional data part:
//
//	offset size
//	0      4    record type (see Type)
//	4      4    flags, zero
//	8      8    metadata length M
//	16     8    data length D (a multiple of 4096 when not zero)
//	24     4    CRC-32C of metadata followed by data
//	28     4    CRC-32C of bytes 0..27 of this header
//
// The metadata is JSON (self-describing; new fields can be added without a
// version change). When D is not zero, zero bytes pad the stream after the
// metadata up to the next multiple of 4096 counted from the start of the
// stream, and the data follows: page data is page-aligned in a file, so it can
// be mapped or read with O_DIRECT. Each record is checksummed on its own, so a
// broken record is named exactly.
//
// # Record order
//
// The first record is a Header (TypeHeader). Then come the metadata records
// of every process (TypeProcess), and files whose content is kept in the
// image (TypeFileData). Only then come the memory pages (TypePages): a
// receiver has the whole process tree described before the first page
// arrives, so it can build the processes while the pages stream in. The last
// record is TypeEnd, which counts the records before it: a stream without it
// is truncated, whatever else it holds.
package image

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Magic opens every image stream.
const Magic = "CKPTIMG\x00"

// Version is the format version this package writes and reads.
const Version = 1

// PageSize is the alignment of record data within a stream.
const PageSize = 4096

// FileName is the name of the image stream inside an image directory.
const FileName = "image.ckpt"

const (
	fileHeaderSize   = 16
	recordHeaderSize = 32
	// MaxMetaSize bounds a record's metadata, so that a corrupt length
	// cannot make the reader allocate without limit.
	MaxMetaSize = 64 << 20
	// MaxDataSize bounds one record's data.
	MaxDataSize = 1 << 40
)

// Type is the kind of a record.
type Type uint32

// Record types.
const (
	TypeHeader   Type = 1 // Header: what made the image, and on what machine
	TypeProcess  Type = 2 // Process: everything about one process but its pages
	TypeFileData Type = 3 // FileData metadata + the file's content as data
	TypePages    Type = 4 // Pages metadata + page contents as data
	TypeEnd      Type = 0x7fffffff
)

func (t Type) String() string {
	switch t {
	case TypeHeader:
		return "header"
	case TypeProcess:
		return "process"
	case TypeFileData:
		return "file-data"
	case TypePages:
		return "pages"
	case TypeEnd:
		return "end"
	}
	return fmt.Sprintf("type-%d", uint32(t))
}

// Errors a caller can branch on. They are wrapped with the position of the
// broken record.
var (
	// ErrNotImage means the stream does not start with the image magic.
	ErrNotImage = errors.New("not a ckpt image")
	// ErrVersion means the image was written by an incompatible format version.
	ErrVersion = errors.New("unsupported image format version")
	// ErrTruncated means the stream ended before its end record.
	ErrTruncated = errors.New("image is truncated")
	// ErrCorrupt means a checksum or a length does not match.
	ErrCorrupt = errors.New("image is corrupt")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type recordHeader struct {
	typ     Type
	flags   uint32
	metaLen uint64
	dataLen uint64
	sum     uint32
}

func (h *recordHeader) marshal(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], uint32(h.typ))
	binary.LittleEndian.PutUint32(b[4:], h.flags)
	binary.LittleEndian.PutUint64(b[8:], h.metaLen)
	binary.LittleEndian.PutUint64(b[16:], h.dataLen)
	binary.LittleEndian.PutUint32(b[24:], h.sum)
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
}

func (h *recordHeader) unmarshal(b []byte) error {
	if got, want := crc32.Checksum(b[:28], castagnoli), binary.LittleEndian.Uint32(b[28:]); got != want {
		return fmt.Errorf("record header checksum %08x, want %08x: %w", got, want, ErrCorrupt)
	}
	h.typ = Type(binary.LittleEndian.Uint32(b[0:]))
	h.flags = binary.LittleEndian.Uint32(b[4:])
	h.metaLen = binary.LittleEndian.Uint64(b[8:])
	h.dataLen = binary.LittleEndian.Uint64(b[16:])
	h.sum = binary.LittleEndian.Uint32(b[24:])
	switch {
	case h.metaLen > MaxMetaSize:
		return fmt.Errorf("metadata length %d over the limit: %w", h.metaLen, ErrCorrupt)
	case h.dataLen > MaxDataSize:
		return fmt.Errorf("data length %d over the limit: %w", h.dataLen, ErrCorrupt)
	case h.dataLen%PageSize != 0:
		return fmt.Errorf("data length %d not page aligned: %w", h.dataLen, ErrCorrupt)
	}
	return nil
}

// padding returns how many zero bytes bring off to the next page boundary.
func padding(off int64) int64 {
	return (PageSize - off%PageSize) % PageSize
}
