package dump

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

const kcmpFile = 0

// sameFile reports whether two fds of pid share one open file description.
func sameFile(pid, fd1, fd2 int) bool {
	r, _, e := unix.Syscall6(unix.SYS_KCMP, uintptr(pid), uintptr(pid), kcmpFile, uintptr(fd1), uintptr(fd2), 0)
	return e == 0 && r == 0
}

type openFile struct {
	fd  int // an fd of the process that refers to it
	dev uint64
	ino uint64
}

func (d *dumper) collectFiles(p *image.Process) error {
	fds, err := proc.FDs(d.pid)
	if err != nil {
		return fmt.Errorf("list fds: %w", err)
	}
	var seen []openFile
	pipes := map[uint64][]*image.File{}
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
		for i, o := range seen {
			if o.dev == st.Dev && o.ino == st.Ino && sameFile(d.pid, o.fd, fd) {
				shared = i
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
		f.ID = len(p.Files)
		entry.File = f.ID
		p.Files = append(p.Files, *f)
		seen = append(seen, openFile{fd: fd, dev: st.Dev, ino: st.Ino})
		p.FDs = append(p.FDs, entry)
		if f.Pipe != nil {
			pipes[f.Pipe.Ino] = append(pipes[f.Pipe.Ino], &p.Files[f.ID])
		}
	}
	if err := linkEpollItems(d.pid, p); err != nil {
		return err
	}
	// A pipe is internal when both of its ends are in the dump; only
	// then is its content saved and can it be rebuilt.
	for ino := range pipes {
		var r, w bool
		var readFD int
		for _, f := range p.Files {
			if f.Pipe != nil && f.Pipe.Ino == ino {
				if f.Pipe.Write {
					w = true
				} else {
					r = true
				}
			}
		}
		for _, e := range p.FDs {
			if pf := p.Files[e.File].Pipe; pf != nil && pf.Ino == ino && !pf.Write {
				readFD = e.FD
				break
			}
		}
		var dataID int
		if r && w {
			data, err := peekPipe(d.pid, readFD)
			if err != nil {
				return fmt.Errorf("fd %d (pipe:[%d]): read buffered data: %w", readFD, ino, err)
			}
			if len(data) > 0 {
				dataID = d.addData(data)
			}
		}
		for i := range p.Files {
			if pf := p.Files[i].Pipe; pf != nil && pf.Ino == ino {
				pf.External = !(r && w)
				pf.DataID = dataID
			}
		}
	}
	return nil
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
		return nil, fmt.Errorf("socket: %w", ErrUnsupported)
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
	defer unix.Close(p[0])
	defer unix.Close(p[1])
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
