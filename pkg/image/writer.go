package image

import (
	"errors"
	"fmt"
	"io"
)

// A Writer writes an image stream, one typed record at a time, and refuses
// a record the format does not allow at that point (ErrOrder) or that a
// reader would refuse (ErrInvalid); a refused record is not written, so
// the stream stays a valid prefix. It is not safe for concurrent use.
type Writer struct {
	raw   rawWriter
	check *checker
	ended bool
}

// ErrEnded means a record was written after the end record.
var ErrEnded = errors.New("image: write after the end record")

// NewWriter writes the file header to w and returns a Writer for the records.
func NewWriter(w io.Writer) (*Writer, error) {
	iw := &Writer{raw: rawWriter{w: w}, check: newChecker()}
	if err := iw.raw.writeFileHeader(); err != nil {
		return nil, fmt.Errorf("write image header: %w", err)
	}
	return iw, nil
}

// Offset is the number of bytes written so far.
func (w *Writer) Offset() int64 { return w.raw.off }

// DataBytes is the number of record data bytes written so far.
func (w *Writer) DataBytes() int64 { return w.raw.dataBytes }

// write encodes meta and writes a record of type t after check accepted it.
func (w *Writer) write(t Type, what string, check func() error, meta any, data ...[]byte) error {
	if w.ended {
		return ErrEnded
	}
	if err := check(); err != nil {
		return fmt.Errorf("image: write %s: %w", what, err)
	}
	m, err := encodeMeta(meta)
	if err != nil {
		return fmt.Errorf("image: write %s: %w", what, err)
	}
	return w.raw.writeRecord(t, m, checksum(m, data), data)
}

// WriteHeader writes the header, the first record.
func (w *Writer) WriteHeader(h *Header) error {
	return w.write(TypeHeader, "header", func() error { return w.check.header(h) }, h)
}

// WriteProcess writes the record of one process; the root comes first,
// and there are as many as the header announces.
func (w *Writer) WriteProcess(p *Process) error {
	return w.write(TypeProcess, fmt.Sprintf("process %d", p.PID), func() error { return w.check.process(p) }, p)
}

// WriteFileData writes the kept content of a file (a deleted file, the
// bytes buffered in a pipe or socket) under id, which the metadata of the
// processes names. data is padded with zeros to a page multiple.
func (w *Writer) WriteFileData(id int, data []byte) error {
	padded := data
	if r := len(data) % PageSize; r != 0 {
		padded = make([]byte, len(data)+PageSize-r)
		copy(padded, data)
	}
	meta := FileData{ID: id, Size: int64(len(data))}
	return w.write(TypeFileData, fmt.Sprintf("file data %d", id),
		func() error { return w.check.fileData(&meta, int64(len(padded))) }, meta, padded)
}

// WritePages writes a pages record: the runs of pg and, in order, the
// contents of the runs that are not Zero.
func (w *Writer) WritePages(pg *Pages, data ...[]byte) error {
	p, err := PreparePages(pg, data...)
	if err != nil {
		return err
	}
	return w.WritePrepared(p)
}

// Prepared is a pages record whose metadata is encoded and whose checksum
// is computed ahead of its writing, so that a pipeline can do that work in
// another goroutine than the one that writes (to a socket, say).
type Prepared struct {
	pages *Pages
	meta  []byte
	data  [][]byte
	sum   uint32
}

// PreparePages encodes a pages record and checksums it. The data must not
// change until the record is written.
func PreparePages(pg *Pages, data ...[]byte) (*Prepared, error) {
	if err := checkRuns(pg, int64(dataLen(data))); err != nil {
		return nil, fmt.Errorf("image: prepare pages: %w", err)
	}
	m, err := encodeMeta(pg)
	if err != nil {
		return nil, err
	}
	return &Prepared{pages: pg, meta: m, data: data, sum: checksum(m, data)}, nil
}

// WritePrepared writes a record made by PreparePages.
func (w *Writer) WritePrepared(p *Prepared) error {
	if w.ended {
		return ErrEnded
	}
	if err := w.check.pages(p.pages, int64(dataLen(p.data))); err != nil {
		return fmt.Errorf("image: write pages: %w", err)
	}
	return w.raw.writeRecord(TypePages, p.meta, p.sum, p.data)
}

// End writes the end record, which counts the records before it. It does
// not close the underlying writer; after it nothing can be written, and a
// second call does nothing.
func (w *Writer) End() error {
	if w.ended {
		return nil
	}
	if err := w.check.end(); err != nil {
		return fmt.Errorf("image: write end: %w", err)
	}
	w.ended = true
	return w.raw.writeEnd()
}
