package fdkind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// File locks, from the "lock:" lines of fdinfo, which list the locks
// taken through that open file description: OFD and flock locks belong
// to the description (saved once, with it, and taken again once on the
// rebuilt description); POSIX locks belong to the process that took them
// (saved on its fd, and taken again by the restored process itself, last,
// once no fd of its will be closed any more: closing any fd of a file
// drops the process's POSIX locks on it). Leases are refused.

// ErrLockTaken means a file lock could not be taken again at restore:
// someone else holds a conflicting one.
var ErrLockTaken = errors.New("file lock held by someone else")

// lockLine is one parsed "lock:" line.
type lockLine struct {
	lock image.Lock
	pid  sys.PID
	dev  string // "maj:min:ino" as the kernel prints it
}

// parseLockLine parses the part of a lock line after "lock:", e.g.
// "1: POSIX  ADVISORY  WRITE 1234 fe:00:9978949 0 EOF". ok is false for
// a waiter ("->") line.
func parseLockLine(v string) (l lockLine, ok bool, err error) {
	f := strings.Fields(v)
	if len(f) > 1 && f[1] == "->" {
		return l, false, nil
	}
	if len(f) < 8 {
		return l, false, fmt.Errorf("lock line %q: too short", v)
	}
	switch f[1] {
	case "POSIX":
		l.lock.Kind = image.LockPOSIX
	case "OFDLCK":
		l.lock.Kind = image.LockOFD
	case "FLOCK":
		l.lock.Kind = image.LockFlock
	case "LEASE":
		if f[2] != "ACTIVE" {
			return l, false, fmt.Errorf("file lease being broken (%s): cannot be restored: %w", strings.ToLower(f[2]), ErrUnsupported)
		}
		l.lock.Kind = image.LockLease
	case "BREAKING", "BREAKER", "DELEG":
		return l, false, fmt.Errorf("file lease (%s): cannot be restored: %w", strings.ToLower(f[1]), ErrUnsupported)
	default:
		return l, false, fmt.Errorf("file lock of type %s: cannot be restored: %w", f[1], ErrUnsupported)
	}
	if f[2] != "ADVISORY" && l.lock.Kind != image.LockLease {
		return l, false, fmt.Errorf("%s file lock: cannot be restored: %w", strings.ToLower(f[2]), ErrUnsupported)
	}
	switch f[3] {
	case "WRITE":
		l.lock.Write = true
	case "READ":
	default:
		return l, false, fmt.Errorf("lock line %q: mode %s", v, f[3])
	}
	pid, err := strconv.Atoi(f[4])
	l.pid = sys.PID(pid)
	if err != nil {
		return l, false, fmt.Errorf("lock line %q: pid: %w", v, err)
	}
	l.dev = f[5]
	if l.lock.Start, err = strconv.ParseInt(f[6], 10, 64); err != nil {
		return l, false, fmt.Errorf("lock line %q: start: %w", v, err)
	}
	l.lock.End = -1
	if f[7] != "EOF" {
		if l.lock.End, err = strconv.ParseInt(f[7], 10, 64); err != nil {
			return l, false, fmt.Errorf("lock line %q: end: %w", v, err)
		}
	}
	return l, true, nil
}

// Locks splits the locks of an fd's fdinfo lines into the process's
// POSIX locks and the description's OFD and flock locks.
func Locks(lines []string) (posix, desc []image.Lock, err error) {
	for _, line := range lines {
		v, ok := strings.CutPrefix(line, "lock:")
		if !ok {
			continue
		}
		l, ok, err := parseLockLine(v)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		switch l.lock.Kind {
		case image.LockPOSIX:
			posix = append(posix, l.lock)
		case image.LockFlock, image.LockLease:
			l.lock.PID = l.pid
			desc = append(desc, l.lock)
		default:
			desc = append(desc, l.lock)
		}
	}
	return posix, desc, nil
}

// flockBytes is struct flock for x86-64.
func flockBytes(l image.Lock) []byte {
	b := make([]byte, 32)
	typ := int16(unix.F_RDLCK)
	if l.Write {
		typ = unix.F_WRLCK
	}
	binary.LittleEndian.PutUint16(b[0:], uint16(typ))
	binary.LittleEndian.PutUint16(b[2:], 0) // SEEK_SET
	binary.LittleEndian.PutUint64(b[8:], uint64(l.Start))
	binary.LittleEndian.PutUint64(b[16:], uint64(lockLen(l)))
	return b
}

// leaseType is the F_SETLEASE argument of a lease.
func leaseType(l image.Lock) int {
	if l.Write {
		return unix.F_WRLCK
	}
	return unix.F_RDLCK
}

func lockLen(l image.Lock) int64 {
	if l.End < 0 {
		return 0
	}
	return l.End - l.Start + 1
}

func showLock(l image.Lock) string {
	mode := "read"
	if l.Write {
		mode = "write"
	}
	end := "EOF"
	if l.End >= 0 {
		end = strconv.FormatInt(l.End, 10)
	}
	if l.Kind == image.LockFlock {
		return fmt.Sprintf("flock %s lock", mode)
	}
	if l.Kind == image.LockLease {
		return fmt.Sprintf("%s lease", mode)
	}
	return fmt.Sprintf("%s %s lock on bytes %d-%s", l.Kind, mode, l.Start, end)
}

// TakeLocks takes the OFD and flock locks of a description again on the
// rebuilt one, never waiting: a lock someone else took meanwhile fails
// the restore, naming the holder. A flock lock taken by a process of the
// dump (byOwner) is left to that process (TakeFlocks): /proc/locks shows
// who took it.
func TakeLocks(f *image.File, of *os.File, byOwner func(pid sys.PID) bool) error {
	for _, l := range f.Locks {
		var err error
		switch l.Kind {
		case image.LockLease:
			if l.PID > 0 && byOwner(l.PID) {
				continue
			}
			_, err = unix.FcntlInt(of.Fd(), unix.F_SETLEASE, leaseType(l))
		case image.LockFlock:
			if l.PID > 0 && byOwner(l.PID) {
				continue
			}
			how := unix.LOCK_SH
			if l.Write {
				how = unix.LOCK_EX
			}
			err = unix.Flock(int(of.Fd()), how|unix.LOCK_NB)
		case image.LockOFD:
			fl := unix.Flock_t{Type: unix.F_RDLCK, Whence: 0, Start: l.Start, Len: lockLen(l)}
			if l.Write {
				fl.Type = unix.F_WRLCK
			}
			err = unix.FcntlFlock(of.Fd(), unix.F_OFD_SETLK, &fl)
		default:
			return fmt.Errorf("%s on the description: %w", showLock(l), image.ErrCorrupt)
		}
		if err != nil {
			return lockError(l, &f.Ref, err)
		}
	}
	return nil
}

// TakeFlocks makes the restored process take again the flock locks and
// the leases it had taken on descriptions of the dump (never waiting),
// through the copies of them ckpt-redo passed it: they belong to the
// description, /proc/locks names the process that took them, and
// F_SETLEASE makes the caller the description's owner (set again
// afterwards, see SetOwner).
func TakeFlocks(t Target, p *image.Process, files map[int]*image.File) error {
	ids := make([]int, 0, len(files))
	for id := range files {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		f := files[id]
		for _, l := range f.Locks {
			if (l.Kind != image.LockFlock && l.Kind != image.LockLease) || l.PID != p.PID {
				continue
			}
			fd, ok := t.Passed(f.ID)
			if !ok {
				return fmt.Errorf("%s of %s: the description was not opened by ckpt-redo: %w", showLock(l), f.Ref.Path, image.ErrCorrupt)
			}
			if l.Kind == image.LockLease {
				// through an fd of the process's own, if it has one: the
				// lease signals its breaks naming that fd (si_fd)
				for _, e := range p.FDs {
					if e.File == f.ID {
						fd = e.FD
						break
					}
				}
				if _, err := t.Call(fmt.Sprintf("fcntl(%d, F_SETLEASE)", fd), unix.SYS_FCNTL, uint64(fd), unix.F_SETLEASE, uint64(leaseType(l))); err != nil {
					return lockError(l, &f.Ref, err)
				}
				continue
			}
			how := uint64(unix.LOCK_SH)
			if l.Write {
				how = unix.LOCK_EX
			}
			if _, err := t.Call(fmt.Sprintf("flock(%d)", fd), unix.SYS_FLOCK, uint64(fd), how|unix.LOCK_NB); err != nil {
				return lockError(l, &f.Ref, err)
			}
		}
	}
	return nil
}

// TakePOSIXLocks makes the restored process take its POSIX locks again
// (F_SETLK, never waiting). It must run after the last close of any fd
// of the process.
func TakePOSIXLocks(t Target, p *image.Process, files map[int]*image.File) error {
	for _, e := range p.FDs {
		for _, l := range e.Locks {
			addr, err := t.Scratch(flockBytes(l))
			if err != nil {
				return err
			}
			if _, err := t.Call(fmt.Sprintf("fcntl(%d, F_SETLK)", e.FD), unix.SYS_FCNTL, uint64(e.FD), unix.F_SETLK, addr); err != nil {
				var ref *image.FileRef
				if f := files[e.File]; f != nil {
					ref = &f.Ref
				}
				return fmt.Errorf("fd %d: %w", e.FD, lockError(l, ref, err))
			}
		}
	}
	return nil
}

// lockError says which lock could not be taken, and who holds the file's
// locks now (from /proc/locks).
func lockError(l image.Lock, ref *image.FileRef, err error) error {
	what := "the file"
	holders := ""
	if ref != nil {
		what = ref.Path
		if h := lockHolders(ref.Ino); len(h) > 0 {
			holders = " (held now by " + strings.Join(h, ", ") + ")"
		}
	}
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("%s of %s: taken by someone else since the dump%s: %w", showLock(l), what, holders, ErrLockTaken)
	}
	return fmt.Errorf("%s of %s: %w", showLock(l), what, err)
}

// lockHolders lists the holders of the locks on inode ino in /proc/locks.
func lockHolders(ino uint64) []string {
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return nil
	}
	var out []string
	suffix := ":" + strconv.FormatUint(ino, 10)
	for _, line := range strings.Split(string(b), "\n") {
		l, ok, err := parseLockLine(line)
		if err != nil || !ok || !strings.HasSuffix(l.dev, suffix) {
			continue
		}
		who := "an open file description"
		if l.pid > 0 {
			who = "process " + l.pid.String()
			if c, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", l.pid)); err == nil {
				who += " (" + strings.TrimSpace(string(c)) + ")"
			}
		}
		out = append(out, fmt.Sprintf("%s: %s", who, showLock(l.lock)))
	}
	return out
}

// ShowLocks says which locks a description or an fd holds, for people.
func ShowLocks(locks []image.Lock) string {
	var out []string
	for _, l := range locks {
		out = append(out, showLock(l))
	}
	return strings.Join(out, ", ")
}
