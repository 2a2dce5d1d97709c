package restore

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

const (
	shmDest    = 0o1000 // SHM_DEST
	shmLocked  = 0o2000 // SHM_LOCKED
	shmExec    = 0o100000
	shmLock    = 11 // shmctl SHM_LOCK
	shmRdonly  = 0o10000
	shmHugetlb = 0o4000 // SHM_HUGETLB
)

// ErrSysV says a System V IPC object of the image cannot be had again.
var ErrSysV = errors.New("SysV IPC object unavailable")

// sysvSegment makes System V shared memory segment s available with its
// old id, once per restore: the same segment if it still exists with the
// same key and size and nobody attaches it (its content is cleared, the
// image's is written back through the attachments), else a new one created
// with the old id (through /proc/sys/kernel/shm_next_id). Anything else is
// refused by name.
func (t *tree) sysvSegment(s *image.SysVShm) error {
	if t.sysv == nil {
		t.sysv = map[int]bool{}
	}
	if _, done := t.sysv[s.ID]; done {
		return nil
	}
	name := fmt.Sprintf("SysV shared memory segment %d (key %#x, %d bytes)", s.ID, uint32(s.Key), s.Size)
	var ds unix.SysvShmDesc
	_, err := unix.SysvShmCtl(s.ID, unix.IPC_STAT, &ds)
	switch {
	case err == nil:
		if ds.Perm.Key != s.Key || ds.Segsz != s.Size || ds.Perm.Mode&shmDest != 0 {
			return fmt.Errorf("%s: id %d now names another segment (key %#x, %d bytes): %w", name, s.ID, uint32(ds.Perm.Key), ds.Segsz, ErrSysV)
		}
		if ds.Nattch != 0 {
			return fmt.Errorf("%s: still attached %d times by other processes: %w", name, ds.Nattch, ErrSysV)
		}
		if err := clearSegment(s.ID); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		t.sysv[s.ID] = false
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EIDRM):
		if s.Key != 0 {
			if id, err := unix.SysvShmGet(int(s.Key), 0, 0); err == nil {
				return fmt.Errorf("%s: the key now names segment %d: %w", name, id, ErrSysV)
			}
		}
		if err := os.WriteFile("/proc/sys/kernel/shm_next_id", []byte(strconv.Itoa(s.ID)), 0); err != nil {
			return fmt.Errorf("%s: set shm_next_id: %w", name, err)
		}
		id, err := shmgetAs(s)
		if err != nil {
			return fmt.Errorf("%s: shmget: %w", name, err)
		}
		t.sysv[id] = true // removed again if the restore fails
		if id != s.ID {
			return fmt.Errorf("%s: created again with id %d (another segment took the id meanwhile): %w", name, id, ErrSysV)
		}
	default:
		return fmt.Errorf("%s: IPC_STAT: %w", name, err)
	}
	if _, err := unix.SysvShmCtl(s.ID, unix.IPC_STAT, &ds); err != nil {
		return fmt.Errorf("%s: IPC_STAT: %w", name, err)
	}
	locked := ds.Perm.Mode & shmLocked
	ds.Perm.Uid, ds.Perm.Gid, ds.Perm.Mode = s.UID, s.GID, s.Mode&0o777
	if _, err := unix.SysvShmCtl(s.ID, unix.IPC_SET, &ds); err != nil {
		return fmt.Errorf("%s: IPC_SET: %w", name, err)
	}
	if s.Mode&shmLocked != 0 && locked == 0 {
		if _, err := unix.SysvShmCtl(s.ID, shmLock, nil); err != nil {
			return fmt.Errorf("%s: SHM_LOCK: %w", name, err)
		}
	}
	return nil
}

// clearSegment empties an existing segment (its pages become holes again,
// as in a fresh one) before the image's content is written into it.
func clearSegment(id int) error {
	b, err := unix.SysvShmAttach(id, 0, 0)
	if err != nil {
		return fmt.Errorf("attach to clear it: %w", err)
	}
	defer unix.SysvShmDetach(b)
	if err := unix.Madvise(b, unix.MADV_REMOVE); err != nil {
		return fmt.Errorf("clear: %w", err)
	}
	return nil
}

// attachSysV attaches the System V shared memory segments of b at their
// addresses (shmat, like the program did). An attachment split into
// several mappings (by an mprotect, mlock or madvise of part of it) is
// one mapping at offset 0 followed by the others (the dump checks it:
// dump.sysvWhole): the segment is attached once, with the first one, and
// each piece then gets its own protection and advice.
func (b *builder) attachSysV(vs []*image.VMA) error {
	var last *image.VMA // the piece before v, when v continues its attachment
	var attProt uint64  // the protection last's attachment was made with
	for _, v := range vs {
		s := v.SysV
		if s == nil {
			return fmt.Errorf("SysV mapping %#x-%#x without its segment: %w", v.Start, v.End, image.ErrCorrupt)
		}
		if v.Offset != 0 {
			// Mapped with the first piece of its attachment.
			if last == nil || last.ShmID != v.ShmID || last.End != v.Start || last.Offset+last.Len() != v.Offset {
				return fmt.Errorf("SysV mapping %#x-%#x at offset %#x of segment %d follows no piece of its attachment: %w",
					v.Start, v.End, v.Offset, s.ID, image.ErrCorrupt)
			}
		} else {
			if err := b.t.sysvSegment(s); err != nil {
				return err
			}
			flags := uint64(0)
			attProt = unix.PROT_READ | unix.PROT_WRITE
			if v.Prot&unix.PROT_EXEC != 0 {
				flags |= shmExec
				attProt |= unix.PROT_EXEC
			}
			if s.ReadOnly {
				flags |= shmRdonly
				attProt &^= unix.PROT_WRITE
			}
			ret, err := b.call(fmt.Sprintf("shmat %d at %#x", s.ID, v.Start), unix.SYS_SHMAT, uint64(s.ID), v.Start, flags)
			if err != nil {
				return err
			}
			if ret != v.Start {
				return fmt.Errorf("shmat %d landed at %#x, not %#x", s.ID, ret, v.Start)
			}
		}
		last = v
		if p := uint64(mapProt(v)); p != attProt {
			if _, err := b.call("mprotect", unix.SYS_MPROTECT, v.Start, v.Len(), p); err != nil {
				return err
			}
		}
		if err := b.advise(v); err != nil {
			return err
		}
	}
	return nil
}

// sysvDone marks the segments that were marked for removal (IPC_RMID)
// while attached, once every process attaches them.
func (t *tree) sysvDone() error {
	seen := map[int]bool{}
	for _, b := range t.procs {
		for _, v := range b.p.VMAs {
			if v.Kind != image.VMASysVShm || v.SysV == nil || seen[v.SysV.ID] || v.SysV.Mode&shmDest == 0 {
				continue
			}
			seen[v.SysV.ID] = true
			if _, err := unix.SysvShmCtl(v.SysV.ID, unix.IPC_RMID, nil); err != nil {
				return fmt.Errorf("SysV shared memory segment %d: IPC_RMID: %w", v.SysV.ID, err)
			}
		}
	}
	return nil
}

// removeSysV removes the segments and message queues a failed restore
// created.
func (t *tree) removeSysV() {
	for id, created := range t.sysv {
		if created {
			unix.SysvShmCtl(id, unix.IPC_RMID, nil)
		}
	}
	t.sysv = nil
	for _, id := range t.sysvMsgMade {
		sys.MsgRemove(id)
	}
	t.sysvMsgMade = nil
}

// shmgetAs creates segment s with the effective uid and gid of its old
// creator, which the segment keeps as cuid and cgid.
func shmgetAs(s *image.SysVShm) (int, error) {
	flags := unix.IPC_CREAT | unix.IPC_EXCL | int(s.Mode&0o777)
	if h := s.HugePageSize; h != 0 {
		flags |= shmHugetlb | bits.TrailingZeros64(h)<<unix.MAP_HUGE_SHIFT // SHM_HUGE_SHIFT is MAP_HUGE_SHIFT
	}
	id, err := asCreator(s.CUID, s.CGID, func() (int, error) {
		return unix.SysvShmGet(int(s.Key), int(s.Size), flags)
	})
	if err != nil && s.HugePageSize != 0 {
		return id, fmt.Errorf("SHM_HUGETLB segment of %d kB pages: %w (free huge pages of that size: %s)",
			s.HugePageSize>>10, err, freeHugePages(s.HugePageSize))
	}
	return id, err
}

// asCreator runs create (a System V IPC object's creation, which records
// the effective ids as its creator's) with effective uid and gid: on one
// OS thread of ckpt-redo whose credentials change for the call only (raw
// per-thread setresuid/setresgid, not the Go runtime's process-wide ones).
func asCreator(uid, gid uint32, create func() (int, error)) (int, error) {
	type result struct {
		id  int
		err error
	}
	done := make(chan result)
	euid, egid := unix.Geteuid(), unix.Getegid()
	go func() {
		runtime.LockOSThread()
		// The thread is left locked, so that it dies with this goroutine
		// if its credentials could not be put back.
		var r result
		defer func() { done <- r }()
		if err := sys.SetThreadEGID(gid); err != nil {
			r.err = fmt.Errorf("effective gid %d: %w", gid, err)
			return
		}
		if err := sys.SetThreadEUID(uid); err != nil {
			r.err = fmt.Errorf("effective uid %d: %w", uid, err)
			sys.SetThreadEGID(uint32(egid))
			return
		}
		r.id, r.err = create()
		e1 := sys.SetThreadEUID(uint32(euid))
		e2 := sys.SetThreadEGID(uint32(egid))
		if e1 == nil && e2 == nil {
			runtime.UnlockOSThread()
		}
	}()
	r := <-done
	return r.id, r.err
}

// sysvWrite writes data, the content of v at addr, into its segment
// through ckpt-redo's own attachment of it (made on first use).
func (t *tree) sysvWrite(v *image.VMA, addr uint64, data []byte) error {
	if t.sysvMem == nil {
		t.sysvMem = map[int][]byte{}
	}
	id := v.SysV.ID
	mem, ok := t.sysvMem[id]
	if !ok {
		var err error
		if mem, err = unix.SysvShmAttach(id, 0, 0); err != nil {
			return fmt.Errorf("SysV shared memory segment %d: attach to fill it: %w", id, err)
		}
		// The attachment spans whole pages; the tail of the last one,
		// past the segment's size, is memory too.
		mem = unsafe.Slice(&mem[0], (len(mem)+image.PageSize-1)&^(image.PageSize-1))
		t.sysvMem[id] = mem
	}
	off := v.Offset + (addr - v.Start)
	if off+uint64(len(data)) > uint64(len(mem)) {
		return fmt.Errorf("pages at %#x beyond SysV shared memory segment %d of %d bytes: %w", addr, id, len(mem), image.ErrCorrupt)
	}
	copy(mem[off:], data)
	return nil
}

// sysvDetach drops ckpt-redo's attachments made by sysvWrite.
func (t *tree) sysvDetach() {
	for _, mem := range t.sysvMem {
		unix.SysvShmDetach(mem)
	}
	t.sysvMem = nil
}
