package proc

import (
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// ReadMaps lists the mappings of /proc/PID/maps: their ranges, protection,
// offset, device, inode and name, without VmFlags, protection key or page
// size (zero). Unlike smaps, maps does not walk the page tables: a caller
// that needs only where the mappings are (a free range, the vDSO) pays
// nothing for the memory a process holds.
func ReadMaps(pid sys.PID) ([]Mapping, error) { return readMaps(root, int(pid)) }

func readMaps(root string, pid int) ([]Mapping, error) {
	p, err := procOf(root, pid)
	if err != nil {
		return nil, err
	}
	pm, err := p.ProcMaps()
	if err != nil {
		return nil, fmt.Errorf("%s/%d/maps: %w", root, pid, err)
	}
	out := make([]Mapping, 0, len(pm))
	for _, m := range pm {
		perms := []byte("---p")
		if m.Perms.Read {
			perms[0] = 'r'
		}
		if m.Perms.Write {
			perms[1] = 'w'
		}
		if m.Perms.Execute {
			perms[2] = 'x'
		}
		if m.Perms.Shared {
			perms[3] = 's'
		}
		out = append(out, Mapping{
			Start: uint64(m.StartAddr), End: uint64(m.EndAddr), Perms: string(perms), Offset: uint64(m.Offset),
			Major: unix.Major(m.Dev), Minor: unix.Minor(m.Dev), Inode: m.Inode, Path: m.Pathname,
		})
	}
	return out, nil
}
