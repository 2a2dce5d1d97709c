package sockets

import (
	"encoding/binary"
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// Netlink sockets are saved with their protocol, bound port id,
// multicast groups (NETLINK_LIST_MEMBERSHIPS), the address they are
// connected to, their NETLINK_* options and the inventory's SOL_SOCKET
// ones. Messages waiting in the receive queue are refused by name (the
// kernel or another process sent them: they cannot be sent again as
// such).

const solNetlink = 270 // SOL_NETLINK

func netlink(family, _, _ int) bool { return family == unix.AF_NETLINK }

// netlinkOptions are the NETLINK_* options a program can read back.
var netlinkOptions = []otherOption{
	{solNetlink, unix.NETLINK_PKTINFO, "SOL_NETLINK NETLINK_PKTINFO", 0, netlink},
	{solNetlink, unix.NETLINK_BROADCAST_ERROR, "SOL_NETLINK NETLINK_BROADCAST_ERROR", 0, netlink},
	{solNetlink, unix.NETLINK_NO_ENOBUFS, "SOL_NETLINK NETLINK_NO_ENOBUFS", 0, netlink},
	{solNetlink, unix.NETLINK_LISTEN_ALL_NSID, "SOL_NETLINK NETLINK_LISTEN_ALL_NSID", 0, netlink},
	{solNetlink, unix.NETLINK_CAP_ACK, "SOL_NETLINK NETLINK_CAP_ACK", 0, netlink},
	{solNetlink, unix.NETLINK_EXT_ACK, "SOL_NETLINK NETLINK_EXT_ACK", 0, netlink},
	{solNetlink, unix.NETLINK_GET_STRICT_CHK, "SOL_NETLINK NETLINK_GET_STRICT_CHK", 0, netlink},
}

// IsNetlink says whether ckpt's fd is a netlink socket.
func IsNetlink(fd int) bool {
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	return err == nil && dom == unix.AF_NETLINK
}

// DescribeNetlink saves a netlink socket (ckpt's fd).
func DescribeNetlink(fd int) (*image.Socket, error) {
	s := &image.Socket{Family: unix.AF_NETLINK}
	var err error
	if s.Type, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil {
		return nil, fmt.Errorf("SO_TYPE: %w", err)
	}
	if s.Protocol, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil {
		return nil, fmt.Errorf("SO_PROTOCOL: %w", err)
	}
	var b [1]byte
	if _, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT|unix.MSG_TRUNC); err == nil {
		return nil, fmt.Errorf("netlink socket (protocol %d) with messages waiting in its receive queue: they cannot be put back: %w", s.Protocol, ErrState)
	}
	if sa, err := unix.Getsockname(fd); err == nil {
		if nl, ok := sa.(*unix.SockaddrNetlink); ok {
			s.PortID = nl.Pid
		}
	}
	if sa, err := unix.Getpeername(fd); err == nil {
		if nl, ok := sa.(*unix.SockaddrNetlink); ok {
			s.DstPortID, s.DstGroup = nl.Pid, nl.Groups
		}
	}
	// NETLINK_LIST_MEMBERSHIPS: a bitmap of u32 words.
	words := make([]byte, 128)
	n, err := sys.Getsockopt(fd, solNetlink, unix.NETLINK_LIST_MEMBERSHIPS, ptr(&words[0]), uintptr(len(words)))
	if err != nil {
		return nil, fmt.Errorf("netlink socket: NETLINK_LIST_MEMBERSHIPS: %w", err)
	}
	for w := 0; w+4 <= min(int(n), len(words)); w += 4 {
		bits := binary.LittleEndian.Uint32(words[w:])
		for i := 0; i < 32; i++ {
			if bits&(1<<i) != 0 {
				s.Groups = append(s.Groups, uint32(w/4*32+i+1))
			}
		}
	}
	if s.Options, err = ReadOptions(fd, unix.AF_NETLINK, s.Type, s.Protocol, false); err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	fresh, err := sys.Socket(unix.AF_NETLINK, s.Type|unix.SOCK_CLOEXEC, s.Protocol)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: new socket for the defaults: %w", err)
	}
	defer fresh.Close()
	for _, o := range netlinkOptions {
		v, err := readOther(fd, o)
		if err != nil {
			continue // not on this kernel
		}
		if def, err := readOther(fresh.Int(), o); err == nil && def.Value == v.Value {
			continue
		}
		s.Options = append(s.Options, v)
	}
	return s, nil
}

// OpenNetlink builds a netlink socket DescribeNetlink saved: options,
// bound to its port id, its groups joined, connected.
func OpenNetlink(s *image.Socket) (*sys.FD, error) {
	sock, err := sys.Socket(unix.AF_NETLINK, s.Type|unix.SOCK_CLOEXEC, s.Protocol)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	defer sock.Close()
	fd := sock.Int()
	fail := func(err error) (*sys.FD, error) {
		return nil, fmt.Errorf("netlink socket (protocol %d): %w", s.Protocol, err)
	}
	if err := setOptions(fd, s.Options, early, nil); err != nil {
		return fail(err)
	}
	for _, v := range s.Options {
		for _, o := range netlinkOptions {
			if o.level == v.Level && o.name == v.Name {
				if err := unix.SetsockoptInt(fd, v.Level, v.Name, v.Value); err != nil {
					return fail(fmt.Errorf("%s: %w", o.label, err))
				}
			}
		}
	}
	if s.PortID != 0 {
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: s.PortID}); err != nil {
			return fail(fmt.Errorf("bind to port id %d: %w", s.PortID, err))
		}
	}
	for _, g := range s.Groups {
		if err := unix.SetsockoptInt(fd, solNetlink, unix.NETLINK_ADD_MEMBERSHIP, int(g)); err != nil {
			return fail(fmt.Errorf("join group %d: %w", g, err))
		}
	}
	if s.DstPortID != 0 || s.DstGroup != 0 {
		if err := unix.Connect(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: s.DstPortID, Groups: s.DstGroup}); err != nil {
			return fail(fmt.Errorf("connect to port id %d group %d: %w", s.DstPortID, s.DstGroup, err))
		}
	}
	if err := setOptions(fd, s.Options, late, nil); err != nil {
		return fail(err)
	}
	return sock.Move(), nil
}
