package sockets

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// Describe reads what a TCP or UDP socket (one of ckpt's fds) is: family,
// type, state, endpoints and options. The queues of an established
// connection are read by DumpTCP. A listener with connections waiting to
// be accepted is returned whole, with an error wrapping ErrAcceptQueue.
func Describe(fd int) (*image.Socket, error) { return DescribeWith(fd, nil) }

// DescribeWith is Describe with the options of new sockets kept in defs
// (a dump describing many sockets reads them once; nil: read each time).
func DescribeWith(fd int, defs *Defaults) (*image.Socket, error) {
	s := &image.Socket{}
	var err, inFlight error
	if s.Family, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil {
		return nil, fmt.Errorf("SO_DOMAIN: %w", err)
	}
	if s.Type, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil {
		return nil, fmt.Errorf("SO_TYPE: %w", err)
	}
	if s.Protocol, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil {
		return nil, fmt.Errorf("SO_PROTOCOL: %w", err)
	}
	mptcp := s.Protocol == unix.IPPROTO_MPTCP
	switch {
	case s.Family != unix.AF_INET && s.Family != unix.AF_INET6:
		return s, fmt.Errorf("%s socket: %w", familyName(s.Family), ErrState)
	case s.Type == unix.SOCK_STREAM && (s.Protocol == unix.IPPROTO_TCP || mptcp):
		var info [256]byte
		if _, err := sys.Getsockopt(fd, unix.IPPROTO_TCP, unix.TCP_INFO, ptr(&info[0]), uintptr(len(info))); err != nil {
			return nil, fmt.Errorf("TCP_INFO: %w", err)
		}
		s.State = int(info[0])
		if mptcp {
			// An MPTCP socket gives the tcp_info of its first
			// subflow (mptcp.go): a listener's is the one below.
			if err := mptcpRefusal(fd, s.State); err != nil {
				return s, err
			}
		}
		switch {
		case s.State == StateSynSent:
			if err := synSentRefusal(fd, info[:]); err != nil {
				return s, err
			}
		case Connected(s.State):
		case s.State == StateListen:
			// For a listener tcp_info has the accept queue length in
			// tcpi_unacked and the backlog in tcpi_sacked.
			queued := le32(info[24:])
			s.Backlog = int(le32(info[28:]))
			if queued > 0 {
				// The listener is described all the same: a dump with
				// --skip-in-flight drops the waiting connections.
				inFlight = fmt.Errorf("%slistening socket with %d connections not accepted yet: %w", mptcpPrefix(s.Protocol), queued, ErrAcceptQueue)
			} else if err := halfOpenError(fd, s.Family); err != nil {
				if !errors.Is(err, ErrAcceptQueue) {
					return nil, err
				}
				inFlight = fmt.Errorf("%s%w", mptcpPrefix(s.Protocol), err) // tcplisten.go
			}
		case s.State == tcpClose && mptcp:
			// Never connected (mptcpRefusal): nothing more.
		case s.State == tcpClose:
			// Never connected, disconnected, or closed after a
			// connection (tcpclosed.go).
			if err := describeClosed(fd, s, info[:]); err != nil {
				return s, err
			}
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
			s.FreeBind = defs.nonLocal(s.Family, ap.Addr())
			if s.State == StateListen {
				// An MPTCP listener is counted by its subflow
				// listener, a TCP one on the same address.
				n, err := listenersOn(fd, s.Family, ap)
				if err != nil {
					return nil, err
				}
				s.PortShared = n > 1
			}
		}
	}

	var remote netip.AddrPort
	if ra, err := unix.Getpeername(fd); err == nil {
		remote = AddrPort(ra)
		s.Remote = remote.String()
	} else if s.Protocol == unix.IPPROTO_TCP && s.State == StateSynSent {
		if _, remote, err = Endpoints(fd); err != nil {
			return nil, err
		}
		s.Remote = remote.String()
	}
	tcpConn := s.Protocol == unix.IPPROTO_TCP && Connected(s.State)
	if tcpConn || s.Protocol == unix.IPPROTO_TCP && s.State == StateListen {
		if la, err := unix.Getsockname(fd); err == nil {
			// Only sock_diag shows the keys: a failed look-up cannot
			// be taken for "none".
			md5, err := hasMD5Keys(fd, AddrPort(la), remote)
			if err != nil {
				return nil, fmt.Errorf("look for TCP-MD5 keys: %w", err)
			}
			if md5 {
				return nil, fmt.Errorf("TCP-MD5 keys (TCP_MD5SIG) cannot be read back: %w", ErrState)
			}
		}
	}
	if s.Options, err = readOptions(fd, s.Family, s.Type, s.Protocol, tcpConn && s.State != StateSynSent, false, defs); err != nil {
		return nil, err
	}
	switch {
	case s.Protocol == unix.IPPROTO_UDP:
		s.Shutdown = dgramShutdown(fd, s.Family, s.Protocol)
	case tcpConn && s.State != StateSynSent:
		s.Shutdown = shutdownOf(fd)
	case s.Protocol == unix.IPPROTO_TCP && s.State == tcpClose:
		s.Shutdown = closedShutdown(fd, s.TCP != nil)
	}
	return s, inFlight
}

const tcpClose = 7

// StateName names a TCP state (ESTABLISHED, SYN_SENT...).
func StateName(s int) string { return tcpStateName(s) }

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

// shutdownOf reads what shutdown() closed on an established TCP
// connection or a datagram socket, as the kernel's sk_shutdown bits (1
// receive, 2 send): poll says POLLRDHUP once the receive side is shut (an
// established connection's peer cannot have sent a FIN, or it would be in
// CLOSE_WAIT), and POLLHUP when both are. A datagram socket's shut send
// side alone does not show (dgramShutdown asks sock_diag).
func shutdownOf(fd int) int {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
	if _, err := unix.Poll(p, 0); err != nil {
		return 0
	}
	switch {
	case p[0].Revents&unix.POLLHUP != 0:
		return 3
	case p[0].Revents&unix.POLLRDHUP != 0:
		return 1
	}
	return 0
}

// dgramShutdown reads the shutdown bits of a datagram socket: from
// sock_diag, which shows a send side shut alone, or else from poll.
func dgramShutdown(fd, family, protocol int) int {
	if bits, ok, err := inetShutdown(fd, family, protocol); err == nil && ok {
		return bits
	}
	return shutdownOf(fd)
}

// closedShutdown reads the shutdown bits of a TCP socket in state CLOSE:
// poll says POLLHUP for any closed socket, and POLLRDHUP when the receive
// side is shut. A connection that ended (both FINs, a reset, a refused
// connect) had both sides shut by the kernel; a socket disconnected
// (connect AF_UNSPEC) none; the send side shut alone on a socket never
// connected does not show (and changes nothing a program sees: sending
// on a closed socket fails with EPIPE either way).
func closedShutdown(fd int, ended bool) int {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
	if _, err := unix.Poll(p, 0); err != nil || p[0].Revents&unix.POLLRDHUP == 0 {
		return 0
	}
	if ended {
		return 3
	}
	return 1
}

// shutdown applies saved shutdown bits; an unconnected socket says
// ENOTCONN but is shut down all the same.
func shutdown(fd, bits int) error {
	if bits == 0 {
		return nil
	}
	if err := unix.Shutdown(fd, bits-1); err != nil && err != unix.ENOTCONN {
		return fmt.Errorf("shutdown %d: %w", bits-1, err)
	}
	return nil
}

// Open builds a socket from its image. An established TCP connection comes
// back in repair mode (see RestoreTCP); the caller calls Resume once every
// socket is built. Flags (O_NONBLOCK) are the file's status flags.
func Open(s *image.Socket, recvQ, sendQ []byte) (*sys.FD, error) {
	sock, err := sys.Socket(s.Family, s.Type|unix.SOCK_CLOEXEC, s.Protocol)
	if err != nil && s.Protocol == unix.IPPROTO_MPTCP {
		return nil, mptcpSocketError(err)
	}
	if err != nil {
		return nil, err
	}
	defer sock.Close()
	fd := sock.Int()
	if s.TCP != nil {
		local, err := netip.ParseAddrPort(s.Local)
		if err != nil {
			return nil, fmt.Errorf("local address %q: %w", s.Local, err)
		}
		remote, err := netip.ParseAddrPort(s.Remote)
		if err != nil {
			return nil, fmt.Errorf("remote address %q: %w", s.Remote, err)
		}
		st := &TCPState{Local: local, Remote: remote, State: s.State, TCPRepair: *s.TCP}
		open := openConn
		switch s.State {
		case StateSynSent:
			open = openSynSent
		case StateClose:
			open = func(fd int, s *image.Socket, st *TCPState, recvQ, _ []byte) error {
				if st.Connecting {
					return openConnectingClosed(fd, s, st.Local, st.Remote)
				}
				return openClosed(fd, s, st.Local, st.Remote, recvQ)
			}
		}
		if err := open(fd, s, st, recvQ, sendQ); err != nil {
			setRepair(fd, true) // closing must stay silent
			return nil, err
		}
		return sock.Move(), nil
	}
	open := openPlain
	if s.PortFree && s.Protocol == unix.IPPROTO_TCP && s.State == StateClose && s.Local != "" {
		open = func(fd int, s *image.Socket) error {
			local, err := netip.ParseAddrPort(s.Local)
			if err != nil {
				return fmt.Errorf("local address %q: %w", s.Local, err)
			}
			return openDisconnected(fd, s, local)
		}
	}
	if err := open(fd, s); err != nil {
		return nil, err
	}
	return sock.Move(), nil
}

// openConn rebuilds a connection with its options, in repair mode:
// SO_REUSEADDR waits for Resume (repair mode forces reuse, and leaving it
// clears the flag).
func openConn(fd int, s *image.Socket, st *TCPState, recvQ, sendQ []byte) error {
	noReuse := func(level, name int) bool { return level == unix.SOL_SOCKET && name == unix.SO_REUSEADDR }
	if err := setOptions(fd, s.Options, early, noReuse); err != nil {
		return err
	}
	if err := setRepair(fd, true); err != nil {
		return err
	}
	orig := bufferSizes(fd)
	if err := raiseBuffers(fd, len(sendQ), len(recvQ)); err != nil {
		return err
	}
	if !connectsForReal(s) {
		if err := restoreTCP(fd, st, recvQ, sendQ); err != nil {
			return err
		}
	} else if err := restoreConnecting(fd, st, recvQ, sendQ); err != nil {
		return err
	} else if st.SockState != SockConnecting {
		// Accepted, connected by a blocking connect, or connected again
		// since: the second connect of a connecting socket makes it
		// connected in the socket layer, as the program's did.
		if err := unix.Connect(fd, Sockaddr(st.Remote)); err != nil {
			return fmt.Errorf("connect %s again (socket layer connected): %w", st.Remote, err)
		}
	}
	if err := restorePortOptions(fd, s.Options); err != nil {
		return err
	}
	if err := setOptions(fd, mergeOptions(orig, s.Options), late, noReuse); err != nil {
		return err
	}
	// The send side is shut by replaying our FIN (Resume). A shutdown
	// would make a socket the socket layer calls connecting connected:
	// the peer's FIN replayed shuts its receive side (an ESTABLISHED
	// one shut for reading cannot be connecting: CheckSockState).
	if s.Shutdown&1 != 0 && st.SockState != SockConnecting {
		if err := unix.Shutdown(fd, unix.SHUT_RD); err != nil {
			return fmt.Errorf("shutdown(SHUT_RD): %w", err)
		}
	}
	return setLinger(fd, s)
}

// openSynSent prepares a connection in SYN_SENT: its options, its address
// and initial sequence number; Resume connects.
func openSynSent(fd int, s *image.Socket, st *TCPState, _, _ []byte) error {
	noReuse := func(level, name int) bool { return level == unix.SOL_SOCKET && name == unix.SO_REUSEADDR }
	if err := setOptions(fd, s.Options, early, noReuse); err != nil {
		return err
	}
	if err := setLinger(fd, s); err != nil {
		return err
	}
	if err := prepareSynSent(fd, st); err != nil {
		return err
	}
	return setOptions(fd, s.Options, late, noReuse)
}

// ResumeSocket is Resume for a connection of an image (Open built it).
func ResumeSocket(fd int, s *image.Socket, sendQ []byte) error {
	if s.TCP == nil {
		return fmt.Errorf("socket %s is not a TCP connection: %w", s.Local, ErrState)
	}
	local, err := netip.ParseAddrPort(s.Local)
	if err != nil {
		return fmt.Errorf("local address %q: %w", s.Local, err)
	}
	remote, err := netip.ParseAddrPort(s.Remote)
	if err != nil {
		return fmt.Errorf("remote address %q: %w", s.Remote, err)
	}
	if err := Resume(fd, &TCPState{Local: local, Remote: remote, State: s.State, TCPRepair: *s.TCP}, sendQ); err != nil {
		return err
	}
	if s.State == StateSynSent {
		// The options the connect needed changed (resumeSynSent).
		return restorePortOptions(fd, s.Options)
	}
	return nil
}

// mergeOptions is base with the values of over in their place.
func mergeOptions(base, over []image.SockOpt) []image.SockOpt {
	out := append([]image.SockOpt(nil), over...)
	for _, b := range base {
		found := false
		for _, o := range over {
			found = found || o.Level == b.Level && o.Name == b.Name
		}
		if !found {
			out = append(out, b)
		}
	}
	return out
}

func openPlain(fd int, s *image.Socket) error {
	if err := setOptions(fd, s.Options, early, nil); err != nil {
		return err
	}
	if err := setLinger(fd, s); err != nil {
		return err
	}
	// A connection accepted from a listener shares its port, and may have
	// been rebuilt first (it has a lower fd): in repair mode it holds the
	// port with forced reuse. The listener binds and listens with
	// SO_REUSEADDR, which passes over such connections (never over
	// another listener), and then gets its own value back.
	listener := s.State == StateListen && s.Type == unix.SOCK_STREAM
	reuse := ReuseAddr(fd)
	if listener && reuse == 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return fmt.Errorf("set SO_REUSEADDR to listen: %w", err)
		}
	}
	// A listener of an SO_REUSEPORT group joins it with SO_REUSEPORT
	// on, whatever its value now: SettlePort sets that once the whole
	// group listens again.
	if listener && s.PortShared {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return fmt.Errorf("set SO_REUSEPORT to listen: %w", err)
		}
	}
	if s.Local != "" {
		local, err := netip.ParseAddrPort(s.Local)
		if err != nil {
			return fmt.Errorf("local address %q: %w", s.Local, err)
		}
		if err := bindFree(fd, s, local); err != nil {
			return fmt.Errorf("bind %s: %w", local, err)
		}
	}
	if err := joinGroups(fd, s); err != nil {
		return err
	}
	if s.State == StateListen {
		if err := unix.Listen(fd, max(s.Backlog, 1)); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	if listener && reuse == 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 0); err != nil {
			return fmt.Errorf("clear SO_REUSEADDR: %w", err)
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
	var skip func(level, name int) bool
	if s.Protocol == unix.IPPROTO_MPTCP {
		skip = mptcpUnsettable
	}
	if err := setOptions(fd, s.Options, late, skip); err != nil {
		return err
	}
	return shutdown(fd, s.Shutdown)
}

// setLinger sets SO_LINGER as older images hold it.
func setLinger(fd int, s *image.Socket) error {
	if s.Linger[0] != 0 {
		if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: s.Linger[0], Linger: s.Linger[1]}); err != nil {
			return fmt.Errorf("SO_LINGER: %w", err)
		}
	}
	return nil
}
