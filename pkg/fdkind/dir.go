package fdkind

import (
	"fmt"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// dir is an open directory, reopened by path at the same position.
func dir() Kind {
	return Kind{
		Name:     image.FileDir,
		Match:    func(s *Source) bool { return s.Type() == unix.S_IFDIR },
		Describe: describeDir,
		Open:     openByPath,
		Show:     showRef,
		Seekable: true,
	}
}

func describeDir(env DumpEnv, s *Source, f *image.File) error {
	lf, err := proc.ReadLinkedFile(s.Path())
	if err != nil {
		return err
	}
	if lf.Unlinked {
		return fmt.Errorf("deleted directory %s: cannot be restored: %w", lf.Path, ErrUnsupported)
	}
	f.Ref = StatRef(lf.Path, &s.Stat)
	return nil
}
