package sockets

// TCP sockets the socket layer calls connecting (struct socket.state
// SS_CONNECTING) or disconnecting.
//
// A TCP socket whose connect() was non-blocking (EINPROGRESS) stays
// SS_CONNECTING in the socket layer after its handshake completes, until
// the program calls connect() again: that call returns 0 (and makes it
// SS_CONNECTED), only the next one EISCONN. A blocking connect, or
// accept, gives SS_CONNECTED: connect() says EISCONN at once. On a closed
// socket still SS_CONNECTING, connect() gives the socket's error or
// ECONNABORTED and disconnects it. shutdown() on an SS_CONNECTING socket
// makes it SS_DISCONNECTING if it is in SYN_SENT, SYN_RECV or CLOSE
// (connect() then says EINVAL), SS_CONNECTED otherwise
// (net/ipv4/af_inet.c: __inet_stream_connect, inet_shutdown). The dump
// reads the state (pkg/bpftask TCPReader.SockState) into SockState.
//
// A connection connected in repair mode is always SS_CONNECTED
// (__inet_stream_connect: tcp_connect finishes the connection at once).
// One that must be SS_CONNECTING is connected for real instead
// (handshake): its initial sequence number set in repair mode to one
// before the first byte of its send queue (the SYN takes one), a
// non-blocking connect (its SYN must not leave: the socket is marked
// DropMark meanwhile, which the caller's network lock drops:
// NeedsSYNDropped), and the peer's SYN-ACK forged with the options the
// connection had and the sequence number one before the first byte of
// its receive queue. Established, it goes back to repair mode and is
// completed as a connection connected in repair mode (fillTCP). A closed
// one is then reset as openClosed does; one shut down while connecting
// is shut down again (SS_DISCONNECTING).

import (
	"errors"
	"fmt"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// Socket layer states (enum socket_state) of image.TCPRepair.SockState.
const (
	SockConnecting    = 2
	SockConnected     = 3
	SockDisconnecting = 4
)

const tcpFlagSYN = 0x02

// DropMark is the packet mark (SO_MARK) a socket that the restore
// connects for real carries while it does (handshake,
// openConnectingClosed): every network lock (pkg/netlock) drops the
// packets with this mark, its SYN and its answer to the forged SYN-ACK,
// before any rule that would hold them for a peer of the tree.
const DropMark = 0x636b7064 // "ckpd"

// dropMarked gives the socket fd the mark DropMark; the function it
// returns sets the socket's mark back.
func dropMarked(fd int) (func() error, error) {
	old, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK)
	if err != nil {
		return nil, fmt.Errorf("SO_MARK: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK, DropMark); err != nil {
		return nil, fmt.Errorf("SO_MARK: %w", err)
	}
	return func() error {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK, old); err != nil {
			return fmt.Errorf("SO_MARK back to %#x: %w", old, err)
		}
		return nil
	}, nil
}

// sockConnecting says whether a TCP socket is to be rebuilt connecting
// (or disconnecting) in the socket layer: read so by the dump, or, in an
// image from before SockState, a closed socket whose connect failed.
func sockConnecting(t *image.TCPRepair) bool {
	return t.SockState == SockConnecting || t.SockState == SockDisconnecting || t.SockState == 0 && t.Connecting
}

// CheckSockState refuses (ErrState) a TCP socket in state (tcp_info),
// with shutdown (Socket.Shutdown: how+1), whose socket layer state
// t.SockState the restore cannot make, or the kernel cannot have made.
// SS_CONNECTED is made by connecting again once connected for real (or
// in repair mode, see connectsForReal), in every state of a connection
// but SYN_SENT (which is SS_CONNECTING: connect makes it so); in CLOSE it
// is for a connection that had been established only. SS_CONNECTING
// (handshake) is made in ESTABLISHED, but not after shutdown(SHUT_RD), and
// CLOSE_WAIT (the peer's FIN, replayed, changes nothing of it): our own
// FIN is a shutdown(), which makes the socket SS_CONNECTED. In CLOSE,
// SS_CONNECTING and SS_DISCONNECTING (shutdown while connecting) are made.
func CheckSockState(state, shutdown int, t *image.TCPRepair) error {
	ok := false
	switch ss := t.SockState; {
	case ss == 0:
		ok = true
	case state == StateSynSent:
		ok = ss == SockConnecting
	case state == StateClose:
		ok = ss == SockConnecting || ss == SockDisconnecting || ss == SockConnected && !t.Connecting
	case state == StateEstablished:
		ok = ss == SockConnected || ss == SockConnecting && shutdown&1 == 0
	case state == StateCloseWait:
		ok = ss == SockConnecting || ss == SockConnected
	case Connected(state):
		ok = ss == SockConnected
	}
	if !ok {
		return fmt.Errorf("TCP socket in state %s (shutdown %d) that the socket layer calls %s: cannot be restored: %w",
			tcpStateName(state), shutdown, sockStateName(t.SockState), ErrState)
	}
	return nil
}

func sockStateName(ss uint8) string {
	switch ss {
	case 1:
		return "unconnected"
	case SockConnecting:
		return "connecting"
	case SockConnected:
		return "connected"
	case SockDisconnecting:
		return "disconnecting"
	}
	return fmt.Sprintf("state %d", ss)
}

// synAckOptions are the options of the forged SYN-ACK: those of t's
// connection (the socket enables an option its SYN offered only if the
// SYN-ACK has it) with mss as the peer's MSS. Its timestamp value and
// echo are 0: the SYN_SENT check of the echo (tcp_rcv_synsent_state_process)
// skips 0, and PAWS then takes any timestamp of the peer.
func synAckOptions(t *image.TCPRepair, mss int) []byte {
	mss = min(max(mss, 536), 65535)
	o := []byte{2, 4, byte(mss >> 8), byte(mss)}
	if t.Options&optWscale != 0 {
		o = append(o, 1, 3, 3, t.SndWscale)
	}
	if t.Options&optSACK != 0 {
		o = append(o, 1, 1, 4, 2)
	}
	if t.Options&optTimestamps != 0 {
		o = append(o, 1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0)
	}
	return o
}

// errISN means the initial sequence number a rebuilt connection needs is
// 0, which connect takes as "choose one".
var errISN = errors.New("the connection's initial sequence number would be 0, which connect replaces")

// handshake connects fd, a new socket in repair mode, for real from
// st.Local to st.Remote, so that the socket layer calls it connecting:
// sndUna is the sequence number its first byte of data takes, rcvNxt the
// one the peer's first byte takes (the receive queue's first byte), mss
// the MSS the forged SYN-ACK offers. The SYN and the answer to the
// SYN-ACK must be dropped by the caller. It returns with the connection
// ESTABLISHED, in repair mode, no queue selected.
func handshake(fd int, st *TCPState, sndUna, rcvNxt uint32, mss int) error {
	if sndUna-1 == 0 {
		return errISN
	}
	if err := setQueueSeq(fd, tcpSendQueue, sndUna-1); err != nil {
		return err
	}
	if err := setQueue(fd, tcpNoQueue); err != nil {
		return err
	}
	unmark, err := dropMarked(fd)
	if err != nil {
		return err
	}
	if err := setRepair(fd, false); err != nil {
		return err
	}
	// A TIME_WAIT socket the original connection left here (its
	// processes killed after a dump that let them run) would be taken
	// over by the connect, with its own next sequence number as the
	// initial one (tcp_twsk_unique): it is ended first.
	owner, err := pairOwner(st.Local, st.Remote)
	if err != nil {
		return err
	}
	if _, err := destroyTimeWait(st.Local, st.Remote, owner); err != nil {
		return err
	}
	if err := nonBlocking(fd, func() error { return connectSynSent(fd, st) }); err != nil {
		return err
	}
	if s, err := State(fd); err != nil || s != StateSynSent {
		return fmt.Errorf("connect %s: state %s (%v), want SYN_SENT", st.Remote, tcpStateName(s), err)
	}
	// A window of 0 leaves the MSS unbounded by half the window
	// (tcp_bound_to_half_wnd), as in a connection connected in repair
	// mode; the window is set after (TCP_REPAIR_WINDOW).
	synAck := tcpSegment{from: st.Remote, to: st.Local, seq: rcvNxt - 1, ack: sndUna,
		flags: tcpFlagSYN | tcpFlagACK, opts: synAckOptions(&st.TCPRepair, mss)}
	if err := inject(synAck); err != nil {
		return err
	}
	if err := waitState(fd, StateEstablished, "the forged SYN-ACK"); err != nil {
		return err
	}
	// Repair mode waits for the socket's lock, which the kernel holds
	// until its answer to the SYN-ACK is sent (marked).
	if err := setRepair(fd, true); err != nil {
		return err
	}
	return unmark()
}

// connectsForReal says whether Open rebuilds the connection s (not in
// SYN_SENT) by connecting it for real (restoreConnecting) rather than in
// repair mode (restoreTCP). The kernel then computes what it computes at
// a connection's start from its path and the peer's options (the MSS in
// use, the MSS it advertises, the initial windows and buffers) as it did
// for the original; a connect in repair mode comes before the peer's
// options and leaves the MSS in use at the default's 524 bytes (it sets
// a user MSS for the connect, which cannot reach loopback's and changes
// the MSS advertised when the peer's is smaller). Every connection is,
// but one that the socket layer calls connected with
// TCP_FASTOPEN_CONNECT set: a Fast Open cookie could defer its connect
// (ConnectingRefusal refuses a connecting one).
func connectsForReal(s *image.Socket) bool {
	if s.TCP.SockState == SockConnecting {
		return true
	}
	for _, o := range s.Options {
		if o.Level == unix.IPPROTO_TCP && o.Name == unix.TCP_FASTOPEN_CONNECT && o.Value != 0 {
			return false
		}
	}
	return true
}

// nonBlocking runs fn (a connect) with O_NONBLOCK set on fd, and puts
// the file's flags back after.
func nonBlocking(fd int, fn func() error) error {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("F_GETFL: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("F_SETFL: %w", err)
	}
	err = fn()
	if _, ferr := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl); ferr != nil && err == nil {
		err = fmt.Errorf("F_SETFL: %w", ferr)
	}
	return err
}

// restoreConnecting is restoreTCP for a connection connected for real
// (connectsForReal): by handshake instead of in repair mode.
func restoreConnecting(fd int, st *TCPState, recvQ, sendQ []byte) error {
	if st.Unsent > len(sendQ) || st.Unsent < 0 {
		return fmt.Errorf("%d unsent bytes of a %d byte send queue: %w", st.Unsent, len(sendQ), ErrState)
	}
	sndUna := st.sendSeq() - uint32(len(sendQ))
	rcvNxt := st.recvSeq() - uint32(len(recvQ))
	if err := handshake(fd, st, sndUna, rcvNxt, st.MSS); err != nil {
		return err
	}
	return fillTCP(fd, st, recvQ, sendQ)
}

// disconnecting shuts down again a rebuilt closed socket that had been
// shut down while connecting (SS_DISCONNECTING): it has every shutdown
// bit already, and the call says ENOTCONN.
func disconnecting(fd int, t *image.TCPRepair) error {
	if t.SockState != SockDisconnecting {
		return nil
	}
	if err := unix.Shutdown(fd, unix.SHUT_RDWR); err != nil && err != unix.ENOTCONN {
		return fmt.Errorf("shutdown(SHUT_RDWR) while connecting: %w", err)
	}
	return nil
}

// SockStateNeeded says whether the restore of a TCP socket in state
// (tcp_info), with shutdown (Socket.Shutdown), needs its socket layer
// state read: it can be connecting (SS_CONNECTING) or else connected, or
// disconnecting (CLOSE). In SYN_SENT it is connecting; after our FIN, or
// shutdown(SHUT_RD) in ESTABLISHED, connected (shutdown makes it so).
func SockStateNeeded(state, shutdown int) bool {
	switch state {
	case StateEstablished:
		return shutdown&1 == 0
	case StateCloseWait, StateClose:
		return true
	}
	return false
}

// ListenerHolds says whether a listener of the namespace holds the local
// port of the TCP socket fd for its address: the connection was accepted
// from it (a port connect chose, or the program bound, is not a
// listener's), and accept makes a socket connected in the socket layer.
// ls lists the namespace's listeners on first need, once.
func ListenerHolds(fd int, ls *Listeners) (bool, error) {
	la, err := unix.Getsockname(fd)
	if err != nil {
		return false, fmt.Errorf("getsockname: %w", err)
	}
	local := AddrPort(la)
	if !ls.listed {
		if err := ls.list(fd); err != nil {
			return false, err
		}
	}
	for _, a := range ls.ports[local.Port()] {
		if a.IsUnspecified() || a.Unmap() == local.Addr().Unmap() {
			return true, nil
		}
	}
	return false, nil
}

// ConnectingRefusal refuses (ErrState) a TCP socket fd, in state with t
// read by the dump, that the restore would connect for real (see
// NeedsSYNDropped) while TCP_FASTOPEN_CONNECT is set on it: the option
// cannot be set after the connect, and set before it, a Fast Open cookie
// cached for the peer would defer the connect (no SYN, nothing the forged
// SYN-ACK could answer).
func ConnectingRefusal(fd, state int, t *image.TCPRepair) error {
	connecting := sockConnecting(t)
	if state != StateClose {
		connecting = state != StateSynSent && Connected(state) && t.SockState == SockConnecting
	}
	if !connecting {
		return nil
	}
	if v, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT); err == nil && v != 0 {
		return fmt.Errorf("TCP socket the socket layer calls %s with TCP_FASTOPEN_CONNECT set (its rebuild connects again, which a Fast Open cookie may defer, and the option cannot be set after the connect): %w",
			sockStateName(t.SockState), ErrState)
	}
	return nil
}
