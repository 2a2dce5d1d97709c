package restore

import (
	"fmt"
	"sort"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// Copy-on-write sharing after fork (image.Inherits). Every process but the
// root is forked from its parent once the parent's memory is in place
// (create), so it starts with a copy of the parent's address space whose
// private pages are the parent's, shared. forkedSpace keeps the VMAs the
// image says are inherited (VMA.ParentPages) and unmaps everything else;
// in the kept ones, every page that is not the parent's (PageRun Parent)
// is dropped with MADV_DONTNEED before its content is written (dropFor,
// dropRest): the page then reads as in a fresh mapping (zero, or the
// file's), and only the pages that differ stop being shared.

// forkedSpace gives a process forked from its laid-out parent its address
// space: the gadget area and the inherited VMAs stay, the vDSO too if it is
// where the image has it, everything else goes.
func (b *builder) forkedSpace() error {
	parent := b.from
	if parent.p == nil || parent.p.PID != b.p.PPID {
		return fmt.Errorf("forked from %d, not from its parent %d", parent.target, b.p.PPID)
	}
	b.gadget = b.t.gadget
	b.inherited = map[*image.VMA]bool{}
	b.dropped = map[*image.VMA]uint64{}
	keep := []ptrace.Area{{Start: b.gadget, End: b.gadget + gadgetSize}}
	for i := range b.p.VMAs {
		v := &b.p.VMAs[i]
		if v.ParentPages == 0 {
			continue
		}
		if !image.Inherits(b.p, v, parent.p, parent.p.VMAAt(v.Start, v.Len())) {
			return fmt.Errorf("vma %#x-%#x holds pages of the parent, which has no such mapping: %w", v.Start, v.End, image.ErrCorrupt)
		}
		b.inherited[v] = true
		b.dropped[v] = v.Start
		keep = append(keep, ptrace.Area{Start: v.Start, End: v.End})
	}
	vdso := vdsoAreas(b.p.VMAs)
	keepVDSO := len(vdso) > 0 && equalAreas(vdso, vdsoAreas(parent.p.VMAs))
	if keepVDSO {
		keep = append(keep, vdso...)
	}
	sort.Slice(keep, func(i, j int) bool { return keep[i].Start < keep[j].Start })
	at := uint64(0)
	for _, k := range append(keep, ptrace.Area{Start: taskSize, End: taskSize}) {
		if k.Start > at {
			if _, err := b.call(fmt.Sprintf("munmap %#x-%#x", at, k.Start), unix.SYS_MUNMAP, at, k.Start-at); err != nil {
				return err
			}
		}
		at = max(at, k.End)
	}
	if keepVDSO || len(vdso) == 0 {
		return nil
	}
	return b.mapVDSO()
}

// vdsoAreas lists the [vvar] and [vdso] VMAs.
func vdsoAreas(vmas []image.VMA) []ptrace.Area {
	var out []ptrace.Area
	for _, v := range vmas {
		if v.Kind == image.VMAVvar || v.Kind == image.VMAVDSO {
			out = append(out, ptrace.Area{Start: v.Start, End: v.End})
		}
	}
	return out
}

func equalAreas(a, b []ptrace.Area) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// mapVDSO maps the vDSO (and vvar) where the image has them; the process
// has none.
func (b *builder) mapVDSO() error {
	var lo, vdso uint64
	for _, v := range b.p.VMAs {
		if v.Kind == image.VMAVvar || v.Kind == image.VMAVDSO {
			if lo == 0 || v.Start < lo {
				lo = v.Start
			}
			if v.Kind == image.VMAVDSO {
				vdso = v.Start
			}
		}
	}
	if vdso == 0 {
		return nil
	}
	if _, err := b.call("arch_prctl(ARCH_MAP_VDSO_64)", unix.SYS_ARCH_PRCTL, archMapVDSO64, lo); err != nil {
		return err
	}
	now, err := proc.ReadMaps(b.target)
	if err != nil {
		return err
	}
	for _, m := range now {
		if m.Path == "[vdso]" {
			if m.Start != vdso {
				return fmt.Errorf("vdso landed at %#x, the image has it at %#x: %w", m.Start, vdso, ErrIncompatible)
			}
			return nil
		}
	}
	return fmt.Errorf("vdso not mapped")
}

// dropFor drops, in the inherited VMAs, the pages of a record's runs that
// are not the parent's, and those before them that the image does not
// hold, before anything is written there (runs come in address order,
// checked by pkg/image).
func (b *builder) dropFor(runs []image.PageRun) error {
	if len(b.inherited) == 0 {
		return nil
	}
	var lo, hi uint64
	flush := func() error {
		if hi > lo {
			if err := b.drop(lo, hi); err != nil {
				return err
			}
		}
		lo, hi = 0, 0
		return nil
	}
	add := func(from, to uint64) error {
		if from >= to {
			return nil
		}
		if hi != from {
			if err := flush(); err != nil {
				return err
			}
			lo = from
		}
		hi = to
		return nil
	}
	for _, r := range runs {
		end := r.Addr + r.Pages*image.PageSize
		v := b.vmaAt(r.Addr, end-r.Addr)
		if v == nil || !b.inherited[v] {
			continue
		}
		from := b.dropped[v]
		if from > r.Addr {
			return fmt.Errorf("pages run %#x+%d before the end %#x of the previous one: %w", r.Addr, r.Pages, from, image.ErrCorrupt)
		}
		to := end
		if r.Parent {
			to = r.Addr
		}
		if err := add(from, to); err != nil {
			return err
		}
		b.dropped[v] = end
	}
	return flush()
}

// dropRest drops the pages after the last run of each inherited VMA, once
// all the process's pages are written.
func (b *builder) dropRest() error {
	for v := range b.inherited {
		if from := b.dropped[v]; from < v.End {
			if err := b.drop(from, v.End); err != nil {
				return err
			}
			b.dropped[v] = v.End
		}
	}
	return nil
}

func (b *builder) drop(lo, hi uint64) error {
	_, err := b.call(fmt.Sprintf("madvise(MADV_DONTNEED) %#x-%#x", lo, hi), unix.SYS_MADVISE, lo, hi-lo, unix.MADV_DONTNEED)
	return err
}
