package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// partialName is the name an image has in its directory while it is being
// written: a dump that dies leaves this, never a FileName that looks whole.
const partialName = FileName + ".partial"

// A DirFile is the image file of an image directory while it is being
// written: a temporary file, created 0600, that Commit syncs and renames to
// its final name. Bytes written to it are not checked: DirWriter writes
// records, a transfer receiver keeps a copy of the stream it reads.
type DirFile struct {
	f   *os.File
	dir string
}

// CreateDirFile creates (if needed, mode 0700) the image directory dir and
// its temporary image file.
func CreateDirFile(dir string) (*DirFile, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create image directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, partialName), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create image file: %w", err)
	}
	return &DirFile{f: f, dir: dir}, nil
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

// Commit syncs the file and gives it its final name. On error the
// temporary file is removed.
func (d *DirFile) Commit() error {
	if err := d.Sync(); err != nil {
		d.Abort()
		return err
	}
	if err := d.f.Close(); err != nil {
		os.Remove(d.f.Name())
		return fmt.Errorf("close image: %w", err)
	}
	if err := os.Rename(d.f.Name(), filepath.Join(d.dir, FileName)); err != nil {
		os.Remove(d.f.Name())
		return fmt.Errorf("commit image: %w", err)
	}
	if dirf, err := os.Open(d.dir); err == nil {
		dirf.Sync()
		dirf.Close()
	}
	return nil
}

// Abort removes the temporary file.
func (d *DirFile) Abort() {
	d.f.Close()
	os.Remove(d.f.Name())
}

// A DirWriter writes the image stream of an image directory into a DirFile.
type DirWriter struct {
	*Writer
	file *DirFile
}

// CreateDir creates (if needed, mode 0700) the image directory dir and starts
// the image stream in it.
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
	if err := d.Writer.Close(); err != nil {
		return err
	}
	return d.file.Sync()
}

// Commit writes the end record (unless Prepare did), syncs the file and
// gives it its final name.
func (d *DirWriter) Commit() error {
	if err := d.Writer.Close(); err != nil {
		d.Abort()
		return err
	}
	return d.file.Commit()
}

// Abort removes the partial image.
func (d *DirWriter) Abort() { d.file.Abort() }

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
			return nil, fmt.Errorf("%s: only a partial image (the dump did not finish): %w", dir, ErrNoImage)
		}
		return nil, fmt.Errorf("%s: %w", dir, ErrNoImage)
	}
	if err != nil {
		return nil, fmt.Errorf("open image: %w", err)
	}
	return f, nil
}
