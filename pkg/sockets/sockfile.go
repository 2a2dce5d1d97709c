package sockets

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// The file a UNIX socket bound to a path name makes is state a program
// sees (stat, connect by name): its owner and permissions, and for a
// relative name the directory it was bound in. A name can also be gone
// (unlinked, its directories maybe removed) while the socket keeps it
// (getsockname, and the peers' getpeername, still say it).

// DescribeSockFile saves the socket file of s, a UNIX socket of process
// pid bound to a path name (u is what sock_diag says of it: the file's
// inode). A relative name is looked for in the process's working
// directory; one not found there cannot be placed and is refused.
func DescribeSockFile(pid sys.PID, s *image.Socket, u UnixInfo) error {
	name := s.Local
	if name == "" || name[0] == '@' || u.VFSIno == 0 || s.AcceptedFrom != 0 {
		return nil // an accepted connection bears its listener's name
	}
	proc := "/proc/" + pid.String()
	path := filepath.Join(proc, "root", name)
	sf := &image.SockFile{}
	if !filepath.IsAbs(name) {
		dir, err := os.Readlink(proc + "/cwd")
		if err != nil {
			return fmt.Errorf("working directory: %w", err)
		}
		sf.Dir, path = dir, filepath.Join(proc, "cwd", name)
	}
	var st unix.Stat_t
	switch err := unix.Lstat(path, &st); {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK && st.Ino == uint64(u.VFSIno) &&
		unix.Major(st.Dev) == u.VFSDev>>20 && unix.Minor(st.Dev) == u.VFSDev&0xfffff:
		sf.Mode, sf.UID, sf.GID = st.Mode&07777, st.Uid, st.Gid
	case sf.Dir != "":
		return fmt.Errorf("UNIX socket bound to the relative name %q, which is not in the process's working directory %s (it changed since the bind, or the name was removed): %w", name, sf.Dir, ErrState)
	default:
		sf.Gone = true
		for d := filepath.Dir(path); ; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); err == nil || d == filepath.Join(proc, "root") {
				break
			}
			sf.MissingDirs++
		}
	}
	s.File = sf
	return nil
}

// ReachName is the name ckpt-redo connects to a rebuilt named socket by:
// its name; for a relative one, the name in its directory; for a gone
// one, the private name its file waits under until ForgetName.
func ReachName(s *image.Socket) string {
	if s.File != nil && s.File.Gone {
		return fmt.Sprintf("%s.ckpt-gone-%d-%d", pathOf(s), os.Getpid(), s.Ino)
	}
	return pathOf(s)
}

// pathOf is the path of a socket's name (for a relative one, in its
// directory).
func pathOf(s *image.Socket) string {
	if s.File != nil && s.File.Dir != "" {
		return filepath.Join(s.File.Dir, s.Local)
	}
	return s.Local
}

// bindName binds a rebuilt socket to its name as the program had it: a
// relative name in its directory, the file with its owner and
// permissions; a gone name with its missing directories made again, its
// file then moved to a private name (ReachName) that ForgetName removes
// once the sockets that connect to it are built, and a file that holds
// the name now put back.
func bindName(fd int, s *image.Socket) error {
	sf := s.File
	if sf == nil {
		return bindUnix(fd, s.Local)
	}
	path := pathOf(s)
	aside := ""
	if !sf.Gone {
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
			unix.Unlink(path) // the stale file of the dead process
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("make the directories of the gone name %s: %w", s.Local, err)
		}
		if _, err := os.Lstat(path); err == nil {
			aside = fmt.Sprintf("%s.ckpt-aside-%d-%d", path, os.Getpid(), s.Ino)
			if err := os.Rename(path, aside); err != nil {
				return fmt.Errorf("move %s aside: %w", path, err)
			}
		}
	}
	bind := func() error { return unix.Bind(fd, unixAddr(s.Local)) }
	var err error
	if sf.Dir != "" {
		err = inDir(sf.Dir, bind)
	} else {
		err = bind()
	}
	if err != nil {
		if aside != "" {
			os.Rename(aside, path)
		}
		return fmt.Errorf("bind %q: %w", s.Local, err)
	}
	if sf.Gone {
		err := os.Rename(path, ReachName(s))
		if aside != "" {
			if err := os.Rename(aside, path); err != nil {
				return fmt.Errorf("put back %s: %w", path, err)
			}
		}
		if err != nil {
			return fmt.Errorf("the file of the gone name %s: %w", s.Local, err)
		}
		return nil
	}
	if err := os.Lchown(path, int(sf.UID), int(sf.GID)); err != nil {
		return fmt.Errorf("socket file %s: %w", path, err)
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, path, sf.Mode, 0); err != nil {
		return fmt.Errorf("socket file %s: chmod: %w", path, err)
	}
	return nil
}

// ForgetName removes the file that binding fd (s, rebuilt) to its gone
// name made, if it is still that socket's, and the directories made for
// it.
func ForgetName(fd int, s *image.Socket) error {
	sf := s.File
	if sf == nil || !sf.Gone {
		return nil
	}
	path := ReachName(s)
	ino, dev, ok := boundFile(fd)
	var st unix.Stat_t
	if ok && unix.Lstat(path, &st) == nil && st.Ino == uint64(ino) &&
		unix.Major(st.Dev) == dev>>20 && unix.Minor(st.Dev) == dev&0xfffff {
		if err := unix.Unlink(path); err != nil {
			return fmt.Errorf("remove the gone name %s again: %w", path, err)
		}
	}
	d := filepath.Dir(pathOf(s))
	for i := 0; i < sf.MissingDirs; i++ {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTEMPTY) {
			return fmt.Errorf("remove %s again: %w", d, err)
		}
		d = filepath.Dir(d)
	}
	return nil
}

// boundFile asks sock_diag which file the UNIX socket fd (ckpt-redo's) is
// bound to: its inode and the kernel's dev_t.
func boundFile(fd int) (ino, dev uint32, ok bool) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return 0, 0, false
	}
	// struct nlmsghdr + struct unix_diag_req for one socket, by inode.
	req := diagRequest(16+24, unix.NLM_F_REQUEST)
	le := binary.LittleEndian
	req[16] = unix.AF_UNIX
	le.PutUint32(req[20:], 0xffffffff)
	le.PutUint32(req[24:], uint32(st.Ino))
	le.PutUint32(req[28:], udiagShowVFS)
	le.PutUint32(req[32:], 0xffffffff) // no cookie
	le.PutUint32(req[36:], 0xffffffff)
	nl, err := sockDiagRequest(fd, req)
	if err != nil {
		return 0, 0, false
	}
	defer nl.Close()
	msgs, err := sockDiagReceive(nl, make([]byte, 4096))
	if err != nil {
		return 0, 0, false
	}
	for _, m := range msgs {
		if m.Header.Type != sockDiagByFamily || len(m.Data) < 16 {
			continue
		}
		diagAttrs(m.Data[16:], func(typ uint16, v []byte) {
			if typ == unixDiagVFS && len(v) >= 8 {
				ino, dev, ok = le.Uint32(v), le.Uint32(v[4:]), true
			}
		})
	}
	return ino, dev, ok
}

// inDir runs fn on a thread of its own whose working directory is dir
// (the thread ends with it: its filesystem context is its own).
func inDir(dir string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("unshare CLONE_FS: %w", err)
			return
		}
		if err := unix.Chdir(dir); err != nil {
			errc <- fmt.Errorf("chdir %s: %w", dir, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
