package fdkind

import (
	"fmt"
	"strings"

	"github.com/ckpt/ckpt/pkg/image"
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
	if strings.HasSuffix(s.Link, " (deleted)") {
		return fmt.Errorf("deleted directory %s: cannot be restored: %w", strings.TrimSuffix(s.Link, " (deleted)"), ErrUnsupported)
	}
	f.Ref = StatRef(s.Link, &s.Stat)
	return nil
}
