package restore

import (
	"testing"

	"github.com/ckpt/ckpt/pkg/image"
)

// TestAnonName checks which VMA names are names given with
// PR_SET_VMA_ANON_NAME (this kernel may lack CONFIG_ANON_VMA_NAME, so
// the e2e cases cannot make one).
func TestAnonName(t *testing.T) {
	tests := []struct {
		kind image.VMAKind
		name string
		want string
		ok   bool
	}{
		{image.VMAAnon, "[anon:buffers]", "buffers", true},
		{image.VMAAnon, "[anon:a]b]", "a]b", true},
		{image.VMAAnon, "", "", false},
		{image.VMAHeap, "[heap]", "", false},
		{image.VMAShmAnon, "[anon_shmem:pool]", "pool", true},
		{image.VMAShmAnon, "/dev/zero (deleted)", "", false},
		{image.VMAFile, "[anon:x]", "", false},
	}
	for _, tc := range tests {
		got, ok := anonName(&image.VMA{Kind: tc.kind, Name: tc.name})
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("anonName(%s %q) = %q, %v; want %q, %v", tc.kind, tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
