package fdkind

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// fifo is an open named FIFO, for reading, writing or both, possibly
// deleted since. The bytes buffered in it are read without being consumed
// and put back. At restore the FIFO is first opened read-write (which
// never blocks), then each description is opened non-blocking through
// that open file and given its real flags: an O_RDONLY or O_WRONLY open
// with nobody at the other end would block or fail.
func fifo() Kind {
	return Kind{
		Name:     image.FileFIFO,
		Match:    func(s *Source) bool { return s.Type() == unix.S_IFIFO && !strings.HasPrefix(s.Link, "pipe:") },
		Describe: describeFIFO,
		Finish:   fifoData,
		Open:     openFIFO,
		Show:     showFIFO,
	}
}

func describeFIFO(env DumpEnv, s *Source, f *image.File) error {
	lf, err := proc.ReadLinkedFile(s.Path())
	if err != nil {
		return err
	}
	f.Ref = StatRef(lf.Path, &s.Stat)
	f.Ref.Deleted = lf.Unlinked
	f.Pipe = &image.Pipe{Ino: s.Stat.Ino, Write: s.Info.Flags&unix.O_ACCMODE == unix.O_WRONLY}
	if s.Copy >= 0 {
		if f.Pipe.Size, err = unix.FcntlInt(uintptr(s.Copy), unix.F_GETPIPE_SZ, 0); err != nil {
			return fmt.Errorf("F_GETPIPE_SZ: %w", err)
		}
	}
	return nil
}

// fifoData reads the bytes buffered in each FIFO of the dump once (tee
// from a new non-blocking read end), and gives every description of it
// the record. A FIFO also open in a process outside the dump keeps its
// buffer through the dump: it is marked External, and the restore joins
// it by its path without putting the bytes back a second time.
func fifoData(env DumpEnv, fds []Held) error {
	inDump := map[sys.PID]bool{}
	for _, h := range fds {
		inDump[h.PID] = true
	}
	type state struct {
		id       int
		external bool
	}
	done := map[[2]uint64]state{}
	for _, h := range fds {
		f := h.File
		if f.Kind != image.FileFIFO || f.Pipe == nil {
			continue
		}
		key := [2]uint64{f.Ref.Dev, f.Ref.Ino}
		st, ok := done[key]
		if !ok {
			if holder := openedElsewhere(key, inDump); holder > 0 {
				if f.Ref.Deleted {
					return fmt.Errorf("process %d fd %d: deleted FIFO %s is also open in process %d, outside the dump: cannot be restored: %w",
						h.PID, h.FD, f.Ref.Path, holder, ErrUnsupported)
				}
				st.external = true
			} else {
				buf, err := peekPipe(proc.Path(h.PID, "fd", fmt.Sprint(h.FD)))
				if err != nil {
					return fmt.Errorf("process %d fd %d (FIFO %s): read buffered data: %w", h.PID, h.FD, f.Ref.Path, err)
				}
				if len(buf) > 0 {
					st.id = env.AddData(buf)
				}
			}
			done[key] = st
		}
		f.Pipe.DataID, f.Pipe.External = st.id, st.external
	}
	return nil
}

// openedElsewhere returns a process outside the dump that has the FIFO
// (device, inode) open, or 0.
func openedElsewhere(key [2]uint64, inDump map[sys.PID]bool) sys.PID {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := sys.Getpid()
	for _, p := range procs {
		n, err := strconv.Atoi(p.Name())
		pid := sys.PID(n)
		if err != nil || inDump[pid] || pid == self {
			continue
		}
		fds, err := os.ReadDir(proc.Path(pid, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			var st unix.Stat_t
			if unix.Stat(proc.Path(pid, "fd", fd.Name()), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO &&
				st.Dev == key[0] && st.Ino == key[1] {
				return pid
			}
		}
	}
	return 0
}

func showFIFO(f *image.File) string {
	end := "read"
	if f.Pipe != nil && f.Pipe.Write {
		end = "write"
	}
	if f.Flags&unix.O_ACCMODE == unix.O_RDWR {
		end = "read-write"
	}
	d := fmt.Sprintf("fifo %s %s end", f.Ref.Path, end)
	if f.Ref.Deleted {
		d += " (deleted)"
	}
	if f.Pipe != nil && f.Pipe.External {
		d += " (also open outside the dump)"
	}
	return d
}

// fifoKey names the read-write open file through which a FIFO is
// reopened, by device and inode.
type fifoKey [2]uint64

func openFIFO(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	if f.Pipe == nil {
		return Desc{}, fmt.Errorf("FIFO without its state: %w", image.ErrCorrupt)
	}
	v, err := env.Once(fifoKey{f.Ref.Dev, f.Ref.Ino}, func() (any, error) { return makeFIFO(env, f) })
	if err != nil {
		return Desc{}, err
	}
	holder := v.(*os.File)
	fl := f.Flags&openFlags&^(unix.O_NOFOLLOW|unix.O_DIRECTORY) | unix.O_NONBLOCK | unix.O_CLOEXEC
	of, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", holder.Fd()), fl, 0)
	if err != nil {
		return Desc{}, fmt.Errorf("FIFO %s: open: %w", f.Ref.Path, err)
	}
	return Desc{File: of}, nil
}

// makeFIFO opens a FIFO read-write, the holder of its buffered data while
// the restore runs; a deleted FIFO is made again at its old path (or, if
// that is taken, beside it) and unlinked at once.
func makeFIFO(env RestoreEnv, f *image.File) (*os.File, error) {
	ref := &f.Ref
	var holder *os.File
	if ref.Deleted {
		defer keepParentTimes(ref.Path)()
		path := ref.Path
		if err := unix.Mkfifo(path, ref.Mode&0o7777); err != nil {
			path = fmt.Sprintf("%s.ckpt-%d", ref.Path, os.Getpid())
			if err := unix.Mkfifo(path, ref.Mode&0o7777); err != nil {
				return nil, fmt.Errorf("deleted FIFO %s: mkfifo: %w", ref.Path, err)
			}
		}
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		unix.Unlink(path)
		if err != nil {
			return nil, fmt.Errorf("deleted FIFO %s: open: %w", ref.Path, err)
		}
		holder = os.NewFile(uintptr(fd), ref.Path)
		env.Keep(holder)
		if _, err := settleGhost(holder, ref, ref.Mode&0o7777); err != nil {
			return nil, err
		}
	} else {
		var st unix.Stat_t
		if err := unix.Stat(ref.Path, &st); err != nil {
			return nil, fmt.Errorf("FIFO %s: %w", ref.Path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFIFO {
			return nil, fmt.Errorf("FIFO %s: now mode %#o: %w", ref.Path, st.Mode, ErrFileChanged)
		}
		fd, err := unix.Open(ref.Path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return nil, fmt.Errorf("FIFO %s: open: %w", ref.Path, err)
		}
		holder = os.NewFile(uintptr(fd), ref.Path)
		env.Keep(holder)
	}
	if f.Pipe.Size > 0 && !f.Pipe.External {
		if _, err := unix.FcntlInt(holder.Fd(), unix.F_SETPIPE_SZ, f.Pipe.Size); err != nil {
			return nil, fmt.Errorf("FIFO %s: capacity %d: %w", ref.Path, f.Pipe.Size, err)
		}
	}
	if f.Pipe.DataID != 0 && !f.Pipe.External {
		data, err := env.Data(f.Pipe.DataID)
		if err != nil {
			return nil, fmt.Errorf("FIFO %s: buffered data: %w", ref.Path, err)
		}
		// Writing stamps the FIFO's times: it gets back those it had.
		var st unix.Stat_t
		if err := unix.Fstat(int(holder.Fd()), &st); err != nil {
			return nil, fmt.Errorf("FIFO %s: fstat: %w", ref.Path, err)
		}
		if _, err := holder.Write(data); err != nil {
			return nil, fmt.Errorf("FIFO %s: refill %d bytes: %w", ref.Path, len(data), err)
		}
		mtime := st.Mtim.Sec*1e9 + st.Mtim.Nsec
		if ref.Deleted {
			mtime = ref.MtimeNs
		}
		if err := setMtime(holder, mtime); err != nil {
			return nil, fmt.Errorf("FIFO %s: %w", ref.Path, err)
		}
	} else if ref.Deleted {
		if err := setMtime(holder, ref.MtimeNs); err != nil {
			return nil, fmt.Errorf("FIFO %s: %w", ref.Path, err)
		}
	}
	// Once every description is open (the steps that may still open
	// some come first), the holder goes: its close (it was opened for
	// writing) must come before the inotify and fanotify watches of the
	// tree are in place (they come last), not after.
	afterSteps(env, 2, func() error {
		holder.Close()
		return nil
	})
	return holder, nil
}
