package proc

import (
	"github.com/ckpt/ckpt/internal/sys"
	"github.com/prometheus/procfs"
)

// MountInfo is one line of /proc/PID/mountinfo, as procfs parses it.
// Paths in it are as the kernel escapes them (a space is "\040").
type MountInfo = procfs.MountInfo

// ReadMountInfo parses /proc/PID/mountinfo.
func ReadMountInfo(pid sys.PID) ([]*MountInfo, error) { return readMountInfo(root, pid) }

func readMountInfo(root string, pid sys.PID) ([]*MountInfo, error) {
	p, err := procOf(root, int(pid))
	if err != nil {
		return nil, err
	}
	return p.MountInfo()
}

// MountByID returns the mount of mountinfo with the given mount ID (the
// mnt_id of an fdinfo), or nil.
func MountByID(mounts []*MountInfo, id int) *MountInfo {
	for _, m := range mounts {
		if m.MountID == id {
			return m
		}
	}
	return nil
}
