package dump

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// sameFile reports whether fd1 of pid1 and fd2 of pid2 share one open file
// description.
func sameFile(pid1, fd1, pid2, fd2 int) bool {
	ok, err := sys.SameFile(sys.PID(pid1), sys.TargetFD(fd1), sys.PID(pid2), sys.TargetFD(fd2))
	return err == nil && ok
}

// openFile is an open file description already in the image, and one fd
// of one process that refers to it.
type openFile struct {
	pid, fd  int
	dev, ino uint64
	id       int // File.ID
}

func (d *dumper) collectFiles(p *image.Process) error {
	fds, err := proc.FDs(d.pid)
	if err != nil {
		return fmt.Errorf("list fds: %w", err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(proc.Path(d.pid, "fd", strconv.Itoa(fd)))
		if err != nil {
			return fmt.Errorf("fd %d: %w", fd, err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(proc.Path(d.pid, "fd", strconv.Itoa(fd)), &st); err != nil {
			return fmt.Errorf("fd %d (%s): stat: %w", fd, link, err)
		}
		info, err := proc.ReadFDInfo(d.pid, fd)
		if err != nil {
			return fmt.Errorf("fd %d (%s): fdinfo: %w", fd, link, err)
		}
		entry := image.FD{FD: fd, CloExec: info.Flags&unix.O_CLOEXEC != 0}
		shared := -1
		for _, o := range d.t.files {
			if o.dev == st.Dev && o.ino == st.Ino && sameFile(o.pid, o.fd, d.pid, fd) {
				shared = o.id
				break
			}
		}
		if shared >= 0 {
			entry.File = shared
			p.FDs = append(p.FDs, entry)
			continue
		}
		f, err := d.describeFile(fd, link, &st, info)
		if err != nil {
			return fmt.Errorf("fd %d (%s): %w", fd, link, err)
		}
		f.ID = len(d.t.files)
		entry.File = f.ID
		p.Files = append(p.Files, *f)
		d.t.files = append(d.t.files, openFile{pid: d.pid, fd: fd, dev: st.Dev, ino: st.Ino, id: f.ID})
		p.FDs = append(p.FDs, entry)
	}
	return linkEpollItems(d.pid, p)
}

// linkPipes decides, for every pipe, whether both of its ends are in the
// dump (it is rebuilt, with the bytes buffered in it) or not (external).
func (t *tree) linkPipes() error {
	files := map[int]*image.File{}
	ends := map[uint64][2]bool{} // ino -> read end seen, write end seen
	for _, m := range t.members {
		if m.p == nil {
			continue
		}
		for i := range m.p.Files {
			f := &m.p.Files[i]
			files[f.ID] = f
			if f.Pipe != nil {
				e := ends[f.Pipe.Ino]
				e[btoi(f.Pipe.Write)] = true
				ends[f.Pipe.Ino] = e
			}
		}
	}
	data := map[uint64]int{}
	for _, m := range t.members {
		if m.p == nil {
			continue
		}
		for _, e := range m.p.FDs {
			pf := files[e.File].Pipe
			if pf == nil || pf.Write {
				continue
			}
			ino := pf.Ino
			if _, done := data[ino]; done || !(ends[ino][0] && ends[ino][1]) {
				continue
			}
			buf, err := peekPipe(m.pid, e.FD)
			if err != nil {
				return fmt.Errorf("process %d fd %d (pipe:[%d]): read buffered data: %w", m.pid, e.FD, ino, err)
			}
			data[ino] = 0
			if len(buf) > 0 {
				data[ino] = t.addData(buf)
			}
		}
	}
	for _, f := range files {
		if pf := f.Pipe; pf != nil {
			pf.External = !(ends[pf.Ino][0] && ends[pf.Ino][1])
			pf.DataID = data[pf.Ino]
		}
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (d *dumper) describeFile(fd int, link string, st *syscall.Stat_t, info *proc.FDInfo) (*image.File, error) {
	if strings.HasPrefix(link, "anon_inode:") {
		return d.describeAnon(fd, link, info)
	}
	f := &image.File{Flags: info.Flags &^ unix.O_CLOEXEC, Pos: info.Pos}
	fdPath := proc.Path(d.pid, "fd", strconv.Itoa(fd))
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFIFO:
		if strings.HasPrefix(link, "pipe:") {
			f.Kind = image.FilePipe
			f.Pipe = &image.Pipe{Ino: st.Ino, Write: info.Flags&unix.O_ACCMODE == unix.O_WRONLY}
			size, err := pipeSize(fdPath)
			if err != nil {
				return nil, err
			}
			f.Pipe.Size = size
			return f, nil
		}
		return nil, fmt.Errorf("named FIFO: %w", ErrUnsupported)
	case syscall.S_IFSOCK:
		return d.describeSocket(fd, st.Ino, info)
	case syscall.S_IFCHR:
		f.Ref = statRef(link, st)
		f.Rdev = st.Rdev
		if isTTY(st.Rdev) {
			f.Kind = image.FileTTY
		} else {
			f.Kind = image.FileChar
		}
		return f, nil
	case syscall.S_IFDIR:
		f.Kind = image.FileDir
		f.Ref = statRef(link, st)
		return f, nil
	case syscall.S_IFREG:
		f.Kind = image.FileRegular
		if strings.HasPrefix(link, "anon_inode:") || strings.HasPrefix(link, "/anon_hugepage") {
			return nil, fmt.Errorf("%s: %w", link, ErrUnsupported)
		}
		deleted := strings.HasSuffix(link, " (deleted)") || strings.HasPrefix(link, "/memfd:")
		f.Ref = statRef(strings.TrimSuffix(link, " (deleted)"), st)
		if deleted {
			f.Ref.Deleted = true
			id, err := d.ghost(fdPath, st)
			if err != nil {
				return nil, err
			}
			f.Ref.DataID = id
		}
		return f, nil
	}
	if strings.HasPrefix(link, "anon_inode:") {
		return nil, fmt.Errorf("%s: %w", strings.TrimPrefix(link, "anon_inode:"), ErrUnsupported)
	}
	return nil, fmt.Errorf("file of mode %#o: %w", st.Mode, ErrUnsupported)
}

// isTTY reports terminal devices: pseudo-terminal slaves (136-143), the
// console and virtual terminals (4, 5).
func isTTY(rdev uint64) bool {
	maj := unix.Major(rdev)
	return (maj >= 136 && maj <= 143) || maj == 4 || (maj == 5 && unix.Minor(rdev) <= 1)
}

func pipeSize(path string) (int, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, fmt.Errorf("open pipe: %w", err)
	}
	defer f.Close()
	n, err := unix.FcntlInt(f.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		return 0, fmt.Errorf("F_GETPIPE_SZ: %w", err)
	}
	return n, nil
}

// peekPipe copies the bytes buffered in a pipe without consuming them:
// tee(2) from a new read end of the pipe into a pipe of ours.
func peekPipe(pid, readFD int) ([]byte, error) {
	src, err := os.OpenFile(proc.Path(pid, "fd", strconv.Itoa(readFD)), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	size, err := unix.FcntlInt(src.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		return nil, err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	pr, _ := sys.NewFD(p[0])
	pw, _ := sys.NewFD(p[1])
	defer pr.Close()
	defer pw.Close()
	if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, size); err != nil {
		return nil, fmt.Errorf("F_SETPIPE_SZ %d: %w", size, err)
	}
	n, err := unix.Tee(int(src.Fd()), p[1], size, unix.SPLICE_F_NONBLOCK)
	if err == unix.EAGAIN {
		return nil, nil // empty
	}
	if err != nil {
		return nil, fmt.Errorf("tee: %w", err)
	}
	buf := make([]byte, n)
	for off := 0; off < int(n); {
		m, err := unix.Read(p[0], buf[off:])
		if err != nil {
			return nil, err
		}
		off += m
	}
	return buf, nil
}
