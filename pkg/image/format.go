// Package image owns the on-disk and on-the-wire format of a ckpt
// checkpoint image: its layout, its record order and what every record must
// hold. Nothing outside this package reads or writes records by hand: a
// dump writes with the typed methods of Writer (WriteHeader, WriteProcess,
// WriteFileData, WritePages or WritePrepared, End), a restore, `ckpt show`
// or a transfer reads with ReadMeta, which returns the header, every
// process and the kept file contents in one checked pass, and then the
// pages with Meta.Pages, an iterator over the pages records up to the end
// record.
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
//	8      4    format version, little endian (currently 2)
//	12     4    reserved, zero
//
// An image of another version is refused (ErrVersion), naming both
// versions. Version 2 made metadata strict (below) and the record order
// checked on both sides; version 1 images are not read.
//
// The file header is followed by records. Every record is a 32-byte record
// header, a metadata part and an optional data part:
//
//	offset size
//	0      4    record type (see Type)
//	4      4    flags, zero
//	8      8    metadata length M
//	16     8    data length D (a multiple of 4096 when not zero)
//	24     4    CRC-32C of metadata followed by data
//	28     4    CRC-32C of bytes 0..27 of this header
//
// The metadata is JSON, decoded strictly: a field this version does not
// know is an error (ErrInvalid), so that a renamed field is never silently
// read as zero. A field added to a record makes an older ckpt refuse the
// newer images, naming the field; Version is bumped when a change makes
// older images read wrongly (a field renamed, retyped or given a new
// meaning). When D is not zero, zero bytes pad the stream after the metadata up to the next
// multiple of 4096 counted from the start of the stream, and the data
// follows: page data is page-aligned in a file, so it can be mapped or read
// with O_DIRECT. Each record is checksummed on its own, so a broken record
// is named exactly.
//
// # Record order
//
// The order is checked in one place (order.go), the same way when an image
// is written and when it is read; a record out of order is ErrOrder:
//
//  1. one Header (TypeHeader), first;
//  2. one Process (TypeProcess) per process, as many as Header.Processes,
//     the root (Header.Root) first;
//  3. the kept file contents (TypeFileData): deleted files, buffered pipe
//     and socket bytes, each with a unique ID > 0;
//  4. the memory pages (TypePages) of the live processes;
//  5. the end record (TypeEnd), which counts the records before it: a
//     stream without it is truncated, whatever else it holds.
//
// A receiver thus has the whole process tree described before the first
// page arrives, so it can build the processes while the pages stream in.
//
// # Content checks
//
// Beyond the order, the records must hold what a restore relies on, or
// they are refused with ErrInvalid naming the record: a process has its
// leader thread (unless it is a zombie), distinct thread IDs and fd
// numbers, page-aligned VMAs in ascending order with end > start, file
// VMAs naming an entry of Process.Mapped, 0 or 64 signal actions, files
// with a kind and image-wide unique IDs, and every fd names a file listed
// by some process of the image (File IDs are image-wide: a process may use
// a file listed by another one). Every FileData ID the processes name (the
// content of a deleted file, bytes buffered in a pipe, socket queues) has
// its record. A pages record names a live process of the image and its
// runs use exactly its data.
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
const Version = 2

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

// String names the record type ("header", "process", ... or "type-N").
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
	// ErrOrder means a record is out of place: not after the records the
	// format puts before it, or one too many (a second header).
	ErrOrder = errors.New("image records out of order")
	// ErrInvalid means a record's metadata is well-formed JSON with a
	// good checksum, but not what this version writes: an unknown field,
	// a missing or malformed required field, a reference to something the
	// image does not hold.
	ErrInvalid = errors.New("invalid image record")
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
