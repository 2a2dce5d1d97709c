package sockets

import (
	"fmt"

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

// prepareSynSent readies a new socket for resumeSynSent: bound in repair
// mode (forced reuse: another connection of the tree may share the local
// port with another peer) with its initial sequence number set.
func prepareSynSent(fd int, st *TCPState) error {
	if err := setRepair(fd, true); err != nil {
		return err
	}
	if err := setQueue(fd, tcpSendQueue); err != nil {
		return err
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_QUEUE_SEQ, int(st.sendSeq())); err != nil {
		return fmt.Errorf("TCP_QUEUE_SEQ: %w", err)
	}
	if err := setQueue(fd, tcpNoQueue); err != nil {
		return err
	}
	if err := unix.Bind(fd, Sockaddr(st.Local)); err != nil {
		return fmt.Errorf("bind %s: %w", st.Local, err)
	}
	return nil
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
	if err := unix.Connect(fd, Sockaddr(st.Remote)); err != nil && err != unix.EINPROGRESS {
		return fmt.Errorf("connect %s: %w", st.Remote, err)
	}
	return nil
}
