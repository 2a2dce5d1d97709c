package dump

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/fdkind"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// sameFile reports whether fd1 of pid1 and fd2 of pid2 share one open file
// description.
func sameFile(pid1 sys.PID, fd1 sys.TargetFD, pid2 sys.PID, fd2 sys.TargetFD) bool {
	ok, err := sys.SameFile(pid1, fd1, pid2, fd2)
	return err == nil && ok
}

// openFile is an open file description already in the image, and one fd
// of one process that refers to it.
type openFile struct {
	pid      sys.PID
	fd       sys.TargetFD
	dev, ino uint64
	id       int // File.ID
}

// collectFiles describes the fd table of the process: each open file
// description once in the whole tree (kcmp tells shared ones apart), by
// its kind's handler (pkg/fdkind).
func (d *dumper) collectFiles(p *image.Process) error {
	filesOf, err := d.sharedFDTable(p.PPID)
	if err != nil {
		return err
	}
	p.FilesOf = filesOf
	rd := d.rd()
	fds, err := proc.FDs(rd)
	if err != nil {
		return fmt.Errorf("list fds: %w", err)
	}
	pidfd, err := sys.PidfdOpen(rd, pidfdFlags(d.fz))
	if err != nil {
		return err
	}
	defer pidfd.Close()
	for _, fd := range fds {
		link, err := os.Readlink(proc.Path(rd, "fd", fd.String()))
		if err != nil {
			return fmt.Errorf("fd %d: %w", fd, err)
		}
		src := &fdkind.Source{PID: rd, FD: fd, Link: link}
		if err := unix.Stat(src.Path(), &src.Stat); err != nil {
			return fmt.Errorf("fd %d (%s): stat: %w", fd, link, err)
		}
		if src.Info, err = proc.ReadFDInfo(rd, fd); err != nil {
			return fmt.Errorf("fd %d (%s): fdinfo: %w", fd, link, err)
		}
		entry := image.FD{FD: fd, CloExec: src.Info.Flags&unix.O_CLOEXEC != 0}
		if entry.Locks, _, err = fdkind.Locks(src.Info.Lines); err != nil {
			return fmt.Errorf("fd %d (%s): %w", fd, link, err)
		}
		shared := -1
		for _, o := range d.t.files {
			if o.dev == src.Stat.Dev && o.ino == src.Stat.Ino && sameFile(o.pid, o.fd, rd, fd) {
				shared = o.id
				break
			}
		}
		if shared >= 0 {
			entry.File = shared
			p.FDs = append(p.FDs, entry)
			continue
		}
		f, err := d.describe(pidfd, src)
		if err != nil {
			return fmt.Errorf("fd %d (%s): %w", fd, link, err)
		}
		f.ID = len(d.t.files)
		entry.File = f.ID
		p.Files = append(p.Files, *f)
		p.Files = append(p.Files, d.t.takeFlight()...)
		d.t.files = append(d.t.files, openFile{pid: rd, fd: fd, dev: src.Stat.Dev, ino: src.Stat.Ino, id: f.ID})
		p.FDs = append(p.FDs, entry)
	}
	return nil
}

// ErrSharedFDTable means two processes of the tree share one file
// descriptor table (clone with CLONE_FILES but not CLONE_THREAD) in a way
// the restore cannot make again.
var ErrSharedFDTable = errors.New("file descriptor table shared between processes: cannot be restored")

// sharedFDTable tells whether the process shares its file descriptor
// table with another process of the tree (kcmp KCMP_FILES), and returns
// its parent's PID if it shares it with its parent: the restore makes it
// with CLONE_FILES from its parent, as the program did. Sharing with
// another process only (its parent gave the table up since) is refused,
// and so are POSIX locks in a shared table (they belong to the table,
// and the restore closes fds of the table after a member took them).
func (d *dumper) sharedFDTable(ppid sys.PID) (sys.PID, error) {
	var with []*member
	for _, m := range d.t.members {
		if m.pid == d.pid || m.fz == nil {
			continue
		}
		same, err := sys.SameFiles(m.rd(), d.rd())
		if err != nil || !same {
			continue // an exited process has no table
		}
		with = append(with, m)
	}
	if len(with) == 0 {
		return 0, nil
	}
	for _, m := range with {
		if m.pid == ppid {
			if err := noPOSIXLocks(d.rd()); err != nil {
				return 0, err
			}
			return ppid, nil
		}
	}
	// A child sharing this process's table is described with it, when
	// its own turn comes (members are in tree order).
	for _, m := range with {
		if st, err := proc.ReadStat(m.pid, 0); err == nil && st.PPID == d.pid {
			return 0, noPOSIXLocks(d.rd())
		}
	}
	return 0, fmt.Errorf("shares its file descriptor table with process %d (%s), not with its parent, process %d (clone CLONE_FILES): %w", with[0].pid, with[0].comm, ppid, ErrSharedFDTable)
}

// noPOSIXLocks refuses POSIX locks in a file descriptor table shared
// between processes.
func noPOSIXLocks(pid sys.PID) error {
	fds, err := proc.FDs(pid)
	if err != nil {
		return err
	}
	for _, fd := range fds {
		info, err := proc.ReadFDInfo(pid, fd)
		if err != nil {
			continue
		}
		if posix, _, _ := fdkind.Locks(info.Lines); len(posix) > 0 {
			return fmt.Errorf("fd %d: POSIX locks in a file descriptor table shared with another process: %w", fd, ErrSharedFDTable)
		}
	}
	return nil
}

// describe describes one open file description, with a copy of it in
// ckpt (pidfd_getfd) for what only fcntl tells.
func (d *dumper) describe(pidfd *sys.FD, src *fdkind.Source) (*image.File, error) {
	if _, err := fdkind.Find(src); err != nil {
		return nil, err // refused: touch nothing
	}
	cp, err := sys.PidfdGetfd(pidfd, src.FD)
	if err != nil {
		return nil, err
	}
	defer cp.Close()
	return fdkind.Describe(fileEnv{d.t}, src, cp.Int())
}

// finishFiles runs, once every process is described, what each kind does
// across the whole tree (the two ends of a pipe, the targets of epoll
// items).
func (t *tree) finishFiles() error {
	var fds []fdkind.Held
	byID := map[int]*image.File{}
	for _, m := range t.members {
		if m.p == nil {
			continue
		}
		for i := range m.p.Files {
			byID[m.p.Files[i].ID] = &m.p.Files[i]
		}
	}
	for _, m := range t.members {
		if m.p == nil {
			continue
		}
		for _, e := range m.p.FDs {
			fds = append(fds, fdkind.Held{PID: m.rd(), FD: e.FD, File: byID[e.File]})
		}
	}
	for _, h := range t.flight.held {
		fds = append(fds, fdkind.Held{PID: sys.Getpid(), FD: sys.TargetFD(h.fd.Int()), File: byID[h.id]})
	}
	for _, k := range fdkind.Table() {
		if k.Finish == nil {
			continue
		}
		if err := k.Finish(fileEnv{t}, fds); err != nil {
			return err
		}
	}
	return fdkind.CheckOwners(fds, t.ownerInDump)
}

// ownerInDump tells whether a SIGIO owner is a thread, process or process
// group of the dump.
func (t *tree) ownerInDump(typ, id int) bool {
	for _, m := range t.members {
		if m.p == nil || m.p.Zombie {
			continue
		}
		switch typ {
		case fdkind.OwnerPGRP:
			if m.p.PGID == sys.PID(id) {
				return true
			}
		case fdkind.OwnerTID:
			for _, th := range m.p.Threads {
				if th.TID == sys.TID(id) {
					return true
				}
			}
		default:
			if m.pid == sys.PID(id) {
				return true
			}
		}
	}
	return false
}

// fileEnv is what the fd kinds get from the dump of a tree.
type fileEnv struct{ t *tree }

// AddData implements fdkind.DumpEnv.
func (e fileEnv) AddData(b []byte) int { return e.t.addData(b) }

// Ghost implements fdkind.DumpEnv.
func (e fileEnv) Ghost(path string, st *unix.Stat_t, ref *image.FileRef) error {
	return (&dumper{t: e.t, opts: e.t.opts}).ghost(path, &syscall.Stat_t{Dev: st.Dev, Ino: st.Ino, Size: st.Size}, ref)
}

// Socket implements fdkind.DumpEnv.
func (e fileEnv) Socket(pid sys.PID, fd sys.TargetFD) (int, bool) {
	if pid == sys.Getpid() {
		return int(fd), true // a socket in flight: ckpt's copy
	}
	our, ok := e.t.socks.fds[heldFD{pid, fd}]
	return our.Int(), ok
}

// Sockets implements fdkind.DumpEnv.
func (e fileEnv) Sockets() fdkind.SocketDumpEnv { return e.t }

// InDump implements fdkind.DumpEnv.
func (e fileEnv) InDump(pid sys.PID) bool { return e.t.ownerInDump(fdkind.OwnerPID, int(pid)) }

// UnixSockets is sock_diag's view of the tree's UNIX sockets, read on
// first need.
func (t *tree) UnixSockets() (map[uint32]sockets.UnixInfo, error) {
	if t.socks.unix == nil {
		m, err := t.socks.unixSockets()
		if err != nil {
			return nil, err
		}
		t.socks.unix = m
	}
	return t.socks.unix, nil
}

// InTree tells whether a UNIX socket inode belongs to the tree.
func (t *tree) InTree(ino uint32) bool { return t.socks.inos[ino] || t.flight.socks[ino] }

// Reuse is the SO_REUSEADDR of a connection ckpt put in repair mode.
func (t *tree) Reuse(fd int) int { return t.socks.reuse[fd] }

// Defaults is what every socket of the tree is compared with.
func (t *tree) Defaults() *sockets.Defaults { return &t.socks.defs }

// Dumped records a connection whose queues were read.
func (t *tree) Dumped(fd int) { t.socks.conns = append(t.socks.conns, fd) }
