package dump

import (
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// shmObject is one shared memory object (a shmem inode: MAP_SHARED
// anonymous memory, what fork() shares) as the whole tree maps it. Its
// content is read from the object itself, not from one process's page
// tables: a page only another process (or one that is gone) touched is in
// the object but absent from this process's pagemap.
type shmObject struct {
	ino uint64
	// data lists the object's page ranges holding data, [off, end) in
	// bytes, page aligned, in order (SEEK_DATA/SEEK_HOLE).
	data [][2]uint64
	// planned marks the pages already planned for some mapping of the
	// tree, one bit a page.
	planned []uint64
	// where names the first mapping seen, for messages.
	where string
}

// shmKey names a shared memory object: a SysV segment's inode number is
// its id, which may equal another shmem inode's number.
type shmKey struct {
	sysv bool
	ino  uint64
}

// shmObjects holds the shared memory objects of a tree.
type shmObjects map[shmKey]*shmObject

// object returns the object behind the VMA of pid, reading its layout the
// first time.
func (s shmObjects) object(pid sys.PID, v *image.VMA) (*shmObject, error) {
	key := shmKey{v.Kind == image.VMASysVShm, v.ShmID}
	if o, ok := s[key]; ok {
		return o, nil
	}
	o := &shmObject{ino: v.ShmID, where: fmt.Sprintf("process %d mapping %#x-%#x", pid, v.Start, v.End)}
	mf := proc.Path(pid, "map_files", fmt.Sprintf("%x-%x", v.Start, v.End))
	f, err := os.Open(mf)
	if err != nil {
		return nil, fmt.Errorf("mapping %#x-%#x: open shared memory object: %w", v.Start, v.End, err)
	}
	defer f.Close()
	size := uint64(v.ShmSize)
	if o.data, err = dataRanges(int(f.Fd()), size); err != nil {
		return nil, fmt.Errorf("mapping %#x-%#x: shared memory object layout: %w", v.Start, v.End, err)
	}
	o.planned = make([]uint64, ((size+pageSize-1)/pageSize+63)/64)
	s[key] = o
	return o, nil
}

// dataRanges lists the ranges of a file holding data, up to size, page
// aligned. A file whose lseek does not know SEEK_DATA (a SysV segment's:
// noop_llseek) is all data.
func dataRanges(fd int, size uint64) ([][2]uint64, error) {
	h, errH := unix.Seek(fd, 0, unix.SEEK_HOLE)
	d, errD := unix.Seek(fd, 0, unix.SEEK_DATA)
	if errors.Is(errH, unix.EINVAL) || errH == nil && errD == nil && h == 0 && d == 0 && size > 0 {
		return [][2]uint64{{0, (size + pageSize - 1) &^ (pageSize - 1)}}, nil
	}
	var out [][2]uint64
	off := int64(0)
	for uint64(off) < size {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("SEEK_DATA at %d: %w", off, err)
		}
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("SEEK_HOLE at %d: %w", d, err)
		}
		if h <= d || d < off {
			return nil, fmt.Errorf("lseek gives data at %d and a hole at %d after %d", d, h, off)
		}
		lo := uint64(d) &^ (pageSize - 1)
		hi := min((uint64(h)+pageSize-1)&^(pageSize-1), size)
		if hi > lo {
			out = append(out, [2]uint64{lo, hi})
		}
		off = h
	}
	return out, nil
}

// plan adds to plan the pages of the object that v maps and that no
// mapping planned before holds, as runs at v's addresses, and counts them
// in v.
func (o *shmObject) plan(v *image.VMA, plan *memPlan) {
	force := v.Prot&unix.PROT_READ == 0
	lo, hi := v.Offset, v.Offset+v.Len()
	first := len(plan.runs)
	i := sort.Search(len(o.data), func(i int) bool { return o.data[i][1] > lo })
	for ; i < len(o.data) && o.data[i][0] < hi; i++ {
		for off := max(o.data[i][0], lo); off < min(o.data[i][1], hi); off += pageSize {
			pg := off / pageSize
			if pg/64 >= uint64(len(o.planned)) || o.planned[pg/64]&(1<<(pg%64)) != 0 {
				continue
			}
			o.planned[pg/64] |= 1 << (pg % 64)
			a := v.Start + (off - v.Offset)
			if k := len(plan.runs) - 1; k >= first && plan.runs[k].addr+plan.runs[k].pages*pageSize == a {
				plan.runs[k].pages++
			} else {
				plan.runs = append(plan.runs, run{addr: a, pages: 1, force: force})
			}
			v.Pages++
			plan.pages++
		}
	}
}

// unreachable returns an error naming the first object holding data that
// no mapping of the tree covers: it could be read back only through
// /proc/PID/map_files, and a restore could not put it anywhere.
func (s shmObjects) unreachable() error {
	keys := make([]shmKey, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ino < keys[j].ino || keys[i].ino == keys[j].ino && !keys[i].sysv })
	for _, k := range keys {
		o := s[k]
		for _, d := range o.data {
			for off := d[0]; off < d[1]; off += pageSize {
				pg := off / pageSize
				if pg/64 >= uint64(len(o.planned)) || o.planned[pg/64]&(1<<(pg%64)) == 0 {
					return fmt.Errorf("%s: shared memory object (inode %d) holds data at offset %#x that no mapping of the tree covers: cannot be restored: %w",
						o.where, o.ino, off, ErrUnsupported)
				}
			}
		}
	}
	return nil
}
