package fdkind

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// A ghost is a file that was deleted while open or mapped: its content
// is saved in the image, holes left out (SEEK_DATA/SEEK_HOLE), and it
// comes back as a file of the same size, mode and owner, unlinked again
// at once (so that /proc shows the same "PATH (deleted)"), or as a memfd
// of the same name with the same seals.

// ErrGhostLimit means a deleted file holds more data than the dump may
// store (--ghost-limit).
var ErrGhostLimit = errors.New("deleted file over the ghost limit")

// ReadGhost reads the data of a deleted file through path (a /proc fd or
// map_files link) and fills ref's Extents and Seals. limit bounds the
// data bytes stored, holes not counted.
func ReadGhost(path string, ref *image.FileRef, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open deleted file: %w", err)
	}
	defer f.Close()
	// A memfd's seals (other tmpfs files show F_SEAL_SEAL: never sealable).
	if strings.HasPrefix(ref.Path, "/memfd:") {
		if seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0); err == nil {
			ref.Seals = seals
		}
	}
	exts, err := dataExtents(int(f.Fd()), ref.Size)
	if err != nil {
		return nil, fmt.Errorf("deleted file %s: %w", ref.Path, err)
	}
	var n int64
	for _, e := range exts {
		n += e.Len
	}
	if n > limit {
		return nil, fmt.Errorf("deleted file %s holds %d bytes of data, over the limit of %d (raise it with --ghost-limit): %w: %w",
			ref.Path, n, limit, ErrGhostLimit, ErrUnsupported)
	}
	data := make([]byte, 0, n)
	for _, e := range exts {
		start := len(data)
		data = data[:start+int(e.Len)]
		if _, err := f.ReadAt(data[start:], e.Off); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read deleted file %s at %d: %w", ref.Path, e.Off, err)
		}
	}
	ref.Extents = exts
	return data, nil
}

// dataExtents lists the ranges of a file that hold data (SEEK_DATA and
// SEEK_HOLE); a file system without them has one range, the whole file.
func dataExtents(fd int, size int64) ([]image.Extent, error) {
	var out []image.Extent
	for off := int64(0); off < size; {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if errors.Is(err, unix.EINVAL) {
			return []image.Extent{{Off: 0, Len: size}}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("SEEK_DATA at %d: %w", off, err)
		}
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("SEEK_HOLE at %d: %w", d, err)
		}
		h = min(h, size)
		if h > d {
			out = append(out, image.Extent{Off: d, Len: h - d})
		}
		off = h
	}
	return out, nil
}

// ghostKey names the file standing for a deleted file.
type ghostKey int

// memfdFirstKey marks the memfd of a content record handed out as is.
type memfdFirstKey int

// tmpfileFirstKey marks the O_TMPFILE file of a content record handed out
// as is.
type tmpfileFirstKey int

// tmpfileFlag is the bit of O_TMPFILE besides O_DIRECTORY (__O_TMPFILE):
// F_GETFL shows O_TMPFILE on a description an O_TMPFILE open made.
const tmpfileFlag = unix.O_TMPFILE &^ unix.O_DIRECTORY

// madeAsTmpfile tells whether a ghost file was made by an O_TMPFILE open.
func madeAsTmpfile(f *os.File) bool {
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	return err == nil && fl&tmpfileFlag != 0
}

// tmpfileName tells whether a deleted file's path is the name the kernel
// gives an O_TMPFILE file ("DIR/#INODE"): such a file never had a name.
func tmpfileName(path string) bool {
	n, ok := strings.CutPrefix(filepath.Base(path), "#")
	if !ok || n == "" {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// openGhost opens a new description of the file standing for a deleted
// one, made once per content record: every fd and mapping of it shares
// it, as they shared the original.
func openGhost(env RestoreEnv, ref *image.FileRef, flags int, mapped bool) (*os.File, error) {
	v, err := env.Once(ghostKey(ref.DataID), func() (any, error) { return makeGhost(env, ref) })
	if err != nil {
		return nil, err
	}
	tmp := v.(*os.File)
	// The first read-write description of a memfd is the one
	// memfd_create made, as it was: a reopened one counts as a writer,
	// and a sealed memfd could then not be run (execveat: ETXTBSY).
	if strings.HasPrefix(ref.Path, "/memfd:") && flags&unix.O_ACCMODE == unix.O_RDWR {
		if mapped {
			// a shared writable mapping is made from the memfd itself,
			// as a program maps it: a reopened description would stay
			// a writer as long as the mapping lives (execveat: ETXTBSY)
			return dupFile(tmp)
		}
		first := false
		env.Once(memfdFirstKey(ref.DataID), func() (any, error) { first = true; return true, nil })
		if first {
			return dupFile(tmp)
		}
	}
	// The description an O_TMPFILE open made (its flags show
	// O_TMPFILE) is the file made the same way, once.
	if flags&tmpfileFlag != 0 && madeAsTmpfile(tmp) {
		first := false
		env.Once(tmpfileFirstKey(ref.DataID), func() (any, error) { first = true; return true, nil })
		if first {
			return dupFile(tmp)
		}
	}
	flags &^= tmpfileFlag | unix.O_DIRECTORY
	// O_NOFOLLOW would refuse the /proc link itself.
	f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", tmp.Fd()), flags&^unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: reopen: %w", ref.Path, err)
	}
	return f, nil
}

// makeGhost creates the file of a deleted file and fills it.
func makeGhost(env RestoreEnv, ref *image.FileRef) (*os.File, error) {
	data, err := env.Data(ref.DataID)
	if err != nil {
		return nil, fmt.Errorf("%s: content: %w", ref.Path, err)
	}
	f, err := createGhost(ref)
	if err != nil {
		return nil, err
	}
	if err := fillGhost(f, ref, data); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", ref.Path, err)
	}
	if err := setMtime(f, ref.MtimeNs); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", ref.Path, err)
	}
	if ref.Seals != 0 {
		if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, ref.Seals); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: F_ADD_SEALS %#x: %w", ref.Path, ref.Seals, err)
		}
	}
	if strings.HasPrefix(ref.Path, "/memfd:") || madeAsTmpfile(f) {
		env.Keep(f) // its own description is handed out (openGhost)
		return f, nil
	}
	// Kept as an O_PATH fd, the writable one closed now: closing it at
	// the end of the restore would show as IN_CLOSE_WRITE to the inotify
	// watches of the file, which are in place by then.
	p, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.O_PATH|unix.O_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref.Path, err)
	}
	env.Keep(p)
	return p, nil
}

// createGhost makes an empty unlinked file for a deleted one: a memfd of
// the same name; or a file created at its old path and unlinked at once
// (its /proc links read the same); or, if that path is taken or gone, an
// O_TMPFILE file in its directory or in /tmp.
func createGhost(ref *image.FileRef) (*os.File, error) {
	mode := ref.Mode & 0o7777
	if name, ok := strings.CutPrefix(ref.Path, "/memfd:"); ok {
		fl := unix.MFD_CLOEXEC
		if ref.Seals != 0 {
			fl |= unix.MFD_ALLOW_SEALING
		}
		fd, err := unix.MemfdCreate(name, fl)
		if err != nil {
			return nil, fmt.Errorf("%s: memfd_create: %w", ref.Path, err)
		}
		return settleGhost(os.NewFile(uintptr(fd), ref.Path), ref, mode)
	}
	defer keepParentTimes(ref.Path)()
	defer makeParents(filepath.Dir(ref.Path))()
	if tmpfileName(ref.Path) {
		// an O_TMPFILE file: made the same way in its directory, so
		// that its description shows O_TMPFILE as it did.
		if fd, err := unix.Open(filepath.Dir(ref.Path), unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, mode); err == nil {
			return settleGhost(os.NewFile(uintptr(fd), ref.Path), ref, mode)
		}
	}
	if fd, err := unix.Open(ref.Path, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, mode); err == nil {
		f := os.NewFile(uintptr(fd), ref.Path)
		if err := unix.Unlink(ref.Path); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: unlink the recreated file: %w", ref.Path, err)
		}
		return settleGhost(f, ref, mode)
	}
	for _, dir := range []string{filepath.Dir(ref.Path), os.TempDir()} {
		fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, mode)
		if err == nil {
			return settleGhost(os.NewFile(uintptr(fd), ref.Path), ref, mode)
		}
	}
	return nil, fmt.Errorf("%s: cannot create an unnamed file for the deleted file's content", ref.Path)
}

// settleGhost gives the new file the old one's owner and mode (the umask
// took some of it, and a chown clears the set-ID bits).
func settleGhost(f *os.File, ref *image.FileRef, mode uint32) (*os.File, error) {
	// chown first: it clears the set-user-ID and set-group-ID bits.
	if err := unix.Fchown(int(f.Fd()), ref.UID, ref.GID); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: chown %d:%d: %w", ref.Path, ref.UID, ref.GID, err)
	}
	if err := unix.Fchmod(int(f.Fd()), mode); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: chmod %#o: %w", ref.Path, mode, err)
	}
	return f, nil
}

// fillGhost writes the saved data at its places, leaving the holes.
func fillGhost(f *os.File, ref *image.FileRef, data []byte) error {
	if len(ref.Extents) == 0 {
		if _, err := f.Write(data); err != nil {
			return fmt.Errorf("write content: %w", err)
		}
		return nil
	}
	if err := f.Truncate(ref.Size); err != nil {
		return fmt.Errorf("size %d: %w", ref.Size, err)
	}
	var at int64
	for _, e := range ref.Extents {
		if at+e.Len > int64(len(data)) {
			return fmt.Errorf("content record shorter than its extents: %w", image.ErrCorrupt)
		}
		if _, err := f.WriteAt(data[at:at+e.Len], e.Off); err != nil {
			return fmt.Errorf("write %d bytes at %d: %w", e.Len, e.Off, err)
		}
		at += e.Len
	}
	return nil
}

// keepParentTimes notes the access and modification times of path's
// directory and returns a function that puts them back: making a file
// there again and removing it at once must not look like a change of the
// directory (its ctime does change; nothing can set it).
func keepParentTimes(path string) func() {
	dir := filepath.Dir(path)
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return func() {}
	}
	return func() {
		ts := []unix.Timespec{st.Atim, st.Mtim}
		unix.UtimesNanoAt(unix.AT_FDCWD, dir, ts, 0)
	}
}

// setMtime gives a file made again by the restore the modification time
// the dump saw (its access time is left as it is).
func setMtime(f *os.File, ns int64) error {
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(ns)}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), ts, 0); err != nil {
		return fmt.Errorf("set modification time: %w", err)
	}
	return nil
}

// makeParents makes the missing directories above a deleted file (it was
// opened in a directory removed since), so that the file can be made and
// unlinked again at its old path; the function it returns removes them
// again, deepest first, and gives the first directory that existed its
// times back.
func makeParents(dir string) func() {
	var made []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == "/" || d == "." {
			break
		}
		made = append(made, d)
	}
	if len(made) == 0 {
		return func() {}
	}
	restore := keepParentTimes(made[len(made)-1])
	for i := len(made) - 1; i >= 0; i-- {
		if unix.Mkdir(made[i], 0o700) != nil {
			made = made[i+1:]
			break
		}
	}
	return func() {
		for _, d := range made {
			unix.Rmdir(d)
		}
		restore()
	}
}
