package fdkind

import (
	"fmt"
	"os"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// tty is a terminal: the slave of a pseudo-terminal whose master is in
// the dump (File.Pty, set by the master's Finish: reopened at /dev/pts/N
// once the pair is rebuilt), or a terminal from outside the dump (a pty
// slave, the console, a virtual terminal): the restore attaches the
// terminal ckpt-redo runs on (--shell-job) or a file (--stdio).
func tty() Kind {
	return Kind{
		Name:     image.FileTTY,
		Match:    func(s *Source) bool { return s.Type() == unix.S_IFCHR && isTTY(s.Stat.Rdev) },
		Describe: describeTTY,
		Open:     openTTY,
		Show: func(f *image.File) string {
			if f.Pty != nil {
				return showPty(f)
			}
			return showDevice(f)
		},
	}
}

// isTTY reports terminal devices: pseudo-terminal slaves (136-143), the
// console and virtual terminals (4, 5).
func isTTY(rdev uint64) bool {
	maj := unix.Major(rdev)
	return (maj >= 136 && maj <= 143) || maj == 4 || (maj == 5 && unix.Minor(rdev) <= 1)
}

// describeTTY saves a terminal; for /dev/tty it notes which pty it
// stands for (TIOCGDEV), which the master's Finish keeps if that pty is
// in the dump.
func describeTTY(env DumpEnv, s *Source, f *image.File) error {
	if isPts(s.Stat.Rdev) && strings.HasSuffix(s.Link, " (deleted)") {
		// devpts removes /dev/pts/N when the master's last fd closes:
		// the slave is hung up (reads end of file, writes fail, every
		// ioctl EIO), which is all it has left
		path := strings.TrimSuffix(s.Link, " (deleted)")
		if _, err := unix.IoctlGetTermios(s.Copy, unix.TCGETS); s.Copy < 0 || err != unix.EIO {
			return fmt.Errorf("slave of pseudo-terminal %s whose node is gone but which is not hung up: cannot be restored: %w", path, ErrUnsupported)
		}
		f.Ref = StatRef(path, &s.Stat)
		f.Rdev = s.Stat.Rdev
		f.Pty = &image.Pty{Index: ptsIndex(path), HungUp: true, UID: int(s.Stat.Uid), GID: int(s.Stat.Gid), Mode: s.Stat.Mode & 0o7777}
		return nil
	}
	if err := describeCharDev(env, s, f); err != nil {
		return err
	}
	if s.Stat.Rdev != unix.Mkdev(5, 0) || s.Copy < 0 {
		return nil
	}
	dev, err := unix.IoctlGetUint32(s.Copy, unix.TIOCGDEV)
	if err != nil {
		return nil // no controlling terminal behind it any more (hung up)
	}
	if rdev := uint64(dev); isPts(rdev) {
		f.Pty = &image.Pty{Index: int(unix.Minor(rdev)), DevTTY: true}
	}
	return nil
}

func openTTY(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	if f.Pty != nil && f.Pty.DevTTY {
		// /dev/tty opens the opener's controlling terminal: the process
		// opens it itself, once it has it again.
		if _, err := restorePair(env, f); err != nil {
			return Desc{}, err
		}
		return Desc{InTarget: func(t Target, fd sys.TargetFD, cloexec bool) error { return openInTarget(t, f, fd, cloexec) }}, nil
	}
	if f.Pty != nil && f.Pty.HungUp {
		return openHungUp(env, f)
	}
	if f.Pty != nil {
		return openPts(env, f)
	}
	if !isPts(f.Rdev) && !env.ShellJob() {
		// the console or a virtual terminal, one device for everyone:
		// opened again by its path (or its node made again)
		return openDevice(env, f, at)
	}
	if env.ShellJob() {
		for _, our := range []*os.File{os.Stdin, os.Stdout, os.Stderr} {
			if _, err := unix.IoctlGetTermios(int(our.Fd()), unix.TCGETS); err == nil {
				d, err := dupFile(our)
				return Desc{File: d, Foreign: true}, err
			}
		}
		return Desc{}, fmt.Errorf("terminal %s: --shell-job given but ckpt-redo runs on no terminal: %w", f.Ref.Path, ErrExternal)
	}
	if at.FD <= 2 {
		if s, ok, err := env.Stdio(); ok || err != nil {
			return Desc{File: s, Foreign: true}, err
		}
	}
	return Desc{}, fmt.Errorf("terminal %s: the process ran on a terminal; pass --shell-job to attach it to this one, "+
		"or --stdio FILE to replace its standard fds: %w", f.Ref.Path, ErrExternal)
}

// dupFile returns a new fd of ours for the same description.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
