package sys

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// FD is a file descriptor this process owns. Close is idempotent; a nil or
// closed FD reports -1.
type FD struct {
	raw int
}

// NewFD takes ownership of raw, which must be an open fd (>= 0).
func NewFD(raw int) (*FD, error) {
	if raw < 0 {
		return nil, fmt.Errorf("invalid fd %d", raw)
	}
	return &FD{raw: raw}, nil
}

// Int returns the fd number, -1 once closed. The FD keeps ownership.
func (fd *FD) Int() int {
	if fd == nil {
		return -1
	}
	return fd.raw
}

// Uintptr returns the fd number for the calls that take one (unix.FcntlInt).
func (fd *FD) Uintptr() uintptr { return uintptr(fd.Int()) }

// String renders the fd as "fd N" ("fd closed" once closed).
func (fd *FD) String() string {
	if fd.Int() < 0 {
		return "fd closed"
	}
	return "fd " + strconv.Itoa(fd.raw)
}

// Close closes the fd once; later calls do nothing and return nil.
func (fd *FD) Close() error {
	if fd == nil || fd.raw < 0 {
		return nil
	}
	raw := fd.raw
	fd.raw = -1
	if err := unix.Close(raw); err != nil {
		return os.NewSyscallError("close", err)
	}
	return nil
}

// Release gives up ownership: it returns the fd number and leaves the FD
// closed (without closing the fd), so that a later Close does nothing.
// It is how a function that made an fd returns it once nothing can fail
// any more: `defer fd.Close()` after making it, `return fd.Release()` at
// the end.
func (fd *FD) Release() int {
	raw := fd.Int()
	if fd != nil {
		fd.raw = -1
	}
	return raw
}

// Move hands ownership over to a new FD, which it returns, and leaves fd
// closed (without closing the fd), so that fd's deferred Close does
// nothing: how a closure or another owner takes an fd over. A closed fd
// moves to nil, which is closed too.
func (fd *FD) Move() *FD {
	raw := fd.Release()
	if raw < 0 {
		return nil
	}
	return &FD{raw: raw}
}

// File hands the fd over to an *os.File named name; the FD is left closed
// (without closing the fd) and must not be used any more.
func (fd *FD) File(name string) *os.File {
	raw := fd.Int()
	if raw < 0 {
		return nil
	}
	fd.raw = -1
	return os.NewFile(uintptr(raw), name)
}
