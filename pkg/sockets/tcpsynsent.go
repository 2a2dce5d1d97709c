package sockets

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// A connection in SYN_SENT has sent its SYN and waits for the answer. It is
// rebuilt by connecting again with the same initial sequence number (set
// with TCP_QUEUE_SEQ in repair mode, which connect keeps) from the same
// address and port: the peer sees the same SYN again, a retransmission,
// and one connection. The SYN's options are chosen again by connect from
// the socket's options, as they were the first time. The timestamp offset
// is chosen by connect too, from the addresses (and the boot's secret): on
// the same machine it is the one of the first SYN.

// prepareSynSent readies a new socket for resumeSynSent: its initial
// sequence number set in repair mode, the port left for connect to choose
// as a program's connect chose it (connectAs), so that the kernel gives
// it back if the connection fails.
func prepareSynSent(fd int, st *TCPState) error {
	if err := setRepair(fd, true); err != nil {
		return err
	}
	if err := setQueueSeq(fd, tcpSendQueue, st.sendSeq()); err != nil {
		return err
	}
	return setQueue(fd, tcpNoQueue)
}

// resumeSynSent connects a socket prepared by prepareSynSent, without
// waiting for the answer: it is in SYN_SENT.
func resumeSynSent(fd int, st *TCPState) error {
	if err := setRepair(fd, false); err != nil {
		return err
	}
	if st.ReuseAddr != 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, st.ReuseAddr); err != nil {
			return fmt.Errorf("SO_REUSEADDR: %w", err)
		}
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("F_GETFL: %w", err)
	}
	if fl&unix.O_NONBLOCK == 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NONBLOCK); err != nil {
			return fmt.Errorf("F_SETFL: %w", err)
		}
		defer unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl)
	}
	return connectSynSent(fd, st)
}

// connectSynSent connects (non-blocking) from st.Local, its port chosen by
// connect narrowed to it with IP_LOCAL_PORT_RANGE (ResumeSocket sets the
// option back); a port the program had bound (st.PortBound), or one
// another socket bound (connect does not share it), is bound in repair
// mode instead (forced reuse).
func connectSynSent(fd int, st *TCPState) error {
	if st.portBound() || !ephemeral(st.Local.Port()) {
		return bindAndConnect(fd, st)
	}
	p := int(st.Local.Port())
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_LOCAL_PORT_RANGE, p|p<<16); err != nil {
		return fmt.Errorf("IP_LOCAL_PORT_RANGE: %w", err)
	}
	if src, err := routeSource(st.Remote); err != nil || src != st.Local.Addr() {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1); err != nil {
			return fmt.Errorf("IP_BIND_ADDRESS_NO_PORT: %w", err)
		}
		if err := unix.Bind(fd, Sockaddr(netip.AddrPortFrom(st.Local.Addr(), 0))); err != nil {
			return fmt.Errorf("bind %s: %w", st.Local.Addr(), err)
		}
	}
	err := unix.Connect(fd, Sockaddr(st.Remote))
	if err == unix.EADDRNOTAVAIL {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 0); err != nil {
			return fmt.Errorf("IP_BIND_ADDRESS_NO_PORT: %w", err)
		}
		return bindAndConnect(fd, st)
	}
	if err != nil && err != unix.EINPROGRESS {
		return fmt.Errorf("connect %s: %w", st.Remote, err)
	}
	if la, err := unix.Getsockname(fd); err != nil || AddrPort(la) != st.Local {
		return fmt.Errorf("connect %s: from %v, want %s", st.Remote, AddrPort(la), st.Local)
	}
	return nil
}

// bindAndConnect binds st.Local in repair mode (forced reuse: another
// socket of the tree may share the port) and connects (non-blocking).
func bindAndConnect(fd int, st *TCPState) error {
	if err := setRepair(fd, true); err != nil {
		return err
	}
	if err := unix.Bind(fd, Sockaddr(st.Local)); err != nil {
		return fmt.Errorf("bind %s: %w", st.Local, err)
	}
	if err := setRepair(fd, false); err != nil {
		return err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, st.ReuseAddr); err != nil {
		return fmt.Errorf("SO_REUSEADDR: %w", err) // leaving repair mode cleared it
	}
	if err := unix.Connect(fd, Sockaddr(st.Remote)); err != nil && err != unix.EINPROGRESS {
		return fmt.Errorf("connect %s: %w", st.Remote, err)
	}
	return nil
}

// synSentRefusal refuses a connection in SYN_SENT that TCP Fast Open made
// (info is its tcp_info): one whose connect was deferred until the first
// write (TCP_FASTOPEN_CONNECT: no SYN sent yet), one with data queued with
// its SYN (sendto MSG_FASTOPEN, or a write after such a connect), which a
// new connect would not send, and one with TCP_FASTOPEN_CONNECT set, whose
// new connect would be deferred where the restore finds a Fast Open cookie
// for the peer (and the option cannot be set after the connect).
func synSentRefusal(fd int, info []byte) error {
	if le32(info[136:]) == 0 { // tcpi_segs_out: not even the SYN
		return fmt.Errorf("TCP connect deferred by TCP Fast Open until the first write (TCP_FASTOPEN_CONNECT: no SYN sent yet): %w", ErrState)
	}
	if v, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT); err == nil && v != 0 {
		return fmt.Errorf("TCP connection in SYN_SENT with TCP_FASTOPEN_CONNECT set (connecting again may be deferred by a Fast Open cookie, and the option cannot be set after the connect): %w", ErrState)
	}
	// SIOCOUTQ says 0 in SYN_SENT: tcp_info counts the bytes sent with
	// the SYN (tcpi_bytes_sent) and those queued behind it
	// (tcpi_notsent_bytes).
	if sent, queued := binary.LittleEndian.Uint64(info[200:]), le32(info[144:]); sent > 0 || queued > 0 {
		return fmt.Errorf("TCP connection in SYN_SENT with %d bytes sent or queued with its SYN by TCP Fast Open: %w", sent+uint64(queued), ErrState)
	}
	return nil
}
