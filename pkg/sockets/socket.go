package sockets

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// intOptions are the integer options saved and restored, by protocol.
var intOptions = []struct {
	level, name int
	tcpOnly     bool
}{
	{unix.SOL_SOCKET, unix.SO_REUSEADDR, false}, {unix.SOL_SOCKET, unix.SO_REUSEPORT, false},
	{unix.SOL_SOCKET, unix.SO_KEEPALIVE, false}, {unix.SOL_SOCKET, unix.SO_BROADCAST, false},
	{unix.SOL_SOCKET, unix.SO_OOBINLINE, false}, {unix.SOL_SOCKET, unix.SO_PRIORITY, false},
	{unix.SOL_SOCKET, unix.SO_RCVLOWAT, false},
	{unix.IPPROTO_TCP, unix.TCP_NODELAY, true}, {unix.IPPROTO_TCP, unix.TCP_CORK, true},
	{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, true}, {unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, true},
	{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, true}, {unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, true},
	{unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, true},
}

// Describe reads what a TCP or UDP socket (one of ckpt's fds) is: family,
// type, state, endpoints and options. The queues of an established
// connection are read by DumpTCP.
func Describe(fd int) (*image.Socket, error) {
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
	switch {
	case s.Family != unix.AF_INET && s.Family != unix.AF_INET6:
		return s, fmt.Errorf("%s socket: %w", familyName(s.Family), ErrState)
	case s.Type == unix.SOCK_STREAM && s.Protocol == unix.IPPROTO_TCP:
		var info [256]byte
		if _, err := sys.Getsockopt(fd, unix.IPPROTO_TCP, unix.TCP_INFO, ptr(&info[0]), uintptr(len(info))); err != nil {
			return nil, fmt.Errorf("TCP_INFO: %w", err)
		}
		s.State = int(info[0])
		switch s.State {
		case StateEstablished:
		case StateListen:
			// For a listener tcp_info has the accept queue length in
			// tcpi_unacked and the backlog in tcpi_sacked.
			queued := le32(info[24:])
			s.Backlog = int(le32(info[28:]))
			if queued > 0 {
				return nil, fmt.Errorf("listening socket with %d connections not accepted yet: %w", queued, ErrAcceptQueue)
			}
		case tcpClose:
			// Created, maybe bound, never connected.
		default:
			return nil, fmt.Errorf("TCP socket in state %s: %w", tcpStateName(s.State), ErrState)
		}
	case s.Type == unix.SOCK_DGRAM && s.Protocol == unix.IPPROTO_UDP:
	default:
		return nil, fmt.Errorf("socket of type %d protocol %d: %w", s.Type, s.Protocol, ErrState)
	}
	if la, err := unix.Getsockname(fd); err == nil {
		if ap := AddrPort(la); ap.Port() != 0 || s.State == StateListen {
			s.Local = ap.String()
		}
	}
	if ra, err := unix.Getpeername(fd); err == nil {
		s.Remote = AddrPort(ra).String()
	}
	for _, o := range intOptions {
		if o.tcpOnly && s.Protocol != unix.IPPROTO_TCP {
			continue
		}
		v, err := unix.GetsockoptInt(fd, o.level, o.name)
		if err != nil {
			return nil, fmt.Errorf("getsockopt %d/%d: %w", o.level, o.name, err)
		}
		s.Options = append(s.Options, image.SockOpt{Level: o.level, Name: o.name, Value: v})
	}
	if s.Family == unix.AF_INET6 {
		v, err := unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
		if err != nil {
			return nil, fmt.Errorf("IPV6_V6ONLY: %w", err)
		}
		s.Options = append([]image.SockOpt{{Level: unix.IPPROTO_IPV6, Name: unix.IPV6_V6ONLY, Value: v}}, s.Options...)
	}
	// Buffer sizes are kept when they differ from the kernel's default for
	// the socket: set by the program. An established TCP connection's are
	// left alone: setting them would turn off the kernel's autotuning.
	if s.State != StateEstablished {
		for _, o := range []struct {
			name int
			def  string
		}{{unix.SO_SNDBUF, bufDefault(s.Protocol, true)}, {unix.SO_RCVBUF, bufDefault(s.Protocol, false)}} {
			v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, o.name)
			if err != nil {
				return nil, fmt.Errorf("getsockopt buffer: %w", err)
			}
			if strconv.Itoa(v) != o.def {
				// The kernel doubles what is set, and reports the double.
				s.Options = append(s.Options, image.SockOpt{Level: unix.SOL_SOCKET, Name: o.name, Value: v / 2})
			}
		}
	}
	l, err := unix.GetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER)
	if err != nil {
		return nil, fmt.Errorf("SO_LINGER: %w", err)
	}
	s.Linger = [2]int32{l.Onoff, l.Linger}
	return s, nil
}

const tcpClose = 7

// bufDefault is the buffer size a new socket of the protocol gets, as
// getsockopt reports it.
func bufDefault(proto int, send bool) string {
	read := func(path string, field int) string {
		b, err := os.ReadFile(path)
		if err != nil {
			return ""
		}
		f := strings.Fields(string(b))
		if field >= len(f) {
			return ""
		}
		return f[field]
	}
	switch {
	case proto == unix.IPPROTO_TCP && send:
		return read("/proc/sys/net/ipv4/tcp_wmem", 1)
	case proto == unix.IPPROTO_TCP:
		return read("/proc/sys/net/ipv4/tcp_rmem", 1)
	case send:
		return read("/proc/sys/net/core/wmem_default", 0)
	}
	return read("/proc/sys/net/core/rmem_default", 0)
}

func tcpStateName(s int) string {
	names := map[int]string{1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT",
		7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING"}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprint(s)
}

func familyName(f int) string {
	switch f {
	case unix.AF_UNIX:
		return "UNIX"
	case unix.AF_NETLINK:
		return "netlink"
	case unix.AF_PACKET:
		return "packet"
	}
	return fmt.Sprintf("family %d", f)
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// Open builds a socket from its image. An established TCP connection comes
// back in repair mode (see RestoreTCP); the caller calls Resume once every
// socket is built. Flags (O_NONBLOCK) are the file's status flags.
func Open(s *image.Socket, recvQ, sendQ []byte) (int, error) {
	if s.TCP != nil {
		local, err := netip.ParseAddrPort(s.Local)
		if err != nil {
			return -1, fmt.Errorf("local address %q: %w", s.Local, err)
		}
		remote, err := netip.ParseAddrPort(s.Remote)
		if err != nil {
			return -1, fmt.Errorf("remote address %q: %w", s.Remote, err)
		}
		fd, err := RestoreTCP(&TCPState{Local: local, Remote: remote, TCPRepair: *s.TCP}, recvQ, sendQ)
		if err != nil {
			return -1, err
		}
		if err := setOptions(fd, s, true); err != nil {
			setRepair(fd, true)
			unix.Close(fd)
			return -1, err
		}
		return fd, nil
	}
	fd, err := unix.Socket(s.Family, s.Type|unix.SOCK_CLOEXEC, s.Protocol)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := openPlain(fd, s); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func openPlain(fd int, s *image.Socket) error {
	if err := setOptions(fd, s, false); err != nil {
		return err
	}
	if s.Local != "" {
		local, err := netip.ParseAddrPort(s.Local)
		if err != nil {
			return fmt.Errorf("local address %q: %w", s.Local, err)
		}
		if err := unix.Bind(fd, Sockaddr(local)); err != nil {
			return fmt.Errorf("bind %s: %w", local, err)
		}
	}
	if s.State == StateListen {
		if err := unix.Listen(fd, max(s.Backlog, 1)); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	if s.Remote != "" && s.Type == unix.SOCK_DGRAM {
		remote, err := netip.ParseAddrPort(s.Remote)
		if err != nil {
			return fmt.Errorf("remote address %q: %w", s.Remote, err)
		}
		if err := unix.Connect(fd, Sockaddr(remote)); err != nil {
			return fmt.Errorf("connect %s: %w", remote, err)
		}
	}
	return nil
}

// setOptions sets the saved options; bound says the socket is bound
// already, when IPV6_V6ONLY can no longer change (it was set before bind).
func setOptions(fd int, s *image.Socket, bound bool) error {
	for _, o := range s.Options {
		if bound && (o.Level == unix.IPPROTO_IPV6 && o.Name == unix.IPV6_V6ONLY || o.Level == unix.SOL_SOCKET && o.Name == unix.SO_REUSEADDR) {
			continue
		}
		if err := unix.SetsockoptInt(fd, o.Level, o.Name, o.Value); err != nil {
			return fmt.Errorf("setsockopt %d/%d = %d: %w", o.Level, o.Name, o.Value, err)
		}
	}
	if s.Linger[0] != 0 {
		if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: s.Linger[0], Linger: s.Linger[1]}); err != nil {
			return fmt.Errorf("SO_LINGER: %w", err)
		}
	}
	return nil
}
