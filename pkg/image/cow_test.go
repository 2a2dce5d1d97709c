package image

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestInherits lists which child VMAs a fork of the parent gives.
func TestInherits(t *testing.T) {
	base := func() (*Process, *Process) {
		p := &Process{PID: 1, Mapped: []FileRef{{Path: "/bin/x", Dev: 1, Ino: 2}},
			VMAs: []VMA{{Start: 0x1000, End: 0x3000, Kind: VMAAnon, Prot: 3, File: -1, Pages: 1},
				{Start: 0x10000, End: 0x11000, Kind: VMAFile, Prot: 1, File: 0, Pages: 1}}}
		c := &Process{PID: 2, PPID: 1, Mapped: []FileRef{{Path: "/bin/x", Dev: 1, Ino: 2}},
			VMAs: []VMA{{Start: 0x1000, End: 0x3000, Kind: VMAAnon, Prot: 3, File: -1, Pages: 2},
				{Start: 0x10000, End: 0x11000, Kind: VMAFile, Prot: 1, File: 0, Pages: 1}}}
		return p, c
	}
	tests := []struct {
		name string
		vma  int
		edit func(p, c *Process)
		want bool
	}{
		{"same anonymous mapping", 0, func(p, c *Process) {}, true},
		{"same private file mapping", 1, func(p, c *Process) {}, true},
		{"another range", 0, func(p, c *Process) { c.VMAs[0].End = 0x2000 }, false},
		{"another protection", 0, func(p, c *Process) { c.VMAs[0].Prot = 1 }, false},
		{"shared", 0, func(p, c *Process) { p.VMAs[0].Shared, c.VMAs[0].Shared = true, true }, false},
		{"no pages in the parent", 0, func(p, c *Process) { p.VMAs[0].Pages = 0 }, false},
		{"other advice", 0, func(p, c *Process) { c.VMAs[0].Advice = []int{unix.MADV_HUGEPAGE} }, false},
		{"same advice", 0, func(p, c *Process) {
			p.VMAs[0].Advice, c.VMAs[0].Advice = []int{unix.MADV_HUGEPAGE}, []int{unix.MADV_HUGEPAGE}
		}, true},
		{"not copied by fork", 0, func(p, c *Process) {
			p.VMAs[0].Advice, c.VMAs[0].Advice = []int{unix.MADV_DONTFORK}, []int{unix.MADV_DONTFORK}
		}, false},
		{"emptied by fork", 0, func(p, c *Process) {
			p.VMAs[0].Advice, c.VMAs[0].Advice = []int{unix.MADV_WIPEONFORK}, []int{unix.MADV_WIPEONFORK}
		}, false},
		{"hugetlb", 0, func(p, c *Process) { p.VMAs[0].HugePageSize, c.VMAs[0].HugePageSize = 4096, 4096 }, false},
		{"another file", 1, func(p, c *Process) { c.Mapped[0].Ino = 3 }, false},
		{"a deleted file", 1, func(p, c *Process) { p.Mapped[0].Deleted, c.Mapped[0].Deleted = true, true }, false},
		{"another offset", 1, func(p, c *Process) { c.VMAs[1].Offset = 0x1000 }, false},
	}
	for _, tt := range tests {
		p, c := base()
		tt.edit(p, c)
		cv := &c.VMAs[tt.vma]
		if got := Inherits(c, cv, p, p.VMAAt(cv.Start, cv.Len())); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
