package sockets

// MPTCP sockets (socket(AF_INET[6], SOCK_STREAM, IPPROTO_MPTCP)): what Go
// programs listen with since Go 1.24 (net.Listen("tcp") when the kernel's
// net.mptcp.enabled allows it).
//
// What a program sees of one, measured on Linux 6.18:
//
//   - SO_PROTOCOL says IPPROTO_MPTCP (262); a listener's accepted socket
//     is a plain TCP one (SO_PROTOCOL 6) when its client did not use
//     MPTCP, and an MPTCP connection when it did;
//   - TCP_INFO gives the tcp_info of the socket's first subflow: for a
//     listener its TCP subflow listener (state LISTEN, the accept queue
//     length in tcpi_unacked, the backlog in tcpi_sacked), for a socket
//     never connected state CLOSE;
//   - the subflow listener is a TCP listener of the network namespace:
//     sock_diag lists it (address, port, its request sockets in
//     SYN_RECV; a connection accepted from it shares its port, which
//     ConnectMayChoosePort sees), and it is in TCP's listening hash, which
//     the BPF TCP lock reader iterates: with a cookie that is not the
//     MPTCP socket's and that no fd of any process has, so the dump,
//     which asks the reader by the cookies of fds, never asks about it;
//   - options: a subset of SOL_SOCKET, IPPROTO_IP, IPPROTO_IPV6 and
//     IPPROTO_TCP (net/mptcp/sockopt.c). getsockopt says EOPNOTSUPP for
//     the others (a program cannot observe them either); some it reads
//     cannot be set (SO_BUF_LOCK, always 3; SO_ZEROCOPY...), so a program
//     cannot change them either and they keep a new socket's value.
//
// A listener and a socket never connected (bound or not) are rebuilt
// with socket(family, SOCK_STREAM, IPPROTO_MPTCP), their options, bind
// and listen with the backlog. An MPTCP connection (established, or in
// any state of a connection) is refused by name: its subflows cannot be
// put in repair mode (TCP_REPAIR is not among MPTCP's options) and the
// MPTCP-level sequence numbers and keys cannot be read or set.

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrMPTCPDisabled means the restoring machine (its network namespace)
// has net.mptcp.enabled=0: no MPTCP socket can be made.
var ErrMPTCPDisabled = errors.New("MPTCP is disabled here (sysctl net.mptcp.enabled=0): an MPTCP socket cannot be made")

// mptcpRefusal says why an MPTCP socket in a TCP state (its first
// subflow's) cannot be saved, or nil for a listener or a socket never
// connected.
func mptcpRefusal(fd, state int) error {
	switch {
	case state == StateListen:
		return nil
	case state == tcpClose:
		if peer := peerName(fd, familyOf(fd)); peer.IsValid() && peer.Port() != 0 {
			return fmt.Errorf("MPTCP socket closed or disconnected after a connection (or an attempt) to %s: an MPTCP connection's subflows cannot be repaired: %w", peer, ErrState)
		}
		if pendingError(fd) {
			return fmt.Errorf("MPTCP socket with a pending error (a failed connect): %w", ErrState)
		}
		// A socket never connected polls POLLHUP alone (state
		// CLOSE); POLLRDHUP says its receive side was shut.
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
		if _, err := unix.Poll(p, 0); err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		if p[0].Revents&unix.POLLRDHUP != 0 {
			return fmt.Errorf("MPTCP socket in state CLOSE with its receive side shut (a connection ended, or shutdown()): %w", ErrState)
		}
		return nil
	case Connected(state), state == StateSynSent, state == stateSynRecv:
		return fmt.Errorf("MPTCP connection (%s): its subflows cannot be repaired (no TCP_REPAIR on MPTCP): %w", tcpStateName(state), ErrState)
	}
	return fmt.Errorf("MPTCP socket in state %s: %w", tcpStateName(state), ErrState)
}

// familyOf is SO_DOMAIN (0 if unreadable).
func familyOf(fd int) int {
	f, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	return f
}

// mptcpSocketError names a failed socket(IPPROTO_MPTCP): the reason is
// net.mptcp.enabled=0 when the sysctl says so.
func mptcpSocketError(err error) error {
	if b, rerr := os.ReadFile("/proc/sys/net/mptcp/enabled"); rerr == nil && strings.TrimSpace(string(b)) == "0" {
		return fmt.Errorf("socket(IPPROTO_MPTCP): %w: %w", ErrMPTCPDisabled, err)
	}
	return fmt.Errorf("socket(IPPROTO_MPTCP): %w", err)
}

// mptcpUnsettable are the options an MPTCP socket reads but refuses to
// set (EOPNOTSUPP): a program cannot change them, so they are never
// saved; SO_BUF_LOCK, which setOptions sets after the buffers, is skipped
// on MPTCP (it always reads 3 there).
func mptcpUnsettable(level, name int) bool {
	return level == unix.SOL_SOCKET && name == unix.SO_BUF_LOCK
}

// mptcpPrefix is "MPTCP " for an MPTCP socket, to name it in an error.
func mptcpPrefix(protocol int) string {
	if protocol == unix.IPPROTO_MPTCP {
		return "MPTCP "
	}
	return ""
}
