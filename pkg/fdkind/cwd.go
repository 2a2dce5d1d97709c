package fdkind

import (
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// DescribeDirs describes the working and root directories of a frozen
// process: their paths and identities (a removed working directory is
// made again at restore, like a deleted directory held open; one in the
// /proc directory of a process that has exited is entered again while a
// process holds that PID). A root directory that was removed or moved is
// refused.
func DescribeDirs(pid sys.PID, m *image.ProcMisc) error {
	lf, err := proc.ReadLinkedFile(proc.Path(pid, "cwd"))
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	var cwd image.FileRef
	if gone, ok := procGone(lf.Path); ok {
		// In the /proc directory of a process that has exited (zdtm
		// unhashed_proc): entered again while a short-lived process
		// holds that PID (see ProcGone).
		cwd = image.FileRef{Path: lf.Path, Mode: lf.Stat.Mode, ProcGone: gone}
	} else if cwd, err = DirRef(lf); err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	rl, err := proc.ReadLinkedFile(proc.Path(pid, "root"))
	if err != nil {
		return fmt.Errorf("root directory: %w", err)
	}
	if rl.Unlinked {
		return fmt.Errorf("root directory (chroot) %s was removed or moved: cannot be restored: %w", rl.Path, ErrUnsupported)
	}
	root, err := DirRef(rl)
	if err != nil {
		return fmt.Errorf("root directory: %w", err)
	}
	m.Cwd, m.CwdRef, m.Root, m.RootRef = lf.Path, &cwd, rl.Path, &root
	return nil
}

// CheckDirs refuses, on the machine of the dump, a working or root
// directory that is another directory than at the dump (removed and made
// again, or another moved there): the process would go on elsewhere.
func CheckDirs(env RestoreEnv, m *image.ProcMisc) error {
	if !env.SameBoot() {
		return nil
	}
	for _, d := range []struct {
		what, path string
		ref        *image.FileRef
	}{{"working directory", m.Cwd, m.CwdRef}, {"root directory", m.Root, m.RootRef}} {
		if d.ref == nil || d.ref.Deleted || d.ref.ProcGone != 0 {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(d.path, &st); err != nil {
			return fmt.Errorf("%s %s: %w", d.what, d.path, err)
		}
		if st.Dev != d.ref.Dev || st.Ino != d.ref.Ino {
			return fmt.Errorf("%s %s is another directory than at the dump (device %#x inode %d, was device %#x inode %d: made again or replaced): %w",
				d.what, d.path, st.Dev, st.Ino, d.ref.Dev, d.ref.Ino, ErrFileChanged)
		}
	}
	return nil
}
