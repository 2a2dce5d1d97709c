package sockets

import (
	"net/netip"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// nonLocal tells whether a socket of family could not bind addr without
// IP_FREEBIND: it is none of the addresses of ckpt's network namespace
// (the dumped process's, ckpt runs in it).
func nonLocal(family int, addr netip.Addr) bool {
	if !addr.IsValid() || addr.IsUnspecified() {
		return false
	}
	fd, err := sys.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer fd.Close()
	if family == unix.AF_INET6 && addr.Is4In6() {
		unix.SetsockoptInt(fd.Int(), unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
	}
	return unix.Bind(fd.Int(), Sockaddr(netip.AddrPortFrom(addr, 0))) == unix.EADDRNOTAVAIL
}

// bindFree binds fd to local; a socket saved with FreeBind binds with
// IP_FREEBIND on, then gets the program's value back (IP_FREEBIND and
// IPV6_FREEBIND are one flag).
func bindFree(fd int, s *image.Socket, local netip.AddrPort) error {
	if !s.FreeBind {
		return unix.Bind(fd, Sockaddr(local))
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_FREEBIND, 1); err != nil {
		return err
	}
	if err := unix.Bind(fd, Sockaddr(local)); err != nil {
		return err
	}
	v := 0
	for _, o := range s.Options {
		if o.Level == unix.IPPROTO_IP && o.Name == unix.IP_FREEBIND || o.Level == unix.IPPROTO_IPV6 && o.Name == unix.IPV6_FREEBIND {
			v |= o.Value
		}
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_FREEBIND, v)
}
