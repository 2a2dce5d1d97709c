package image

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func writeSample(t testing.TB) []byte {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	page := bytes.Repeat([]byte{0xab}, 2*PageSize)
	steps := []struct {
		typ  Type
		meta any
		data [][]byte
	}{
		{TypeHeader, Header{Tool: "test", Root: 42}, nil},
		{TypeProcess, Process{PID: 42, Comm: "x"}, nil},
		{TypePages, Pages{PID: 42, Runs: []PageRun{{Addr: 0x1000, Pages: 2}, {Addr: 0x9000, Pages: 5, Zero: true}}}, [][]byte{page}},
		{TypePages, Pages{PID: 42, Runs: []PageRun{{Addr: 0x20000, Pages: 1}}}, [][]byte{page[:PageSize]}},
	}
	for _, s := range steps {
		if err := w.WriteRecord(s.typ, s.meta, s.data...); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readAll(b []byte) ([]Type, error) {
	r, err := NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	var types []Type
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return types, nil
		}
		if err != nil {
			return types, err
		}
		types = append(types, rec.Type)
		if rec.DataLen > 0 && rec.Index%2 == 0 {
			// read some records' data, let Next skip the others
			buf := make([]byte, rec.DataLen)
			if _, err := r.ReadData(buf); err != nil {
				return types, err
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	b := writeSample(t)
	types, err := readAll(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []Type{TypeHeader, TypeProcess, TypePages, TypePages}
	if diff := cmp.Diff(want, types); diff != "" {
		t.Fatalf("types (-want +got):\n%s", diff)
	}
	// Data is page aligned in the stream.
	r, _ := NewReader(bytes.NewReader(b))
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if rec.DataLen > 0 && r.Offset()%PageSize != 0 {
			t.Errorf("%s: data at offset %d, not page aligned", rec, r.Offset())
		}
		var p Pages
		if rec.Type == TypePages {
			if err := rec.Decode(&p); err != nil || p.PID != 42 {
				t.Errorf("decode pages: %v %+v", err, p)
			}
		}
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
			_, err := readAll(b)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func FuzzReader(f *testing.F) {
	f.Add(writeSample(f))
	f.Add([]byte(Magic + "\x01\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		for i := 0; i < 1000; i++ {
			rec, err := r.Next()
			if err != nil {
				return
			}
			var h Header
			var p Process
			var pg Pages
			_ = rec.Decode(&h)
			_ = rec.Decode(&p)
			_ = rec.Decode(&pg)
			if rec.DataLen > 0 && rec.DataLen < 1<<20 {
				buf := make([]byte, rec.DataLen)
				// Pages records the way a restore reads them: checked
				// later; everything else checked as it is read. Either
				// way a corrupt record must fail its check.
				if rec.Type == TypePages {
					check, err := r.ReadDataLater(buf)
					if err != nil {
						return
					}
					if err := check(); err != nil {
						if !errors.Is(err, ErrCorrupt) {
							t.Fatalf("deferred check: %v, want ErrCorrupt", err)
						}
						return
					}
				} else if _, err := r.ReadData(buf); err != nil {
					return
				}
			}
		}
	})
}

// TestReadDataLater checks that a record read without its check is
// verified by the check it returns: a flipped data byte fails it, and the
// stream goes on to its end record either way.
func TestReadDataLater(t *testing.T) {
	var out bytes.Buffer
	w, err := NewWriter(&out)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{7}, 2*PageSize)
	rec, err := Prepare(TypePages, Pages{PID: 1}, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WritePrepared(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	good := out.Bytes()
	bad := bytes.Clone(good)
	bad[len(bad)-200-PageSize] ^= 1 // in the data, before the end record
	for _, tt := range []struct {
		name string
		img  []byte
		ok   bool
	}{{"intact", good, true}, {"flipped data byte", bad, false}} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(tt.img))
			if err != nil {
				t.Fatal(err)
			}
			rec, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, rec.DataLen)
			if _, err := r.ReadDataLater(buf[:PageSize]); err == nil {
				t.Fatal("ReadDataLater of part of the data succeeded")
			}
			check, err := r.ReadDataLater(buf)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Fatalf("after the record: %v, want the end", err)
			}
			if err := check(); (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrCorrupt)) {
				t.Fatalf("check: %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
