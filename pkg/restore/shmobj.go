package restore

import (
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// shmSource is where a shared memory object was created again: a
// MAP_SHARED|MAP_ANONYMOUS mapping of process pid at [start, end), whose
// /proc/PID/map_files entry the other mappings of the object open. A
// temporary one (an object no single mapping covers whole) is unmapped
// once every process is laid out.
type shmSource struct {
	pid        sys.PID
	start, end uint64
	temp       bool
}

func (s shmSource) path() string {
	return fmt.Sprintf("/proc/%d/map_files/%x-%x", s.pid, s.start, s.end)
}

// shmSize is the size of shared memory object id at dump time (a mapping
// may reach past it: its pages there raise SIGBUS, as before), or, for
// an image without it, what its mappings cover.
func (t *tree) shmSize(id uint64) uint64 {
	var size, covered uint64
	for _, b := range t.procs {
		for _, v := range b.p.VMAs {
			if v.Kind == image.VMAShmAnon && v.ShmID == id {
				size = max(size, uint64(max(v.ShmSize, 0)))
				covered = max(covered, v.Offset+v.Len())
			}
		}
	}
	if size == 0 {
		return covered
	}
	return size
}

// mapShared maps the shared anonymous VMAs of b as the same kind of object
// they were: the first process of the tree mapping an object creates it
// with mmap(MAP_SHARED|MAP_ANONYMOUS), every other mapping maps that one
// through the creator's /proc/PID/map_files entry. Both are one shmem
// inode, "/dev/zero (deleted)" on the same device as before, exactly what
// the program made (a memfd would show another name and device).
func (b *builder) mapShared(vs []*image.VMA) error {
	t := b.t
	if t.shmSrc == nil {
		t.shmSrc = map[uint64]shmSource{}
	}
	done := map[*image.VMA]bool{}
	for _, v := range vs {
		if _, ok := t.shmSrc[v.ShmID]; ok || v.Offset != 0 || v.Len() != t.shmSize(v.ShmID) {
			continue
		}
		if err := b.mapAt(v, unix.MAP_FIXED|unix.MAP_SHARED|unix.MAP_ANONYMOUS, ^uint64(0), 0); err != nil {
			return err
		}
		t.shmSrc[v.ShmID] = shmSource{pid: b.target, start: v.Start, end: v.End}
		done[v] = true
	}
	for _, v := range vs {
		if done[v] {
			continue
		}
		src, ok := t.shmSrc[v.ShmID]
		if !ok {
			// No mapping covers the object whole: create it whole where
			// the kernel finds room (every VMA of b is in place), for as
			// long as the tree is laid out.
			size := t.shmSize(v.ShmID)
			ret, err := b.call("mmap shared memory object", unix.SYS_MMAP, 0, size,
				unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS, ^uint64(0), 0)
			if err != nil {
				return err
			}
			src = shmSource{pid: b.target, start: ret, end: ret + size, temp: true}
			t.shmSrc[v.ShmID] = src
		}
		if err := b.writeString(scratchPathOff, src.path()); err != nil {
			return err
		}
		at := int64(unix.AT_FDCWD)
		fd, err := b.call("open "+src.path(), unix.SYS_OPENAT, uint64(at), b.gadget+scratchPathOff, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = b.mapAt(v, unix.MAP_FIXED|unix.MAP_SHARED, fd, v.Offset)
		if _, cerr := b.call("close", unix.SYS_CLOSE, fd); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// dropShmTemps unmaps the temporary mappings made to create shared memory
// objects, once every process maps what it needs of them.
func (t *tree) dropShmTemps() error {
	for id, src := range t.shmSrc {
		if !src.temp {
			continue
		}
		b := t.byPID[src.pid]
		if _, err := b.call("munmap shared memory object", unix.SYS_MUNMAP, src.start, src.end-src.start); err != nil {
			return fmt.Errorf("process %d: %w", b.p.PID, err)
		}
		src.temp = false
		t.shmSrc[id] = src
	}
	return nil
}
