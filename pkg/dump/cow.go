package dump

import (
	"encoding/binary"
	"os"
	"sort"
	"unsafe"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// Copy-on-write sharing after fork (see image.Inherits): a page of a child
// whose frame is the frame of its parent's page at the same address is
// stored once, with the parent, and the child's run says so (PageRun
// Parent). Frames come from pagemap, which shows them to root only; with
// none (PFN 0) nothing is shared and every page is stored as before. Two
// processes frozen for the dump see the same frame at the same address only
// while they still share the page, so its content is the same in both.

const (
	pmExclusive = 1 << 56 // PM_MMAP_EXCLUSIVE: mapped by this process only
	pmPFN       = 1<<55 - 1
)

// frames are the page frames of a process's private pages that its
// children may share, in address order.
type frames struct {
	addrs []uint64
	pfns  []uint64
}

func (f *frames) add(addr, pfn uint64) {
	f.addrs = append(f.addrs, addr)
	f.pfns = append(f.pfns, pfn)
}

// cowParent is what the planning of a child needs to know of its parent.
type cowParent struct {
	p  *image.Process
	fr *frames
}

// sharer follows, VMA by VMA in address order, which pages of a child are
// its parent's frames.
type sharer struct {
	fr *frames
	i  int // next parent frame to compare
}

// sharerFor returns the sharer for child VMA v of process c, or nil when
// v is not what a fork of the parent gives (image.Inherits, checked with
// the parent's VMA as planned and v as if it held pages).
func (cp *cowParent) sharerFor(c *image.Process, v *image.VMA) *sharer {
	if cp == nil || cp.fr == nil {
		return nil
	}
	pv := cp.p.VMAAt(v.Start, v.Len())
	probe := *v
	probe.Pages = 1
	if !image.Inherits(c, &probe, cp.p, pv) {
		return nil
	}
	i := sort.Search(len(cp.fr.addrs), func(i int) bool { return cp.fr.addrs[i] >= v.Start })
	return &sharer{fr: cp.fr, i: i}
}

// parents tells whether the page at addr, pagemap entry e, is the
// parent's frame. Calls come in ascending addr order.
func (s *sharer) parents(addr, e uint64) bool {
	if s == nil || e&pmPresent == 0 || e&pmExclusive != 0 || e&pmPFN == 0 {
		return false
	}
	for s.i < len(s.fr.addrs) && s.fr.addrs[s.i] < addr {
		s.i++
	}
	return s.i < len(s.fr.addrs) && s.fr.addrs[s.i] == addr && s.fr.pfns[s.i] == e&pmPFN
}

// keepsFrames tells whether the pages of v can be shared with a child:
// private memory that fork copies.
func keepsFrames(v *image.VMA) bool {
	if v.Shared {
		return false
	}
	switch v.Kind {
	case image.VMAAnon, image.VMAHeap, image.VMAStack, image.VMAFile:
		return true
	}
	return false
}

// zeroPFN is the frame of the kernel's shared zero page, which a read of
// untouched anonymous memory maps (0 if pagemap does not show frames). It
// is in no process's exclusive use, yet reading it with process_vm_readv
// copies nothing: such pages need not go through /proc/PID/mem.
func zeroPFN() uint64 {
	page, err := unix.Mmap(-1, 0, pageSize, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return 0
	}
	defer unix.Munmap(page)
	if page[0] != 0 { // the read maps the zero page
		return 0
	}
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return 0
	}
	defer pm.Close()
	var e [8]byte
	if _, err := pm.ReadAt(e[:], int64(uintptr(unsafe.Pointer(&page[0]))/pageSize*8)); err != nil {
		return 0
	}
	v := binary.LittleEndian.Uint64(e[:])
	if v&pmPresent == 0 {
		return 0
	}
	return v & pmPFN
}

// mayShare tells whether a page of private memory, pagemap entry e, may
// be an anonymous page another process maps too (see run.force).
func mayShare(e, zero uint64) bool {
	if e&(pmExclusive|pmFile) != 0 {
		return false
	}
	return e&pmPresent == 0 || zero == 0 || e&pmPFN != zero
}
