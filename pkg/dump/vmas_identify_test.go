package dump

import (
	"reflect"
	"testing"

	"github.com/ckpt/ckpt/pkg/image"
)

func TestMergeExtents(t *testing.T) {
	for _, tc := range []struct {
		in, want []image.Extent
	}{
		{nil, []image.Extent{}},
		{[]image.Extent{{Off: 8192, Len: 4096}, {Off: 0, Len: 4096}}, []image.Extent{{Off: 0, Len: 4096}, {Off: 8192, Len: 4096}}},
		{[]image.Extent{{Off: 4096, Len: 4096}, {Off: 0, Len: 4096}}, []image.Extent{{Off: 0, Len: 8192}}},
		{[]image.Extent{{Off: 0, Len: 8192}, {Off: 4096, Len: 1000}}, []image.Extent{{Off: 0, Len: 8192}}},
		{[]image.Extent{{Off: 0, Len: 8192}, {Off: 4096, Len: 8192}}, []image.Extent{{Off: 0, Len: 12288}}},
	} {
		if got := mergeExtents(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("mergeExtents(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
