package sockets

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"

	"golang.org/x/sys/unix"
)

// Datagram is a UDP datagram queued in a socket: its payload, where it
// came from and the address it was sent to.
type Datagram struct {
	Data     []byte
	From, To netip.AddrPort
}

// PeekUDP reads the receive queue of a UDP socket (one of ckpt's fds)
// without consuming it: every datagram with its source and destination
// (IP_PKTINFO, IPV6_RECVPKTINFO, turned on while it reads). The program's
// SO_PEEK_OFF and pktinfo options are put back. It never blocks.
func PeekUDP(fd, family int) ([]Datagram, error) {
	type opt struct{ level, name, val int }
	opts := []opt{{unix.SOL_SOCKET, unix.SO_PEEK_OFF, 0}, {unix.IPPROTO_IP, unix.IP_PKTINFO, 1}}
	if family == unix.AF_INET6 {
		opts = append(opts, opt{unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1})
	}
	for _, o := range opts {
		old, err := unix.GetsockoptInt(fd, o.level, o.name)
		if err != nil {
			return nil, fmt.Errorf("getsockopt %d/%d: %w", o.level, o.name, err)
		}
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.val); err != nil {
			return nil, fmt.Errorf("setsockopt %d/%d: %w", o.level, o.name, err)
		}
		defer unix.SetsockoptInt(fd, o.level, o.name, old)
	}
	local, err := unix.Getsockname(fd)
	if err != nil {
		return nil, fmt.Errorf("getsockname: %w", err)
	}
	port := AddrPort(local).Port()
	var out []Datagram
	buf := make([]byte, 65536)
	oob := make([]byte, 256)
	for {
		n, oobn, flags, from, err := unix.Recvmsg(fd, buf, oob, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if err == unix.EAGAIN {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("peek the queue: %w", err)
		}
		if flags&unix.MSG_TRUNC != 0 {
			return nil, fmt.Errorf("a queued datagram larger than %d bytes: %w", len(buf), ErrState)
		}
		d := Datagram{Data: append([]byte(nil), buf[:n]...), From: AddrPort(from)}
		cmsgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, c := range cmsgs {
			switch {
			case c.Header.Level == unix.IPPROTO_IP && c.Header.Type == unix.IP_PKTINFO && len(c.Data) >= 12:
				// struct in_pktinfo: ifindex, spec_dst, addr (the header's destination).
				d.To = netip.AddrPortFrom(netip.AddrFrom4([4]byte(c.Data[8:12])), port)
			case c.Header.Level == unix.IPPROTO_IPV6 && c.Header.Type == unix.IPV6_PKTINFO && len(c.Data) >= 16:
				d.To = netip.AddrPortFrom(netip.AddrFrom16([16]byte(c.Data[0:16])), port)
			}
		}
		if !d.From.IsValid() || !d.To.IsValid() {
			return nil, fmt.Errorf("a queued datagram without its addresses: %w", ErrState)
		}
		out = append(out, d)
	}
}

// RefillUDP sends datagrams again to a rebuilt UDP socket as they came:
// from their source address and port, to their destination, as raw IP
// packets (the sender's port may belong to a socket of the dump).
func RefillUDP(ds []Datagram) error {
	raw := map[bool]*sys.FD{}
	defer func() {
		for _, fd := range raw {
			fd.Close()
		}
	}()
	for _, d := range ds {
		src, dst := d.From.Addr().Unmap(), d.To.Addr().Unmap()
		v4 := src.Is4() && dst.Is4()
		sock, ok := raw[v4]
		if !ok {
			family := unix.AF_INET6
			if v4 {
				family = unix.AF_INET
			}
			var err error
			if sock, err = sys.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW); err != nil {
				return fmt.Errorf("raw: %w", err)
			}
			raw[v4] = sock
		}
		fd := sock.Int()
		pkt := udpPacket(src, dst, d.From.Port(), d.To.Port(), d.Data)
		var to unix.Sockaddr = &unix.SockaddrInet6{Addr: dst.As16()}
		if v4 {
			to = &unix.SockaddrInet4{Addr: dst.As4()}
		}
		if err := unix.Sendto(fd, pkt, unix.MSG_DONTWAIT, to); err != nil {
			return fmt.Errorf("resend a datagram from %s to %s: %w", d.From, d.To, err)
		}
	}
	return nil
}

// udpPacket builds an IPv4 or IPv6 packet holding a UDP datagram, with
// its checksum.
func udpPacket(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	be := binary.BigEndian
	udp := make([]byte, 8+len(payload))
	be.PutUint16(udp[0:], sport)
	be.PutUint16(udp[2:], dport)
	be.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload)
	var pseudo []byte
	var hdr []byte
	if src.Is4() {
		s, d := src.As4(), dst.As4()
		pseudo = append(append(append([]byte{}, s[:]...), d[:]...), 0, unix.IPPROTO_UDP, byte(len(udp)>>8), byte(len(udp)))
		hdr = make([]byte, 20)
		hdr[0] = 0x45
		be.PutUint16(hdr[2:], uint16(20+len(udp)))
		hdr[8] = 64
		hdr[9] = unix.IPPROTO_UDP
		copy(hdr[12:], s[:])
		copy(hdr[16:], d[:])
	} else {
		s, d := src.As16(), dst.As16()
		var l [4]byte
		be.PutUint32(l[:], uint32(len(udp)))
		pseudo = append(append(append(append([]byte{}, s[:]...), d[:]...), l[:]...), 0, 0, 0, unix.IPPROTO_UDP)
		hdr = make([]byte, 40)
		hdr[0] = 0x60
		be.PutUint16(hdr[4:], uint16(len(udp)))
		hdr[6] = unix.IPPROTO_UDP
		hdr[7] = 64
		copy(hdr[8:], s[:])
		copy(hdr[24:], d[:])
	}
	sum := checksum(append(pseudo, udp...))
	if sum == 0 {
		sum = 0xffff
	}
	be.PutUint16(udp[6:], sum)
	return append(hdr, udp...)
}

func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// RefillDatagrams sends the queued datagrams of a UDP socket's image (data
// are their payloads, in order) to the rebuilt socket fd, and checks
// that all of them are queued: a datagram the kernel dropped fails the
// restore. A socket bound to a specific address gets them there (after
// rewrite rules), one bound to a wildcard where they were sent.
func RefillDatagrams(fd int, s *image.Socket, data [][]byte) error {
	if len(s.RecvFrom) != len(data) || len(s.RecvTo) != len(data) {
		return fmt.Errorf("%d datagrams with %d sources and %d destinations: %w", len(data), len(s.RecvFrom), len(s.RecvTo), image.ErrCorrupt)
	}
	local, err := netip.ParseAddrPort(s.Local)
	if err != nil {
		return fmt.Errorf("local address %q: %w", s.Local, err)
	}
	var ds []Datagram
	total := 0
	for i, b := range data {
		from, err1 := netip.ParseAddrPort(s.RecvFrom[i])
		to, err2 := netip.ParseAddrPort(s.RecvTo[i])
		if err1 != nil || err2 != nil {
			return fmt.Errorf("datagram %d addresses %q %q: %w", i, s.RecvFrom[i], s.RecvTo[i], image.ErrCorrupt)
		}
		if !local.Addr().IsUnspecified() {
			to = local
		}
		ds = append(ds, Datagram{Data: b, From: from, To: netip.AddrPortFrom(to.Addr(), local.Port())})
		total += len(b)
	}
	if err := RefillUDP(ds); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		got, err := PeekUDP(fd, s.Family)
		if err != nil {
			return err
		}
		if len(got) == len(ds) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d queued datagrams (%d bytes) made it back into the socket", len(got), len(ds), total)
		}
		time.Sleep(time.Millisecond)
	}
}
