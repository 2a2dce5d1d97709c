package image

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sampleHeader, sampleRoot and sampleChild make a small valid image of two
// processes: the child uses a file (ID 0) that the root lists, and a pipe
// (ID 1) it lists itself, whose buffered bytes are file data 1.
func sampleHeader() *Header {
	return &Header{Tool: "test", Machine: "x86_64", Root: 42, Processes: 2}
}

func sampleRoot() *Process {
	return &Process{PID: 42, Comm: "root", Threads: []Thread{{TID: 42}, {TID: 44}},
		VMAs: []VMA{
			{Start: 0x1000, End: 0x3000, Kind: VMAAnon, File: -1, Pages: 2},
			{Start: 0x9000, End: 0xe000, Kind: VMAAnon, File: -1, Pages: 5},
			{Start: 0x20000, End: 0x21000, Kind: VMAFile, File: 0, Pages: 1},
		},
		Mapped: []FileRef{{Path: "/bin/x"}},
		Files:  []File{{ID: 0, Kind: FileRegular, Ref: FileRef{Path: "/tmp/log"}}},
		FDs:    []FD{{FD: 1, File: 0}},
	}
}

func sampleChild() *Process {
	return &Process{PID: 43, PPID: 42, Comm: "child", Threads: []Thread{{TID: 43}},
		VMAs:  []VMA{{Start: 0x1000, End: 0x2000, Kind: VMAAnon, File: -1, Pages: 1}},
		Files: []File{{ID: 1, Kind: FilePipe, Pipe: &Pipe{Ino: 7, DataID: 1}}},
		FDs:   []FD{{FD: 1, File: 0}, {FD: 3, File: 1}},
	}
}

var (
	samplePage  = bytes.Repeat([]byte{0xab}, 2*PageSize)
	samplePages = []*Pages{
		{PID: 42, Runs: []PageRun{{Addr: 0x1000, Pages: 2}, {Addr: 0x9000, Pages: 5, Zero: true}}},
		{PID: 42, Runs: []PageRun{{Addr: 0x20000, Pages: 1}}},
		{PID: 43, Runs: []PageRun{{Addr: 0x1000, Pages: 1}}},
	}
	sampleData = [][]byte{samplePage, samplePage[:PageSize], samplePage[:PageSize]}
)

func writeSample(t testing.TB) []byte {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	steps := []func() error{
		func() error { return w.WriteHeader(sampleHeader()) },
		func() error { return w.WriteProcess(sampleRoot()) },
		func() error { return w.WriteProcess(sampleChild()) },
		func() error { return w.WriteFileData(1, []byte("hello")) },
		func() error { return w.WritePages(samplePages[0], sampleData[0]) },
		func() error {
			p, err := PreparePages(samplePages[1], sampleData[1])
			if err != nil {
				return err
			}
			return w.WritePrepared(p)
		},
		func() error { return w.WritePages(samplePages[2], sampleData[2]) },
		w.End,
	}
	for i, s := range steps {
		if err := s(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	return buf.Bytes()
}

// readImage reads an image with ReadMeta and its pages iterator, reading
// the data of every other pages record and letting Next skip the others.
func readImage(b []byte) (*Meta, []*Pages, error) {
	m, err := ReadMeta(bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	var pages []*Pages
	pr := m.Pages()
	for i := 0; ; i++ {
		pg, n, err := pr.Next()
		if err == io.EOF {
			return m, pages, nil
		}
		if err != nil {
			return m, pages, err
		}
		pages = append(pages, pg)
		if i%2 == 0 {
			if err := pr.ReadData(make([]byte, n)); err != nil {
				return m, pages, err
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	b := writeSample(t)
	m, pages, err := readImage(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*sampleHeader(), m.Header); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]*Process{sampleRoot(), sampleChild()}, m.Processes); diff != "" {
		t.Errorf("processes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int][]byte{1: []byte("hello")}, m.FileData); diff != "" {
		t.Errorf("file data (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(samplePages, pages); diff != "" {
		t.Errorf("pages (-want +got):\n%s", diff)
	}
	// File IDs are image-wide: the child's fd 1 is the root's file 0.
	if f, ok := m.File(0); !ok || f.Ref.Path != "/tmp/log" {
		t.Errorf("File(0) = %+v, %v; want the root's log", f, ok)
	}
	if f, ok := m.File(1); !ok || f.Kind != FilePipe {
		t.Errorf("File(1) = %+v, %v; want the child's pipe", f, ok)
	}
	// Page data is page aligned in the stream.
	m, err = ReadMeta(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	pr := m.Pages()
	for {
		_, n, err := pr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if pr.Offset()%PageSize != 0 {
			t.Errorf("data at offset %d, not page aligned", pr.Offset())
		}
		if err := pr.ReadData(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
	}
	if pr.Offset() != int64(len(b)) || pr.Records() != 7 {
		t.Errorf("read %d bytes in %d records, want %d in 7", pr.Offset(), pr.Records(), len(b))
	}
}

func TestDamage(t *testing.T) {
	good := writeSample(t)
	tests := []struct {
		name string
		mod  func([]byte) []byte
		want error
	}{
		{"empty", func(b []byte) []byte { return nil }, ErrNotImage},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, ErrNotImage},
		{"version", func(b []byte) []byte { b[8] = 9; return b }, ErrVersion},
		{"truncated in header", func(b []byte) []byte { return b[:20] }, ErrTruncated},
		{"truncated in data", func(b []byte) []byte { return b[:len(b)-PageSize-100] }, ErrTruncated},
		{"no end record", func(b []byte) []byte { return b[:len(b)-32-40] }, ErrTruncated},
		{"flipped meta byte", func(b []byte) []byte { b[16+32+3] ^= 1; return b }, ErrCorrupt},
		{"flipped data byte", func(b []byte) []byte { b[len(b)-PageSize/2] ^= 1; return b }, ErrCorrupt},
		{"flipped padding byte", func(b []byte) []byte { b[len(b)-PageSize-200] ^= 1; return b }, ErrCorrupt},
		{"flipped header byte", func(b []byte) []byte { b[16+9] ^= 1; return b }, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.mod(append([]byte(nil), good...))
			_, _, err := readImage(b)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestReadDataLater checks that a record read without its check is
// verified by the check it returns: a flipped data byte fails it, and the
// stream goes on to its end record either way.
func TestReadDataLater(t *testing.T) {
	good := writeSample(t)
	bad := bytes.Clone(good)
	bad[len(bad)-PageSize/2] ^= 1 // in the last page's data, before the end record
	for _, tt := range []struct {
		name string
		img  []byte
		ok   bool
	}{{"intact", good, true}, {"flipped data byte", bad, false}} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ReadMeta(bytes.NewReader(tt.img))
			if err != nil {
				t.Fatal(err)
			}
			pr := m.Pages()
			var checks []func() error
			for {
				_, n, err := pr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, n)
				if n > PageSize {
					if _, err := pr.ReadDataLater(buf[:PageSize]); err == nil {
						t.Fatal("ReadDataLater of part of the data succeeded")
					}
				}
				check, err := pr.ReadDataLater(buf)
				if err != nil {
					t.Fatal(err)
				}
				checks = append(checks, check)
			}
			var err2 error
			for _, c := range checks {
				if err := c(); err != nil {
					err2 = err
				}
			}
			if (err2 == nil) != tt.ok || (err2 != nil && !errors.Is(err2, ErrCorrupt)) {
				t.Fatalf("checks: %v, want ok=%v", err2, tt.ok)
			}
		})
	}
}
