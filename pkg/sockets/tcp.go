// Package sockets saves and rebuilds sockets.
//
// An established TCP connection is saved with TCP_REPAIR: with the socket in
// repair mode its sequence numbers, its queues (the receive queue with data
// the process has not read; the send queue with data sent but not
// acknowledged, and data not sent yet), its MSS, window scaling, SACK and
// timestamp options and its window can be read without the peer noticing,
// and closing it sends neither FIN nor RST. A socket built in repair mode
// from that state and "connected" to the same peer sends no SYN: it simply
// carries on where the old one stopped. The part of the send queue that had
// been sent goes back in repair mode (it is retransmitted if the peer did
// not get it); the unsent part is sent normally after repair mode is left.
// The states of a close are replayed (tcpstates.go); a socket closed after
// a connection is built connected again and reset by a forged segment
// (tcpclosed.go).
//
// Options (options.go) is the inventory of every socket option a program
// can observe: each row says how it is read and set back, or why it is
// refused, derived, or cannot be read. UNIX sockets (unixsock.go) are
// saved in every state with their queues, senders and shutdown state; UDP
// queues (udpqueue.go) are resent from their original sources.
//
// The dumped and restored sockets are reached from ckpt with pidfd_getfd, so
// this package works on file descriptors of ckpt's own.
package sockets

import (
	"errors"
	"fmt"
	"net/netip"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// ErrState means a socket is in a state this package does not save.
var ErrState = errors.New("unsupported socket state")

// ErrAcceptQueue means a listening socket has connections waiting to be
// accepted, which cannot be saved. It is transient: once the process has
// accepted them, a dump can succeed.
var ErrAcceptQueue = fmt.Errorf("%w: connections wait in the accept queue", ErrState)

// TCP states of tcp_info.
const (
	StateEstablished = 1
	StateListen      = 10
)

const (
	tcpRecvQueue = 1
	tcpSendQueue = 2
	tcpNoQueue   = 0

	optTimestamps = 1 // TCPI_OPT_TIMESTAMPS
	optSACK       = 2 // TCPI_OPT_SACK
	optWscale     = 4 // TCPI_OPT_WSCALE
)

// TCPState is what a TCP connection needs to be rebuilt: its endpoints
// and what repair mode reads.
type TCPState struct {
	Local, Remote netip.AddrPort
	// State is the TCP state (tcp_info), Connected.
	State int
	image.TCPRepair
}

func setRepair(fd int, on bool) error {
	v := 0
	if on {
		v = 1
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR, v); err != nil {
		return fmt.Errorf("TCP_REPAIR %d: %w", v, err)
	}
	return nil
}

func setQueue(fd, q int) error {
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR_QUEUE, q); err != nil {
		return fmt.Errorf("TCP_REPAIR_QUEUE %d: %w", q, err)
	}
	return nil
}

// setQueueSeq selects queue q of a socket in repair mode and sets the
// sequence number its first byte has (TCP_QUEUE_SEQ). The queue stays
// selected.
func setQueueSeq(fd, q int, seq uint32) error {
	if err := setQueue(fd, q); err != nil {
		return err
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_QUEUE_SEQ, int(seq)); err != nil {
		return fmt.Errorf("TCP_QUEUE_SEQ: %w", err)
	}
	return nil
}

func ptr(b *byte) unsafe.Pointer { return unsafe.Pointer(b) }

// AddrPort converts a socket address.
func AddrPort(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port))
	}
	return netip.AddrPort{}
}

// Sockaddr converts an address for bind and connect.
func Sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
}

// State returns the TCP state of a socket (tcp_info.tcpi_state).
func State(fd int) (int, error) {
	var info [256]byte
	if _, err := sys.Getsockopt(fd, unix.IPPROTO_TCP, unix.TCP_INFO, unsafe.Pointer(&info[0]), uintptr(len(info))); err != nil {
		return 0, fmt.Errorf("TCP_INFO: %w", err)
	}
	return int(info[0]), nil
}

// DumpTCP puts a connection (Connected: established, SYN_SENT, or one of
// the states of a close) in repair mode and reads its state and queues.
// The socket stays in repair mode: closing it then is silent; LeaveRepair
// lets it go on instead.
func DumpTCP(fd int) (st *TCPState, recvQ, sendQ []byte, err error) {
	var info [256]byte
	if _, err := sys.Getsockopt(fd, unix.IPPROTO_TCP, unix.TCP_INFO, unsafe.Pointer(&info[0]), uintptr(len(info))); err != nil {
		return nil, nil, nil, fmt.Errorf("TCP_INFO: %w", err)
	}
	state := int(info[0])
	if !Connected(state) {
		return nil, nil, nil, fmt.Errorf("TCP state %s, not a connection: %w", tcpStateName(state), ErrState)
	}
	local, remote, err := Endpoints(fd)
	if err != nil {
		return nil, nil, nil, err
	}
	reuse := ReuseAddr(fd)
	if err := setRepair(fd, true); err != nil {
		return nil, nil, nil, err
	}
	defer func() {
		if err != nil {
			LeaveRepair(fd, reuse)
		}
	}()
	st = &TCPState{Local: local, Remote: remote, State: state,
		TCPRepair: image.TCPRepair{Options: info[5], SndWscale: info[6] & 0xf, RcvWscale: info[6] >> 4, ReuseAddr: reuse}}
	// A program's SO_PEEK_OFF would make the peeks below skip bytes.
	if off, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEEK_OFF); err == nil && off >= 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEEK_OFF, -1); err != nil {
			return nil, nil, nil, fmt.Errorf("SO_PEEK_OFF: %w", err)
		}
		defer unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEEK_OFF, off)
	}
	if st.MSS, err = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG); err != nil {
		return nil, nil, nil, fmt.Errorf("TCP_MAXSEG: %w", err)
	}
	ts, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_TIMESTAMP)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("TCP_TIMESTAMP: %w", err)
	}
	st.Timestamp = uint32(ts)
	if _, err := sys.Getsockopt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR_WINDOW, unsafe.Pointer(&st.Window), unsafe.Sizeof(st.Window)); err != nil {
		return nil, nil, nil, fmt.Errorf("TCP_REPAIR_WINDOW: %w", err)
	}
	inq, err := sys.IoctlInt(fd, unix.SIOCINQ)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("SIOCINQ: %w", err)
	}
	outq, err := sys.IoctlInt(fd, unix.SIOCOUTQ)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("SIOCOUTQ: %w", err)
	}
	if st.Unsent, err = sys.IoctlInt(fd, unix.SIOCOUTQNSD); err != nil {
		return nil, nil, nil, fmt.Errorf("SIOCOUTQNSD: %w", err)
	}
	// Our FIN, not acknowledged, counts one in the send queue (it has no
	// data), and in what is unsent if it was not sent.
	if finInQueue(state) {
		if outq > 0 {
			outq--
		}
		if st.Unsent > 0 {
			st.Unsent--
			st.FinUnsent = true
		}
	}
	if recvQ, st.RcvSeq, err = peekQueue(fd, tcpRecvQueue, inq); err != nil {
		return nil, nil, nil, fmt.Errorf("receive queue: %w", err)
	}
	if sendQ, st.SndSeq, err = peekQueue(fd, tcpSendQueue, outq); err != nil {
		return nil, nil, nil, fmt.Errorf("send queue: %w", err)
	}
	if err := setQueue(fd, tcpNoQueue); err != nil {
		return nil, nil, nil, err
	}
	return st, recvQ, sendQ, nil
}

// peekQueue reads a queue of a socket in repair mode without consuming it,
// and the sequence number that follows it.
func peekQueue(fd, q, n int) ([]byte, uint32, error) {
	if err := setQueue(fd, q); err != nil {
		return nil, 0, err
	}
	seq, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_QUEUE_SEQ)
	if err != nil {
		return nil, 0, fmt.Errorf("TCP_QUEUE_SEQ: %w", err)
	}
	buf := make([]byte, n)
	if n > 0 {
		m, _, err := unix.Recvfrom(fd, buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if err != nil {
			return nil, 0, fmt.Errorf("peek %d bytes: %w", n, err)
		}
		if m != n {
			return nil, 0, fmt.Errorf("peeked %d of %d bytes", m, n)
		}
	}
	return buf, uint32(seq), nil
}

// LeaveRepair takes a dumped socket out of repair mode, so that it carries
// on as before (a dump that failed, or that leaves the process running).
// Leaving repair mode clears SO_REUSEADDR: reuse is its value from before
// (ReuseAddr). A socket that is not in repair mode is left alone.
func LeaveRepair(fd, reuse int) error {
	on, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR)
	if err != nil || on == 0 {
		return err
	}
	if err := setRepair(fd, false); err != nil {
		return err
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, reuse)
}

// EnterRepair puts a socket in repair mode, so that closing it is silent.
func EnterRepair(fd int) error { return setRepair(fd, true) }

// ReuseAddr reads SO_REUSEADDR, to be read before repair mode changes it.
func ReuseAddr(fd int) int {
	v, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR)
	return v
}

// RestoreTCP builds a socket in repair mode that takes over the connection
// described by st: same 4-tuple, sequence numbers, options, window and
// queues. It stays in repair mode, and so silent, until Resume.
func RestoreTCP(st *TCPState, recvQ, sendQ []byte) (*sys.FD, error) {
	if st.Unsent > len(sendQ) || st.Unsent < 0 {
		return nil, fmt.Errorf("%d unsent bytes of a %d byte send queue: %w", st.Unsent, len(sendQ), ErrState)
	}
	family := unix.AF_INET
	if st.Local.Addr().Is6() {
		family = unix.AF_INET6
	}
	sock, err := sys.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer sock.Close()
	fd := sock.Int()
	err = setRepair(fd, true)
	if err == nil {
		err = raiseBuffers(fd, len(sendQ), len(recvQ))
	}
	if err == nil {
		err = restoreTCP(fd, st, recvQ, sendQ)
	}
	if err != nil {
		setRepair(fd, true) // closing must stay silent
		return nil, err
	}
	return sock.Move(), nil
}

// restoreTCP rebuilds a connection on a socket in repair mode. Repair
// mode forces address reuse (SK_FORCE_REUSE): the connection can be bound
// to the port of a listener. Setting SO_REUSEADDR before Resume would take
// that away.
func restoreTCP(fd int, st *TCPState, recvQ, sendQ []byte) error {
	if st.Unsent > len(sendQ) || st.Unsent < 0 {
		return fmt.Errorf("%d unsent bytes of a %d byte send queue: %w", st.Unsent, len(sendQ), ErrState)
	}
	for _, q := range []struct {
		q   int
		seq uint32
	}{{tcpRecvQueue, st.recvSeq() - uint32(len(recvQ))}, {tcpSendQueue, st.sendSeq() - uint32(len(sendQ))}} {
		if err := setQueueSeq(fd, q.q, q.seq); err != nil {
			return err
		}
	}
	// The port is chosen by connect, as a program's connect chose it, so
	// that the kernel gives it back when the connection ends (connectAs);
	// one a listener holds (an accepted connection) is bound, and so is
	// one the program had bound (it keeps it).
	clamp := st.MSS >= tcpMinMSS
	if clamp {
		// The MSS in use is computed when connect() runs, from the path
		// MTU and the clamp; in repair mode the clamp comes after the
		// connect (TCP_REPAIR_OPTIONS), too late: the connection would
		// send 524-byte segments (the default's) until its path MTU
		// changed. So connect sees the clamp as a user MSS (at most
		// 32767, the kernel's limit: loopback's 65495 is cut), cleared
		// right after (a closed socket's TCP_MAXSEG would show it).
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG, min(st.MSS, tcpMaxUserMSS)); err != nil {
			return fmt.Errorf("TCP_MAXSEG %d: %w", st.MSS, err)
		}
	}
	if err := connectAs(fd, st.Local, st.Remote, !st.portBound()); err != nil {
		return err
	}
	if clamp {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG, 0); err != nil {
			return fmt.Errorf("TCP_MAXSEG 0: %w", err)
		}
	}
	return fillTCP(fd, st, recvQ, sendQ)
}

// The smallest and largest user MSS the kernel takes (TCP_MIN_MSS,
// MAX_TCP_WINDOW).
const (
	tcpMinMSS     = 88
	tcpMaxUserMSS = 32767
)

// fillTCP completes a connection connected in repair mode with its
// sequence numbers set (restoreTCP, or handshake for one the socket layer
// calls connecting): its options, its queues and its window.
func fillTCP(fd int, st *TCPState, recvQ, sendQ []byte) error {
	if err := restorePortOptions(fd, nil); err != nil {
		return err
	}
	if err := setRepairOptions(fd, st, uint32(st.MSS)); err != nil {
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
	if err := sendAll(fd, sendQ[:len(sendQ)-st.Unsent]); err != nil {
		return fmt.Errorf("refill send queue: %w", err)
	}
	if err := setQueue(fd, tcpNoQueue); err != nil {
		return err
	}
	return setWindow(fd, windowBeforeFIN(st.Window, st.recvSeq()))
}

// portBound says whether the connection's port is to be bound: the
// program had bound it (PortBound, read at the dump), or, when the dump
// could not read that, connect could not have chosen it (outside
// ip_local_port_range; connectAs and connectSynSent look at that too).
func (st *TCPState) portBound() bool {
	return st.PortBound != nil && *st.PortBound
}

// Resume takes a restored socket out of repair mode, sets SO_REUSEADDR
// back (leaving repair mode clears it) and sends the part of the send
// queue that had never been sent. A connection saved in one of the states
// of a close is brought back to it first (replayClose), one in SYN_SENT
// connects (resumeSynSent).
func Resume(fd int, st *TCPState, sendQ []byte) error {
	if st.State == StateClose {
		return nil // built whole by Open (tcpclosed.go)
	}
	if st.State == StateSynSent {
		return resumeSynSent(fd, st)
	}
	var orig []image.SockOpt
	if st.Unsent > 0 || peerFIN(st.State) {
		orig = bufferSizes(fd)
	}
	var after func() error
	if st.State != StateEstablished && st.State != 0 {
		// The peer's FIN must find room in a receive queue the restore
		// filled: the buffer is raised while it comes, then put back.
		if peerFIN(st.State) {
			if err := raiseBuffers(fd, 0, 1<<20); err != nil {
				return err
			}
		}
		var err error
		if after, err = replayClose(fd, st, len(sendQ)); err != nil {
			return fmt.Errorf("rebuild state %s: %w", tcpStateName(st.State), err)
		}
	}
	if err := setRepair(fd, false); err != nil {
		return err
	}
	if st.ReuseAddr != 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, st.ReuseAddr); err != nil {
			return fmt.Errorf("SO_REUSEADDR: %w", err)
		}
	}
	if st.Unsent > 0 {
		// The unsent bytes fitted the buffer before; so that a different
		// accounting can never block here (the peer may be frozen), the
		// buffer is raised while they are queued, then put back.
		if err := raiseBuffers(fd, st.Unsent, 0); err != nil {
			return err
		}
		for b := sendQ[len(sendQ)-st.Unsent:]; len(b) > 0; {
			n, err := unix.SendmsgN(fd, b, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return fmt.Errorf("send the unsent %d bytes: %w", st.Unsent, err)
			}
			b = b[n:]
		}
	}
	if after != nil {
		if err := after(); err != nil {
			return fmt.Errorf("rebuild state %s: %w", tcpStateName(st.State), err)
		}
	}
	if orig != nil {
		return setOptions(fd, orig, late, nil)
	}
	return nil
}

func sendAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// setRepairOptions gives a socket in repair mode the options st's
// handshake agreed (TCP_REPAIR_OPTIONS: the MSS clamp mss, window
// scaling, SACK, timestamps) and st's timestamp offset.
func setRepairOptions(fd int, st *TCPState, mss uint32) error {
	type opt struct{ code, val uint32 }
	opts := []opt{{unix.TCPOPT_MAXSEG, mss}}
	if st.Options&optWscale != 0 {
		opts = append(opts, opt{unix.TCPOPT_WINDOW, uint32(st.SndWscale) | uint32(st.RcvWscale)<<16})
	}
	if st.Options&optSACK != 0 {
		opts = append(opts, opt{unix.TCPOPT_SACK_PERMITTED, 0})
	}
	if st.Options&optTimestamps != 0 {
		opts = append(opts, opt{unix.TCPOPT_TIMESTAMP, 0})
	}
	if err := sys.Setsockopt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR_OPTIONS, unsafe.Pointer(&opts[0]), uintptr(len(opts))*8); err != nil {
		return fmt.Errorf("TCP_REPAIR_OPTIONS: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_TIMESTAMP, int(st.Timestamp)); err != nil {
		return fmt.Errorf("TCP_TIMESTAMP: %w", err)
	}
	return nil
}
