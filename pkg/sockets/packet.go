package sockets

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// Packet sockets (AF_PACKET, SOCK_RAW or SOCK_DGRAM, and the old
// SOCK_PACKET bound by device name) are saved with their protocol, the
// interface and protocol (or device) they are bound to, their
// SOL_PACKET options and the inventory's SOL_SOCKET ones (a classic
// filter included). Refused by name: an mmap ring (PACKET_RX_RING,
// PACKET_TX_RING, seen through sock_diag), memberships
// (PACKET_ADD_MEMBERSHIP, also seen through sock_diag), a fanout group,
// packets waiting in the receive queue.

const solPacket = 263 // SOL_PACKET

func packet(family, _, _ int) bool { return family == unix.AF_PACKET }

// packetOptions are the SOL_PACKET options a program can read back.
var packetOptions = []otherOption{
	{solPacket, unix.PACKET_AUXDATA, "SOL_PACKET PACKET_AUXDATA", 0, packet},
	{solPacket, unix.PACKET_ORIGDEV, "SOL_PACKET PACKET_ORIGDEV", 0, packet},
	{solPacket, unix.PACKET_VERSION, "SOL_PACKET PACKET_VERSION", 0, packet},
	{solPacket, unix.PACKET_RESERVE, "SOL_PACKET PACKET_RESERVE", 0, packet},
	{solPacket, unix.PACKET_LOSS, "SOL_PACKET PACKET_LOSS", 0, packet},
	{solPacket, unix.PACKET_VNET_HDR, "SOL_PACKET PACKET_VNET_HDR", 0, packet},
	{solPacket, unix.PACKET_TIMESTAMP, "SOL_PACKET PACKET_TIMESTAMP", 0, packet},
	{solPacket, unix.PACKET_QDISC_BYPASS, "SOL_PACKET PACKET_QDISC_BYPASS", 0, packet},
	{solPacket, unix.PACKET_IGNORE_OUTGOING, "SOL_PACKET PACKET_IGNORE_OUTGOING", 0, packet},
}

// IsPacket says whether ckpt's fd is a packet socket.
func IsPacket(fd int) bool {
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	return err == nil && dom == unix.AF_PACKET
}

// DescribePacket saves a packet socket (ckpt's fd, inode ino).
func DescribePacket(fd int, ino uint64) (*image.Socket, error) {
	s := &image.Socket{Family: unix.AF_PACKET}
	var err error
	if s.Type, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil {
		return nil, fmt.Errorf("SO_TYPE: %w", err)
	}
	if s.Protocol, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil {
		return nil, fmt.Errorf("SO_PROTOCOL: %w", err)
	}
	rx, tx, members, err := packetRings(ino)
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	if members {
		return nil, fmt.Errorf("packet socket with memberships (PACKET_ADD_MEMBERSHIP: promiscuous, multicast): not saved yet: %w", ErrState)
	}
	if rx || tx {
		return nil, fmt.Errorf("packet socket with an mmap ring (PACKET_RX_RING %v, PACKET_TX_RING %v): %w", rx, tx, ErrState)
	}
	if f, err := unix.GetsockoptInt(fd, solPacket, unix.PACKET_FANOUT); err == nil && f != 0 {
		return nil, fmt.Errorf("packet socket in a fanout group (PACKET_FANOUT %#x): %w", f, ErrState)
	}
	var b [1]byte
	if _, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT|unix.MSG_TRUNC); err == nil {
		return nil, fmt.Errorf("packet socket with packets waiting in its receive queue: they cannot be put back: %w", ErrState)
	}
	if s.Type == unix.SOCK_PACKET {
		// A SOCK_PACKET socket is bound by device name (struct
		// sockaddr: family, then the name in sa_data).
		var sa [16]byte
		if n, err := sys.GetsocknameRaw(fd, sa[:]); err == nil && n > 2 {
			s.Local = string(bytes.TrimRight(sa[2:n], "\x00"))
		}
	} else if sa, err := unix.Getsockname(fd); err == nil {
		if ll, ok := sa.(*unix.SockaddrLinklayer); ok {
			s.Ifindex, s.LinkProto = ll.Ifindex, int(ll.Protocol)
		}
	}
	if s.Options, err = ReadOptions(fd, unix.AF_PACKET, s.Type, s.Protocol, false); err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	fresh, err := sys.Socket(unix.AF_PACKET, s.Type|unix.SOCK_CLOEXEC, s.Protocol)
	if err != nil {
		return nil, fmt.Errorf("packet socket: new socket for the defaults: %w", err)
	}
	defer fresh.Close()
	for _, o := range packetOptions {
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

// OpenPacket builds a packet socket DescribePacket saved.
func OpenPacket(s *image.Socket) (int, error) {
	sock, err := sys.Socket(unix.AF_PACKET, s.Type|unix.SOCK_CLOEXEC, s.Protocol)
	if err != nil {
		return -1, fmt.Errorf("packet socket: %w", err)
	}
	defer sock.Close()
	fd := sock.Int()
	fail := func(err error) (int, error) {
		return -1, fmt.Errorf("packet socket: %w", err)
	}
	if err := setOptions(fd, s.Options, early, nil); err != nil {
		return fail(err)
	}
	for _, v := range s.Options {
		for _, o := range packetOptions {
			if o.level == v.Level && o.name == v.Name {
				if err := unix.SetsockoptInt(fd, v.Level, v.Name, v.Value); err != nil {
					return fail(fmt.Errorf("%s: %w", o.label, err))
				}
			}
		}
	}
	if s.Type == unix.SOCK_PACKET && s.Local != "" {
		sa := make([]byte, 16)
		binary.LittleEndian.PutUint16(sa, unix.AF_PACKET)
		copy(sa[2:15], s.Local)
		if err := sys.BindRaw(fd, sa); err != nil {
			return fail(fmt.Errorf("bind to device %s: %w", s.Local, err))
		}
	} else if s.Type != unix.SOCK_PACKET && (s.Ifindex != 0 || s.LinkProto != s.Protocol) {
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: s.Ifindex, Protocol: uint16(s.LinkProto)}); err != nil {
			return fail(fmt.Errorf("bind to interface %d protocol %#x: %w", s.Ifindex, s.LinkProto, err))
		}
	}
	if err := setOptions(fd, s.Options, late, nil); err != nil {
		return fail(err)
	}
	return sock.Release(), nil
}

// packetRings asks sock_diag whether the packet socket ino has an mmap
// ring for receiving or sending, and memberships.
func packetRings(ino uint64) (rx, tx, members bool, err error) {
	const (
		packetShowMclist  = 0x2
		packetShowRingCfg = 0x4
		packetDiagMclist  = 1
		packetDiagRxRing  = 2
		packetDiagTxRing  = 3
	)
	le := binary.LittleEndian
	req := make([]byte, 16+20)
	le.PutUint32(req[0:], uint32(len(req)))
	le.PutUint16(req[4:], sockDiagByFamily)
	le.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	req[16] = unix.AF_PACKET
	le.PutUint32(req[20:], uint32(ino))
	le.PutUint32(req[24:], packetShowRingCfg|packetShowMclist)
	le.PutUint32(req[28:], 0xffffffff)
	le.PutUint32(req[32:], 0xffffffff)
	found := false
	err = sockDiagDump(req, func(d []byte) bool {
		// struct packet_diag_msg: family, type, num (2), ino (4), cookie (8).
		if len(d) < 16 || uint64(le.Uint32(d[4:])) != ino {
			return false
		}
		found = true
		diagAttrs(d[16:], func(typ uint16, v []byte) {
			rx = rx || typ == packetDiagRxRing
			tx = tx || typ == packetDiagTxRing
			members = members || typ == packetDiagMclist && len(v) > 0
		})
		return true
	})
	if err == nil && !found {
		err = fmt.Errorf("sock_diag: packet socket %d not found", ino)
	}
	if err != nil {
		return false, false, false, err
	}
	return rx, tx, members, nil
}
