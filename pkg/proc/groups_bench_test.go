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

// BenchmarkScanGroupsUser is the dump's scan: kthreadd's children left out.
func BenchmarkScanGroupsUser(b *testing.B) {
	for b.Loop() {
		skip, err := KthreaddChildren()
		if err != nil {
			b.Fatal(err)
		}
		if err := ScanGroupsExcept(skip, func(Groups) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
