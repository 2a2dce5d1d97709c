package sys

import (
	"os"

	"golang.org/x/sys/unix"
)

// The calls that make a new fd, returning it owned; the flags should
// include the close-on-exec one.

// Socket makes a socket (socket(2)).
func Socket(domain, typ, proto int) (*FD, error) {
	fd, err := unix.Socket(domain, typ, proto)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	return NewFD(fd)
}

// Socketpair makes a pair of connected sockets (socketpair(2)).
func Socketpair(domain, typ, proto int) (a, b *FD, err error) {
	p, err := unix.Socketpair(domain, typ, proto)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	return &FD{raw: p[0]}, &FD{raw: p[1]}, nil
}

// Accept4 takes a connection off the queue of the listening socket l
// (accept4(2)).
func Accept4(l int, flags int) (*FD, error) {
	fd, _, err := unix.Accept4(l, flags)
	if err != nil {
		return nil, os.NewSyscallError("accept4", err)
	}
	return NewFD(fd)
}

// Dup duplicates fd as a new close-on-exec fd (fcntl F_DUPFD_CLOEXEC):
// a copy of one's own, whoever owns fd.
func Dup(fd int) (*FD, error) {
	r, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", err)
	}
	return NewFD(r)
}

// Pipe2 makes a pipe (pipe2(2)) and returns its read and write ends.
func Pipe2(flags int) (r, w *FD, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], flags); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	return &FD{raw: p[0]}, &FD{raw: p[1]}, nil
}

// MemfdCreate makes an anonymous memory file (memfd_create(2)).
func MemfdCreate(name string, flags int) (*FD, error) {
	fd, err := unix.MemfdCreate(name, flags)
	if err != nil {
		return nil, os.NewSyscallError("memfd_create", err)
	}
	return NewFD(fd)
}

// Open opens a file (openat(2) at the working directory).
func Open(path string, flags int, mode uint32) (*FD, error) {
	fd, err := unix.Open(path, flags, mode)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return NewFD(fd)
}

// OpenByHandleAt opens the file a handle names, on the file system of
// mount, an fd of a directory in it (open_by_handle_at(2)).
func OpenByHandleAt(mount *FD, h unix.FileHandle, flags int) (*FD, error) {
	fd, err := unix.OpenByHandleAt(mount.Int(), h, flags)
	if err != nil {
		return nil, os.NewSyscallError("open_by_handle_at", err)
	}
	return NewFD(fd)
}
