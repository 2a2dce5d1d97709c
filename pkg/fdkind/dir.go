package fdkind

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// dir is an open directory, reopened by path at the same position. A
// directory removed while open (necessarily empty) is made again at its
// path with its mode and owner, opened, and removed again, so that its
// fds read the same "PATH (deleted)".
func dir() Kind {
	return Kind{
		Name:     image.FileDir,
		Match:    func(s *Source) bool { return s.Type() == unix.S_IFDIR },
		Describe: describeDir,
		Open:     openDir,
		Show:     showRef,
		Seekable: true,
	}
}

func describeDir(env DumpEnv, s *Source, f *image.File) error {
	lf, err := proc.ReadLinkedFile(s.Path())
	if err != nil {
		return err
	}
	if pid, gone := procGone(lf.Path); gone {
		f.Ref = image.FileRef{Path: lf.Path, Mode: s.Stat.Mode, ProcGone: pid}
		return nil
	}
	f.Ref, err = DirRef(lf)
	return err
}

// DirRef describes a directory reached through a /proc link (an fd, the
// working directory): a deleted one (necessarily empty) is made again at
// restore; one still linked somewhere else than its old path (moved, or
// out of ckpt's sight) is refused.
func DirRef(lf proc.LinkedFile) (image.FileRef, error) {
	if lf.Unlinked && lf.Stat.Nlink > 0 {
		return image.FileRef{}, fmt.Errorf("directory %s is not at that path any more (moved, or outside ckpt's view of the file system): cannot be restored: %w",
			lf.Path, ErrUnsupported)
	}
	st := &lf.Stat
	ref := image.FileRef{
		Path: lf.Path, Dev: st.Dev, Ino: st.Ino, Size: st.Size, Mode: st.Mode, UID: int(st.Uid), GID: int(st.Gid),
		MtimeNs: st.Mtim.Sec*1e9 + st.Mtim.Nsec, CtimeNs: st.Ctim.Sec*1e9 + st.Ctim.Nsec,
	}
	ref.Deleted = lf.Unlinked
	return ref, nil
}

// deletedDirKey names the directory made again for a deleted one.
type deletedDirKey [2]uint64

func openDir(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	if !f.Ref.Deleted {
		return openByPath(env, f, at)
	}
	of, err := OpenDeletedDir(env, &f.Ref, f.Flags)
	if err != nil {
		return Desc{}, err
	}
	return Desc{File: of}, nil
}

// OpenDeletedDir opens, with flags, the directory made again for a
// deleted one (once per directory: every fd of it, and every process
// working in it, share it).
func OpenDeletedDir(env RestoreEnv, ref *image.FileRef, flags int) (*os.File, error) {
	v, err := env.Once(deletedDirKey{ref.Dev, ref.Ino}, func() (any, error) {
		defer keepParentTimes(ref.Path)()
		defer makeParents(filepath.Dir(ref.Path))() // its parents may be gone too
		if err := unix.Mkdir(ref.Path, ref.Mode&0o7777); err != nil {
			return nil, fmt.Errorf("deleted directory %s: make it again: %w", ref.Path, err)
		}
		fd, err := sys.Open(ref.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if rmErr := unix.Rmdir(ref.Path); err == nil && rmErr != nil {
			fd.Close()
			return nil, fmt.Errorf("deleted directory %s: remove it again: %w", ref.Path, rmErr)
		}
		if err != nil {
			return nil, fmt.Errorf("deleted directory %s: %w", ref.Path, err)
		}
		holder := fd.File(ref.Path)
		env.Keep(holder)
		if err := setMtime(holder, ref.MtimeNs); err != nil {
			return nil, fmt.Errorf("deleted directory %s: %w", ref.Path, err)
		}
		return settleGhost(holder, ref, ref.Mode&0o7777)
	})
	if err != nil {
		return nil, err
	}
	holder := v.(*os.File)
	of, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", holder.Fd()), flags&openFlags&^unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("deleted directory %s: reopen: %w", ref.Path, err)
	}
	return of, nil
}
