package fdkind

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// regular is a regular file, opened by path; a deleted one (or a memfd)
// has its content in the image and comes back as an unnamed file.
func regular() Kind {
	return Kind{
		Name:     image.FileRegular,
		Match:    func(s *Source) bool { return s.Type() == unix.S_IFREG && s.Anon() == "" },
		Describe: describeRegular,
		Open:     openByPath,
		Show:     showRef,
		Seekable: true,
	}
}

func describeRegular(env DumpEnv, s *Source, f *image.File) error {
	if strings.HasPrefix(s.Link, "/anon_hugepage") {
		return fmt.Errorf("%s: cannot be restored: %w", s.Link, ErrUnsupported)
	}
	// Whether it was deleted is not in the link text (a name may end in
	// " (deleted)"): the name must still lead to the same inode.
	lf, err := proc.ReadLinkedFile(s.Path())
	if err != nil {
		return err
	}
	if pid, gone := procGone(lf.Path); gone {
		f.Ref = image.FileRef{Path: lf.Path, Mode: s.Stat.Mode, ProcGone: pid}
		return nil
	}
	f.Ref = StatRef(lf.Path, &s.Stat)
	if lf.Unlinked && s.Stat.Nlink > 0 && s.Type() == unix.S_IFREG {
		return LinkedElsewhere(s.Path(), uint64(s.Stat.Nlink), &f.Ref)
	}
	if lf.Unlinked {
		if err := env.Ghost(s.Path(), &s.Stat, &f.Ref); err != nil {
			return err
		}
	}
	return nil
}

// LinkedElsewhere saves a file whose name was removed while it has
// nlink other links (path is a /proc link that opens it: an fd or a
// map_files entry): the same inode is still reachable, under a name the
// dump does not know. A copy of it would be another file (writes would
// not reach the other names), so it is saved by its file handle and
// opened again by it (openLinkedElsewhere); a file system without file
// handles is refused.
func LinkedElsewhere(path string, nlink uint64, ref *image.FileRef) error {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	if err != nil {
		return fmt.Errorf("%s was removed but still has %d other links, and its file system gives no file handle to open it again (%v): cannot be restored: %w",
			ref.Path, nlink, err, ErrUnsupported)
	}
	ref.Handle = &image.FileHandle{Type: h.Type(), Bytes: h.Bytes()}
	return nil
}

// openLinkedElsewhere opens a removed file that still has other links by
// its file handle, on the file system of the nearest existing directory
// above its old name, and checks it is the file of the dump.
func openLinkedElsewhere(env RestoreEnv, ref *image.FileRef, flags int, mapped bool) (*os.File, error) {
	dir := filepath.Dir(ref.Path)
	var mnt *sys.FD
	for {
		m, err := sys.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == nil {
			mnt = m
			break
		}
		if dir == "/" || dir == "." {
			return nil, fmt.Errorf("%s (removed, linked elsewhere): no directory of its file system: %w", ref.Path, err)
		}
		dir = filepath.Dir(dir)
	}
	defer mnt.Close()
	h := unix.NewFileHandle(ref.Handle.Type, ref.Handle.Bytes)
	fd, err := sys.OpenByHandleAt(mnt, h, flags|unix.O_CLOEXEC|unix.O_NOCTTY)
	if err != nil {
		return nil, fmt.Errorf("%s (removed at the dump, still linked under another name): open it by its file handle on the file system of %s: %w",
			ref.Path, dir, err)
	}
	f := fd.File(ref.Path)
	if err := checkUnchanged(env, ref, f, flags, mapped); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// StatRef identifies a file by its path and stat.
func StatRef(path string, st *unix.Stat_t) image.FileRef {
	return image.FileRef{
		Path: path, Dev: st.Dev, Ino: st.Ino, Size: st.Size,
		MtimeNs: st.Mtim.Sec*1e9 + st.Mtim.Nsec, Mode: st.Mode,
		UID: int(st.Uid), GID: int(st.Gid), CtimeNs: st.Ctim.Sec*1e9 + st.Ctim.Nsec,
	}
}

func showRef(f *image.File) string {
	if f.Ref.ProcGone != 0 {
		return f.Ref.Path + " (its process had exited)"
	}
	if f.Ref.Deleted && f.Kind == image.FileDir {
		return f.Ref.Path + " (deleted)"
	}
	if f.Ref.Deleted {
		return f.Ref.Path + " (deleted, content in image)"
	}
	if f.Ref.Handle != nil {
		return f.Ref.Path + " (removed, still linked under another name: opened by its file handle)"
	}
	return f.Ref.Path
}

// openByPath reopens a file, directory or device by its path. A file of
// the /proc directory of a process of the dump does not exist before the
// process does: the process opens it itself.
func openByPath(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	if f.Ref.ProcGone != 0 {
		return openProcGone(f), nil
	}
	if ownProc(env, f.Ref.Path) {
		return Desc{InTarget: func(t Target, fd sys.TargetFD, cloexec bool) error { return openInTarget(t, f, fd, cloexec) }}, nil
	}
	of, err := OpenRef(env, &f.Ref, f.Flags, false)
	if err != nil {
		return Desc{}, err
	}
	return Desc{File: of}, nil
}

// ownProc tells whether path is under /proc/PID of a process of the dump.
func ownProc(env RestoreEnv, path string) bool {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return false
	}
	pid, _, _ := strings.Cut(rest, "/")
	n, err := strconv.Atoi(pid)
	return err == nil && env.InDump(sys.PID(n))
}

// openInTarget makes the process open a file itself and puts it at fd.
func openInTarget(t Target, f *image.File, fd sys.TargetFD, cloexec bool) error {
	addr, err := t.Scratch(append([]byte(f.Ref.Path), 0))
	if err != nil {
		return err
	}
	flags := uint64(f.Flags) &^ (unix.O_CREAT | unix.O_TRUNC | unix.O_EXCL)
	at := int64(unix.AT_FDCWD)
	r, err := t.Call("open "+f.Ref.Path, unix.SYS_OPENAT, uint64(at), addr, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	cl := uint64(0)
	if cloexec {
		cl = unix.O_CLOEXEC
	}
	if sys.TargetFD(r) == fd {
		if !cloexec {
			_, err = t.Call("fcntl F_SETFD", unix.SYS_FCNTL, r, unix.F_SETFD, 0)
		}
		return err
	}
	if _, err := t.Call(fmt.Sprintf("dup3 fd %d", fd), unix.SYS_DUP3, r, uint64(fd), cl); err != nil {
		return err
	}
	_, err = t.Call("close", unix.SYS_CLOSE, r)
	return err
}

// openFlags are the flags a file is reopened with: its access mode and
// the status flags open takes (F_SETFL sets the rest, see Settle).
const openFlags = unix.O_ACCMODE | unix.O_APPEND | unix.O_NONBLOCK | unix.O_DSYNC | unix.O_SYNC |
	unix.O_DIRECT | unix.O_NOATIME | unix.O_LARGEFILE | unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | tmpfileFlag

// OpenRef opens a file as the image describes it, with flags. Files
// whose content is in the image (deleted at dump time) are recreated as
// unnamed files. A regular file that is not as the dump saw it is refused
// (checkUnchanged); mapped is set for the file behind mappings, whose
// content is compared too.
func OpenRef(env RestoreEnv, ref *image.FileRef, flags int, mapped bool) (*os.File, error) {
	fl := flags & openFlags
	if ref.Deleted {
		return openGhost(env, ref, fl, mapped)
	}
	if ref.Handle != nil {
		return openLinkedElsewhere(env, ref, fl&^(tmpfileFlag|unix.O_DIRECTORY|unix.O_NOFOLLOW), mapped)
	}
	var st unix.Stat_t
	if err := unix.Stat(ref.Path, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", ref.Path, err)
	}
	if st.Mode&unix.S_IFMT != ref.Mode&unix.S_IFMT {
		return nil, fmt.Errorf("%s: was mode %#o, now %#o: %w", ref.Path, ref.Mode, st.Mode, ErrFileChanged)
	}
	if fl&tmpfileFlag != 0 {
		// an O_TMPFILE file linked into a directory since: opened by
		// its name (its F_GETFL no longer shows O_TMPFILE).
		fl &^= tmpfileFlag | unix.O_DIRECTORY
	}
	f, err := os.OpenFile(ref.Path, fl|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	var err2 error
	switch ref.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		err2 = checkUnchanged(env, ref, f, fl, mapped)
	case unix.S_IFDIR:
		err2 = checkSameDir(env, ref, f)
	}
	if err2 != nil {
		f.Close()
		return nil, err2
	}
	return f, nil
}

// procGone tells whether path is in the /proc directory of a process
// that has exited, and which.
func procGone(path string) (sys.PID, bool) {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return 0, false
	}
	pid, _, _ := strings.Cut(rest, "/")
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return 0, false
	}
	if _, err := os.Stat("/proc/" + pid); err == nil {
		return 0, false
	}
	return sys.PID(n), true
}

// openProcGone opens a file of the /proc directory of the process ref
// names, which had exited at the dump: inside the process being built,
// while a short-lived child holds that PID; once the child is gone the
// file tells ESRCH, as it did.
func openProcGone(f *image.File) Desc {
	return Desc{InTarget: func(t Target, fd sys.TargetFD, cloexec bool) error {
		return t.HoldPID(f.Ref.ProcGone, func() error { return openInTarget(t, f, fd, cloexec) })
	}}
}
