package parity

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

func sampleHeader(t testing.TB) *Header {
	t.Helper()
	l, err := NewLayout(1000, []int64{12345, 0, 999, 4000})
	if err != nil {
		t.Fatal(err)
	}
	h := &Header{
		Version: formatVersion, N: 4, Index: 0, BlockSize: 1000,
		EncodeID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		Sizes:    l.Sizes(), Hashes: make([][32]byte, 4),
		DataCRC:     make([]uint32, l.DataBlocks(0)),
		ParityCRC:   make([]uint32, l.ParityBlocks(0)),
		ParityBytes: l.ParityBytes(0),
	}
	for i := range h.Hashes {
		h.Hashes[i][0], h.Hashes[i][31] = byte(i), 0xee
	}
	for i := range h.DataCRC {
		h.DataCRC[i] = uint32(i) * 0x01010101
	}
	for i := range h.ParityCRC {
		h.ParityCRC[i] = ^uint32(i)
	}
	return h
}

func TestHeaderRoundTrip(t *testing.T) {
	h := sampleHeader(t)
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != h.Len() || h.PayloadOffset()%PayloadAlign != 0 {
		t.Fatalf("len %d, Len %d, payload offset %d", len(b), h.Len(), h.PayloadOffset())
	}
	l, _ := NewLayout(1000, h.Sizes)
	if headerLen(l, 0) != h.Len() {
		t.Fatalf("headerLen %d, Len %d", headerLen(l, 0), h.Len())
	}
	// Trailing bytes (padding, payload) are ignored.
	g, err := DecodeHeader(append(b, make([]byte, 100)...))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.check(l); err != nil {
		t.Fatal(err)
	}
	b2, _ := g.MarshalBinary()
	if !bytes.Equal(b, b2) {
		t.Fatal("re-encoded header differs")
	}
	r, err := ReadHeader(bytes.NewReader(b))
	if err != nil || r.ParityBytes != h.ParityBytes {
		t.Fatalf("ReadHeader: %v", err)
	}
	// Every truncation and every single-bit flip is detected.
	for n := range len(b) {
		if _, err := DecodeHeader(b[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
		if _, err := ReadHeader(bytes.NewReader(b[:n])); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("ReadHeader truncated to %d: %v", n, err)
		}
	}
	for i := range len(b) * 8 {
		c := bytes.Clone(b)
		c[i/8] ^= 1 << (i % 8)
		if _, err := DecodeHeader(c); err == nil {
			t.Fatalf("bit %d flipped: accepted", i)
		}
	}
}

func TestHeaderMarshalRejects(t *testing.T) {
	h := sampleHeader(t)
	h.Sizes = h.Sizes[:3]
	if _, err := h.MarshalBinary(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v", err)
	}
}

// FuzzDecodeHeader: the decoder never panics, never over-allocates, and
// whatever it accepts re-encodes to the same bytes.
func FuzzDecodeHeader(f *testing.F) {
	b, err := sampleHeader(f).MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:20])
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		// Random bytes rarely pass the checksum; also try the input with
		// its checksum fixed up, to reach the structural checks behind it.
		if len(data) >= 16 {
			hl := int(binary.LittleEndian.Uint32(data[12:]))
			if hl >= headerFixed+4 && hl <= len(data) {
				fixed := bytes.Clone(data)
				binary.LittleEndian.PutUint32(fixed[hl-4:], crc32.Checksum(fixed[:hl-4], castagnoli()))
				checkDecode(t, fixed)
			}
		}
	})
}

func checkDecode(t *testing.T, data []byte) {
	h, err := DecodeHeader(data)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrMismatch) {
			t.Fatalf("error %v wraps neither ErrCorrupt nor ErrMismatch", err)
		}
		return
	}
	out, err := h.MarshalBinary()
	if err != nil {
		t.Fatalf("decoded header does not encode: %v", err)
	}
	if !bytes.Equal(out, data[:len(out)]) {
		t.Fatal("decode/encode round trip differs")
	}
	r, err := ReadHeader(bytes.NewReader(data))
	if err != nil || r.Len() != h.Len() {
		t.Fatalf("ReadHeader disagrees: %v", err)
	}
}
