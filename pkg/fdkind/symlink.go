package fdkind

import (
	"fmt"
	"os"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// symlink is an O_PATH|O_NOFOLLOW fd of a symbolic link itself, reopened
// the same way; the link must still be there, pointing where it did.
func symlink() Kind {
	return Kind{
		Name:     image.FileSymlink,
		Match:    func(s *Source) bool { return s.Type() == unix.S_IFLNK },
		Describe: describeSymlink,
		Open:     openSymlink,
		Show:     func(f *image.File) string { return "symlink " + f.Ref.Path + " -> " + f.Target },
	}
}

func describeSymlink(env DumpEnv, s *Source, f *image.File) error {
	var st unix.Stat_t
	if err := unix.Lstat(s.Link, &st); err != nil || st.Ino != s.Stat.Ino || st.Dev != s.Stat.Dev {
		return fmt.Errorf("symbolic link %s, removed or replaced: cannot be restored: %w", s.Link, ErrUnsupported)
	}
	target, err := os.Readlink(s.Link)
	if err != nil {
		return fmt.Errorf("symbolic link %s: %w", s.Link, err)
	}
	f.Ref = StatRef(s.Link, &s.Stat)
	f.Target = target
	return nil
}

func openSymlink(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	target, err := os.Readlink(f.Ref.Path)
	if err != nil {
		return Desc{}, fmt.Errorf("symbolic link %s: %w", f.Ref.Path, err)
	}
	if target != f.Target {
		return Desc{}, fmt.Errorf("symbolic link %s points to %s, was %s: %w", f.Ref.Path, target, f.Target, ErrFileChanged)
	}
	fd, err := unix.Open(f.Ref.Path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Desc{}, fmt.Errorf("symbolic link %s: %w", f.Ref.Path, err)
	}
	return Desc{File: os.NewFile(uintptr(fd), f.Ref.Path)}, nil
}
