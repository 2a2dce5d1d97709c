package fdkind

import (
	"fmt"
	"os"
	"regexp"
	"strconv"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// nsFile is an open file of the nsfs file system: a process opened one of
// the /proc/PID/ns/TYPE links ("net:[4026531833]"), to keep a namespace
// or to setns(2) into it later. It is restored when the namespace is the
// one ckpt runs in at the dump (checked by inode) and ckpt-redo runs in
// at the restore: reopened through /proc/self/ns/TYPE. A namespace of
// another is refused at dump: no restore can make it again.
func nsFile() Kind {
	return Kind{
		Name:     image.FileNS,
		Match:    func(s *Source) bool { return s.Type() == unix.S_IFREG && nsLink.MatchString(s.Link) },
		Describe: describeNSFile,
		Open:     openNSFile,
		Show:     func(f *image.File) string { return "namespace " + f.Ref.Path },
	}
}

// nsLink is the link text of an nsfs file: TYPE:[INODE].
var nsLink = regexp.MustCompile(`^([a-z_]+):\[([0-9]+)\]$`)

// nsType splits an nsfs link into the namespace type (the name of its
// /proc/PID/ns entry) and inode.
func nsType(link string) (string, uint64, bool) {
	m := nsLink.FindStringSubmatch(link)
	if m == nil {
		return "", 0, false
	}
	ino, err := strconv.ParseUint(m[2], 10, 64)
	return m[1], ino, err == nil
}

func describeNSFile(env DumpEnv, s *Source, f *image.File) error {
	typ, ino, ok := nsType(s.Link)
	if !ok {
		return fmt.Errorf("namespace file %s: %w", s.Link, ErrUnsupported)
	}
	var own unix.Stat_t
	if err := unix.Stat("/proc/self/ns/"+typ, &own); err != nil {
		return fmt.Errorf("namespace file %s: ckpt's own %s namespace: %v: cannot be restored: %w", s.Link, typ, err, ErrUnsupported)
	}
	if own.Ino != ino || own.Dev != s.Stat.Dev {
		return fmt.Errorf("namespace file %s of a %s namespace other than ckpt's (%s:[%d]): cannot be restored: %w",
			s.Link, typ, typ, own.Ino, ErrUnsupported)
	}
	f.Ref = StatRef(s.Link, &s.Stat)
	return nil
}

func openNSFile(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	typ, ino, ok := nsType(f.Ref.Path)
	if !ok {
		return Desc{}, fmt.Errorf("namespace file %q: %w", f.Ref.Path, image.ErrCorrupt)
	}
	of, err := os.OpenFile("/proc/self/ns/"+typ, f.Flags&unix.O_ACCMODE|unix.O_CLOEXEC, 0)
	if err != nil {
		return Desc{}, fmt.Errorf("namespace file %s: %w", f.Ref.Path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(of.Fd()), &st); err != nil {
		of.Close()
		return Desc{}, fmt.Errorf("namespace file %s: fstat: %w", f.Ref.Path, err)
	}
	if st.Ino != ino {
		of.Close()
		return Desc{}, fmt.Errorf("namespace file %s: ckpt-redo runs in another %s namespace (%s:[%d]): %w",
			f.Ref.Path, typ, typ, st.Ino, ErrFileChanged)
	}
	return Desc{File: of}, nil
}
