package sys

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PutSockaddr writes addr as a struct sockaddr_in or sockaddr_in6 (port
// 0) at the start of b, a struct sockaddr_storage of a larger struct
// (group_filter, group_source_req).
func PutSockaddr(b []byte, addr netip.Addr) {
	if addr.Is4() {
		*(*uint16)(unsafe.Pointer(&b[0])) = unix.AF_INET
		a := addr.As4()
		copy(b[4:], a[:])
		return
	}
	*(*uint16)(unsafe.Pointer(&b[0])) = unix.AF_INET6
	a := addr.As16()
	copy(b[8:], a[:])
}
