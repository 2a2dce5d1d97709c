package image

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// rawRec is a record as a broken writer could frame it: any type, any
// metadata (a value to encode, or raw JSON bytes), any data.
type rawRec struct {
	typ  Type
	meta any
	data []byte
}

// rawImage frames recs into a stream with good checksums and a good end
// record, bypassing the Writer's checks, so that the reader's are tested.
func rawImage(t *testing.T, recs []rawRec) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := rawWriter{w: &buf}
	if err := w.writeFileHeader(); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		m, ok := r.meta.([]byte)
		if !ok {
			var err error
			if m, err = json.Marshal(r.meta); err != nil {
				t.Fatal(err)
			}
		}
		var data [][]byte
		if r.data != nil {
			data = [][]byte{r.data}
		}
		if err := w.writeRecord(r.typ, m, checksum(m, data), data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.writeEnd(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// goodRecs is the sample image's records, for the cases below to edit.
func goodRecs() []rawRec {
	return []rawRec{
		{TypeHeader, sampleHeader(), nil},
		{TypeProcess, sampleRoot(), nil},
		{TypeProcess, sampleChild(), nil},
		{TypeFileData, FileData{ID: 1, Size: 5}, append([]byte("hello"), make([]byte, PageSize-5)...)},
		{TypePages, samplePages[0], sampleData[0]},
		{TypePages, samplePages[1], sampleData[1]},
	}
}

// cowRecs is the sample image with a child whose first VMA is the
// root's, one page of it the root's own (Parent), one its own; edit
// changes the child and its runs, advice is given to both VMAs.
func cowRecs(edit func(c *Process, runs *[]PageRun), advice ...int) []rawRec {
	r := goodRecs()
	root := sampleRoot()
	root.VMAs[0].Advice = advice
	c := sampleChild()
	c.VMAs = []VMA{{Start: 0x1000, End: 0x3000, Kind: VMAAnon, File: -1, Pages: 2, ParentPages: 1, Advice: advice}}
	runs := []PageRun{{Addr: 0x1000, Pages: 1, Parent: true}, {Addr: 0x2000, Pages: 1}}
	edit(c, &runs)
	r[1].meta, r[2].meta = root, c
	return append(r, rawRec{TypePages, &Pages{PID: 43, Runs: runs}, sampleData[2]})
}

// TestReadOrder feeds ReadMeta and the pages iterator images that are
// well framed and checksummed but break the record order or hold what the
// format does not allow: each must be refused with the right sentinel and
// a message naming what is wrong.
func TestReadOrder(t *testing.T) {
	edit := func(f func(r []rawRec) []rawRec) []rawRec { return f(goodRecs()) }
	proc := func(f func(p *Process)) *Process { p := sampleRoot(); f(p); return p }
	one := &Header{Tool: "test", Machine: "x86_64", Root: 42, Processes: 1}
	tests := []struct {
		name string
		recs []rawRec
		want error
		text string // the message must contain it
	}{
		{"good", goodRecs(), nil, ""},
		{"no records", nil, ErrOrder, "end record first, want the header"},
		{"header only", goodRecs()[:1], ErrOrder, "end record before any process"},
		{"process first", edit(func(r []rawRec) []rawRec { return r[1:] }), ErrOrder, "process record first, want the header"},
		{"duplicate header", edit(func(r []rawRec) []rawRec { return append(r[:1], r...) }), ErrOrder, "second header"},
		{"header after a process", edit(func(r []rawRec) []rawRec { return append([]rawRec{r[0], r[1], r[0]}, r[2:]...) }), ErrOrder, "second header"},
		{"pages before processes", edit(func(r []rawRec) []rawRec { return []rawRec{r[0], r[4], r[1], r[2], r[3]} }), ErrOrder, "pages record before any process"},
		{"process after file data", edit(func(r []rawRec) []rawRec { return []rawRec{{TypeHeader, one, nil}, r[1], r[3], r[2], r[4]} }), ErrOrder, "process record after file-data records"},
		{"file data after pages", edit(func(r []rawRec) []rawRec { return []rawRec{{TypeHeader, one, nil}, r[1], r[4], r[3]} }), ErrOrder, "file-data record after pages records"},
		{"process after pages", edit(func(r []rawRec) []rawRec { return []rawRec{{TypeHeader, one, nil}, r[1], r[4], r[2]} }), ErrOrder, "process record after pages records"},
		{"unknown record type", edit(func(r []rawRec) []rawRec { return append(r, rawRec{Type(99), struct{}{}, nil}) }), ErrCorrupt, "unknown record type 99"},
		{"unknown header field", edit(func(r []rawRec) []rawRec {
			r[0].meta = []byte(`{"tool":"t","machine":"x86_64","root":42,"processes":2,"colour":"red"}`)
			return r
		}), ErrInvalid, `unknown field "colour"`},
		{"unknown process field", edit(func(r []rawRec) []rawRec {
			b, _ := json.Marshal(r[1].meta)
			r[1].meta = append(b[:len(b)-1], []byte(`,"renamed_field":1}`)...)
			return r
		}), ErrInvalid, `record 1 (process)`},
		{"unknown pages field", edit(func(r []rawRec) []rawRec {
			r[4].meta = []byte(`{"pid":42,"runs":[],"extra":true}`)
			return r
		}), ErrInvalid, `unknown field "extra"`},
		{"data after the JSON", edit(func(r []rawRec) []rawRec {
			b, _ := json.Marshal(r[1].meta)
			r[1].meta = append(b, []byte(` {}`)...)
			return r
		}), ErrInvalid, "after the JSON value"},
		{"header without machine", edit(func(r []rawRec) []rawRec { r[0].meta = Header{Tool: "t", Root: 42, Processes: 2}; return r }), ErrInvalid, "header: no machine"},
		{"fewer processes than announced", edit(func(r []rawRec) []rawRec { return append(r[:2], r[3:]...) }), ErrInvalid, "announces 2 processes, the image holds 1"},
		{"more processes than announced", edit(func(r []rawRec) []rawRec {
			extra := sampleChild()
			extra.PID, extra.Threads[0].TID, extra.Files, extra.FDs = 45, 45, nil, nil
			return append(r[:3], append([]rawRec{{TypeProcess, extra, nil}}, r[3:]...)...)
		}), ErrInvalid, "process 45: one more than the 2"},
		{"root not first", edit(func(r []rawRec) []rawRec { r[1], r[2] = r[2], r[1]; return r }), ErrInvalid, "process 43 first, the header's root is 42"},
		{"same process twice", edit(func(r []rawRec) []rawRec { r[2] = r[1]; r[0].meta = sampleHeader(); return r }), ErrInvalid, "process 42: a second record"},
		{"process without threads", edit(func(r []rawRec) []rawRec { r[1].meta = proc(func(p *Process) { p.Threads = nil }); return r }), ErrInvalid, "process 42: no leader thread"},
		{"repeated thread", edit(func(r []rawRec) []rawRec {
			r[1].meta = proc(func(p *Process) { p.Threads[1].TID = 42 })
			return r
		}), ErrInvalid, "thread id 42 malformed or repeated"},
		{"vma end before start", edit(func(r []rawRec) []rawRec {
			r[1].meta = proc(func(p *Process) { p.VMAs[1].End = p.VMAs[1].Start })
			return r
		}), ErrInvalid, "process 42: vma 1 0x9000-0x9000 malformed"},
		{"vmas overlap", edit(func(r []rawRec) []rawRec {
			r[1].meta = proc(func(p *Process) { p.VMAs[1].Start = 0x2000 })
			return r
		}), ErrInvalid, "vma 1 0x2000-0xe000 malformed"},
		{"file vma without its file", edit(func(r []rawRec) []rawRec {
			r[1].meta = proc(func(p *Process) { p.Mapped = nil })
			return r
		}), ErrInvalid, "vma 2 0x20000-0x21000 names mapped file 0 of 0"},
		{"more pages than the vma", edit(func(r []rawRec) []rawRec {
			r[1].meta = proc(func(p *Process) { p.VMAs[0].Pages = 3 })
			return r
		}), ErrInvalid, "vma 0 0x1000-0x3000 holds 3 pages"},
		{"repeated fd", edit(func(r []rawRec) []rawRec {
			r[1].meta = proc(func(p *Process) { p.FDs = append(p.FDs, p.FDs[0]) })
			return r
		}), ErrInvalid, "fd 1 malformed or repeated"},
		{"file without kind", edit(func(r []rawRec) []rawRec {
			r[1].meta = proc(func(p *Process) { p.Files[0].Kind = "" })
			return r
		}), ErrInvalid, "file 0: no kind"},
		{"file ID used twice", edit(func(r []rawRec) []rawRec {
			c := sampleChild()
			c.Files[0].ID = 0
			r[2].meta = c
			return r
		}), ErrInvalid, "process 43: file 0 (pipe): another file has that ID"},
		{"fd of a file nobody lists", edit(func(r []rawRec) []rawRec {
			c := sampleChild()
			c.FDs[1].File = 7
			r[2].meta = c
			return r
		}), ErrInvalid, "process 43: fd 3: file 7 is listed by no process"},
		{"wrong signal actions", edit(func(r []rawRec) []rawRec {
			r[1].meta = proc(func(p *Process) { p.Signals.Actions = make([]Sigaction, 3) })
			return r
		}), ErrInvalid, "3 signal actions"},
		{"file data missing", edit(func(r []rawRec) []rawRec { return append(r[:3], r[4:]...) }), ErrInvalid, "process 43: file 1 (pipe:[7]): file data 1 is not in the image"},
		{"file data ID 0", edit(func(r []rawRec) []rawRec { r[3].meta = FileData{ID: 0, Size: 5}; return r }), ErrInvalid, "file data 0: ID not positive"},
		{"file data twice", edit(func(r []rawRec) []rawRec { return append(r[:4], r[3:]...) }), ErrInvalid, "file data 1: a second record"},
		{"file data size over its data", edit(func(r []rawRec) []rawRec { r[3].meta = FileData{ID: 1, Size: PageSize + 1}; return r }), ErrInvalid, "size 4097 in 4096"},
		{"pages of an unknown process", edit(func(r []rawRec) []rawRec { r[5].meta = &Pages{PID: 7, Runs: samplePages[1].Runs}; return r }), ErrInvalid, "pages of process 7, which the image does not hold"},
		{"pages runs longer than the data", edit(func(r []rawRec) []rawRec {
			r[5].meta = &Pages{PID: 43, Runs: []PageRun{{Addr: 0x1000, Pages: 2}}}
			return r
		}), ErrInvalid, "runs need 8192 data bytes, the record has 4096"},
		{"pages run outside the vmas", edit(func(r []rawRec) []rawRec {
			r[5].meta = &Pages{PID: 43, Runs: []PageRun{{Addr: 0x5000, Pages: 1}}}
			return r
		}), ErrInvalid, "run 0x5000+1 outside any VMA holding pages"},
		{"pages run across two vmas", edit(func(r []rawRec) []rawRec {
			r[4].meta = &Pages{PID: 42, Runs: []PageRun{{Addr: 0x2000, Pages: 2}}}
			return r
		}), ErrInvalid, "run 0x2000+2 outside any VMA"},
		{"pages run not aligned", edit(func(r []rawRec) []rawRec {
			r[5].meta = &Pages{PID: 43, Runs: []PageRun{{Addr: 0x1001, Pages: 1}}}
			return r
		}), ErrInvalid, "run 0x1001+1 malformed"},
		{"pages of a process after a later one's", edit(func(r []rawRec) []rawRec {
			return append(r[:5], rawRec{TypePages, samplePages[2], sampleData[2]}, r[5])
		}), ErrOrder, "pages of process 42 after pages of a later process"},
		{"pages of a process out of address order", edit(func(r []rawRec) []rawRec { r[4], r[5] = r[5], r[4]; return r }), ErrOrder, "run 0x1000+2 before the end 0x21000 of its previous run"},
		{"runs of a record out of address order", edit(func(r []rawRec) []rawRec {
			r[4].meta = &Pages{PID: 42, Runs: []PageRun{{Addr: 0x9000, Pages: 5, Zero: true}, {Addr: 0x1000, Pages: 2}}}
			return r
		}), ErrInvalid, "run 0x1000+2 before the end 0xe000 of the previous one"},
		{"good with pages of the parent", cowRecs(func(c *Process, runs *[]PageRun) {}), nil, ""},
		{"parent's pages in a VMA not inherited", cowRecs(func(c *Process, runs *[]PageRun) { c.VMAs[0].ParentPages = 0 }), ErrInvalid, "run 0x1000+1 of the parent's pages in a VMA not inherited"},
		{"inherited VMA the parent does not have", cowRecs(func(c *Process, runs *[]PageRun) { c.VMAs[0].End = 0x2000; c.VMAs[0].Pages = 1 }), ErrInvalid, "process 43: vma 0x1000-0x2000 holds pages of its parent 42, which has no such mapping"},
		{"inherited VMA with another protection", cowRecs(func(c *Process, runs *[]PageRun) { c.VMAs[0].Prot = 1 }), ErrInvalid, "which has no such mapping to fork"},
		{"inherited VMA not copied by fork", cowRecs(func(c *Process, runs *[]PageRun) {}, 10), ErrInvalid, "which has no such mapping to fork"},
		{"more parent pages than pages", cowRecs(func(c *Process, runs *[]PageRun) { c.VMAs[0].ParentPages = 3 }), ErrInvalid, "holds 3 of its 2 pages from the parent"},
		{"zero and the parent's", cowRecs(func(c *Process, runs *[]PageRun) { (*runs)[0].Zero = true }), ErrInvalid, "both zero and the parent's"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := readImage(rawImage(t, tt.recs))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("got %q, want it to say %q", err, tt.text)
			}
		})
	}
}

// TestReadVersion checks that an image of another format version is
// refused with a message naming both versions.
func TestReadVersion(t *testing.T) {
	for _, v := range []uint32{1, Version + 1, 0xffffffff} {
		b := writeSample(t)
		binary.LittleEndian.PutUint32(b[8:], v)
		_, err := ReadMeta(bytes.NewReader(b))
		if !errors.Is(err, ErrVersion) {
			t.Fatalf("version %d: got %v, want ErrVersion", v, err)
		}
		for _, want := range []string{"format version " + itoa(int(v)), "reads version " + itoa(Version)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("version %d: %q does not say %q", v, err, want)
			}
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestWriterOrder checks that the Writer refuses what the reader would:
// the refused record is not written, so the stream stays as it was.
func TestWriterOrder(t *testing.T) {
	page := make([]byte, PageSize)
	hdr := sampleHeader()
	one := &Header{Tool: "test", Machine: "x86_64", Root: 42, Processes: 1}
	pages := func(w *Writer) error {
		return w.WritePages(&Pages{PID: 42, Runs: []PageRun{{Addr: 0x1000, Pages: 1}}}, page)
	}
	tests := []struct {
		name string
		ok   []func(w *Writer) error // succeed
		bad  func(w *Writer) error   // then refused
		want error
		text string
	}{
		{"process first", nil, func(w *Writer) error { return w.WriteProcess(sampleRoot()) }, ErrOrder, "write process 42: process record first"},
		{"end first", nil, (*Writer).End, ErrOrder, "end record first"},
		{"invalid header", nil, func(w *Writer) error { return w.WriteHeader(&Header{Tool: "x"}) }, ErrInvalid, "header: no machine"},
		{"duplicate header", []func(*Writer) error{func(w *Writer) error { return w.WriteHeader(hdr) }},
			func(w *Writer) error { return w.WriteHeader(hdr) }, ErrOrder, "second header"},
		{"pages before processes", []func(*Writer) error{func(w *Writer) error { return w.WriteHeader(hdr) }},
			pages, ErrOrder, "pages record before any process"},
		{"end before all processes", []func(*Writer) error{
			func(w *Writer) error { return w.WriteHeader(hdr) },
			func(w *Writer) error { return w.WriteProcess(sampleRoot()) },
		}, (*Writer).End, ErrInvalid, "announces 2 processes, the image holds 1"},
		{"process after file data", []func(*Writer) error{
			func(w *Writer) error { return w.WriteHeader(one) },
			func(w *Writer) error { return w.WriteProcess(sampleRoot()) },
			func(w *Writer) error { return w.WriteFileData(1, []byte("x")) },
		}, func(w *Writer) error { return w.WriteProcess(sampleChild()) }, ErrOrder, "process record after file-data records"},
		{"file data after pages", []func(*Writer) error{
			func(w *Writer) error { return w.WriteHeader(one) },
			func(w *Writer) error { return w.WriteProcess(sampleRoot()) },
			pages,
		}, func(w *Writer) error { return w.WriteFileData(1, []byte("x")) }, ErrOrder, "file-data record after pages records"},
		{"process without leader", []func(*Writer) error{func(w *Writer) error { return w.WriteHeader(one) }},
			func(w *Writer) error { p := sampleRoot(); p.Threads = nil; return w.WriteProcess(p) }, ErrInvalid, "process 42: no leader thread"},
		{"pages data short of the runs", []func(*Writer) error{
			func(w *Writer) error { return w.WriteHeader(one) },
			func(w *Writer) error { return w.WriteProcess(sampleRoot()) },
		}, func(w *Writer) error {
			return w.WritePages(&Pages{PID: 42, Runs: []PageRun{{Addr: 0x1000, Pages: 2}}}, page)
		}, ErrInvalid, "runs need 8192 data bytes"},
		{"pages of a process not in the image", []func(*Writer) error{
			func(w *Writer) error { return w.WriteHeader(one) },
			func(w *Writer) error { return w.WriteProcess(sampleRoot()) },
		}, func(w *Writer) error {
			return w.WritePages(&Pages{PID: 9, Runs: []PageRun{{Addr: 0x1000, Pages: 1}}}, page)
		}, ErrInvalid, "pages of process 9"},
		{"write after end", []func(*Writer) error{
			func(w *Writer) error { return w.WriteHeader(one) },
			func(w *Writer) error { return w.WriteProcess(sampleRoot()) },
			(*Writer).End,
		}, pages, ErrEnded, "after the end record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := NewWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			for i, f := range tt.ok {
				if err := f(w); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			size := buf.Len()
			err = tt.bad(w)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("got %v, want %v saying %q", err, tt.want, tt.text)
			}
			if buf.Len() != size {
				t.Errorf("the refused record wrote %d bytes", buf.Len()-size)
			}
		})
	}
}
