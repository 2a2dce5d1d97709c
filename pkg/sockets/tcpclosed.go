package sockets

// TCP sockets in state CLOSE that were connected, or tried to connect.
//
// What a program sees of a socket whose connection ended (reset by its
// peer, both FINs exchanged, a connect refused or timed out) and still has
// open, measured on Linux 6.18:
//
//   - TCP_INFO says CLOSE; poll says POLLIN|POLLRDHUP|POLLOUT|POLLHUP (the
//     kernel shut both sides: sk_shutdown is SHUTDOWN_MASK), plus POLLERR
//     while an error (ECONNRESET, ECONNREFUSED, ETIMEDOUT, EPIPE...) is
//     pending;
//   - read gives the bytes received and not read yet, then that error
//     once, then 0; send says the error once, then EPIPE;
//   - getsockname still gives the address and port of the connection,
//     although the port is given back (another socket can bind it) unless
//     it was bound explicitly (bind with a port; a connection accepted
//     from a listener gives it back too); getpeername says ENOTCONN but
//     SO_PEERNAME still gives the peer; TCP_MAXSEG and the tcp_info
//     options (timestamps, SACK, window scales) stay those of the
//     connection; TCP_TIMESTAMP goes on;
//   - connect says EISCONN (the socket layer still calls it connected),
//     listen EINVAL; bind succeeds when the port was given back.
//
// A socket that connect(AF_UNSPEC) disconnected (a blocking connect that
// failed is disconnected by the kernel) is new again but for its port:
// getsockname gives the wildcard address and the old port, which it does
// not hold, and SO_PEERNAME says ENOTCONN.
//
// Rebuilding: the connection is built again in repair mode (same
// addresses, MSS, options, timestamp clock, the bytes not read yet in the
// receive queue) and then ended by a reset forged from the peer's address
// (marked InjectMark, so that a network lock lets it through): the kernel
// closes it exactly as the original was closed, giving the port back when
// the socket did not bind it (the restore then lets connect choose the
// port, which IP_LOCAL_PORT_RANGE narrows to the one saved). The error
// the reset leaves is read, as the program had read its own. A
// disconnected socket is connected in repair mode (the port chosen the
// same way) and disconnected.
//
// A socket whose non-blocking connect() was never called again is still
// "connecting" in the socket layer (connect() on it gives the error, or
// ECONNABORTED, and disconnects it), or "disconnecting" if shut down
// since (connect() says EINVAL): it is connected for real by a forged
// handshake instead of in repair mode (tcpconnecting.go), then reset the
// same way, and shut down again.
//
// Not rebuilt: an error still pending (its value cannot be read without
// clearing it: such a socket is refused by name).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// stateBoundInactive is the pseudo-state (TCP_BOUND_INACTIVE) in which
// sock_diag lists the sockets in state CLOSE that hold their port.
const stateBoundInactive = 13

// ErrPendingError means a closed TCP socket has an error pending, whose
// value cannot be read without clearing it.
var ErrPendingError = fmt.Errorf("%w: TCP socket closed after a connection with an error pending (SO_ERROR, POLLERR: "+
	"the reset or failure not read yet): its value cannot be read without clearing it", ErrState)

const tcpFlagRST = 0x04

// peerName reads SO_PEERNAME, which (unlike getpeername) still gives the
// peer of a TCP socket whose connection ended; not valid if none.
func peerName(fd, family int) netip.AddrPort {
	// The buffer may not be longer than the address (EINVAL).
	size := unix.SizeofSockaddrInet4
	if family == unix.AF_INET6 {
		size = unix.SizeofSockaddrInet6
	}
	buf := make([]byte, size)
	n, err := sys.Getsockopt(fd, unix.SOL_SOCKET, unix.SO_PEERNAME, unsafe.Pointer(&buf[0]), uintptr(len(buf)))
	if err != nil || n < 8 {
		return netip.AddrPort{}
	}
	port := uint16(buf[2])<<8 | uint16(buf[3])
	switch {
	case family == unix.AF_INET && n >= unix.SizeofSockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(buf[4:8])), port)
	case family == unix.AF_INET6 && n >= unix.SizeofSockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(buf[8:24])), port)
	}
	return netip.AddrPort{}
}

// holdsPort says whether a TCP socket in state CLOSE holds its local
// port: sock_diag lists it as bound (TCP_BOUND_INACTIVE).
func holdsPort(fd, family int) (bool, error) {
	var s unix.Stat_t
	if err := unix.Fstat(fd, &s); err != nil {
		return false, fmt.Errorf("fstat: %w", err)
	}
	d, err := diagFind(fd, family, stateBoundInactive, uint32(s.Ino))
	if err != nil {
		return false, fmt.Errorf("sock_diag (bound sockets): %w", err)
	}
	return d != nil, nil
}

// describeClosed completes the description of a TCP socket in state
// CLOSE (s has its family and local address): one that was connected or
// tried (a peer in SO_PEERNAME) gets what its rebuild needs in s.TCP; one
// that shows a port it does not hold gets PortFree.
func describeClosed(fd int, s *image.Socket, info []byte) error {
	la, err := unix.Getsockname(fd)
	if err != nil {
		return fmt.Errorf("getsockname: %w", err)
	}
	local := AddrPort(la)
	held, err := holdsPort(fd, s.Family)
	if err != nil {
		return err
	}
	s.PortFree = local.Port() != 0 && !held
	peer := peerName(fd, s.Family)
	if !peer.IsValid() || peer.Port() == 0 {
		return nil // never connected, or disconnected
	}
	if pendingError(fd) {
		return ErrPendingError
	}
	if urgentData(fd) {
		return fmt.Errorf("urgent data (MSG_OOB) pending in the receive queue cannot be restored: %w", ErrState)
	}
	s.Remote = peer.String()
	s.Local = local.String()
	mss, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
	if err != nil {
		return fmt.Errorf("TCP_MAXSEG: %w", err)
	}
	ts, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_TIMESTAMP)
	if err != nil {
		return fmt.Errorf("TCP_TIMESTAMP: %w", err)
	}
	s.TCP = &image.TCPRepair{MSS: mss, Options: info[5], SndWscale: info[6] & 0xf, RcvWscale: info[6] >> 4,
		Timestamp: uint32(ts), ReuseAddr: ReuseAddr(fd),
		// Nothing ever delivered (tcpi_delivered counts our SYN once
		// acknowledged): the connect failed. A connect() call that
		// waited for it would have disconnected the socket (no peer
		// left): none did, and the socket layer still says connecting.
		Connecting: le32(info[192:]) == 0}
	s.Shutdown = 3 // the kernel shut both sides when the connection ended
	return nil
}

// PeekClosed reads the bytes a closed TCP socket (described with a peer
// by Describe) received and the program has not read, without consuming
// them: no error is pending (describeClosed refused it), so a peek gives
// the bytes.
func PeekClosed(fd int) ([]byte, error) {
	n, err := sys.IoctlInt(fd, unix.SIOCINQ)
	if err != nil {
		return nil, fmt.Errorf("SIOCINQ: %w", err)
	}
	if n == 0 {
		return nil, nil
	}
	if off, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEEK_OFF); err == nil && off >= 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEEK_OFF, -1); err != nil {
			return nil, fmt.Errorf("SO_PEEK_OFF: %w", err)
		}
		defer unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEEK_OFF, off)
	}
	buf := make([]byte, n)
	m, _, err := unix.Recvfrom(fd, buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	if err != nil {
		return nil, fmt.Errorf("peek %d bytes: %w", n, err)
	}
	if m != n {
		return nil, fmt.Errorf("peeked %d of %d bytes", m, n)
	}
	return buf, nil
}

// The sequence numbers of a connection that ended cannot be read by the
// program: the rebuilt one uses these.
const (
	closedSndISN = 1 << 20
	closedRcvISN = 1 << 21
)

// openClosed rebuilds a TCP socket closed after a connection (see the top
// of this file) on a new socket fd: connected in repair mode, then reset
// by a forged segment. It returns with the socket out of repair mode and
// every option set.
func openClosed(fd int, s *image.Socket, local, remote netip.AddrPort, recvQ []byte) error {
	// TCP_MAXSEG shows the connection's MSS, which repair mode sets (the
	// option could not set it: 32768 is above what setsockopt takes).
	mss := func(level, name int) bool { return level == unix.IPPROTO_TCP && name == unix.TCP_MAXSEG }
	noReuse := func(level, name int) bool {
		return mss(level, name) || level == unix.SOL_SOCKET && name == unix.SO_REUSEADDR
	}
	if err := setOptions(fd, s.Options, early, noReuse); err != nil {
		return err
	}
	if err := setRepair(fd, true); err != nil {
		return err
	}
	if err := raiseBuffers(fd, 0, len(recvQ)); err != nil {
		return err
	}
	for _, q := range []struct {
		q   int
		seq uint32
	}{{tcpRecvQueue, closedRcvISN}, {tcpSendQueue, closedSndISN}} {
		if err := setQueueSeq(fd, q.q, q.seq); err != nil {
			return err
		}
	}
	if err := setQueue(fd, tcpNoQueue); err != nil {
		return err
	}
	st := &TCPState{Local: local, Remote: remote, State: StateEstablished, TCPRepair: *s.TCP}
	if sockConnecting(s.TCP) {
		// The socket layer calls it connecting: connected for real
		// (tcpconnecting.go), the port as connectAs chooses it.
		bound := !s.PortFree
		cst := *st
		cst.PortBound = &bound
		mss := s.TCP.MSS
		if s.TCP.Options&optTimestamps != 0 {
			mss += 12 // TCPOLEN_TSTAMP_ALIGNED, which the MSS in use leaves out
		}
		if err := handshake(fd, &cst, closedSndISN, closedRcvISN, mss); err != nil {
			return err
		}
	} else {
		if err := presetMSS(fd, s.TCP.MSS); err != nil {
			return err
		}
		if err := connectAs(fd, local, remote, s.PortFree); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG, 0); err != nil {
			return fmt.Errorf("TCP_MAXSEG 0: %w", err)
		}
	}
	// The clamp (mss_clamp, which only repair mode shows) must not keep
	// acknowledge from reaching the MSS: no lower than the MSS and its
	// timestamp option.
	if err := setRepairOptions(fd, st, uint32(min(st.MSS+40, 65535))); err != nil {
		return err
	}
	if err := setQueue(fd, tcpRecvQueue); err != nil {
		return err
	}
	if err := sendAll(fd, recvQ); err != nil {
		return fmt.Errorf("refill receive queue: %w", err)
	}
	if err := setQueue(fd, tcpSendQueue); err != nil {
		return err
	}
	if err := sendAll(fd, []byte{0}); err != nil { // see acknowledge
		return fmt.Errorf("fill send queue: %w", err)
	}
	if err := setQueue(fd, tcpNoQueue); err != nil {
		return err
	}
	rcvNxt := closedRcvISN + uint32(len(recvQ))
	if err := acknowledge(fd, st, rcvNxt); err != nil {
		return err
	}
	// The reset: its sequence number is the next expected (rcv_nxt),
	// which the kernel accepts at once.
	rst := tcpSegment{from: remote, to: local, seq: rcvNxt, flags: tcpFlagRST}
	if err := inject(rst); err != nil {
		return err
	}
	if err := waitState(fd, StateClose, "the forged reset"); err != nil {
		return err
	}
	// The error the reset left (ECONNRESET) had been read by the program.
	if e, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || e != int(unix.ECONNRESET) {
		return fmt.Errorf("the forged reset left error %d (%v), want ECONNRESET", e, err)
	}
	if err := setRepair(fd, false); err != nil {
		return err
	}
	if err := restoreConnectOptions(fd, s.Options); err != nil {
		return err
	}
	if err := setOptions(fd, s.Options, late, mss); err != nil {
		return err
	}
	if err := disconnecting(fd, s.TCP); err != nil {
		return err
	}
	return setLinger(fd, s)
}

// NeedsSYNDropped says whether rebuilding a socket sends a SYN that must
// not leave (Open connects it for real: a closed socket whose connect
// failed or that the socket layer calls connecting, and a connection but
// one in SYN_SENT, see connectsForReal and tcpconnecting.go): the caller
// holds a network lock (pkg/netlock), which drops the packets marked
// DropMark, while Open runs.
func NeedsSYNDropped(s *image.Socket) bool {
	if s == nil || s.TCP == nil {
		return false
	}
	if s.State == StateClose {
		return sockConnecting(s.TCP)
	}
	return s.State != StateSynSent && Connected(s.State) && connectsForReal(s)
}

// openConnectingClosed rebuilds a TCP socket whose connect failed while
// the socket layer still calls it connecting (see Connecting): a real
// non-blocking connect (its SYN dropped by the caller's lock), then a
// reset forged from the peer that refuses it, as the original was.
func openConnectingClosed(fd int, s *image.Socket, local, remote netip.AddrPort) error {
	mss := func(level, name int) bool { return level == unix.IPPROTO_TCP && name == unix.TCP_MAXSEG }
	noReuse := func(level, name int) bool {
		return mss(level, name) || level == unix.SOL_SOCKET && name == unix.SO_REUSEADDR
	}
	if err := setOptions(fd, s.Options, early, noReuse); err != nil {
		return err
	}
	if err := setRepair(fd, true); err != nil {
		return err
	}
	if err := setQueueSeq(fd, tcpSendQueue, closedSndISN); err != nil {
		return err
	}
	if err := setQueue(fd, tcpNoQueue); err != nil {
		return err
	}
	free := s.PortFree
	if free {
		p := int(local.Port())
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_LOCAL_PORT_RANGE, p|p<<16); err != nil {
			return fmt.Errorf("IP_LOCAL_PORT_RANGE: %w", err)
		}
		if src, err := routeSource(remote); err != nil || src != local.Addr() {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1); err != nil {
				return fmt.Errorf("IP_BIND_ADDRESS_NO_PORT: %w", err)
			}
			if err := unix.Bind(fd, Sockaddr(netip.AddrPortFrom(local.Addr(), 0))); err != nil {
				return fmt.Errorf("bind %s: %w", local.Addr(), err)
			}
		}
	} else if err := unix.Bind(fd, Sockaddr(local)); err != nil { // forced reuse in repair mode
		return fmt.Errorf("bind %s: %w", local, err)
	}
	if err := setRepair(fd, false); err != nil {
		return err
	}
	if err := presetMSS(fd, s.TCP.MSS); err != nil {
		return err
	}
	unmark, err := dropMarked(fd) // its SYN is dropped (DropMark)
	if err != nil {
		return err
	}
	if err := nonBlocking(fd, func() error {
		if err := unix.Connect(fd, Sockaddr(remote)); err != unix.EINPROGRESS {
			return fmt.Errorf("connect %s: %v, want EINPROGRESS", remote, err)
		}
		return nil
	}); err != nil {
		return err
	}
	if la, err := unix.Getsockname(fd); err != nil || AddrPort(la) != local {
		return fmt.Errorf("connect %s: from %v, want %s", remote, AddrPort(la), local)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG, 0); err != nil {
		return fmt.Errorf("TCP_MAXSEG 0: %w", err)
	}
	// The peer refuses: a reset acknowledging the SYN.
	rst := tcpSegment{from: remote, to: local, ack: closedSndISN + 1, flags: tcpFlagRST | tcpFlagACK}
	if err := inject(rst); err != nil {
		return err
	}
	if err := waitState(fd, StateClose, "the forged refusal"); err != nil {
		return err
	}
	if err := unmark(); err != nil {
		return err
	}
	if e, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || e != int(unix.ECONNREFUSED) {
		return fmt.Errorf("the forged refusal left error %d (%v), want ECONNREFUSED", e, err)
	}
	if err := restoreConnectOptions(fd, s.Options); err != nil {
		return err
	}
	if err := setOptions(fd, s.Options, late, mss); err != nil {
		return err
	}
	if err := disconnecting(fd, s.TCP); err != nil {
		return err
	}
	return setLinger(fd, s)
}

// connectAs connects a socket in repair mode (no SYN is sent) from local
// to remote. A port the socket must not hold once closed (free) is not
// bound but chosen by connect, narrowed to it with IP_LOCAL_PORT_RANGE,
// so that the kernel gives it back when the connection ends; the address
// is bound (IP_BIND_ADDRESS_NO_PORT) only if the route would choose
// another. A port connect cannot choose is bound, and stays held: one
// outside ip_local_port_range, and the port of a listener (an accepted
// connection shares it, and connect never chooses a port a bind holds).
// An accepted connection gave its port back when it ended; rebuilt bound,
// it keeps it (SOCK_BINDPORT_LOCK): only an accept puts a socket on a
// listener's port without that lock. The option is left to the caller to
// set back.
func connectAs(fd int, local, remote netip.AddrPort, free bool) error {
	if free {
		// A packet from remote to local would reach the listener, or
		// the pair's TIME_WAIT socket: one look-up by the pair (not a
		// walk of every socket) tells an accepted connection, whose
		// port is bound at once instead of after two connects refused
		// (and before ip_local_port_range is read).
		owner, err := pairOwner(local, remote)
		if err != nil {
			return err
		}
		if owner.state != StateListen && ephemeral(local.Port()) {
			done, err := connectChosen(fd, local, remote, owner)
			if done || err != nil {
				return err
			}
		}
	}
	if err := unix.Bind(fd, Sockaddr(local)); err != nil {
		return fmt.Errorf("bind %s: %w", local, err)
	}
	if err := unix.Connect(fd, Sockaddr(remote)); err != nil {
		return fmt.Errorf("connect %s in repair mode: %w", remote, err)
	}
	return nil
}

// connectChosen connects fd (in repair mode) from local to remote with the
// port chosen by connect, narrowed to local's (see connectAs); owner is
// what pairOwner found for the pair. It says not done when the port is
// held by a socket bound to it, which connect will not share (the caller
// binds it then).
func connectChosen(fd int, local, remote netip.AddrPort, owner diagOwner) (done bool, err error) {
	p := int(local.Port())
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_LOCAL_PORT_RANGE, p|p<<16); err != nil {
		return false, fmt.Errorf("IP_LOCAL_PORT_RANGE: %w", err)
	}
	if src, err := routeSource(remote); err != nil || src != local.Addr() {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1); err != nil {
			return false, fmt.Errorf("IP_BIND_ADDRESS_NO_PORT: %w", err)
		}
		if err := unix.Bind(fd, Sockaddr(netip.AddrPortFrom(local.Addr(), 0))); err != nil {
			return false, fmt.Errorf("bind %s: %w", local.Addr(), err)
		}
	}
	err = unix.Connect(fd, Sockaddr(remote))
	if errors.Is(err, unix.EADDRNOTAVAIL) && owner.state == stateTimeWait {
		// The connection's TIME_WAIT socket (both FINs were
		// exchanged) holds the pair: it is network state, which a
		// restore elsewhere would not have either.
		if gone, derr := destroyTimeWait(local, remote, owner); derr != nil {
			return false, derr
		} else if gone {
			err = unix.Connect(fd, Sockaddr(remote))
		}
	}
	if err == nil {
		if la, err := unix.Getsockname(fd); err != nil || AddrPort(la) != local {
			return false, fmt.Errorf("connect %s in repair mode: bound to %v, want %s", remote, AddrPort(la), local)
		}
		return true, nil
	}
	if !errors.Is(err, unix.EADDRNOTAVAIL) {
		return false, fmt.Errorf("connect %s in repair mode: %w", remote, err)
	}
	// The port is held by another socket bound to it (a listener on
	// another address, a socket the program bound): it is bound instead.
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 0); err != nil {
		return false, fmt.Errorf("IP_BIND_ADDRESS_NO_PORT: %w", err)
	}
	return false, nil
}

// ephemeral says whether connect may choose port: it is in the network
// namespace's ip_local_port_range (IP_LOCAL_PORT_RANGE only narrows it).
// A port outside it was bound by the program, or is its listener's.
func ephemeral(port uint16) bool {
	lo, hi, ok := localPortRange()
	return ok && lo <= port && port <= hi
}

// localPortRange reads ip_local_port_range (of ckpt's network namespace).
func localPortRange() (lo, hi uint16, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return 0, 0, false
	}
	return lo, hi, true
}

// routeSource is the source address the kernel chooses to reach to.
func routeSource(to netip.AddrPort) (netip.Addr, error) {
	family := unix.AF_INET
	if to.Addr().Is6() {
		family = unix.AF_INET6
	}
	sock, err := sys.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return netip.Addr{}, err
	}
	defer sock.Close()
	fd := sock.Int()
	if family == unix.AF_INET6 {
		unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
	}
	if err := unix.Connect(fd, Sockaddr(to)); err != nil {
		return netip.Addr{}, err
	}
	la, err := unix.Getsockname(fd)
	if err != nil {
		return netip.Addr{}, err
	}
	return AddrPort(la).Addr(), nil
}

// openDisconnected rebuilds a TCP socket that shows a port it does not
// hold (disconnected: see the top of this file): connected in repair mode
// with that port chosen by connect, then disconnected (connect
// AF_UNSPEC), which gives the port back and keeps it in getsockname.
func openDisconnected(fd int, s *image.Socket, local netip.AddrPort) error {
	// TCP_MAXSEG shows the MSS of the connection it had (disconnecting
	// keeps it): set as for a closed connection.
	mss := 0
	for _, o := range s.Options {
		if o.Level == unix.IPPROTO_TCP && o.Name == unix.TCP_MAXSEG {
			mss = o.Value
		}
	}
	noMSS := func(level, name int) bool { return level == unix.IPPROTO_TCP && name == unix.TCP_MAXSEG }
	if err := setOptions(fd, s.Options, early, noMSS); err != nil {
		return err
	}
	if err := setLinger(fd, s); err != nil {
		return err
	}
	if err := setRepair(fd, true); err != nil {
		return err
	}
	if err := setQueueSeq(fd, tcpRecvQueue, closedRcvISN); err != nil {
		return err
	}
	if err := setQueue(fd, tcpNoQueue); err != nil {
		return err
	}
	if err := presetMSS(fd, mss); err != nil {
		return err
	}
	// Any peer does: disconnecting forgets it. The socket's own address
	// (or, for the wildcard, the loopback address of the family) at the
	// same port is a pair nobody else uses. An address that shows after
	// the disconnect was bound (the kernel keeps a bound address): it is
	// bound without a port.
	lo := local.Addr()
	if lo.IsUnspecified() {
		lo = netip.MustParseAddr("127.0.0.1")
		if s.Family == unix.AF_INET6 {
			lo = netip.IPv6Loopback()
		}
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1); err != nil {
			return fmt.Errorf("IP_BIND_ADDRESS_NO_PORT: %w", err)
		}
		if err := unix.Bind(fd, Sockaddr(netip.AddrPortFrom(lo, 0))); err != nil {
			return fmt.Errorf("bind %s: %w", lo, err)
		}
	}
	if err := connectAs(fd, netip.AddrPortFrom(lo, local.Port()), netip.AddrPortFrom(lo, local.Port()), true); err != nil {
		return err
	}
	if mss > 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG, 0); err != nil {
			return fmt.Errorf("TCP_MAXSEG 0: %w", err)
		}
	}
	if err := sys.Disconnect(fd); err != nil {
		return err
	}
	// Disconnecting in repair mode leaves ECONNABORTED, which the
	// original did not have pending.
	unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err := setRepair(fd, false); err != nil {
		return err
	}
	if la, err := unix.Getsockname(fd); err != nil || AddrPort(la) != local {
		return fmt.Errorf("disconnected socket shows %v, want %s", AddrPort(la), local)
	}
	if err := restoreConnectOptions(fd, s.Options); err != nil {
		return err
	}
	if err := setOptions(fd, s.Options, late, noMSS); err != nil {
		return err
	}
	return shutdown(fd, s.Shutdown)
}

// sockDestroy is SOCK_DESTROY, the sock_diag request that ends a socket.
const sockDestroy = 21

const stateTimeWait = 6

// diagOwner is the socket a packet of a pair would reach (pairOwner):
// its TCP state and sock_diag cookie; state 0 when there is none.
type diagOwner struct {
	state  int
	cookie [8]byte
}

// pairOwner looks up, through sock_diag, the socket a segment from remote
// to local would reach: the pair's own socket (a TIME_WAIT one, say) or
// else a listener on local. It is one hashed look-up, as the kernel does
// for a packet, where a dump walks every socket of the namespace. It asks
// in ckpt-redo's network namespace, where the connection is made again.
func pairOwner(local, remote netip.AddrPort) (diagOwner, error) {
	req := tcpPairRequest(local, remote, 0, unix.NLM_F_REQUEST)
	nl, err := sockDiagRequest(-1, req)
	if err != nil {
		return diagOwner{}, err
	}
	defer nl.Close()
	msgs, err := sockDiagReceive(nl, make([]byte, 4096))
	if err != nil {
		return diagOwner{}, err
	}
	for _, m := range msgs {
		switch {
		case m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4:
			switch e := unix.Errno(-int32(binary.LittleEndian.Uint32(m.Data))); e {
			case 0, unix.ENOENT:
				return diagOwner{}, nil
			default:
				return diagOwner{}, fmt.Errorf("sock_diag: look up %s-%s: %w", local, remote, e)
			}
		case m.Header.Type == sockDiagByFamily && len(m.Data) >= 52:
			// inet_diag_msg: state at 1, the sockid at 4 (ports,
			// addresses, if, cookie at 44).
			return diagOwner{state: int(m.Data[1]), cookie: [8]byte(m.Data[44:52])}, nil
		}
	}
	return diagOwner{}, fmt.Errorf("sock_diag: look up %s-%s: no answer", local, remote)
}

// destroyTimeWait ends the TIME_WAIT socket the connection local-remote
// left (the one a socket closed after both FINs leaves on this machine),
// found by pairOwner as owner, so that the connection can be built again:
// it is reported whether it was still there. SOCK_DESTROY looks the pair
// up as a packet would, and would find a listener on the local port once
// the TIME_WAIT socket is gone: the request names it by its cookie.
func destroyTimeWait(local, remote netip.AddrPort, owner diagOwner) (bool, error) {
	if owner.state != stateTimeWait {
		return false, nil
	}
	le := binary.LittleEndian
	req := tcpPairRequest(local, remote, 1<<stateTimeWait, unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	copy(req[24+40:24+48], owner.cookie[:])
	le.PutUint16(req[4:], sockDestroy)
	nl, err := sockDiagRequest(-1, req)
	if err != nil {
		return false, err
	}
	defer nl.Close()
	msgs, err := sockDiagReceive(nl, make([]byte, 4096))
	if err != nil {
		return false, err
	}
	for _, m := range msgs {
		if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
			switch e := unix.Errno(-int32(le.Uint32(m.Data))); e {
			case 0:
				return true, nil
			case unix.ENOENT, unix.ESTALE: // gone meanwhile
				return false, nil
			default:
				return false, fmt.Errorf("sock_diag: destroy the TIME_WAIT socket %s-%s: %w", local, remote, e)
			}
		}
	}
	return false, nil
}

// presetMSS makes the connection connect builds in repair mode have mss
// as its MSS (TCP_MAXSEG of a closed socket shows it): connect takes the
// path MTU's, bounded by the clamp (TCP_MAXSEG before connect, at most
// 32767), less the timestamp option connect reserves room for when
// net.ipv4.tcp_timestamps is on. The caller clears the clamp after
// connect. An MSS above 32755 (loopback only: its MTU is 65536) is
// reached by acknowledge.
func presetMSS(fd, mss int) error {
	if mss <= 0 {
		return nil
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_timestamps"); err != nil || strings.TrimSpace(string(b)) != "0" {
		mss += 12 // TCPOLEN_TSTAMP_ALIGNED
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG, min(mss, tcpMaxUserMSS)); err != nil {
		return fmt.Errorf("TCP_MAXSEG: %w", err)
	}
	return nil
}

// sndMSS reads tcp_info's tcpi_snd_mss (the MSS in use, which getsockopt
// TCP_MAXSEG shows out of repair mode).
func sndMSS(fd int) (int, error) {
	var info [256]byte
	if _, err := sys.Getsockopt(fd, unix.IPPROTO_TCP, unix.TCP_INFO, unsafe.Pointer(&info[0]), uintptr(len(info))); err != nil {
		return 0, fmt.Errorf("TCP_INFO: %w", err)
	}
	return int(le32(info[16:])), nil
}

// acknowledge has the peer acknowledge (a segment forged from it) the
// byte the rebuilt connection sent, as the original's SYN was: tcp_info
// counts something delivered (a connection that never delivered anything
// is one whose connect failed: Connecting). The MSS presetMSS could not
// give the connection (above 32755) is reached in the same segment as the
// original reached it, from half the window the peer offers: the window
// is set small in repair mode first, and the kernel computes the MSS
// again when the segment offers a larger one.
func acknowledge(fd int, st *TCPState, rcvNxt uint32) error {
	cur, err := sndMSS(fd)
	if err != nil {
		return err
	}
	win := uint32(65535)
	w := [5]uint32{rcvNxt - 1, win << st.SndWscale, win << st.SndWscale, 65535, rcvNxt}
	if cur < st.MSS {
		win = min((uint32(2*st.MSS)+1<<st.SndWscale-1)>>st.SndWscale, 65535)
		w[1], w[2] = 1, 1
	}
	if err := setWindow(fd, w); err != nil {
		return err
	}
	seg := tcpSegment{from: st.Remote, to: st.Local, seq: rcvNxt, ack: closedSndISN + 1, flags: tcpFlagACK, window: uint16(win)}
	if err := inject(seg); err != nil {
		return err
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		n, err := sys.IoctlInt(fd, unix.SIOCOUTQ)
		if err != nil {
			return fmt.Errorf("SIOCOUTQ: %w", err)
		}
		if cur, err = sndMSS(fd); err != nil {
			return err
		}
		if n == 0 && cur >= st.MSS {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the forged acknowledgment: %d bytes not acknowledged, MSS %d, want %d", n, cur, st.MSS)
		}
		time.Sleep(time.Millisecond)
	}
}

// restoreConnectOptions sets back, after the rebuild, the options it
// changed to choose the port and address: IP_LOCAL_PORT_RANGE,
// IP_BIND_ADDRESS_NO_PORT and SO_REUSEADDR (which repair mode clears),
// to their saved values or the default.
func restoreConnectOptions(fd int, saved []image.SockOpt) error {
	return setBack(fd, saved, []struct{ level, name int }{
		{unix.IPPROTO_IP, unix.IP_LOCAL_PORT_RANGE}, {unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT}, {unix.SOL_SOCKET, unix.SO_REUSEADDR},
	})
}

// restorePortOptions is restoreConnectOptions but for SO_REUSEADDR, which
// a connection still in repair mode must not set (Resume does).
func restorePortOptions(fd int, saved []image.SockOpt) error {
	return setBack(fd, saved, []struct{ level, name int }{
		{unix.IPPROTO_IP, unix.IP_LOCAL_PORT_RANGE}, {unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT},
	})
}

// setBack sets options to their saved values or 0.
func setBack(fd int, saved []image.SockOpt, opts []struct{ level, name int }) error {
	for _, o := range opts {
		v := 0
		for _, sv := range saved {
			if sv.Level == o.level && sv.Name == o.name {
				v = sv.Value
			}
		}
		if err := unix.SetsockoptInt(fd, o.level, o.name, v); err != nil {
			return fmt.Errorf("setsockopt %d/%d back to %d: %w", o.level, o.name, v, err)
		}
	}
	return nil
}
