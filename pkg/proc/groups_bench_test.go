package proc

import "testing"

// BenchmarkScanGroups measures one scan of the machine's processes, which
// every dump makes while the tree is frozen.
func BenchmarkScanGroups(b *testing.B) {
	for b.Loop() {
		n := 0
		if err := ScanGroups(func(Groups) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			b.Fatal("no process found")
		}
	}
}
