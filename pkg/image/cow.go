package image

import (
	"slices"

	"golang.org/x/sys/unix"
)

// Copy-on-write sharing between a parent and its child: a page of the
// child that is the same frame as the parent's page at the same address
// (pagemap PFNs, read as root at the dump) is stored once, with the
// parent, and the child's run says Parent. The restore forks the child
// from its restored parent once the parent's private memory is in place,
// keeps the VMAs that hold such pages (the fork's copies, whose pages are
// the parent's, shared), and writes only the pages that differ. Inherits
// says which VMAs can be kept that way.

// Inherits tells whether VMA cv of the child c is what a fork of its
// parent p gives from p's VMA pv: the same private anonymous or
// private file mapping (same file, not a deleted one; not hugetlb
// memory), at the same range, with the same protection, name and advice,
// and advice that lets fork copy it with its pages (neither MADV_DONTFORK
// nor MADV_WIPEONFORK). Both must hold pages.
func Inherits(c *Process, cv *VMA, p *Process, pv *VMA) bool {
	if cv == nil || pv == nil || cv.Shared || pv.Shared || cv.Pages == 0 || pv.Pages == 0 {
		return false
	}
	switch cv.Kind {
	case VMAAnon, VMAHeap, VMAStack, VMAFile:
	default:
		return false
	}
	if cv.HugePageSize != 0 || pv.HugePageSize != 0 {
		// A child's copy-on-write fault in private hugetlb memory needs a
		// free huge page the parent's reservation does not cover.
		return false
	}
	if cv.Start != pv.Start || cv.End != pv.End || cv.Kind != pv.Kind || cv.Prot != pv.Prot || cv.Name != pv.Name ||
		cv.Offset != pv.Offset || cv.GrowsDown != pv.GrowsDown || cv.NoReserve != pv.NoReserve || !slices.Equal(cv.Advice, pv.Advice) {
		return false
	}
	if slices.Contains(cv.Advice, unix.MADV_DONTFORK) || slices.Contains(cv.Advice, unix.MADV_WIPEONFORK) {
		return false
	}
	if cv.Kind == VMAFile {
		if cv.File < 0 || cv.File >= len(c.Mapped) || pv.File < 0 || pv.File >= len(p.Mapped) {
			return false
		}
		cf, pf := &c.Mapped[cv.File], &p.Mapped[pv.File]
		if cf.Deleted || pf.Deleted || cf.Path != pf.Path || cf.Dev != pf.Dev || cf.Ino != pf.Ino {
			return false
		}
	}
	return true
}
