package image

import (
	"errors"
	"fmt"
	"io"
)

// Meta is what an image says before its pages: the header, every process
// and the kept file contents, all checked (see ReadMeta).
type Meta struct {
	Header    Header
	Processes []*Process // the root first, parents before children
	// FileData is the content of every FileData record, by ID, without
	// its padding.
	FileData map[int][]byte

	files map[int]*File
	pages *PagesReader
}

// File returns the open file description with image-wide ID id, whichever
// process lists it.
func (m *Meta) File(id int) (*File, bool) {
	f, ok := m.files[id]
	return f, ok
}

// Pages returns the iterator over the pages records that follow the
// metadata, up to the end record.
func (m *Meta) Pages() *PagesReader { return m.pages }

// ReadMeta reads the file header and the metadata records of an image
// stream, checking their order and content, and stops at the first pages
// record (or the end record), which m.Pages() then returns. It refuses an
// image of another format version (ErrVersion), one whose records are out
// of order (ErrOrder), hold unknown fields or miss required ones
// (ErrInvalid), are damaged (ErrCorrupt) or cut short (ErrTruncated).
func ReadMeta(r io.Reader) (*Meta, error) {
	ir, err := newReader(r)
	if err != nil {
		return nil, err
	}
	c := newChecker()
	m := &Meta{FileData: map[int][]byte{}, files: map[int]*File{}}
	for {
		rec, err := ir.next()
		if err == io.EOF {
			// next returns the end record before io.EOF, and the
			// loop stops there.
			return nil, fmt.Errorf("image: the stream ended without an end record: %w", ErrTruncated)
		}
		if err != nil {
			return nil, err
		}
		switch rec.typ {
		case TypeHeader:
			if err := rec.decode(&m.Header); err != nil {
				return nil, err
			}
			if err := c.header(&m.Header); err != nil {
				return nil, fmt.Errorf("%s: %w", rec, err)
			}
		case TypeProcess:
			p := new(Process)
			if err := rec.decode(p); err != nil {
				return nil, err
			}
			if err := c.process(p); err != nil {
				return nil, fmt.Errorf("%s: %w", rec, err)
			}
			m.Processes = append(m.Processes, p)
		case TypeFileData:
			var fd FileData
			if err := rec.decode(&fd); err != nil {
				return nil, err
			}
			if err := c.fileData(&fd, rec.dataLen); err != nil {
				return nil, fmt.Errorf("%s: %w", rec, err)
			}
			buf := make([]byte, rec.dataLen)
			if _, err := ir.readData(buf); err != nil {
				return nil, err
			}
			m.FileData[fd.ID] = buf[:fd.Size]
		default:
			// The first record after the metadata: the pages
			// iterator takes it from here and checks it.
			if err := c.enter(rec.typ); err != nil {
				return nil, fmt.Errorf("%s: %w", rec, err)
			}
			for _, p := range m.Processes {
				for i := range p.Files {
					m.files[p.Files[i].ID] = &p.Files[i]
				}
			}
			m.pages = &PagesReader{r: ir, c: c, first: rec}
			return m, nil
		}
	}
}

// PagesReader iterates over the pages records of an image, up to its end
// record, checking each against the processes of the image. It is not safe
// for concurrent use, but the check returned by ReadDataLater may run in
// another goroutine.
type PagesReader struct {
	r     *reader
	c     *checker
	first *record // read by ReadMeta, not returned yet
	cur   *record
	end   bool
}

// Next returns the next pages record's metadata and its data length. Its
// data is then read with ReadData or ReadDataLater; data left unread is
// read, checked and discarded by the following Next. Next returns io.EOF
// once the end record has been read and checked: only then is the image
// known to be whole.
func (r *PagesReader) Next() (*Pages, int64, error) {
	if r.end {
		return nil, 0, io.EOF
	}
	rec := r.first
	r.first = nil
	r.cur = nil
	if rec == nil {
		var err error
		if rec, err = r.r.next(); err != nil {
			if err == io.EOF {
				err = fmt.Errorf("image: read past the end record: %w", ErrCorrupt)
			}
			return nil, 0, err
		}
		// ReadMeta entered the first record's stage already.
		switch rec.typ {
		case TypeEnd:
			if err := r.c.end(); err != nil {
				return nil, 0, fmt.Errorf("%s: %w", rec, err)
			}
		case TypePages:
		default:
			if err := r.c.enter(rec.typ); err != nil {
				return nil, 0, fmt.Errorf("%s: %w", rec, err)
			}
		}
	}
	if rec.typ == TypeEnd {
		r.end = true
		return nil, 0, io.EOF
	}
	pg := new(Pages)
	if err := rec.decode(pg); err != nil {
		return nil, 0, err
	}
	if err := r.c.pages(pg, rec.dataLen); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", rec, err)
	}
	r.cur = rec
	return pg, rec.dataLen, nil
}

// errNoRecord means a data read came without a current pages record.
var errNoRecord = errors.New("image: no pages record to read data from")

// ReadData reads all of the current record's data into p, which must be
// exactly its length, and verifies the record's checksum.
func (r *PagesReader) ReadData(p []byte) error {
	if r.cur == nil {
		return errNoRecord
	}
	if int64(len(p)) != r.r.left || r.r.left != r.cur.dataLen {
		return fmt.Errorf("image: read of %d data bytes, %d left in %s", len(p), r.r.left, r.cur)
	}
	_, err := r.r.readData(p)
	return err
}

// ReadDataLater reads all of the current record's data into p (exactly
// its length) without checking it, and returns the check: it must be
// called, and succeed, before the data is used. A pipeline uses it to move
// the checksum off the goroutine that reads from a socket.
func (r *PagesReader) ReadDataLater(p []byte) (check func() error, err error) {
	if r.cur == nil {
		return nil, errNoRecord
	}
	return r.r.readDataLater(p)
}

// Offset is the number of stream bytes consumed so far: after Next
// returned io.EOF, the size of the image.
func (r *PagesReader) Offset() int64 { return r.r.off }

// Records is the number of records read so far, the end record not
// counted.
func (r *PagesReader) Records() int {
	if r.end {
		return r.r.n - 1
	}
	return r.r.n
}
