package image

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReader feeds arbitrary bytes to the record framing and to ReadMeta
// with its pages iterator: neither may panic or allocate without bound, a
// corrupt pages record must fail its deferred check with ErrCorrupt, and
// an image ReadMeta accepts must have passed every check the Writer makes,
// so writing what was read back gives an image that reads the same.
func FuzzReader(f *testing.F) {
	f.Add(writeSample(f))
	f.Add([]byte(Magic + "\x02\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzFraming(t, b)
		fuzzMeta(t, b)
	})
}

// fuzzFraming walks the records with the framing reader alone.
func fuzzFraming(t *testing.T, b []byte) {
	r, err := newReader(bytes.NewReader(b))
	if err != nil {
		return
	}
	for i := 0; i < 1000; i++ {
		rec, err := r.next()
		if err != nil || rec.typ == TypeEnd {
			return
		}
		var h Header
		var p Process
		_ = rec.decode(&h)
		_ = rec.decode(&p)
		if rec.dataLen > 0 && rec.dataLen < 1<<20 {
			if _, err := r.readData(make([]byte, rec.dataLen)); err != nil {
				return
			}
		}
	}
}

// fuzzMeta reads the image the way a restore does: metadata first, then
// the pages, checked later.
func fuzzMeta(t *testing.T, b []byte) {
	m, err := ReadMeta(bytes.NewReader(b))
	if err != nil {
		return
	}
	var out bytes.Buffer
	w, err := NewWriter(&out)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteHeader(&m.Header); err != nil {
		t.Fatalf("ReadMeta accepted a header the Writer refuses: %v", err)
	}
	for _, p := range m.Processes {
		if err := w.WriteProcess(p); err != nil {
			t.Fatalf("ReadMeta accepted a process the Writer refuses: %v", err)
		}
	}
	for id, d := range m.FileData {
		if err := w.WriteFileData(id, d); err != nil {
			t.Fatalf("ReadMeta accepted file data the Writer refuses: %v", err)
		}
	}
	pr := m.Pages()
	for i := 0; i < 1000; i++ {
		pg, n, err := pr.Next()
		if err == io.EOF {
			if err := w.End(); err != nil {
				t.Fatalf("the Writer refuses to end what the reader accepted: %v", err)
			}
			if _, _, err := readImage(out.Bytes()); err != nil {
				t.Fatalf("the image rewritten from what was read does not read: %v", err)
			}
			return
		}
		if err != nil || n >= 1<<20 {
			return
		}
		buf := make([]byte, n)
		check, err := pr.ReadDataLater(buf)
		if err != nil {
			return
		}
		if err := check(); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("deferred check: %v, want ErrCorrupt", err)
			}
			return
		}
		if err := w.WritePages(pg, buf); err != nil {
			t.Fatalf("the pages reader accepted a record the Writer refuses: %v", err)
		}
	}
}
