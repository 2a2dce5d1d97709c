package fdkind

import (
	"fmt"
	"os"

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
	f.Ref = StatRef(lf.Path, &s.Stat)
	f.Ref.Deleted = lf.Unlinked
	if err := procFileGone(lf.Path); err != nil {
		return err
	}
	return nil
}

// deletedDirKey names the directory made again for a deleted one.
type deletedDirKey [2]uint64

func openDir(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	if !f.Ref.Deleted {
		return openByPath(env, f, at)
	}
	ref := &f.Ref
	v, err := env.Once(deletedDirKey{ref.Dev, ref.Ino}, func() (any, error) {
		defer keepParentTimes(ref.Path)()
		if err := unix.Mkdir(ref.Path, ref.Mode&0o7777); err != nil {
			return nil, fmt.Errorf("deleted directory %s: make it again: %w", ref.Path, err)
		}
		fd, err := unix.Open(ref.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if rmErr := unix.Rmdir(ref.Path); err == nil && rmErr != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("deleted directory %s: remove it again: %w", ref.Path, rmErr)
		}
		if err != nil {
			return nil, fmt.Errorf("deleted directory %s: %w", ref.Path, err)
		}
		holder := os.NewFile(uintptr(fd), ref.Path)
		env.Keep(holder)
		if err := setMtime(holder, ref.MtimeNs); err != nil {
			return nil, fmt.Errorf("deleted directory %s: %w", ref.Path, err)
		}
		return settleGhost(holder, ref, ref.Mode&0o7777)
	})
	if err != nil {
		return Desc{}, err
	}
	holder := v.(*os.File)
	of, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", holder.Fd()), f.Flags&openFlags&^unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Desc{}, fmt.Errorf("deleted directory %s: reopen: %w", ref.Path, err)
	}
	return Desc{File: of}, nil
}
