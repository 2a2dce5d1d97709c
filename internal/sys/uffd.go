package sys

import (
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The userfaultfd ABI (linux/userfaultfd.h); x/sys/unix does not define it.
const (
	UffdAPI                   = 0xAA       // UFFD_API
	UffdUserModeOnly          = 1          // UFFD_USER_MODE_ONLY, a userfaultfd(2) flag
	UffdioRegisterModeMissing = 1          // UFFDIO_REGISTER_MODE_MISSING
	uffdioAPI                 = 0xc018aa3f // _IOWR(0xAA, 0x3F, struct uffdio_api)
	uffdioRegister            = 0xc020aa00 // _IOWR(0xAA, 0x00, struct uffdio_register)
	uffdioCopy                = 0xc028aa03 // _IOWR(0xAA, 0x03, struct uffdio_copy)
)

type uffdioAPIArg struct{ api, features, ioctls uint64 }

type uffdioRegisterArg struct{ start, len, mode, ioctls uint64 }

type uffdioCopyArg struct {
	dst, src, len, mode uint64
	copy                int64
}

func uffdIoctl(fd *FD, name string, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, fd.Uintptr(), req, uintptr(arg))
	if e != 0 {
		return os.NewSyscallError("ioctl("+name+")", e)
	}
	return nil
}

// Userfaultfd opens a userfaultfd in this process (userfaultfd(2)).
func Userfaultfd(flags int) (*FD, error) {
	r, _, e := unix.Syscall(unix.SYS_USERFAULTFD, uintptr(flags), 0, 0)
	if e != 0 {
		return nil, os.NewSyscallError("userfaultfd", e)
	}
	return NewFD(int(r))
}

// UffdioAPI does the UFFDIO_API handshake asking for features, and returns
// the ioctls the userfaultfd supports.
func UffdioAPI(fd *FD, features uint64) (ioctls uint64, err error) {
	a := uffdioAPIArg{api: UffdAPI, features: features}
	if err := uffdIoctl(fd, "UFFDIO_API", uffdioAPI, unsafe.Pointer(&a)); err != nil {
		return 0, err
	}
	return a.ioctls, nil
}

// UffdioRegister registers [start, start+length) of the process the
// userfaultfd belongs to, and returns the ioctls allowed on the range.
func UffdioRegister(fd *FD, start, length, mode uint64) (ioctls uint64, err error) {
	r := uffdioRegisterArg{start: start, len: length, mode: mode}
	if err := uffdIoctl(fd, "UFFDIO_REGISTER", uffdioRegister, unsafe.Pointer(&r)); err != nil {
		return 0, err
	}
	return r.ioctls, nil
}

// UffdioCopy copies src to dst in the registered range (UFFDIO_COPY). It
// returns how many bytes went in even when it fails (EAGAIN, EEXIST part
// way through).
func UffdioCopy(fd *FD, dst uint64, src []byte, mode uint64) (int64, error) {
	if len(src) == 0 {
		return 0, nil
	}
	c := uffdioCopyArg{dst: dst, src: uint64(uintptr(unsafe.Pointer(&src[0]))), len: uint64(len(src)), mode: mode}
	err := uffdIoctl(fd, "UFFDIO_COPY", uffdioCopy, unsafe.Pointer(&c))
	runtime.KeepAlive(src) // its address went in as a number
	return max(c.copy, 0), err
}
