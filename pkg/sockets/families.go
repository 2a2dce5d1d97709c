package sockets

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// The inet sockets besides TCP and UDP: UDP-Lite, ICMP "ping" sockets
// (SOCK_DGRAM, IPPROTO_ICMP/ICMPV6, allowed by net.ipv4.ping_group_range)
// and raw sockets. Each is saved with its address (a ping socket's port
// is its ICMP identifier, a raw socket's its protocol), its peer, its
// options (the inventory's, and the few of its own below) and its
// shutdown state. Packets waiting in the receive queue are refused by
// name: a raw or ping socket's queue can only be filled by the network.

// otherOption is an option only these sockets have.
type otherOption struct {
	level, name int
	label       string
	size        int // 0: an int, else that many bytes
	applies     func(family, typ, proto int) bool
}

func raw4(family, typ, _ int) bool { return family == unix.AF_INET && typ == unix.SOCK_RAW }
func raw6(family, typ, _ int) bool { return family == unix.AF_INET6 && typ == unix.SOCK_RAW }
func udplite(_, _, proto int) bool { return proto == unix.IPPROTO_UDPLITE }

const (
	solRaw         = 255 // SOL_RAW
	icmpFilter     = 1   // ICMP_FILTER
	icmpv6Filter   = 1   // ICMPV6_FILTER
	udpliteSendCov = 10  // UDPLITE_SEND_CSCOV
	udpliteRecvCov = 11  // UDPLITE_RECV_CSCOV
)

// otherOptions are the options of these sockets the inventory
// (Options) does not list.
var otherOptions = []otherOption{
	{unix.IPPROTO_IP, unix.IP_HDRINCL, "IPPROTO_IP IP_HDRINCL", 0, raw4},
	{solRaw, icmpFilter, "SOL_RAW ICMP_FILTER", 4, func(f, t, p int) bool { return raw4(f, t, p) && p == unix.IPPROTO_ICMP }},
	{unix.IPPROTO_IPV6, unix.IPV6_CHECKSUM, "IPPROTO_IPV6 IPV6_CHECKSUM", 0, raw6},
	{unix.IPPROTO_ICMPV6, icmpv6Filter, "IPPROTO_ICMPV6 ICMPV6_FILTER", 32, func(f, t, p int) bool { return raw6(f, t, p) && p == unix.IPPROTO_ICMPV6 }},
	{unix.IPPROTO_UDPLITE, udpliteSendCov, "IPPROTO_UDPLITE UDPLITE_SEND_CSCOV", 0, udplite},
	{unix.IPPROTO_UDPLITE, udpliteRecvCov, "IPPROTO_UDPLITE UDPLITE_RECV_CSCOV", 0, udplite},
}

// OtherInet says whether a socket of this family, type and protocol is
// one DescribeOther saves.
func OtherInet(family, typ, proto int) bool {
	if family != unix.AF_INET && family != unix.AF_INET6 {
		return false
	}
	switch {
	case typ == unix.SOCK_RAW:
		return true
	case typ == unix.SOCK_DGRAM && proto == unix.IPPROTO_UDPLITE:
		return true
	case typ == unix.SOCK_DGRAM && (proto == unix.IPPROTO_ICMP || proto == unix.IPPROTO_ICMPV6):
		return true
	}
	return false
}

// OtherInetFD says whether the socket fd is one DescribeOther saves.
func OtherInetFD(fd int) bool {
	dom, err1 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	typ, err2 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	proto, err3 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	return err1 == nil && err2 == nil && err3 == nil && OtherInet(dom, typ, proto)
}

// OtherName names the kind of such a socket for messages.
func OtherName(family, typ, proto int) string {
	v := "IPv4"
	if family == unix.AF_INET6 {
		v = "IPv6"
	}
	switch {
	case typ == unix.SOCK_RAW:
		return fmt.Sprintf("%s raw socket (protocol %d)", v, proto)
	case proto == unix.IPPROTO_UDPLITE:
		return v + " UDP-Lite socket"
	}
	return v + " ICMP ping socket"
}

// DescribeOther saves a UDP-Lite, ICMP ping or raw socket (one of ckpt's
// fds; its inode ino): the peer of a ping or raw socket is read in
// netDir (/proc/PID/net of a process that has it).
func DescribeOther(fd int, ino uint64, netDir string) (*image.Socket, error) {
	s := &image.Socket{}
	var err error
	if s.Family, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil {
		return nil, fmt.Errorf("SO_DOMAIN: %w", err)
	}
	if s.Type, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil {
		return nil, fmt.Errorf("SO_TYPE: %w", err)
	}
	if s.Protocol, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil {
		return nil, fmt.Errorf("SO_PROTOCOL: %w", err)
	}
	name := OtherName(s.Family, s.Type, s.Protocol)
	// Ping sockets have no SIOCINQ: a peek says whether a packet waits.
	var b [1]byte
	if _, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT|unix.MSG_TRUNC); err == nil {
		return nil, fmt.Errorf("%s with packets waiting in its receive queue: they cannot be put back: %w", name, ErrState)
	}
	if la, err := unix.Getsockname(fd); err == nil {
		if ap := AddrPort(la); ap.IsValid() && (ap.Port() != 0 || !ap.Addr().IsUnspecified()) {
			s.Local = ap.String()
		}
	}
	if ra, err := unix.Getpeername(fd); err == nil {
		if ap := AddrPort(ra); ap.IsValid() {
			s.Remote = ap.String()
		}
	}
	if s.Protocol != unix.IPPROTO_UDPLITE && s.Remote == "" {
		a, ok, err := procNetPeer(netDir, s.Family, s.Type, ino)
		if errors.Is(err, errNotListed) && s.Type != unix.SOCK_RAW {
			err = nil // a ping socket not bound yet: no peer
		}
		if err != nil {
			return nil, fmt.Errorf("%s: its peer: %w", name, err)
		}
		if ok {
			s.Remote = netip.AddrPortFrom(a, 0).String()
		}
	}
	if s.Options, err = ReadOptions(fd, s.Family, s.Type, s.Protocol, false); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	fresh, err := sys.Socket(s.Family, s.Type|unix.SOCK_CLOEXEC, s.Protocol)
	if err != nil {
		return nil, fmt.Errorf("%s: new socket for the defaults: %w", name, err)
	}
	defer fresh.Close()
	for _, o := range otherOptions {
		if !o.applies(s.Family, s.Type, s.Protocol) {
			continue
		}
		v, err := readOther(fd, o)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", name, o.label, err)
		}
		if def, err := readOther(fresh.Int(), o); err == nil && def.Value == v.Value && bytes.Equal(def.Bytes, v.Bytes) {
			continue
		}
		s.Options = append(s.Options, v)
	}
	if s.Protocol == unix.IPPROTO_UDPLITE {
		s.Shutdown = dgramShutdown(fd, s.Family, s.Protocol)
	} else {
		s.Shutdown = shutdownOf(fd)
	}
	return s, nil
}

func readOther(fd int, o otherOption) (image.SockOpt, error) {
	v := image.SockOpt{Level: o.level, Name: o.name}
	var err error
	if o.size == 0 {
		v.Value, err = unix.GetsockoptInt(fd, o.level, o.name)
		return v, err
	}
	buf := make([]byte, o.size)
	l := uint32(o.size)
	if _, err := sys.Getsockopt(fd, o.level, o.name, ptr(&buf[0]), uintptr(l)); err != nil {
		return v, err
	}
	v.Bytes = buf
	return v, nil
}

// OpenOther builds a socket DescribeOther saved: options, its own
// options, bound to its address (a ping socket with its identifier),
// connected to its peer, shut down as it was.
func OpenOther(s *image.Socket) (*sys.FD, error) {
	sock, err := sys.Socket(s.Family, s.Type|unix.SOCK_CLOEXEC, s.Protocol)
	if err != nil {
		return nil, err
	}
	defer sock.Close()
	if err := openOther(sock.Int(), s); err != nil {
		return nil, fmt.Errorf("%s: %w", OtherName(s.Family, s.Type, s.Protocol), err)
	}
	return sock.Move(), nil
}

func openOther(fd int, s *image.Socket) error {
	if err := setOptions(fd, s.Options, early, nil); err != nil {
		return err
	}
	for _, v := range s.Options {
		for _, o := range otherOptions {
			if o.level != v.Level || o.name != v.Name {
				continue
			}
			var err error
			if o.size == 0 {
				err = unix.SetsockoptInt(fd, v.Level, v.Name, v.Value)
			} else if len(v.Bytes) > 0 {
				err = sys.Setsockopt(fd, v.Level, v.Name, ptr(&v.Bytes[0]), uintptr(len(v.Bytes)))
			}
			if err != nil {
				return fmt.Errorf("%s: %w", o.label, err)
			}
		}
	}
	for _, a := range []struct {
		addr string
		do   func(int, unix.Sockaddr) error
		what string
	}{{s.Local, unix.Bind, "bind"}, {s.Remote, unix.Connect, "connect"}} {
		if a.addr == "" {
			continue
		}
		ap, err := netip.ParseAddrPort(a.addr)
		if err != nil {
			return fmt.Errorf("address %q: %w", a.addr, err)
		}
		if s.Type == unix.SOCK_RAW {
			ap = netip.AddrPortFrom(ap.Addr(), 0) // the port is the protocol
		}
		if err := a.do(fd, Sockaddr(ap)); err != nil {
			return fmt.Errorf("%s %s: %w", a.what, ap, err)
		}
	}
	if err := joinGroups(fd, s); err != nil {
		return err
	}
	if err := setOptions(fd, s.Options, late, nil); err != nil {
		return err
	}
	return shutdown(fd, s.Shutdown)
}

// procNetPeer finds the peer a ping or raw socket is connected to in
// /proc/PID/net/{icmp,icmp6,raw,raw6} (the socket's inode ino): such a
// socket's port is 0, so getpeername says ENOTCONN although send() goes
// to the connected address. ok is false if it is not connected.
func procNetPeer(netDir string, family, typ int, ino uint64) (netip.Addr, bool, error) {
	file := "icmp"
	if typ == unix.SOCK_RAW {
		file = "raw"
	}
	if family == unix.AF_INET6 {
		file += "6"
	}
	b, err := os.ReadFile(filepath.Join(netDir, file))
	if err != nil {
		return netip.Addr{}, false, err
	}
	return parseNetPeer(b, file, ino)
}

// parseNetPeer finds socket ino in b, the text of /proc/net/FILE for an
// icmp, icmp6, raw or raw6 table, which procfs does not read (it reads
// the tcp and udp ones, of the same format): one header line, then per
// socket "sl local rem st ... uid timeout inode ...", addresses in hex
// words of host byte order.
func parseNetPeer(b []byte, file string, ino uint64) (netip.Addr, bool, error) {
	want := strconv.FormatUint(ino, 10)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[9] != want {
			continue
		}
		if f[3] != "01" { // TCP_ESTABLISHED: connected
			return netip.Addr{}, false, nil
		}
		hexAddr, _, _ := strings.Cut(f[2], ":")
		raw, err := hex.DecodeString(hexAddr)
		if err != nil || (len(raw) != 4 && len(raw) != 16) {
			return netip.Addr{}, false, fmt.Errorf("%s: address %q", file, f[2])
		}
		// Each 32-bit word is printed in host (little-endian) order.
		for i := 0; i < len(raw); i += 4 {
			raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
		}
		a, _ := netip.AddrFromSlice(raw)
		return a, true, nil
	}
	return netip.Addr{}, false, fmt.Errorf("socket %d not in %s: %w", ino, file, errNotListed)
}

// errNotListed is parseNetPeer's error for a socket its table does not
// list: a ping socket never bound, connected or used is not hashed yet.
var errNotListed = errors.New("not listed")
