package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// partialName is the name an image has in its directory while it is being
// written: a dump that dies leaves this, never a FileName that looks whole.
const partialName = FileName + ".partial"

// Errors of image directories, for callers that branch on them.
var (
	// ErrImageExists means a dump was asked to write into a directory
	// that already holds an image: it is never overwritten.
	ErrImageExists = errors.New("already holds an image")
	// ErrBusy means another dump is writing into the directory.
	ErrBusy = errors.New("another dump is writing into it")
	// ErrIncomplete means a directory holds only the partial image of a
	// dump that did not finish.
	ErrIncomplete = errors.New("incomplete image (the dump did not finish)")
)

// A DirFile is the image file of an image directory while it is being
// written: a temporary file, created 0600 and locked (flock) while it is
// written, that Commit syncs and renames to its final name. Bytes written
// to it are not checked: DirWriter writes records, a transfer receiver
// keeps a copy of the stream it reads.
type DirFile struct {
	f       *os.File
	dir     string
	created []string // directories CreateDirFile made, deepest first
	// StaleRemoved says that the directory held the partial image of an
	// earlier dump that did not finish, which was removed.
	StaleRemoved bool
}

// CreateDirFile creates (if needed, mode 0700) the image directory dir and
// its temporary image file. It refuses a directory that already holds an
// image (ErrImageExists) or that another dump is writing into (ErrBusy),
// and removes the partial image a dump that did not finish left there
// (saying so in StaleRemoved). Abort removes the directories it created.
func CreateDirFile(dir string) (*DirFile, error) {
	created := missingDirs(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create image directory %s: %w", dir, err)
	}
	d := &DirFile{dir: dir, created: created}
	partial := filepath.Join(dir, partialName)
	_, err := os.Lstat(partial)
	stale := err == nil
	f, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		d.removeDirs()
		return nil, fmt.Errorf("create image file: %w", err)
	}
	d.f = f
	// The lock is held until the image has its final name: a partial
	// file nobody holds is what a dump that died left behind.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		d.removeDirs()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("image directory %s: %w", dir, ErrBusy)
		}
		return nil, fmt.Errorf("lock image file %s: %w", partial, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, FileName)); err == nil {
		if !stale {
			os.Remove(partial)
		}
		f.Close()
		return nil, fmt.Errorf("image directory %s %w (%s): remove it or dump into another directory",
			dir, ErrImageExists, filepath.Join(dir, FileName))
	}
	if stale {
		if err := f.Truncate(0); err != nil {
			d.Abort()
			return nil, fmt.Errorf("remove the stale partial image %s: %w", partial, err)
		}
		d.StaleRemoved = true
	}
	return d, nil
}

// missingDirs lists dir and those of its parents that do not exist,
// deepest first.
func missingDirs(dir string) []string {
	var out []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || filepath.Dir(d) == d {
			return out
		}
		out = append(out, d)
	}
}

// removeDirs removes the directories CreateDirFile made, if empty.
func (d *DirFile) removeDirs() {
	for _, dir := range d.created {
		if os.Remove(dir) != nil {
			return
		}
	}
}

// Write appends to the temporary file.
func (d *DirFile) Write(p []byte) (int, error) { return d.f.Write(p) }

// Sync flushes the temporary file to disk.
func (d *DirFile) Sync() error {
	if err := d.f.Sync(); err != nil {
		return fmt.Errorf("sync image: %w", err)
	}
	return nil
}

// Commit syncs the file and gives it its final name (while it is still
// locked, so that no other dump takes it for a stale one). On error the
// temporary file is removed, and the directories CreateDirFile made.
func (d *DirFile) Commit() error {
	if err := d.Sync(); err != nil {
		d.Abort()
		return err
	}
	if err := os.Rename(d.f.Name(), filepath.Join(d.dir, FileName)); err != nil {
		d.Abort()
		return fmt.Errorf("commit image: %w", err)
	}
	if dirf, err := os.Open(d.dir); err == nil {
		dirf.Sync()
		dirf.Close()
	}
	if err := d.f.Close(); err != nil {
		return fmt.Errorf("close image: %w", err)
	}
	return nil
}

// Abort removes the temporary file, and the directories CreateDirFile
// made if they are empty.
func (d *DirFile) Abort() {
	os.Remove(d.f.Name())
	d.f.Close()
	d.removeDirs()
}

// A DirWriter writes the image stream of an image directory into a DirFile.
type DirWriter struct {
	*Writer
	file *DirFile
}

// CreateDir creates (if needed, mode 0700) the image directory dir and starts
// the image stream in it. It refuses and cleans up as CreateDirFile does.
func CreateDir(dir string) (*DirWriter, error) {
	df, err := CreateDirFile(dir)
	if err != nil {
		return nil, err
	}
	w, err := NewWriter(df)
	if err != nil {
		df.Abort()
		return nil, err
	}
	return &DirWriter{Writer: w, file: df}, nil
}

// Prepare writes the end record and syncs the file, so that only the
// rename is left for Commit.
func (d *DirWriter) Prepare() error {
	if err := d.Writer.End(); err != nil {
		return err
	}
	return d.file.Sync()
}

// Commit writes the end record (unless Prepare did), syncs the file and
// gives it its final name.
func (d *DirWriter) Commit() error {
	if err := d.Writer.End(); err != nil {
		d.Abort()
		return err
	}
	return d.file.Commit()
}

// Abort removes the partial image, and the directories CreateDir made.
func (d *DirWriter) Abort() { d.file.Abort() }

// StaleRemoved says that CreateDir removed the partial image an earlier
// dump that did not finish had left in the directory.
func (d *DirWriter) StaleRemoved() bool { return d.file.StaleRemoved }

// ErrNoImage means a directory holds no image.
var ErrNoImage = errors.New("no ckpt image in directory")

// OpenDir opens the image stream of an image directory (or an image file
// given directly).
func OpenDir(dir string) (*os.File, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("open image: %w", err)
	}
	path := dir
	if st.IsDir() {
		path = filepath.Join(dir, FileName)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, perr := os.Stat(filepath.Join(dir, partialName)); perr == nil {
			return nil, fmt.Errorf("%s: %w", dir, ErrIncomplete)
		}
		return nil, fmt.Errorf("%s: %w", dir, ErrNoImage)
	}
	if err != nil {
		return nil, fmt.Errorf("open image: %w", err)
	}
	return f, nil
}
