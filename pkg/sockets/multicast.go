package sockets

import (
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// Multicast group memberships have no getsockopt that lists them: the
// dump reads them from the kernel (bpftask.SockReader) and saves them in
// image.Socket.Joined; the restore joins them again after bind,
// oldest first (the kernel keeps them newest first, as the program
// joined them), and sets their source filters with MCAST_MSFILTER, which
// getsockopt(MCAST_MSFILTER) then gives back for each group.

// groupFilterHead is the size of struct group_filter before its sources
// (gf_interface, padding, gf_group, gf_fmode, gf_numsrc).
const groupFilterHead = 8 + 128 + 8

// joinGroups joins the multicast groups of s on fd, with their source
// filters. An interface is found by the name it had at the dump: one
// that does not exist here fails the restore, naming it.
func joinGroups(fd int, s *image.Socket) error {
	for i := len(s.Joined) - 1; i >= 0; i-- {
		m := &s.Joined[i]
		if err := join(fd, m); err != nil {
			return fmt.Errorf("multicast group %s on interface %s (index %d): %w", m.Group, m.Interface, m.Ifindex, err)
		}
	}
	return nil
}

func join(fd int, m *image.Membership) error {
	group, err := netip.ParseAddr(m.Group)
	if err != nil {
		return fmt.Errorf("group address: %w", err)
	}
	ifindex := m.Ifindex
	if m.Interface != "" {
		ifi, err := net.InterfaceByName(m.Interface)
		if err != nil {
			return fmt.Errorf("the interface does not exist here: %w", err)
		}
		ifindex = ifi.Index
	}
	level := unix.IPPROTO_IPV6
	if group.Is4() {
		level = unix.IPPROTO_IP
		mreq := unix.IPMreqn{Multiaddr: group.As4(), Ifindex: int32(ifindex)}
		if m.Address != "" {
			a, err := netip.ParseAddr(m.Address)
			if err != nil {
				return fmt.Errorf("interface address: %w", err)
			}
			mreq.Address = a.As4()
		}
		if err := unix.SetsockoptIPMreqn(fd, level, unix.IP_ADD_MEMBERSHIP, &mreq); err != nil {
			return fmt.Errorf("IP_ADD_MEMBERSHIP: %w", err)
		}
	} else {
		mreq := unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(ifindex)}
		if err := unix.SetsockoptIPv6Mreq(fd, level, unix.IPV6_ADD_MEMBERSHIP, &mreq); err != nil {
			return fmt.Errorf("IPV6_ADD_MEMBERSHIP: %w", err)
		}
	}
	if !m.Include && len(m.Sources) == 0 {
		return nil // any source: as joined
	}
	gf, err := groupFilter(ifindex, group, m.Include, m.Sources)
	if err != nil {
		return err
	}
	if err := sys.Setsockopt(fd, level, unix.MCAST_MSFILTER, unsafe.Pointer(&gf[0]), uintptr(len(gf))); err != nil {
		return fmt.Errorf("MCAST_MSFILTER: %w", err)
	}
	return nil
}

// groupFilter builds a struct group_filter.
func groupFilter(ifindex int, group netip.Addr, include bool, sources []string) ([]byte, error) {
	gf := make([]byte, groupFilterHead+128*max(len(sources), 1))
	*(*uint32)(unsafe.Pointer(&gf[0])) = uint32(ifindex)
	sys.PutSockaddr(gf[8:], group)
	mode := uint32(unix.MCAST_EXCLUDE)
	if include {
		mode = unix.MCAST_INCLUDE
	}
	*(*uint32)(unsafe.Pointer(&gf[136])) = mode
	*(*uint32)(unsafe.Pointer(&gf[140])) = uint32(len(sources))
	for i, s := range sources {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("source address: %w", err)
		}
		sys.PutSockaddr(gf[groupFilterHead+128*i:], a)
	}
	return gf, nil
}
