package dump

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"syscall"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/fdkind"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// vmAdvice maps the VmFlags of smaps to the madvise(2) advice that sets
// them again.
var vmAdvice = []struct {
	flag   string
	advice int
}{
	{"rr", unix.MADV_RANDOM}, {"sr", unix.MADV_SEQUENTIAL}, {"dc", unix.MADV_DONTFORK},
	{"mg", unix.MADV_MERGEABLE}, {"hg", unix.MADV_HUGEPAGE}, {"nh", unix.MADV_NOHUGEPAGE},
	{"dd", unix.MADV_DONTDUMP}, {"wf", unix.MADV_WIPEONFORK},
}

func (d *dumper) collectVMAs(p *image.Process) error {
	// numa_maps and smaps both walk the page tables: read them at once.
	type numa struct {
		marked map[uint64]bool
		err    error
	}
	policies := make(chan numa, 1)
	go func() {
		m, err := vmaPolicies(d.rd())
		policies <- numa{m, err}
	}()
	maps, err := proc.ReadSmaps(d.rd())
	pol := <-policies
	perr := pol.err
	if err != nil {
		return fmt.Errorf("read smaps: %w", err)
	}
	if perr != nil {
		return perr
	}
	refs := map[[2]uint64]int{} // dev, ino -> index in p.Mapped
	for _, m := range maps {
		v := image.VMA{Start: m.Start, End: m.End, Offset: m.Offset, File: -1, Name: m.Path}
		if m.Perms[0] == 'r' {
			v.Prot |= unix.PROT_READ
		}
		if m.Perms[1] == 'w' {
			v.Prot |= unix.PROT_WRITE
		}
		if m.Perms[2] == 'x' {
			v.Prot |= unix.PROT_EXEC
		}
		v.Shared = m.Perms[3] == 's'
		v.GrowsDown = m.VmFlags["gd"]
		if pol.marked[m.Start] && m.Path != "[vsyscall]" {
			// A policy to ask in the injection window (askVMAPolicies).
			v.MemPolicy = &image.MemPolicy{}
		}
		if err := vmaAttributes(&v, m); err != nil {
			return fmt.Errorf("mapping %#x-%#x %s: %w", m.Start, m.End, m.Path, err)
		}
		for _, a := range vmAdvice {
			if m.VmFlags[a.flag] {
				v.Advice = append(v.Advice, a.advice)
			}
		}
		// A SHM_HUGETLB segment is a SysV segment like the others (see
		// sysvAttachment).
		if m.VmFlags["ht"] && !(v.Shared && strings.HasPrefix(m.Path, "/SYSV")) {
			if err := hugetlb(&v, m); err != nil {
				return fmt.Errorf("mapping %#x-%#x %s: %w", m.Start, m.End, m.Path, err)
			}
			p.VMAs = append(p.VMAs, v)
			continue
		}
		switch {
		case m.Path == "[vdso]":
			v.Kind = image.VMAVDSO
		case m.Path == "[vvar]" || m.Path == "[vvar_vclock]":
			v.Kind = image.VMAVvar
		case m.Path == "[vsyscall]":
			v.Kind = image.VMAVsyscall
		case m.Path == "[heap]":
			v.Kind = image.VMAHeap
		case m.Path == "[stack]":
			v.Kind = image.VMAStack
		case m.Inode == 0 && (m.Path == "" || strings.HasPrefix(m.Path, "[anon:") || strings.HasPrefix(m.Path, "[anon_shmem:")):
			v.Kind = image.VMAAnon
			if v.Shared {
				v.Kind = image.VMAShmAnon
			}
		case v.Shared && (strings.HasPrefix(m.Path, "/dev/zero") || strings.HasPrefix(m.Path, "[anon_shmem:")):
			// A named one ([anon_shmem:NAME]) shows its shmem inode.
			v.Kind = image.VMAShmAnon
		case v.Shared && strings.HasPrefix(m.Path, "/SYSV"):
			v.Kind = image.VMASysVShm
		case m.Path == "/[aio] (deleted)":
			v.Kind, v.Advice = image.VMAAIO, nil // the kernel's own flags
			if v.AIO, err = readAIORing(d.rd(), m.Start, m.End); err != nil {
				return fmt.Errorf("mapping %#x-%#x [aio]: %w", m.Start, m.End, err)
			}
		case m.Path == "/secretmem (deleted)":
			return fmt.Errorf("mapping %#x-%#x: memfd_secret memory: no one but the process can read it: cannot be restored: %w", m.Start, m.End, ErrUnsupported)
		case strings.HasPrefix(m.Path, "socket:["):
			return fmt.Errorf("mapping %#x-%#x of %s, a packet socket's mmap ring: its frames and the mapping cannot be restored: %w", m.Start, m.End, m.Path, ErrUnsupported)
		case m.VmFlags["io"] || m.VmFlags["pf"]:
			return fmt.Errorf("mapping %#x-%#x %s is device memory: %w", m.Start, m.End, m.Path, ErrUnsupported)
		case m.Inode != 0:
			v.Kind = image.VMAFile
			key := [2]uint64{uint64(unix.Mkdev(m.Major, m.Minor)), m.Inode}
			idx, ok := refs[key]
			if !ok {
				ref, err := d.mappedFile(m)
				if err != nil {
					return fmt.Errorf("mapping %#x-%#x %s: %w", m.Start, m.End, m.Path, err)
				}
				idx = len(p.Mapped)
				p.Mapped = append(p.Mapped, ref)
				refs[key] = idx
			}
			v.File = idx
			v.Name = p.Mapped[idx].Path
		default:
			return fmt.Errorf("mapping %#x-%#x %q: unknown kind: %w", m.Start, m.End, m.Path, ErrUnsupported)
		}
		if v.Kind == image.VMAShmAnon || v.Kind == image.VMASysVShm {
			// The shared memory object: processes of the tree that map
			// the same one share it again after restore.
			var st syscall.Stat_t
			mf := proc.Path(d.rd(), "map_files", fmt.Sprintf("%x-%x", m.Start, m.End))
			if err := syscall.Stat(mf, &st); err != nil {
				return fmt.Errorf("mapping %#x-%#x: stat shared memory: %w", m.Start, m.End, err)
			}
			v.ShmID = st.Ino
			v.ShmSize = st.Size
		}
		if v.Kind == image.VMASysVShm {
			if err := sysvAttachment(&v, m); err != nil {
				return fmt.Errorf("mapping %#x-%#x %s: %w", m.Start, m.End, m.Path, err)
			}
		}
		p.VMAs = append(p.VMAs, v)
	}
	if err := sysvWhole(p.VMAs); err != nil {
		return err
	}
	return identifyMapped(d.rd(), p)
}

// identifyMapped records the content identity (ELF build-id, or a hash
// of the parts mapped privately) of every file the process maps privately
// and that still has its name: the restore reads their clean pages back
// from them, and refuses one whose content is not the same
// (fdkind.IdentifyContent).
func identifyMapped(pid sys.PID, p *image.Process) error {
	ranges := map[int][]image.Extent{}
	link := map[int]string{}
	for _, v := range p.VMAs {
		if v.Kind != image.VMAFile || v.Shared {
			continue
		}
		ref := &p.Mapped[v.File]
		if ref.Deleted || ref.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if _, ok := link[v.File]; !ok {
			link[v.File] = proc.Path(pid, "map_files", fmt.Sprintf("%x-%x", v.Start, v.End))
		}
		end := min(int64(v.Offset)+int64(v.Len()), ref.Size)
		if int64(v.Offset) < end {
			ranges[v.File] = append(ranges[v.File], image.Extent{Off: int64(v.Offset), Len: end - int64(v.Offset)})
		}
	}
	for i, mf := range link {
		rs := mergeExtents(ranges[i])
		if len(rs) == 0 {
			continue // mapped past its end only: nothing is read from it
		}
		if err := fdkind.IdentifyContent(mf, &p.Mapped[i], rs); err != nil {
			return fmt.Errorf("mapped file %s: %w", p.Mapped[i].Path, err)
		}
	}
	return nil
}

// mergeExtents sorts ranges and merges those that overlap or touch; it
// returns a non-nil slice (an empty one: nothing of the file is mapped).
func mergeExtents(rs []image.Extent) []image.Extent {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Off < rs[j].Off })
	out := []image.Extent{}
	for _, r := range rs {
		if n := len(out); n > 0 && r.Off <= out[n-1].Off+out[n-1].Len {
			out[n-1].Len = max(out[n-1].Len, r.Off+r.Len-out[n-1].Off)
			continue
		}
		out = append(out, r)
	}
	return out
}

// mappedFile describes the file behind a mapping, through map_files so
// that a deleted file is still reachable; its content is kept in the image
// when it was deleted. The maps path text does not say which file it is.
func (d *dumper) mappedFile(m proc.Mapping) (image.FileRef, error) {
	mf := proc.Path(d.rd(), "map_files", fmt.Sprintf("%x-%x", m.Start, m.End))
	lf, err := proc.ReadLinkedFile(mf)
	if err != nil {
		return image.FileRef{}, err
	}
	ref := statRef(lf.Path, &lf.Stat)
	if lf.Unlinked && lf.Stat.Nlink > 0 && lf.Stat.Mode&unix.S_IFMT == unix.S_IFREG {
		// removed, but linked under another name: the same file, not a copy
		return ref, fdkind.LinkedElsewhere(mf, uint64(lf.Stat.Nlink), &ref)
	}
	if lf.Unlinked {
		if err := d.ghost(mf, &lf.Stat, &ref); err != nil {
			return ref, err
		}
	}
	return ref, nil
}

// ghost saves the content of a deleted file once, however many fds and
// mappings use it (fdkind.ReadGhost: holes are not stored), and marks ref
// deleted with its data record.
func (d *dumper) ghost(path string, st *syscall.Stat_t, ref *image.FileRef) error {
	key := [2]uint64{st.Dev, st.Ino}
	if g, ok := d.t.ghosts[key]; ok {
		ref.Deleted, ref.DataID, ref.Extents, ref.Seals = true, g.DataID, g.Extents, g.Seals
		return nil
	}
	data, err := fdkind.ReadGhost(path, ref, d.opts.GhostLimit)
	if err != nil {
		return err
	}
	ref.Deleted, ref.DataID = true, d.addData(data)
	d.t.ghosts[key] = *ref
	return nil
}

func statRef(path string, st *syscall.Stat_t) image.FileRef {
	return image.FileRef{
		Path: path, Dev: st.Dev, Ino: st.Ino, Size: st.Size,
		MtimeNs: st.Mtim.Sec*1e9 + st.Mtim.Nsec, Mode: st.Mode,
		UID: int(st.Uid), GID: int(st.Gid), CtimeNs: st.Ctim.Sec*1e9 + st.Ctim.Nsec,
	}
}

// sysvAttachment describes the System V shared memory segment v attaches
// (the inode of a SysV mapping is the segment id). Only whole attachments
// are restored (shmat at the same address; see sysvWhole). A segment made with
// SHM_HUGETLB (VmFlags ht) is created again with huge pages of the same
// size.
func sysvAttachment(v *image.VMA, m proc.Mapping) error {
	s, _, err := sysvShm(v.ShmID)
	if err != nil {
		return fmt.Errorf("SysV shared memory: %w", err)
	}
	v.SysV = s
	if m.VmFlags["ht"] {
		if m.KernelPageSize <= pageSize || m.KernelPageSize&(m.KernelPageSize-1) != 0 {
			return fmt.Errorf("SysV shared memory segment %d with page size %d: %w", s.ID, m.KernelPageSize, ErrUnsupported)
		}
		s.HugePageSize = m.KernelPageSize
	}
	s.ReadOnly = !m.VmFlags["mw"]
	return nil
}

// sysvAttachPages is the length of a whole attachment of segment s: its
// size rounded up to its pages.
func sysvAttachPages(s *image.SysVShm) uint64 {
	ps := uint64(pageSize)
	if s.HugePageSize != 0 {
		ps = s.HugePageSize
	}
	return (s.Size + ps - 1) &^ (ps - 1)
}

// sysvWhole checks that the SysV mappings of vmas (in address order) are
// whole attachments: one mapping, or several that follow each other and
// the segment's offsets from 0 to its end, the pieces an mprotect, mlock
// or madvise of part of one attachment splits it into (the restore
// attaches the segment once and gives each piece its attributes). An
// attachment of which a part was unmapped (or moved by mremap) is refused:
// shmat maps a segment whole.
func sysvWhole(vmas []image.VMA) error {
	for i := 0; i < len(vmas); i++ {
		v := &vmas[i]
		if v.Kind != image.VMASysVShm || v.SysV == nil {
			continue
		}
		base, end := v.Start-v.Offset, v.End
		j := i + 1
		for ; j < len(vmas); j++ {
			w := &vmas[j]
			if w.Kind != image.VMASysVShm || w.ShmID != v.ShmID || w.Start != end || w.Offset != w.Start-base || w.Offset == 0 {
				break
			}
			end = w.End
		}
		pages := sysvAttachPages(v.SysV)
		if v.Offset != 0 || end-v.Start != pages {
			return fmt.Errorf("mapping %#x-%#x %s: SysV shared memory segment %d (key %#x) attached in part (offset %#x, %d of %d bytes): cannot be restored: %w",
				v.Start, end, v.Name, v.SysV.ID, uint32(v.SysV.Key), v.Offset, end-v.Start, pages, ErrUnsupported)
		}
		i = j - 1
	}
	return nil
}

// vmaRefused are the VmFlags of attributes a restore cannot give a
// mapping again, with what they are.
var vmaRefused = []struct{ flag, what string }{
	{"ss", "shadow stack"},
	{"dp", "droppable memory (MAP_DROPPABLE)"},
	{"um", "registered with a userfaultfd (missing mode)"},
	{"uw", "registered with a userfaultfd (write-protect mode)"},
	{"ui", "registered with a userfaultfd (minor mode)"},
}

// vmaAttributes reads the attributes of a mapping restore gives back
// (mlock, mlock on fault, mseal, MAP_NORESERVE) and refuses those it cannot.
func vmaAttributes(v *image.VMA, m proc.Mapping) error {
	v.Locked = m.VmFlags["lo"]
	v.LockOnFault = m.VmFlags["lf"]
	v.Sealed = m.VmFlags["sl"]
	v.NoReserve = m.VmFlags["nr"]
	if m.ProtectionKey != 0 {
		return fmt.Errorf("memory protection key %d (pkey_mprotect): cannot be restored: %w", m.ProtectionKey, ErrUnsupported)
	}
	for _, r := range vmaRefused {
		if m.VmFlags[r.flag] {
			return fmt.Errorf("%s: cannot be restored: %w", r.what, ErrUnsupported)
		}
	}
	return nil
}

// hugetlb describes a hugetlb mapping (VmFlags ht). A private anonymous
// one (MAP_PRIVATE|MAP_ANONYMOUS|MAP_HUGETLB, which smaps shows as the
// deleted file /anon_hugepage) is restored as one again, with the same huge
// page size; its pages are read and written like any anonymous memory.
// Other shared hugetlb memory (MAP_SHARED anonymous, files of hugetlbfs or
// MFD_HUGETLB memfds) is refused: it is an object in a hugetlbfs that the
// restore does not rebuild. SHM_HUGETLB segments are SysV segments (see
// sysvAttachment), not handled here.
func hugetlb(v *image.VMA, m proc.Mapping) error {
	if v.Shared || m.Path != "/anon_hugepage (deleted)" {
		return fmt.Errorf("shared hugetlb memory (a hugetlbfs file, MFD_HUGETLB memfd or MAP_SHARED|MAP_HUGETLB mapping): cannot be restored: %w", ErrUnsupported)
	}
	if m.KernelPageSize <= image.PageSize || m.KernelPageSize&(m.KernelPageSize-1) != 0 {
		return fmt.Errorf("hugetlb mapping with page size %d: %w", m.KernelPageSize, ErrUnsupported)
	}
	v.Kind, v.Name, v.HugePageSize = image.VMAAnon, "", m.KernelPageSize
	return nil
}

// aioRingMagic is struct aio_ring's magic; aioRingHeader its size, after
// which the io_event slots (aioEventSize bytes each) start.
const (
	aioRingMagic  = 0xa10a10a1
	aioRingHeader = 32
	aioEventSize  = 32
)

// readAIORing reads the ring of the AIO context mapped at start: its
// size, head and tail, and the completions not yet reaped.
func readAIORing(pid sys.PID, start, end uint64) (*image.AIORing, error) {
	ring := make([]byte, end-start)
	if err := ptrace.ReadMem(pid, start, ring); err != nil {
		return nil, fmt.Errorf("read the ring: %w", err)
	}
	le := binary.LittleEndian
	r := &image.AIORing{Nr: le.Uint32(ring[4:]), Head: le.Uint32(ring[8:]), Tail: le.Uint32(ring[12:])}
	if magic, hlen := le.Uint32(ring[16:]), le.Uint32(ring[28:]); magic != aioRingMagic || hlen != aioRingHeader {
		return nil, fmt.Errorf("not an AIO ring (magic %#x, header %d bytes): %w", magic, hlen, ErrUnsupported)
	}
	if r.Nr < 2 || aioRingHeader+uint64(r.Nr)*aioEventSize > uint64(len(ring)) || r.Head >= r.Nr || r.Tail >= r.Nr {
		return nil, fmt.Errorf("AIO ring of %d events, head %d, tail %d, in %d bytes: %w", r.Nr, r.Head, r.Tail, len(ring), ErrUnsupported)
	}
	for i := r.Head; i != r.Tail; i = (i + 1) % r.Nr {
		off := aioRingHeader + uint64(i)*aioEventSize
		r.Events = append(r.Events, ring[off:off+aioEventSize]...)
	}
	return r, nil
}

// checkAIOQuiet reads the tail of every AIO ring of the tree again, at the
// end of the dump: a ring whose tail moved got completions of requests
// that were in flight when the tree froze, which no restore can submit
// again. A request still in flight then (a poll, or an I/O slower than the
// dump) leaves no trace a program outside the kernel can see.
func checkAIOQuiet(members []*member) error {
	for _, m := range members {
		if m.p == nil || m.p.Zombie {
			continue
		}
		for _, v := range m.p.VMAs {
			if v.AIO == nil {
				continue
			}
			var tail [4]byte
			if err := ptrace.ReadMem(m.rd(), v.Start+12, tail[:]); err != nil {
				return fmt.Errorf("process %d: AIO ring %#x: %w", m.pid, v.Start, err)
			}
			if now := binary.LittleEndian.Uint32(tail[:]); now != v.AIO.Tail {
				return refuse(m.pid, fmt.Sprintf("AIO context %#x", v.Start),
					"requests completed during the dump (tail %d, then %d): requests in flight cannot be restored; dump again once they are done", v.AIO.Tail, now)
			}
		}
	}
	return nil
}
