package bpftask

import (
	"fmt"
	"net/netip"
	"slices"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// Verify checks the reader on sockets of ckpt's own that it makes: UDP
// sockets with IPv4 memberships on the loopback interface (any source,
// include mode with a source, exclude mode with a blocked source), an
// IPv6 one with a membership, a UDP socket in an SO_REUSEPORT group with
// a classic BPF program and one without, an accepted TCP connection
// holding a SYN saved by TCP_SAVE_SYN and its client holding none. It
// fails with ErrSockMismatch if what it reads differs. (A per-socket
// IPsec policy is not made: setting one needs the kernel's key manager;
// its offset is the BTF's.)
func (r *SockReader) Verify() error {
	lo := 1 // the loopback interface, in every network namespace
	type made struct {
		name string
		fd   int
		want SockExtra
	}
	var socks []made
	defer func() {
		for _, s := range socks {
			unix.Close(s.fd)
		}
	}()
	add := func(name string, family, typ int, want SockExtra, prep func(fd int) error) error {
		fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("verify socket state reader: %s: %w", name, err)
		}
		socks = append(socks, made{name, fd, want})
		if err := prep(fd); err != nil {
			return fmt.Errorf("verify socket state reader: %s: %w", name, err)
		}
		return nil
	}
	g1, g2, g3 := netip.MustParseAddr("239.255.77.1"), netip.MustParseAddr("239.255.77.2"), netip.MustParseAddr("239.255.77.3")
	src := netip.MustParseAddr("127.0.0.2")
	loAddr := netip.MustParseAddr("127.0.0.1")
	g6 := netip.MustParseAddr("ff12::77:1")
	src6 := netip.MustParseAddr("::1")
	steps := []struct {
		name        string
		family, typ int
		want        SockExtra
		prep        func(fd int) error
	}{
		{"UDP with IPv4 memberships", unix.AF_INET, unix.SOCK_DGRAM, SockExtra{Memberships: []Membership{
			// The kernel keeps them newest first.
			{Group: g3, Address: netip.IPv4Unspecified(), Ifindex: lo, Sources: []netip.Addr{src}},
			{Group: g2, Address: loAddr, Ifindex: lo, Include: true, Sources: []netip.Addr{src}},
			{Group: g1, Address: netip.IPv4Unspecified(), Ifindex: lo},
		}}, func(fd int) error {
			if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &unix.IPMreqn{Multiaddr: g1.As4(), Ifindex: int32(lo)}); err != nil {
				return err
			}
			if err := sourceOpt(fd, unix.IP_ADD_SOURCE_MEMBERSHIP, g2, loAddr, src); err != nil {
				return err
			}
			if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &unix.IPMreqn{Multiaddr: g3.As4(), Ifindex: int32(lo)}); err != nil {
				return err
			}
			return groupSourceReq(fd, unix.IPPROTO_IP, unix.MCAST_BLOCK_SOURCE, lo, g3, src)
		}},
		{"UDP with an IPv6 membership", unix.AF_INET6, unix.SOCK_DGRAM, SockExtra{Memberships: []Membership{
			{Group: g6, Ifindex: lo, Sources: []netip.Addr{src6}},
		}}, func(fd int) error {
			mreq := unix.IPv6Mreq{Multiaddr: g6.As16(), Interface: uint32(lo)}
			if err := unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_ADD_MEMBERSHIP, &mreq); err != nil {
				return err
			}
			return groupSourceReq(fd, unix.IPPROTO_IPV6, unix.MCAST_BLOCK_SOURCE, lo, g6, src6)
		}},
		{"UDP in a reuseport group with a program", unix.AF_INET, unix.SOCK_DGRAM, SockExtra{ReuseportProg: true}, func(fd int) error {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
				return err
			}
			if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
				return err
			}
			ret := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
			return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &unix.SockFprog{Len: 1, Filter: &ret[0]})
		}},
		{"UDP in a reuseport group", unix.AF_INET, unix.SOCK_DGRAM, SockExtra{}, func(fd int) error {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
				return err
			}
			return unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
		}},
	}
	for _, s := range steps {
		s.want.Family, s.want.Type = s.family, s.typ
		s.want.Protocol = unix.IPPROTO_UDP
		if err := add(s.name, s.family, s.typ, s.want, s.prep); err != nil {
			return err
		}
	}
	// A connection accepted from a listener with TCP_SAVE_SYN, and its
	// client.
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("verify socket state reader: %w", err)
	}
	defer unix.Close(lfd)
	if err := unix.SetsockoptInt(lfd, unix.IPPROTO_TCP, unix.TCP_SAVE_SYN, 1); err != nil {
		return fmt.Errorf("verify socket state reader: TCP_SAVE_SYN: %w", err)
	}
	if err := unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fmt.Errorf("verify socket state reader: bind: %w", err)
	}
	if err := unix.Listen(lfd, 1); err != nil {
		return fmt.Errorf("verify socket state reader: listen: %w", err)
	}
	sa, err := unix.Getsockname(lfd)
	if err != nil {
		return fmt.Errorf("verify socket state reader: %w", err)
	}
	tcp := SockExtra{Family: unix.AF_INET, Type: unix.SOCK_STREAM, Protocol: unix.IPPROTO_TCP}
	if err := add("TCP client", unix.AF_INET, unix.SOCK_STREAM, tcp, func(fd int) error { return unix.Connect(fd, sa) }); err != nil {
		return err
	}
	afd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
	if err != nil {
		return fmt.Errorf("verify socket state reader: accept: %w", err)
	}
	saved := tcp
	saved.SavedSYN = true
	socks = append(socks, made{"TCP connection with a saved SYN", afd, saved})

	got, err := r.Read()
	if err != nil {
		return fmt.Errorf("verify socket state reader: %w", err)
	}
	for _, s := range socks {
		g, ok := got[s.fd]
		if !ok {
			return fmt.Errorf("verify socket state reader: socket %s (fd %d) not read: %w", s.name, s.fd, ErrSockMismatch)
		}
		if !sameExtra(g, &s.want) {
			return fmt.Errorf("verify socket state reader: socket %s: read %+v, want %+v: %w", s.name, *g, s.want, ErrSockMismatch)
		}
	}
	return nil
}

func sameExtra(a, b *SockExtra) bool {
	if a.Family != b.Family || a.Type != b.Type || a.Protocol != b.Protocol || a.More != b.More ||
		a.ReuseportProg != b.ReuseportProg || a.Policy != b.Policy || a.SavedSYN != b.SavedSYN || len(a.Memberships) != len(b.Memberships) {
		return false
	}
	for i, m := range a.Memberships {
		w := b.Memberships[i]
		if m.Group != w.Group || m.Address != w.Address || m.Ifindex != w.Ifindex || m.Include != w.Include || !slices.Equal(m.Sources, w.Sources) {
			return false
		}
	}
	return true
}

// sourceOpt sets an IPv4 source option (struct ip_mreq_source: group,
// interface address, source).
func sourceOpt(fd, opt int, group, iface, source netip.Addr) error {
	var req [12]byte
	g, i, s := group.As4(), iface.As4(), source.As4()
	copy(req[0:], g[:])
	copy(req[4:], i[:])
	copy(req[8:], s[:])
	return sys.Setsockopt(fd, unix.IPPROTO_IP, opt, unsafe.Pointer(&req[0]), uintptr(len(req)))
}

// groupSourceReq sets a struct group_source_req option (MCAST_BLOCK_SOURCE,
// MCAST_JOIN_SOURCE_GROUP...).
func groupSourceReq(fd, level, opt, ifindex int, group, source netip.Addr) error {
	// u32 interface, 4 bytes padding, two struct sockaddr_storage.
	var req [8 + 2*128]byte
	*(*uint32)(unsafe.Pointer(&req[0])) = uint32(ifindex)
	sys.PutSockaddr(req[8:], group)
	sys.PutSockaddr(req[8+128:], source)
	return sys.Setsockopt(fd, level, opt, unsafe.Pointer(&req[0]), uintptr(len(req)))
}
