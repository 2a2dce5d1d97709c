package sys

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The socket calls take a raw fd: pkg/sockets hands its sockets around as
// plain ints (they end up in an *os.File or in another process).

// Getsockopt reads option opt at level into the size bytes at p (for the
// structures x/sys/unix has no getter for: TCP_INFO as bytes,
// TCP_REPAIR_WINDOW) and returns how many bytes the kernel wrote.
func Getsockopt(fd, level, opt int, p unsafe.Pointer, size uintptr) (int, error) {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, os.NewSyscallError(fmt.Sprintf("getsockopt(%d, %d)", level, opt), e)
	}
	return int(l), nil
}

// Setsockopt sets option opt at level from the size bytes at p (for
// TCP_REPAIR_OPTIONS and TCP_REPAIR_WINDOW, which x/sys/unix has no setter
// for).
func Setsockopt(fd, level, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), size, 0)
	if e != 0 {
		return os.NewSyscallError(fmt.Sprintf("setsockopt(%d, %d)", level, opt), e)
	}
	return nil
}

// ioctlName names the int ioctls IoctlInt is used with.
func ioctlName(req uint) string {
	switch req {
	case unix.SIOCINQ:
		return "SIOCINQ"
	case unix.SIOCOUTQ:
		return "SIOCOUTQ"
	case unix.SIOCOUTQNSD:
		return "SIOCOUTQNSD"
	}
	return fmt.Sprintf("%#x", req)
}

// IoctlInt runs an ioctl that returns an int (SIOCINQ, SIOCOUTQ,
// SIOCOUTQNSD); the error names the request.
func IoctlInt(fd int, req uint) (int, error) {
	v, err := unix.IoctlGetInt(fd, req)
	if err != nil {
		return 0, os.NewSyscallError("ioctl("+ioctlName(req)+")", err)
	}
	return v, nil
}

// GetsocknameRaw reads a socket's address as the kernel gives it (for a
// SOCK_PACKET socket's struct sockaddr, which x/sys/unix reads as a
// struct sockaddr_ll): the bytes written, at most len(buf).
func GetsocknameRaw(fd int, buf []byte) (int, error) {
	l := uint32(len(buf))
	_, _, e := unix.Syscall(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)))
	if e != 0 {
		return 0, os.NewSyscallError("getsockname", e)
	}
	return int(min(l, uint32(len(buf)))), nil
}

// BindRaw binds a socket to an address given as its bytes.
func BindRaw(fd int, addr []byte) error {
	_, _, e := unix.Syscall(unix.SYS_BIND, uintptr(fd), uintptr(unsafe.Pointer(&addr[0])), uintptr(len(addr)))
	if e != 0 {
		return os.NewSyscallError("bind", e)
	}
	return nil
}

// Disconnect is connect(fd, AF_UNSPEC): it dissolves a socket's
// association (x/sys/unix has no Sockaddr for AF_UNSPEC).
func Disconnect(fd int) error {
	var sa [16]byte // struct sockaddr, sa_family AF_UNSPEC
	if _, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa[0])), uintptr(len(sa))); e != 0 {
		return os.NewSyscallError("connect(AF_UNSPEC)", e)
	}
	return nil
}
