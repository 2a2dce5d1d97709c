package fdkind

import (
	"fmt"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// charDev is a character device that holds no state of its own
// (/dev/null, /dev/zero, /dev/urandom...), reopened by path.
func charDev() Kind {
	return Kind{
		Name:     image.FileChar,
		Match:    func(s *Source) bool { return s.Type() == unix.S_IFCHR },
		Describe: describeCharDev,
		Open:     openByPath,
		Show:     showDevice,
	}
}

func describeCharDev(env DumpEnv, s *Source, f *image.File) error {
	f.Ref = StatRef(s.Link, &s.Stat)
	f.Rdev = s.Stat.Rdev
	return nil
}

func showDevice(f *image.File) string {
	return fmt.Sprintf("%s (device %d:%d)", f.Ref.Path, unix.Major(f.Rdev), unix.Minor(f.Rdev))
}
