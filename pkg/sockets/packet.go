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
// filter included), memberships (PACKET_ADD_MEMBERSHIP, seen through
// sock_diag), the fanout group and empty mmap rings. Refused by name: a
// receive ring that may hold frames, a mapping of a ring (by the dump of
// the memory), packets waiting in the receive queue.

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
	pd, err := packetInfo(fd, ino)
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	s.Memberships, s.RxRing, s.TxRing = pd.members, pd.rx, pd.tx
	if f, err := unix.GetsockoptInt(fd, solPacket, unix.PACKET_FANOUT); err == nil {
		s.Fanout = f
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
	// A ring's frames can be read only through a mapping of it, which
	// the dump of the memory refuses: a transmit ring is then empty, a
	// receive ring too if the socket receives nothing (protocol 0).
	if len(s.RxRing) > 0 && (s.Protocol != 0 || s.LinkProto != 0) {
		return nil, fmt.Errorf("packet socket with a receive ring (PACKET_RX_RING) that may hold frames (protocol %#x): they cannot be read back: %w", max(s.Protocol, s.LinkProto), ErrState)
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
func OpenPacket(s *image.Socket) (*sys.FD, error) {
	sock, err := sys.Socket(unix.AF_PACKET, s.Type|unix.SOCK_CLOEXEC, s.Protocol)
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	defer sock.Close()
	fd := sock.Int()
	fail := func(err error) (*sys.FD, error) {
		return nil, fmt.Errorf("packet socket: %w", err)
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
	for _, m := range s.Memberships {
		if err := addMember(fd, m); err != nil {
			return fail(err)
		}
	}
	if err := setRing(fd, unix.PACKET_RX_RING, s.RxRing); err != nil {
		return fail(fmt.Errorf("PACKET_RX_RING %v: %w", s.RxRing, err))
	}
	if err := setRing(fd, unix.PACKET_TX_RING, s.TxRing); err != nil {
		return fail(fmt.Errorf("PACKET_TX_RING %v: %w", s.TxRing, err))
	}
	if s.Fanout != 0 {
		if err := unix.SetsockoptInt(fd, solPacket, unix.PACKET_FANOUT, s.Fanout); err != nil {
			return fail(fmt.Errorf("PACKET_FANOUT %#x: %w", s.Fanout, err))
		}
	}
	if err := setOptions(fd, s.Options, late, nil); err != nil {
		return fail(err)
	}
	return sock.Move(), nil
}

// packetDiag is what sock_diag says of a packet socket: its memberships
// and its rings (struct packet_diag_ring, as struct tpacket_req3 has it).
type packetDiag struct {
	members []image.PacketMember
	rx, tx  []uint32
}

// packetInfo asks sock_diag for the memberships and rings of the packet
// socket ino.
func packetInfo(fd int, ino uint64) (*packetDiag, error) {
	const (
		packetShowMclist  = 0x2
		packetShowRingCfg = 0x4
		packetDiagMclist  = 1
		packetDiagRxRing  = 2
		packetDiagTxRing  = 3
	)
	le := binary.LittleEndian
	req := diagRequest(16+20, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	req[16] = unix.AF_PACKET
	le.PutUint32(req[20:], uint32(ino))
	le.PutUint32(req[24:], packetShowRingCfg|packetShowMclist)
	le.PutUint32(req[28:], 0xffffffff)
	le.PutUint32(req[32:], 0xffffffff)
	var pd *packetDiag
	ring := func(v []byte) []uint32 {
		var r []uint32
		for i := 0; i+4 <= len(v) && len(r) < 7; i += 4 {
			r = append(r, le.Uint32(v[i:]))
		}
		return r
	}
	err := sockDiagDump(fd, req, func(d []byte) bool {
		// struct packet_diag_msg: family, type, num (2), ino (4), cookie (8).
		if len(d) < 16 || uint64(le.Uint32(d[4:])) != ino {
			return false
		}
		pd = &packetDiag{}
		diagAttrs(d[16:], func(typ uint16, v []byte) {
			switch typ {
			case packetDiagRxRing:
				pd.rx = ring(v)
			case packetDiagTxRing:
				pd.tx = ring(v)
			case packetDiagMclist:
				// struct packet_diag_mclist: index, count (u32), type,
				// alen (u16), addr[32].
				for ; len(v) >= 44; v = v[44:] {
					alen := min(int(le.Uint16(v[10:])), 32)
					pd.members = append(pd.members, image.PacketMember{Ifindex: int(le.Uint32(v)), Count: int(le.Uint32(v[4:])),
						Type: int(le.Uint16(v[8:])), Addr: append([]byte(nil), v[12:12+alen]...)})
				}
			}
		})
		return true
	})
	if err == nil && pd == nil {
		err = fmt.Errorf("sock_diag: packet socket %d not found", ino)
	}
	return pd, err
}

// addMember adds a membership m.Count times (struct packet_mreq_max).
func addMember(fd int, m image.PacketMember) error {
	mr := make([]byte, 8+32)
	binary.LittleEndian.PutUint32(mr, uint32(m.Ifindex))
	binary.LittleEndian.PutUint16(mr[4:], uint16(m.Type))
	binary.LittleEndian.PutUint16(mr[6:], uint16(len(m.Addr)))
	copy(mr[8:], m.Addr)
	for i := 0; i < m.Count; i++ {
		if err := sys.Setsockopt(fd, solPacket, unix.PACKET_ADD_MEMBERSHIP, ptr(&mr[0]), uintptr(len(mr))); err != nil {
			return fmt.Errorf("PACKET_ADD_MEMBERSHIP interface %d type %d: %w", m.Ifindex, m.Type, err)
		}
	}
	return nil
}

// setRing sets an mmap ring (a struct tpacket_req3 as saved).
func setRing(fd, opt int, r []uint32) error {
	if len(r) == 0 {
		return nil
	}
	req := make([]byte, 7*4)
	for i, v := range r {
		binary.LittleEndian.PutUint32(req[4*i:], v)
	}
	return sys.Setsockopt(fd, solPacket, opt, ptr(&req[0]), uintptr(len(req)))
}
