package dump

import (
	"os"
	"testing"
)

// TestZeroPFN: as root, pagemap shows the zero page's frame, and a read of
// fresh anonymous memory in another mapping maps that same frame.
func TestZeroPFN(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pagemap shows frames to root only")
	}
	a, b := zeroPFN(), zeroPFN()
	if a == 0 || a != b {
		t.Fatalf("zero page frame %#x then %#x, want the same, not 0", a, b)
	}
}

// TestMayShare lists which pagemap entries are read through /proc/PID/mem.
func TestMayShare(t *testing.T) {
	const zero = 0x1234
	tests := []struct {
		name string
		e    uint64
		want bool
	}{
		{"exclusive anonymous", pmPresent | pmExclusive | 0x99, false},
		{"file page", pmPresent | pmFile | 0x99, false},
		{"shared anonymous", pmPresent | 0x99, true},
		{"the zero page", pmPresent | zero, false},
		{"swapped", pmSwapped, true},
	}
	for _, tt := range tests {
		if got := mayShare(tt.e, zero); got != tt.want {
			t.Errorf("%s (%#x): %v, want %v", tt.name, tt.e, got, tt.want)
		}
	}
}
