package dump

import (
	"errors"
	"testing"

	"github.com/ckpt/ckpt/pkg/image"
)

// TestSysVWhole checks which layouts of SysV mappings sysvWhole accepts:
// whole attachments, split or not, and not those with a part missing.
func TestSysVWhole(t *testing.T) {
	const pg = 4096
	seg := func(id int) *image.SysVShm { return &image.SysVShm{ID: id, Size: 3 * pg} }
	m := func(id int, start, end, off uint64) image.VMA {
		return image.VMA{Kind: image.VMASysVShm, Start: start, End: end, Offset: off, ShmID: uint64(id), SysV: seg(id)}
	}
	const a, b = 0x10000, 0x20000
	anon := image.VMA{Kind: image.VMAAnon, Start: a + 3*pg, End: a + 4*pg}
	tests := []struct {
		name string
		vmas []image.VMA
		ok   bool
	}{
		{"whole", []image.VMA{m(1, a, a+3*pg, 0)}, true},
		{"split in three", []image.VMA{m(1, a, a+pg, 0), m(1, a+pg, a+2*pg, pg), m(1, a+2*pg, a+3*pg, 2*pg)}, true},
		{"two attachments side by side", []image.VMA{m(1, a, a+3*pg, 0), m(1, a+3*pg, a+4*pg, 0), m(1, a+4*pg, a+6*pg, pg)}, true},
		{"split, then other memory", []image.VMA{m(1, a, a+pg, 0), m(1, a+pg, a+3*pg, pg), anon}, true},
		{"two segments", []image.VMA{m(1, a, a+3*pg, 0), m(2, b, b+pg, 0), m(2, b+pg, b+3*pg, pg)}, true},
		{"tail unmapped", []image.VMA{m(1, a, a+2*pg, 0)}, false},
		{"head unmapped", []image.VMA{m(1, a+pg, a+3*pg, pg)}, false},
		{"middle unmapped", []image.VMA{m(1, a, a+pg, 0), m(1, a+2*pg, a+3*pg, 2*pg)}, false},
		{"piece of another segment", []image.VMA{m(1, a, a+pg, 0), m(2, a+pg, a+3*pg, pg)}, false},
		{"piece moved", []image.VMA{m(1, a, a+pg, 0), m(1, a+pg, a+2*pg, 2*pg), m(1, a+2*pg, a+3*pg, pg)}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := sysvWhole(tc.vmas)
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("got %v, want a refusal (ErrUnsupported)", err)
			}
		})
	}
}
