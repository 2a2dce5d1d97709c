package fdkind

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// pipe is one end of an anonymous pipe. A pipe both of whose ends are in
// the dump is rebuilt with the bytes buffered in it; one whose other end
// is outside needs --inherit-fd or --stdio.
func pipe() Kind {
	return Kind{
		Name:     image.FilePipe,
		Match:    func(s *Source) bool { return s.Type() == unix.S_IFIFO && strings.HasPrefix(s.Link, "pipe:") },
		Describe: describePipe,
		Finish:   linkPipes,
		Open:     openPipe,
		Show:     showPipe,
	}
}

func describePipe(env DumpEnv, s *Source, f *image.File) error {
	f.Pipe = &image.Pipe{Ino: s.Stat.Ino, Write: s.Info.Flags&unix.O_ACCMODE == unix.O_WRONLY}
	size, err := pipeSize(s.Path())
	if err != nil {
		return err
	}
	f.Pipe.Size = size
	f.Pipe.PeerClosed = peerClosed(s.Copy, f.Pipe.Write)
	return nil
}

// peerClosed tells whether nobody has the other end of a pipe open: poll
// on the description itself (ckpt's copy, which counts as neither reader
// nor writer) says POLLHUP on a read end without writers, POLLERR on a
// write end without readers.
func peerClosed(cp int, write bool) bool {
	if cp < 0 {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(cp), Events: 0}}
	if n, err := unix.Poll(fds, 0); err != nil || n == 0 {
		return false
	}
	if write {
		return fds[0].Revents&unix.POLLERR != 0
	}
	return fds[0].Revents&unix.POLLHUP != 0
}

// linkPipes decides, for every pipe, whether both of its ends are in the
// dump (by the pipe's inode, across the whole tree) or the other end is
// open nowhere any more, and reads the bytes buffered in those pipes: they
// are rebuilt. A pipe whose other end is open outside the dump is
// external.
func linkPipes(env DumpEnv, fds []Held) error {
	ends := map[uint64][2]bool{} // ino -> read end seen, write end seen
	for _, h := range fds {
		if p := h.File.Pipe; p != nil {
			e := ends[p.Ino]
			if p.Write {
				e[1] = true
			} else {
				e[0] = true
			}
			ends[p.Ino] = e
		}
	}
	inside := func(p *image.Pipe) bool {
		e := ends[p.Ino]
		return (e[0] && e[1]) || p.PeerClosed
	}
	data := map[uint64]int{}
	for _, h := range fds {
		p := h.File.Pipe
		if p == nil || p.Write {
			continue
		}
		if _, done := data[p.Ino]; done || !inside(p) {
			continue
		}
		buf, err := peekPipe(proc.Path(h.PID, "fd", fmt.Sprint(h.FD)))
		if err != nil {
			return fmt.Errorf("process %d fd %d (pipe:[%d]): read buffered data: %w", h.PID, h.FD, p.Ino, err)
		}
		data[p.Ino] = 0
		if len(buf) > 0 {
			data[p.Ino] = env.AddData(buf)
		}
	}
	for _, h := range fds {
		if p := h.File.Pipe; p != nil {
			p.External = !inside(p)
			p.DataID = data[p.Ino]
		}
	}
	return nil
}

func showPipe(f *image.File) string {
	end := "read"
	if f.Pipe.Write {
		end = "write"
	}
	d := fmt.Sprintf("pipe:[%d] %s end", f.Pipe.Ino, end)
	switch {
	case f.Pipe.External:
		d += " (other end outside the dump)"
	case f.Pipe.PeerClosed:
		d += " (other end closed)"
	}
	return d
}

func pipeSize(path string) (int, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
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

// peekPipe copies the bytes buffered in a pipe or FIFO without consuming
// them: tee(2) from a new read end of it (opened by path, a /proc fd
// link) into a pipe of ours.
func peekPipe(path string) ([]byte, error) {
	src, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	size, err := unix.FcntlInt(src.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		return nil, err
	}
	pr, pw, err := sys.Pipe2(unix.O_CLOEXEC | unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	defer pw.Close()
	p := [2]int{pr.Int(), pw.Int()}
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

// pipeKey names the rebuilt pipe of an inode.
type pipeKey uint64

func openPipe(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	pp := f.Pipe
	if pp == nil {
		return Desc{}, fmt.Errorf("pipe without its state: %w", image.ErrCorrupt)
	}
	if pp.External {
		if at.FD <= 2 {
			if s, ok, err := env.Stdio(); ok || err != nil {
				return Desc{File: s, Foreign: true}, err
			}
		}
		return Desc{}, fmt.Errorf("pipe:[%d] whose other end is outside the dump; pass --inherit-fd %d to give it this "+
			"ckpt-redo's fd %d, or --stdio FILE: %w", pp.Ino, at.FD, at.FD, ErrExternal)
	}
	v, err := env.Once(pipeKey(pp.Ino), func() (any, error) { return makePipe(env, pp) })
	if err != nil {
		return Desc{}, fmt.Errorf("pipe:[%d]: %w", pp.Ino, err)
	}
	end := v.(*pipeEnds).take(pp.Write, f.Flags&unix.O_LARGEFILE != 0)
	if end.first {
		d, err := dupFile(end.f)
		return Desc{File: d}, err
	}
	d, err := reopenPipeEnd(end.f, pp.Write)
	if err != nil {
		return Desc{}, fmt.Errorf("pipe:[%d]: %w", pp.Ino, err)
	}
	return Desc{File: d}, nil
}

// pipeEnds is a rebuilt pipe: its two ends as pipe2 made them, and
// whether each has been given to a description of the dump.
type pipeEnds struct {
	mu    sync.Mutex
	ends  [2]*os.File
	taken [2]bool
}

// pipeEnd is the end a description is made from: first means the
// description is that end itself (a dup of it), else a new open of it.
type pipeEnd struct {
	f     *os.File
	first bool
}

// take chooses how a description of one end is made. pipe2 makes one
// description per end, without O_LARGEFILE; every other description of
// a pipe end was opened through a /proc fd link, which adds O_LARGEFILE.
// So the description without O_LARGEFILE is the end itself (once), the
// others are new opens of it.
func (p *pipeEnds) take(write, largefile bool) pipeEnd {
	i := 0
	if write {
		i = 1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if largefile || p.taken[i] {
		return pipeEnd{f: p.ends[i]}
	}
	p.taken[i] = true
	return pipeEnd{f: p.ends[i], first: true}
}

// reopenPipeEnd opens a new open file description of one end of a
// rebuilt pipe (through its /proc/self/fd link, as a program opening
// /proc/self/fd/N of a pipe does). Each description of the dump gets its
// own: two fds that shared one pipe end but not one description (so
// not its O_NONBLOCK) must not come back sharing it. Opening an
// anonymous pipe this way never waits for the other end.
func reopenPipeEnd(end *os.File, write bool) (*os.File, error) {
	mode := unix.O_RDONLY
	if write {
		mode = unix.O_WRONLY
	}
	path := fmt.Sprintf("/proc/self/fd/%d", end.Fd())
	fd, err := unix.Open(path, mode|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open a new description of the pipe (%s): %w", path, err)
	}
	return os.NewFile(uintptr(fd), end.Name()), nil
}

// makePipe creates a pipe of the old capacity holding the old buffered
// data.
func makePipe(env RestoreEnv, pp *image.Pipe) (*pipeEnds, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	ends := [2]*os.File{os.NewFile(uintptr(fds[0]), "pipe-r"), os.NewFile(uintptr(fds[1]), "pipe-w")}
	p := &pipeEnds{ends: ends}
	env.Keep(ends[0])
	env.Keep(ends[1])
	if pp.Size > 0 {
		if _, err := unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, pp.Size); err != nil {
			return p, fmt.Errorf("set capacity %d: %w", pp.Size, err)
		}
	}
	if pp.DataID != 0 {
		data, err := env.Data(pp.DataID)
		if err != nil {
			return p, fmt.Errorf("buffered data: %w", err)
		}
		if _, err := ends[1].Write(data); err != nil {
			return p, fmt.Errorf("refill %d bytes: %w", len(data), err)
		}
	}
	return p, nil
}
