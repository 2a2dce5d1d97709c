package fdkind

import (
	"fmt"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// charDev is a character device that holds no state of its own
// (/dev/null, /dev/zero, /dev/urandom...), reopened by path, or made again
// when its node was removed (devnode.go).
func charDev() Kind {
	return Kind{
		Name:     image.FileChar,
		Match:    func(s *Source) bool { return s.Type() == unix.S_IFCHR },
		Describe: describeCharDev,
		Open:     openDevice,
		Show:     showDevice,
	}
}

func describeCharDev(env DumpEnv, s *Source, f *image.File) error {
	return describeDevice(s, f)
}

func showDevice(f *image.File) string {
	s := fmt.Sprintf("%s (device %d:%d)", f.Ref.Path, unix.Major(f.Rdev), unix.Minor(f.Rdev))
	if f.Ref.Deleted {
		s += " (node removed)"
	}
	return s
}
