package sockets

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDiagAttrs: attributes are walked at 4-byte alignment; a malformed
// length, or a last attribute whose padding the buffer lacks, ends the
// walk without reading past the buffer.
func TestDiagAttrs(t *testing.T) {
	type attr struct {
		Typ uint16
		V   string
	}
	tests := []struct {
		name string
		b    []byte
		want []attr
	}{
		{"two, padded", []byte{5, 0, 1, 0, 'a', 0, 0, 0, 6, 0, 2, 0, 'b', 'c'}, []attr{{1, "a"}, {2, "bc"}}},
		{"last without padding", []byte{5, 0, 3, 0, 'z'}, []attr{{3, "z"}}},
		{"length below the header", []byte{3, 0, 1, 0, 'a', 0, 0, 0}, nil},
		{"length past the end", []byte{9, 0, 1, 0, 'a'}, nil},
		{"short", []byte{4, 0}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []attr
			diagAttrs(tt.b, func(typ uint16, v []byte) { got = append(got, attr{typ, string(v)}) })
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("attributes (-want +got):\n%s", diff)
			}
		})
	}
}
