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

// A DirWriter writes the image stream of an image directory. The stream
// goes to a temporary file, created 0600; Commit syncs it and renames it to
// its final name.
type DirWriter struct {
	*Writer
	f   *os.File
	dir string
}

// CreateDir creates (if needed, mode 0700) the image directory dir and starts
// the image stream in it.
func CreateDir(dir string) (*DirWriter, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create image directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, partialName), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create image file: %w", err)
	}
	w, err := NewWriter(f)
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &DirWriter{Writer: w, f: f, dir: dir}, nil
}

// Commit writes the end record, syncs the file and gives it its final name.
func (d *DirWriter) Commit() error {
	if err := d.Writer.Close(); err != nil {
		d.Abort()
		return err
	}
	if err := d.f.Sync(); err != nil {
		d.Abort()
		return fmt.Errorf("sync image: %w", err)
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

// Abort removes the partial image.
func (d *DirWriter) Abort() {
	d.f.Close()
	os.Remove(d.f.Name())
}

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
