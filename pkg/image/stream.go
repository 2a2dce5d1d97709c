package image

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// This file holds the record framing: headers, checksums, padding and the
// end record's counts. It knows nothing of what records mean or of their
// order; writer.go and reader.go put the typed API and order.go the checks
// on top of it.

// endMeta is the metadata of the end record.
type endMeta struct {
	Records   int   `json:"records"`
	DataBytes int64 `json:"data_bytes"`
}

// rawWriter frames records into a stream.
type rawWriter struct {
	w         io.Writer
	off       int64
	records   int
	dataBytes int64
	scratch   []byte
	err       error
}

func (w *rawWriter) write(b []byte) error {
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

// writeFileHeader writes the magic and the version.
func (w *rawWriter) writeFileHeader() error {
	var h [fileHeaderSize]byte
	copy(h[:], Magic)
	binary.LittleEndian.PutUint32(h[8:], Version)
	return w.write(h[:])
}

// checksum is the CRC-32C of a record's metadata followed by its data.
func checksum(meta []byte, data [][]byte) uint32 {
	sum := crc32.Update(0, castagnoli, meta)
	for _, d := range data {
		sum = crc32.Update(sum, castagnoli, d)
	}
	return sum
}

// dataLen is the total length of data slices.
func dataLen(data [][]byte) uint64 {
	var n uint64
	for _, d := range data {
		n += uint64(len(d))
	}
	return n
}

// writeRecord writes one record whose checksum is sum.
func (w *rawWriter) writeRecord(t Type, meta []byte, sum uint32, data [][]byte) error {
	dlen := dataLen(data)
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

// writeEnd writes the end record.
func (w *rawWriter) writeEnd() error {
	m, err := encodeMeta(endMeta{Records: w.records, DataBytes: w.dataBytes})
	if err != nil {
		return err
	}
	return w.writeRecord(TypeEnd, m, checksum(m, nil), nil)
}

// record is one record of a stream as the reader frames it. Its data, if
// any, is read with readData or readDataLater before the next call to next.
type record struct {
	typ     Type
	index   int   // position of the record in the stream, from 0
	offset  int64 // stream offset of the record header
	meta    []byte
	dataLen int64
}

func (r *record) String() string {
	return fmt.Sprintf("record %d (%s) at offset %d", r.index, r.typ, r.offset)
}

// decode unmarshals the record's metadata strictly into v.
func (r *record) decode(v any) error {
	if err := decodeMeta(r.meta, v); err != nil {
		return fmt.Errorf("%s: %w", r, err)
	}
	return nil
}

// reader frames the records of a stream and verifies every checksum and
// the end record's counts.
type reader struct {
	r         *bufio.Reader
	off       int64
	n         int
	dataBytes int64
	cur       *record
	left      int64  // data bytes of cur not yet read
	sum       uint32 // running checksum of cur
	want      uint32
	done      bool
	discard   []byte
}

// newReader reads and checks the file header.
func newReader(r io.Reader) (*reader, error) {
	ir := &reader{r: bufio.NewReaderSize(r, 256<<10)}
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
		return nil, fmt.Errorf("the image has format version %d, this ckpt reads version %d only: %w", v, Version, ErrVersion)
	}
	return ir, nil
}

func (r *reader) readFull(p []byte, what string) error {
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

// next returns the next record. It returns io.EOF after the end record has
// been read and checked. Data of the previous record that was not read is
// read, checked and discarded.
func (r *reader) next() (*record, error) {
	if r.done {
		return nil, io.EOF
	}
	if r.cur != nil && r.left > 0 {
		if r.discard == nil {
			r.discard = make([]byte, 1<<20)
		}
		for r.left > 0 {
			n := min(int64(len(r.discard)), r.left)
			if _, err := r.readData(r.discard[:n]); err != nil {
				return nil, err
			}
		}
	}
	rec := &record{index: r.n, offset: r.off}
	var hb [recordHeaderSize]byte
	if err := r.readFull(hb[:], rec.String()+": header"); err != nil {
		return nil, err
	}
	var h recordHeader
	if err := h.unmarshal(hb[:]); err != nil {
		return nil, fmt.Errorf("%s: %w", rec, err)
	}
	rec.typ = h.typ
	rec.dataLen = int64(h.dataLen)
	rec.meta = make([]byte, h.metaLen)
	if err := r.readFull(rec.meta, rec.String()+": metadata"); err != nil {
		return nil, err
	}
	r.sum = crc32.Update(0, castagnoli, rec.meta)
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
	r.cur, r.left = rec, rec.dataLen
	r.n++
	if h.dataLen == 0 {
		if err := r.check(); err != nil {
			return nil, err
		}
	}
	if rec.typ == TypeEnd {
		var end endMeta
		if err := rec.decode(&end); err != nil {
			return nil, err
		}
		if end.Records != rec.index || end.DataBytes != r.dataBytes {
			return nil, fmt.Errorf("%s: counts %d records and %d data bytes, stream has %d and %d: %w",
				rec, end.Records, end.DataBytes, rec.index, r.dataBytes, ErrCorrupt)
		}
		r.done = true
		return rec, nil
	}
	return rec, nil
}

func (r *reader) check() error {
	if r.sum != r.want {
		return fmt.Errorf("%s: checksum %08x, want %08x: %w", r.cur, r.sum, r.want, ErrCorrupt)
	}
	return nil
}

// readData reads the next len(p) bytes of the current record's data. When
// the last byte of the data has been read, it verifies the record checksum.
func (r *reader) readData(p []byte) (int, error) {
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

// readDataLater reads all of the current record's data into p (exactly
// its length) without checking it, and returns the check.
func (r *reader) readDataLater(p []byte) (check func() error, err error) {
	if r.cur == nil || int64(len(p)) != r.left || r.left != r.cur.dataLen {
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
