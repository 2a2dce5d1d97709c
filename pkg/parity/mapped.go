package parity

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// mappedFile is an image file mapped read-only: the ring uses its whole
// blocks where they lie (blockSource) instead of copying each into a
// buffer first — one copy less per image byte.
type mappedFile struct{ b []byte }

// mapImage maps f (size bytes) if it can, and returns f itself otherwise:
// either way an io.ReaderAt over the image. Release it with unmapImage.
func mapImage(f *os.File, size int64) io.ReaderAt {
	if size <= 0 || int64(int(size)) != size {
		return f
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return f
	}
	unix.Madvise(b, unix.MADV_SEQUENTIAL)
	return &mappedFile{b: b}
}

// unmapImage releases what mapImage returned.
func unmapImage(r io.ReaderAt) {
	if m, ok := r.(*mappedFile); ok && m.b != nil {
		unix.Munmap(m.b)
		m.b = nil
	}
}

// ReadAt implements io.ReaderAt.
func (m *mappedFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// block returns n bytes at off in place, or nil if the file is shorter.
func (m *mappedFile) block(off int64, n int) []byte {
	if off < 0 || off+int64(n) > int64(len(m.b)) {
		return nil
	}
	return m.b[off : off+int64(n) : off+int64(n)]
}

// guardFaults runs a ring stage so that a memory fault while it reads a
// mapped image — the file was truncated under the ring — is an error, not
// a crash of the process (an agent is PID 1 of its node).
func guardFaults(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			err = fmt.Errorf("%w: an image changed while the ring read it: %v", ErrCorrupt, r)
		}
	}()
	return f()
}
