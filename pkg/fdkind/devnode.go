package fdkind

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// describeDevice saves a character device by its path and device number;
// a device node removed since it was opened is marked deleted (its mode,
// owner and device number are all it had) and made again at restore
// (openDeletedDevice).
func describeDevice(s *Source, f *image.File) error {
	lf, err := proc.ReadLinkedFile(s.Path())
	if err != nil {
		return err
	}
	f.Ref = StatRef(lf.Path, &s.Stat)
	f.Ref.Deleted = lf.Unlinked
	f.Rdev = s.Stat.Rdev
	return nil
}

// devNodeKey names the node made again for a removed device node.
type devNodeKey [2]uint64

// openDeletedDevice opens a new description of a device node that was
// removed while open: the node is made once (mknod at its old path, or
// beside it if that is taken, with its mode and owner), held by an
// O_PATH fd and removed again; every description of it is an open of
// that fd's /proc/self/fd link, so that they share the node as they did.
func openDeletedDevice(env RestoreEnv, f *image.File, flags int) (*os.File, error) {
	ref := &f.Ref
	v, err := env.Once(devNodeKey{ref.Dev, ref.Ino}, func() (any, error) { return makeDeviceNode(env, ref, f.Rdev) })
	if err != nil {
		return nil, err
	}
	node := v.(*os.File)
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", node.Fd()), flags&openFlags&^(unix.O_NOFOLLOW|unix.O_PATH)|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s (removed device node %d:%d): open: %w", ref.Path, unix.Major(f.Rdev), unix.Minor(f.Rdev), err)
	}
	return os.NewFile(uintptr(fd), ref.Path), nil
}

// makeDeviceNode makes the removed node again and returns an O_PATH fd
// of it, the node itself removed again.
func makeDeviceNode(env RestoreEnv, ref *image.FileRef, rdev uint64) (*os.File, error) {
	mode := ref.Mode & (unix.S_IFMT | 0o7777)
	defer keepParentTimes(ref.Path)()
	defer makeParents(filepath.Dir(ref.Path))()
	var path string
	for _, p := range []string{ref.Path, fmt.Sprintf("%s.ckpt-%d", ref.Path, ref.Ino),
		filepath.Join(os.TempDir(), fmt.Sprintf("ckpt-dev-%d-%d", ref.Ino, os.Getpid()))} {
		if unix.Mknod(p, mode, int(rdev)) == nil {
			path = p
			break
		}
	}
	if path == "" {
		return nil, fmt.Errorf("%s (removed device node %d:%d): cannot make it again", ref.Path, unix.Major(rdev), unix.Minor(rdev))
	}
	defer unix.Unlink(path)
	if err := unix.Lchown(path, ref.UID, ref.GID); err != nil {
		return nil, fmt.Errorf("%s: chown %d:%d: %w", path, ref.UID, ref.GID, err)
	}
	if err := unix.Chmod(path, mode&0o7777); err != nil {
		return nil, fmt.Errorf("%s: chmod %#o: %w", path, mode&0o7777, err)
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	node := os.NewFile(uintptr(fd), ref.Path)
	env.Keep(node)
	return node, nil
}

// openDevice reopens a character device: by its path, which must still
// be a node of the same device, or made again when it was removed.
func openDevice(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	if f.Ref.Deleted {
		of, err := openDeletedDevice(env, f, f.Flags)
		if err != nil {
			return Desc{}, err
		}
		return Desc{File: of}, nil
	}
	var st unix.Stat_t
	if err := unix.Stat(f.Ref.Path, &st); err != nil {
		return Desc{}, fmt.Errorf("%s: %w", f.Ref.Path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != f.Rdev {
		return Desc{}, fmt.Errorf("%s: was device %d:%d, now mode %#o device %d:%d: %w", f.Ref.Path,
			unix.Major(f.Rdev), unix.Minor(f.Rdev), st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), ErrFileChanged)
	}
	return openByPath(env, f, at)
}
