package dump

import (
	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// lockFuture tells whether mlockall(MCL_FUTURE) is in effect (mm
// def_flags, which /proc does not show): a probe mapping made in the
// process counts in VmLck only then, and is lock-on-fault (smaps lf)
// under MCL_ONFAULT. It returns the mlockall flags to restore. before is
// VmLck before the probe. The probe is one inaccessible page, unmapped at
// once; a dump that maps its batch area uses that area as the probe
// instead (lockedFlags), which spares two injected calls.
func lockFuture(r *remote, before uint64) (int, error) {
	addr, _, err := r.call("mmap probe", 0, unix.SYS_MMAP, 0, pageSize, unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uint64(0), 0)
	if err != nil {
		return 0, err
	}
	flags, err := lockedFlags(r.pid, before, addr)
	if _, _, uerr := r.call("munmap probe", 0, unix.SYS_MUNMAP, addr, pageSize); uerr != nil && err == nil {
		err = uerr
	}
	return flags, err
}

// lockedFlags tells, from the probe mapping at addr and VmLck before it
// was made, the mlockall flags in effect (see lockFuture).
func lockedFlags(pid sys.PID, before, addr uint64) (int, error) {
	after, err := vmLck(pid)
	if err != nil || after == before {
		return 0, err
	}
	maps, err := proc.ReadSmaps(pid)
	if err != nil {
		return 0, err
	}
	for _, m := range maps {
		if m.Start <= addr && addr < m.End && m.VmFlags["lf"] {
			return unix.MCL_FUTURE | unix.MCL_ONFAULT, nil
		}
	}
	return unix.MCL_FUTURE, nil
}

// vmLck returns VmLck (bytes) of /proc/PID/status.
func vmLck(pid sys.PID) (uint64, error) {
	st, err := proc.ReadStatus(pid)
	if err != nil {
		return 0, err
	}
	return st.VmLck, nil
}
