package sys

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// RecvmsgName is recvmsg(2) that gives the sender's address as the kernel
// wrote it: its bytes, as long as msg_namelen says (x/sys/unix cuts a
// UNIX name at its first NUL byte, and an abstract name may hold NULs,
// even be only NULs). It returns the bytes read, the control bytes read
// into oob, the message flags and the address bytes (empty if the sender
// had none).
func RecvmsgName(fd int, p, oob []byte, flags int) (n, oobn, recvflags int, name []byte, err error) {
	var rsa unix.RawSockaddrAny
	var msg unix.Msghdr
	msg.Name = (*byte)(unsafe.Pointer(&rsa))
	msg.Namelen = uint32(unsafe.Sizeof(rsa))
	var iov unix.Iovec
	var dummy byte
	if len(p) > 0 {
		iov.Base = &p[0]
		iov.SetLen(len(p))
	} else {
		iov.Base = &dummy
		iov.SetLen(0)
	}
	msg.Iov = &iov
	msg.Iovlen = 1
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), uintptr(flags))
	if e != 0 {
		return 0, 0, 0, nil, os.NewSyscallError("recvmsg", e)
	}
	l := min(int(msg.Namelen), int(unsafe.Sizeof(rsa)))
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&rsa)), l)
	return int(r), int(msg.Controllen), int(msg.Flags), append([]byte(nil), raw...), nil
}
