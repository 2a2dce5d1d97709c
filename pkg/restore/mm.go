package restore

// The address space of a process being built: the gadget area, the
// vDSO, every VMA at its address with its protection, advice, locks and
// seals, and the mm fields (PR_SET_MM_MAP). The dump side is
// pkg/dump/vmas.go and memory.go.

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"os"
	"strings"
	"unsafe"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// layout gives the process its address space: the gadget area at g,
// the vDSO and every VMA, ready for the pages. A process forked from its
// laid-out parent keeps what it inherits (cow.go).
func (b *builder) layout(g uint64) error {
	space := func() error { return b.addressSpace(g) }
	if b.from != nil {
		space = b.forkedSpace
	}
	if err := space(); err != nil {
		return fmt.Errorf("address space: %w", err)
	}
	b.scratch = b.gadget + scratchOff
	if err := b.mapVMAs(); err != nil {
		return fmt.Errorf("map: %w", err)
	}
	return nil
}

// addressSpace maps the gadget area where the image leaves room, removes
// everything else the helper had, and maps the vDSO at its old address.
func (b *builder) addressSpace(g uint64) error {
	ret, err := b.call("mmap gadget", unix.SYS_MMAP, g, gadgetSize, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uint64(0), 0)
	if err != nil {
		return err
	}
	if ret != g {
		return fmt.Errorf("gadget mapped at %#x, not %#x", ret, g)
	}
	b.gadget = g
	if err := ptrace.WriteMem(b.target, g, []byte{0x0f, 0x05, 0xcc}); err != nil {
		return err
	}
	b.in.Gadget = g
	if _, err := b.call("munmap below gadget", unix.SYS_MUNMAP, 0, g); err != nil {
		return err
	}
	if _, err := b.call("munmap above gadget", unix.SYS_MUNMAP, g+gadgetSize, taskSize-(g+gadgetSize)); err != nil {
		return err
	}
	return b.mapVDSO()
}

// mapProt is the protection a VMA is mapped with while it is filled.
func mapProt(v *image.VMA) int {
	if v.Pages > 0 && v.Kind != image.VMASysVShm { // see sysvWrite
		return v.Prot | unix.PROT_READ | unix.PROT_WRITE
	}
	return v.Prot
}

// mapVMAs maps every VMA of the image at its address; shared anonymous
// memory last (see mapShared), once everything else is in place.
func (b *builder) mapVMAs() error {
	var shared, sysv, aio []*image.VMA
	batch := b.newMapBatch()
	for i := range b.p.VMAs {
		v := &b.p.VMAs[i]
		if v.Start < b.gadget+gadgetSize && b.gadget < v.End {
			return fmt.Errorf("vma %#x-%#x overlaps the gadget", v.Start, v.End)
		}
		flags := unix.MAP_FIXED | unix.MAP_PRIVATE
		if v.Shared {
			flags = unix.MAP_FIXED | unix.MAP_SHARED
		}
		fd, off := ^uint64(0), uint64(0)
		if b.inherited[v] {
			continue // there since the fork
		}
		switch v.Kind {
		case image.VMAVDSO, image.VMAVvar, image.VMAVsyscall:
			continue
		case image.VMAShmAnon:
			shared = append(shared, v)
			continue
		case image.VMASysVShm:
			sysv = append(sysv, v)
			continue
		case image.VMAAIO:
			aio = append(aio, v)
			continue
		case image.VMAFile:
			fd, off = uint64(b.mapFD[v.File]), v.Offset
		default:
			flags |= unix.MAP_ANONYMOUS
			if h := v.HugePageSize; h != 0 {
				flags |= unix.MAP_HUGETLB | bits.TrailingZeros64(h)<<unix.MAP_HUGE_SHIFT
			}
		}
		if v.GrowsDown {
			flags |= unix.MAP_GROWSDOWN
		}
		if err := batch.mapAt(v, flags, fd, off); err != nil {
			return err
		}
	}
	if err := batch.run(); err != nil {
		return err
	}
	if err := b.mapShared(shared); err != nil {
		return err
	}
	if err := b.attachSysV(sysv); err != nil {
		return err
	}
	return b.aioRings(aio)
}

// mmapFlags adds to flags those v's own attributes ask of mmap.
func mmapFlags(v *image.VMA, flags int) int {
	if v.NoReserve {
		flags |= unix.MAP_NORESERVE // VmFlags nr
	}
	return flags
}

// mapAt maps v at its address and gives it its advice.
func (b *builder) mapAt(v *image.VMA, flags int, fd, off uint64) error {
	ret, err := b.call(fmt.Sprintf("mmap %#x-%#x %s", v.Start, v.End, v.Name), unix.SYS_MMAP,
		v.Start, v.Len(), uint64(mapProt(v)), uint64(mmapFlags(v, flags)), fd, off)
	if err != nil && v.HugePageSize != 0 {
		return fmt.Errorf("hugetlb mapping of %d pages of %d kB: %w (free huge pages of that size: %s)",
			v.Len()/v.HugePageSize, v.HugePageSize>>10, err, freeHugePages(v.HugePageSize))
	}
	if err != nil {
		return err
	}
	if ret != v.Start {
		return fmt.Errorf("mmap %#x-%#x landed at %#x", v.Start, v.End, ret)
	}
	if name, ok := anonName(v); ok {
		// The name given with prctl(PR_SET_VMA_ANON_NAME).
		if err := b.writeString(scratchPathOff, name); err != nil {
			return err
		}
		if _, err := b.call("prctl(PR_SET_VMA_ANON_NAME) "+v.Name, unix.SYS_PRCTL, prSetVMA, prSetVMAAnonName,
			v.Start, v.Len(), b.gadget+scratchPathOff); err != nil {
			return err
		}
	}
	return b.advise(v)
}

// advise gives v its madvise(2) advice.
func (b *builder) advise(v *image.VMA) error {
	for _, a := range v.Advice {
		ret, err := b.in.Syscall(unix.SYS_MADVISE, v.Start, v.Len(), uint64(a))
		if err != nil {
			return err
		}
		if e := ptrace.Errno(ret); e != nil {
			// The advice shows in smaps (and MADV_DONTFORK,
			// MADV_WIPEONFORK change what a fork does): never dropped.
			return fmt.Errorf("madvise(%d) on %#x-%#x: %w", a, v.Start, v.End, e)
		}
	}
	return nil
}

func (b *builder) protect() error {
	for i := range b.p.VMAs {
		v := &b.p.VMAs[i]
		switch v.Kind {
		case image.VMAVDSO, image.VMAVvar, image.VMAVsyscall:
			continue
		}
		if err := b.vmaPolicy(v); err != nil {
			return err
		}
		if mapProt(v) != v.Prot {
			if _, err := b.call("mprotect", unix.SYS_MPROTECT, v.Start, v.Len(), uint64(v.Prot)); err != nil {
				return err
			}
		}
		if err := b.lockSeal(v); err != nil {
			return err
		}
	}
	if b.p.LockFuture != 0 {
		// Every mapping of the image is in place: only the program's
		// own mappings from now on are locked.
		if _, err := b.call("mlockall", unix.SYS_MLOCKALL, uint64(b.p.LockFuture)); err != nil {
			return err
		}
	}
	return nil
}

// lockSeal locks v in memory (mlock2, on fault or not) and seals it
// (mseal) as it was; sealing comes last, nothing changes v after it.
func (b *builder) lockSeal(v *image.VMA) error {
	if v.Locked || v.LockOnFault {
		flags := uint64(0)
		if v.LockOnFault {
			flags = unix.MLOCK_ONFAULT
		}
		if _, err := b.call(fmt.Sprintf("mlock2 %#x-%#x", v.Start, v.End), unix.SYS_MLOCK2, v.Start, v.Len(), flags); err != nil {
			return err
		}
	}
	if v.Sealed {
		if _, err := b.call(fmt.Sprintf("mseal %#x-%#x", v.Start, v.End), unix.SYS_MSEAL, v.Start, v.Len(), 0); err != nil {
			return err
		}
	}
	return nil
}

// mm sets the mm fields, auxv and exe link with PR_SET_MM_MAP.
func (b *builder) mm() error {
	m := b.p.MM
	auxv := make([]byte, 8*len(b.p.Auxv))
	for i, a := range b.p.Auxv {
		binary.LittleEndian.PutUint64(auxv[8*i:], a)
	}
	if len(auxv) > scratchPathOff-scratchAuxvOff {
		return fmt.Errorf("auxv of %d bytes too large", len(auxv))
	}
	exe := uint32(0xffffffff)
	if b.exeFD >= 0 {
		exe = uint32(b.exeFD)
	}
	s := struct {
		StartCode, EndCode, StartData, EndData, StartBrk, Brk, StartStack uint64
		ArgStart, ArgEnd, EnvStart, EnvEnd                                uint64
		Auxv                                                              uint64
		AuxvSize, ExeFD                                                   uint32
	}{m.StartCode, m.EndCode, m.StartData, m.EndData, m.StartBrk, m.Brk, m.StartStack,
		m.ArgStart, m.ArgEnd, m.EnvStart, m.EnvEnd, b.gadget + scratchAuxvOff, uint32(len(auxv)), exe}
	if unsafe.Sizeof(s) != prctlMMMapSize {
		panic("prctl_mm_map size")
	}
	if err := b.write(scratchOff, ptrace.Bytes(&s)); err != nil {
		return err
	}
	if err := b.write(scratchAuxvOff, auxv); err != nil {
		return err
	}
	_, err := b.call("prctl(PR_SET_MM_MAP)", unix.SYS_PRCTL, prSetMM, prSetMMMap, b.gadget+scratchOff, prctlMMMapSize)
	return err
}

// anonName is the name an anonymous VMA was given with
// prctl(PR_SET_VMA_ANON_NAME): "[anon:NAME]", "[anon_shmem:NAME]".
func anonName(v *image.VMA) (string, bool) {
	prefix := "[anon:"
	switch v.Kind {
	case image.VMAAnon:
	case image.VMAShmAnon:
		prefix = "[anon_shmem:"
	default:
		return "", false
	}
	name, ok := strings.CutPrefix(v.Name, prefix)
	return strings.TrimSuffix(name, "]"), ok
}

// freeHugePages says how many huge pages of size bytes the kernel has free,
// for the message of a hugetlb mapping that could not be made.
func freeHugePages(size uint64) string {
	b, err := os.ReadFile(fmt.Sprintf("/sys/kernel/mm/hugepages/hugepages-%dkB/free_hugepages", size>>10))
	if err != nil {
		return "unknown: " + err.Error()
	}
	return strings.TrimSpace(string(b))
}
