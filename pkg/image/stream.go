package image

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// endMeta is the metadata of the end record.
type endMeta struct {
	Records   int   `json:"records"`
	DataBytes int64 `json:"data_bytes"`
}

// A Writer writes an image stream. It is not safe for concurrent use.
type Writer struct {
	w         io.Writer
	off       int64
	records   int
	dataBytes int64
	scratch   []byte
	err       error
	closed    bool
}

// NewWriter writes the file header to w and returns a Writer for the records.
func NewWriter(w io.Writer) (*Writer, error) {
	iw := &Writer{w: w}
	var h [fileHeaderSize]byte
	copy(h[:], Magic)
	binary.LittleEndian.PutUint32(h[8:], Version)
	if err := iw.write(h[:]); err != nil {
		return nil, fmt.Errorf("write image header: %w", err)
	}
	return iw, nil
}

func (w *Writer) write(b []byte) error {
	if w.err != nil {
		return w.err
	}
	n, err := w.w.Write(b)
	w.off += int64(n)
	if err != nil {
		w.err = err
	}
	return err
}

// Offset is the number of bytes written so far.
func (w *Writer) Offset() int64 { return w.off }

// DataBytes is the number of record data bytes written so far.
func (w *Writer) DataBytes() int64 { return w.dataBytes }

// WriteRecord writes one record: meta encoded as JSON, then the data slices
// in order. The data slices together must be a multiple of PageSize long.
func (w *Writer) WriteRecord(t Type, meta any, data ...[]byte) error {
	if w.closed {
		return errors.New("image: write after close")
	}
	m, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("image: encode %s record: %w", t, err)
	}
	return w.writeRaw(t, m, data...)
}

// Prepared is a record whose metadata is encoded and whose checksum is
// computed ahead of its writing, so that a pipeline can do that work in
// another goroutine than the one that writes (to a socket, say).
type Prepared struct {
	typ  Type
	meta []byte
	data [][]byte
	sum  uint32
}

// Prepare encodes meta and checksums the record. The data must not change
// until the record is written.
func Prepare(t Type, meta any, data ...[]byte) (*Prepared, error) {
	m, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("image: encode %s record: %w", t, err)
	}
	sum := crc32.Update(0, castagnoli, m)
	for _, d := range data {
		sum = crc32.Update(sum, castagnoli, d)
	}
	return &Prepared{typ: t, meta: m, data: data, sum: sum}, nil
}

// WritePrepared writes a record made by Prepare.
func (w *Writer) WritePrepared(p *Prepared) error {
	if w.closed {
		return errors.New("image: write after close")
	}
	return w.writeSum(p.typ, p.meta, p.sum, p.data...)
}

func (w *Writer) writeRaw(t Type, meta []byte, data ...[]byte) error {
	sum := crc32.Update(0, castagnoli, meta)
	for _, d := range data {
		sum = crc32.Update(sum, castagnoli, d)
	}
	return w.writeSum(t, meta, sum, data...)
}

func (w *Writer) writeSum(t Type, meta []byte, sum uint32, data ...[]byte) error {
	var dlen uint64
	for _, d := range data {
		dlen += uint64(len(d))
	}
	if dlen%PageSize != 0 {
		return fmt.Errorf("image: %s record data is %d bytes, not a multiple of %d", t, dlen, PageSize)
	}
	h := recordHeader{typ: t, metaLen: uint64(len(meta)), dataLen: dlen, sum: sum}
	need := recordHeaderSize + len(meta) + PageSize
	if cap(w.scratch) < need {
		w.scratch = make([]byte, need)
	}
	b := w.scratch[:recordHeaderSize]
	h.marshal(b)
	b = append(b, meta...)
	if dlen > 0 {
		pad := padding(w.off + int64(len(b)))
		for i := int64(0); i < pad; i++ {
			b = append(b, 0)
		}
	}
	if err := w.write(b); err != nil {
		return fmt.Errorf("image: write %s record %d: %w", t, w.records, err)
	}
	for _, d := range data {
		if err := w.write(d); err != nil {
			return fmt.Errorf("image: write %s record %d data: %w", t, w.records, err)
		}
	}
	w.records++
	w.dataBytes += int64(dlen)
	return nil
}

// Close writes the end record. It does not close the underlying writer.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	m, _ := json.Marshal(endMeta{Records: w.records, DataBytes: w.dataBytes})
	err := w.writeRaw(TypeEnd, m)
	w.closed = true
	return err
}

// A Record is one record of a stream, as returned by Reader.Next. Its data,
// if any, is read with Reader.ReadData before the next call to Next.
type Record struct {
	Type    Type
	Index   int   // position of the record in the stream, from 0
	Offset  int64 // stream offset of the record header
	Meta    []byte
	DataLen int64
}

// Decode unmarshals the record's JSON metadata into v.
func (r *Record) Decode(v any) error {
	if err := json.Unmarshal(r.Meta, v); err != nil {
		return fmt.Errorf("%s: decode metadata: %v: %w", r, err, ErrCorrupt)
	}
	return nil
}

func (r *Record) String() string {
	return fmt.Sprintf("record %d (%s) at offset %d", r.Index, r.Type, r.Offset)
}

// A Reader reads an image stream record by record and verifies every
// checksum. It is not safe for concurrent use.
type Reader struct {
	r         *bufio.Reader
	off       int64
	n         int
	dataBytes int64
	cur       *Record
	left      int64  // data bytes of cur not yet read
	sum       uint32 // running checksum of cur
	want      uint32
	done      bool
	discard   []byte
}

// NewReader reads and checks the file header.
func NewReader(r io.Reader) (*Reader, error) {
	ir := &Reader{r: bufio.NewReaderSize(r, 256<<10)}
	var h [fileHeaderSize]byte
	if _, err := io.ReadFull(ir.r, h[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("file header: %w", ErrNotImage)
		}
		return nil, fmt.Errorf("read file header: %w", err)
	}
	ir.off = fileHeaderSize
	if string(h[:8]) != Magic {
		return nil, fmt.Errorf("bad magic %q: %w", h[:8], ErrNotImage)
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != Version {
		return nil, fmt.Errorf("format version %d, this ckpt reads %d: %w", v, Version, ErrVersion)
	}
	return ir, nil
}

func (r *Reader) readFull(p []byte, what string) error {
	n, err := io.ReadFull(r.r, p)
	r.off += int64(n)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%s: %w", what, ErrTruncated)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Next returns the next record. It returns io.EOF after the end record has
// been read and checked. Data of the previous record that was not read is
// read, checked and discarded.
func (r *Reader) Next() (*Record, error) {
	if r.done {
		return nil, io.EOF
	}
	if r.cur != nil && r.left > 0 {
		if r.discard == nil {
			r.discard = make([]byte, 1<<20)
		}
		for r.left > 0 {
			n := int64(len(r.discard))
			if n > r.left {
				n = r.left
			}
			if _, err := r.ReadData(r.discard[:n]); err != nil {
				return nil, err
			}
		}
	}
	rec := &Record{Index: r.n, Offset: r.off}
	var hb [recordHeaderSize]byte
	if err := r.readFull(hb[:], rec.String()+": header"); err != nil {
		return nil, err
	}
	var h recordHeader
	if err := h.unmarshal(hb[:]); err != nil {
		return nil, fmt.Errorf("%s: %w", rec, err)
	}
	rec.Type = h.typ
	rec.DataLen = int64(h.dataLen)
	rec.Meta = make([]byte, h.metaLen)
	if err := r.readFull(rec.Meta, rec.String()+": metadata"); err != nil {
		return nil, err
	}
	r.sum = crc32.Update(0, castagnoli, rec.Meta)
	r.want = h.sum
	if h.dataLen > 0 {
		pad := make([]byte, padding(r.off))
		if err := r.readFull(pad, rec.String()+": padding"); err != nil {
			return nil, err
		}
		for _, c := range pad {
			if c != 0 {
				return nil, fmt.Errorf("%s: non-zero padding: %w", rec, ErrCorrupt)
			}
		}
	}
	r.cur, r.left = rec, rec.DataLen
	r.n++
	if h.dataLen == 0 {
		if err := r.check(); err != nil {
			return nil, err
		}
	}
	if rec.Type == TypeEnd {
		var end endMeta
		if err := rec.Decode(&end); err != nil {
			return nil, err
		}
		if end.Records != rec.Index || end.DataBytes != r.dataBytes {
			return nil, fmt.Errorf("%s: counts %d records and %d data bytes, stream has %d and %d: %w",
				rec, end.Records, end.DataBytes, rec.Index, r.dataBytes, ErrCorrupt)
		}
		r.done = true
		return nil, io.EOF
	}
	return rec, nil
}

func (r *Reader) check() error {
	if r.sum != r.want {
		return fmt.Errorf("%s: checksum %08x, want %08x: %w", r.cur, r.sum, r.want, ErrCorrupt)
	}
	return nil
}

// ReadData reads the next len(p) bytes of the current record's data. When
// the last byte of the data has been read, it verifies the record checksum.
func (r *Reader) ReadData(p []byte) (int, error) {
	if r.cur == nil || int64(len(p)) > r.left {
		return 0, fmt.Errorf("image: read of %d data bytes, %d left in record", len(p), r.left)
	}
	if err := r.readFull(p, r.cur.String()+": data"); err != nil {
		return 0, err
	}
	r.sum = crc32.Update(r.sum, castagnoli, p)
	r.left -= int64(len(p))
	r.dataBytes += int64(len(p))
	if r.left == 0 {
		if err := r.check(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// ReadDataLater reads all of the current record's data into p (exactly
// its length) without checking it, and returns the check: it must be
// called, and succeed, before the data is used. A pipeline uses it to move
// the checksum off the goroutine that reads from a socket.
func (r *Reader) ReadDataLater(p []byte) (check func() error, err error) {
	if r.cur == nil || int64(len(p)) != r.left || r.left != r.cur.DataLen {
		return nil, fmt.Errorf("image: deferred read of %d data bytes, %d left in record", len(p), r.left)
	}
	if err := r.readFull(p, r.cur.String()+": data"); err != nil {
		return nil, err
	}
	rec, metaSum, want := r.cur, r.sum, r.want
	r.left = 0
	r.dataBytes += int64(len(p))
	return func() error {
		if sum := crc32.Update(metaSum, castagnoli, p); sum != want {
			return fmt.Errorf("%s: checksum %08x, want %08x: %w", rec, sum, want, ErrCorrupt)
		}
		return nil
	}, nil
}

// Offset is the number of stream bytes consumed so far.
func (r *Reader) Offset() int64 { return r.off }
