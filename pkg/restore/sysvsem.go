package restore

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// The System V semaphore sets the tree operated on last are in the image
// with their values and last operators (the dump refuses a process with
// SEM_UNDO operations). A set lives in the IPC namespace, not in a
// process: after a killing dump on the same machine it is still there, and
// the restore checks, before anything is created, that nothing touched it
// since (its key, times, values and last operators are the same). A set
// gone (a restore on another machine, or removed) or changed is refused by
// name: making it again is not done yet.

// checkSysVSem refuses the image if one of its semaphore sets is not as it
// was dumped.
func checkSysVSem(sets []image.SysVSemSet) error {
	for i := range sets {
		s := &sets[i]
		name := fmt.Sprintf("SysV semaphore set %d (key %#x)", s.ID, uint32(s.Key))
		ds, err := sys.SemStat(s.ID)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EIDRM) {
			return fmt.Errorf("%s is gone (making it again is not supported): %w", name, ErrSysV)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := sameSemSet(s, ds); err != nil {
			return fmt.Errorf("%s: %w: %w", name, err, ErrSysV)
		}
	}
	return nil
}

// sameSemSet says how set ds differs from s as it was dumped, or nil.
func sameSemSet(s *image.SysVSemSet, ds *sys.SemidDS) error {
	if ds.Perm.Key != s.Key || int(ds.NSems) != len(s.Values) {
		return fmt.Errorf("the id now names another set (key %#x, %d semaphores)", uint32(ds.Perm.Key), ds.NSems)
	}
	if ds.OTime != s.OTime || ds.CTime != s.CTime {
		return fmt.Errorf("used or changed since the dump")
	}
	vals, err := sys.SemGetAll(s.ID, len(s.Values))
	if err != nil {
		return err
	}
	pids := make([]int32, len(s.PIDs))
	for i := range pids {
		pid, err := sys.SemGetPID(s.ID, i)
		if err != nil {
			return err
		}
		pids[i] = int32(pid)
	}
	if !slices.Equal(vals, s.Values) || !slices.Equal(pids, s.PIDs) {
		return fmt.Errorf("its values or last operators changed since the dump")
	}
	return nil
}
