package sockets

// TCP states other than ESTABLISHED (see DumpTCP and Resume).
//
// Repair mode builds a connection as ESTABLISHED only. The states around
// a close are rebuilt by replaying, in their original order, the FINs that
// brought the connection there:
//
//   - our own FIN (FIN_WAIT1, FIN_WAIT2, CLOSING, LAST_ACK) is shutdown(SHUT_WR):
//     in repair mode with the send queue selected, the FIN is queued as
//     already sent (with its original sequence number: the send queue is
//     rebuilt to end before it), and retransmitted if the peer had not got
//     it; a FIN that had not been sent yet (behind unsent data, or a
//     closed window) is sent normally after the unsent data;
//   - the peer's FIN (CLOSE_WAIT, CLOSING, LAST_ACK) is received again: a
//     segment forged from the peer's address with a raw socket, with the
//     FIN's sequence number and an acknowledgment that acknowledges
//     nothing new, marked (InjectMark) so that the network lock lets it
//     through while it still drops everything else;
//   - in FIN_WAIT2 the peer had acknowledged our FIN: a forged
//     acknowledgment of it moves the rebuilt socket from FIN_WAIT1.
//
// The window (TCP_REPAIR_WINDOW) is set again after the replay, so that
// the forged segments change nothing of it. SYN_SENT is a non-blocking
// connect with the initial sequence number set in repair mode: the peer
// sees the same SYN again, one connection.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// TCP states of tcp_info besides StateEstablished and StateListen.
const (
	StateSynSent   = 2
	StateFinWait1  = 4
	StateFinWait2  = 5
	StateClose     = tcpClose
	StateCloseWait = 8
	StateLastAck   = 9
	StateClosing   = 11
)

// InjectMark is the packet mark (SO_MARK) of the segments the restore
// forges to replay a FIN: the network lock (pkg/netlock) lets packets
// with this mark through.
const InjectMark = 0x636b7074 // "ckpt"

// Connected says whether a TCP state is one of a connection that DumpTCP
// saves and Resume rebuilds: a peer is known and sequence numbers exist.
func Connected(state int) bool {
	switch state {
	case StateEstablished, StateSynSent, StateFinWait1, StateFinWait2, StateCloseWait, StateLastAck, StateClosing:
		return true
	}
	return false
}

// ourFIN says whether we had sent our FIN (shutdown(SHUT_WR) or close).
func ourFIN(state int) bool {
	return state == StateFinWait1 || state == StateFinWait2 || state == StateClosing || state == StateLastAck
}

// finInQueue says whether our FIN is still in the send queue (sent or not,
// but not acknowledged): it counts one in SIOCOUTQ and in the sequence.
func finInQueue(state int) bool { return ourFIN(state) && state != StateFinWait2 }

// peerFIN says whether the peer's FIN had been received: it counts one in
// the receive sequence (rcv_nxt), not in the queue.
func peerFIN(state int) bool {
	return state == StateCloseWait || state == StateClosing || state == StateLastAck
}

// ourFINFirst says whether our FIN came before the peer's (or alone).
func ourFINFirst(state int) bool {
	return state == StateFinWait1 || state == StateFinWait2 || state == StateClosing
}

// Endpoints reads the local and remote addresses of a TCP socket of ckpt;
// a connection in SYN_SENT has no peer name yet (getpeername says
// ENOTCONN), sock_diag knows it.
func Endpoints(fd int) (local, remote netip.AddrPort, err error) {
	la, err := unix.Getsockname(fd)
	if err != nil {
		return local, remote, fmt.Errorf("getsockname: %w", err)
	}
	local = AddrPort(la)
	if ra, err := unix.Getpeername(fd); err == nil {
		return local, AddrPort(ra), nil
	}
	st, err := State(fd)
	if err != nil {
		return local, remote, err
	}
	if st != StateSynSent {
		return local, remote, fmt.Errorf("getpeername: %w", unix.ENOTCONN)
	}
	var s unix.Stat_t
	if err := unix.Fstat(fd, &s); err != nil {
		return local, remote, fmt.Errorf("fstat: %w", err)
	}
	family := unix.AF_INET
	if _, ok := la.(*unix.SockaddrInet6); ok {
		family = unix.AF_INET6
	}
	remote, err = diagPeer(fd, family, StateSynSent, uint32(s.Ino))
	return local, remote, err
}

// diagPeer asks sock_diag for the remote end of the TCP socket with inode
// ino among those of family in state.
func diagPeer(fd, family, state int, ino uint32) (netip.AddrPort, error) {
	d, err := diagFind(fd, family, state, ino)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if d == nil {
		return netip.AddrPort{}, fmt.Errorf("sock_diag: no TCP socket with inode %d in state %s", ino, tcpStateName(state))
	}
	port := binary.BigEndian.Uint16(d[6:])
	if family == unix.AF_INET {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(d[24:28])), port), nil
	}
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(d[24:40])), port), nil
}

// diagFind asks sock_diag for the TCP socket with inode ino among those of
// family in state: its inet_diag_msg, nil if there is none.
func diagFind(fd, family, state int, ino uint32) ([]byte, error) {
	req := inetDiagRequest(byte(family), unix.IPPROTO_TCP, 1<<state, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	var found []byte
	err := sockDiagDump(fd, req, func(d []byte) bool {
		if len(d) < 72 || binary.LittleEndian.Uint32(d[68:]) != ino {
			return false
		}
		found = d
		return true
	})
	return found, err
}

// tcpSegment is a segment to forge from the peer of a connection.
type tcpSegment struct {
	from, to netip.AddrPort
	seq, ack uint32
	flags    byte
	window   uint16
	// opts are its TCP options, a multiple of 4 bytes long (synAck).
	opts []byte
}

const (
	tcpFlagFIN = 0x01
	tcpFlagACK = 0x10
)

// inject sends a forged TCP segment (no data) with a raw
// socket marked InjectMark. A v4-mapped connection's segments are IPv4.
func inject(s tcpSegment) error {
	src, dst := s.from.Addr().Unmap(), s.to.Addr().Unmap()
	tcp := make([]byte, 20, 20+len(s.opts))
	tcp = append(tcp, s.opts...)
	be := binary.BigEndian
	be.PutUint16(tcp[0:], s.from.Port())
	be.PutUint16(tcp[2:], s.to.Port())
	be.PutUint32(tcp[4:], s.seq)
	be.PutUint32(tcp[8:], s.ack)
	tcp[12] = byte(len(tcp)/4) << 4
	tcp[13] = s.flags
	be.PutUint16(tcp[14:], s.window)
	// The checksum covers a pseudo-header: addresses, protocol, length.
	pseudo := append(append(append([]byte(nil), src.AsSlice()...), dst.AsSlice()...), 0, unix.IPPROTO_TCP, 0, byte(len(tcp)))
	be.PutUint16(tcp[16:], checksum(append(pseudo, tcp...)))
	var pkt []byte
	var family int
	var to unix.Sockaddr
	if src.Is4() {
		family, to = unix.AF_INET, &unix.SockaddrInet4{Addr: dst.As4()}
		ip := make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, unix.IPPROTO_TCP
		be.PutUint16(ip[2:], uint16(20+len(tcp)))
		be.PutUint16(ip[6:], 0x4000) // DF; the kernel fills in the ID and checksum
		copy(ip[12:], src.AsSlice())
		copy(ip[16:], dst.AsSlice())
		pkt = append(ip, tcp...)
	} else {
		family, to = unix.AF_INET6, &unix.SockaddrInet6{Addr: dst.As16()}
		ip := make([]byte, 40)
		ip[0], ip[6], ip[7] = 0x60, unix.IPPROTO_TCP, 64
		be.PutUint16(ip[4:], uint16(len(tcp)))
		copy(ip[8:], src.AsSlice())
		copy(ip[24:], dst.AsSlice())
		pkt = append(ip, tcp...)
	}
	raw, err := sys.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return fmt.Errorf("raw socket: %w", err)
	}
	defer raw.Close()
	fd := raw.Int()
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK, InjectMark); err != nil {
		return fmt.Errorf("raw socket SO_MARK: %w", err)
	}
	if err := unix.Sendto(fd, pkt, 0, to); err != nil {
		return fmt.Errorf("send a forged segment %s -> %s: %w", s.from, s.to, err)
	}
	return nil
}

// waitState waits until a socket is in state want (the forged segments
// are processed by the kernel after sendto returns).
func waitState(fd, want int, what string) error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		st, err := State(fd)
		if err != nil {
			return err
		}
		if st == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: state %s, want %s", what, tcpStateName(st), tcpStateName(want))
		}
		time.Sleep(time.Millisecond)
	}
}

// queueFIN puts our FIN in the send queue of a socket in repair mode as a
// segment already sent (TCP_REPAIR_QUEUE selects the send queue: the
// kernel "sends" it by queueing it). The FIN takes the sequence number
// after the send queue.
func queueFIN(fd int) error {
	if err := setQueue(fd, tcpSendQueue); err != nil {
		return err
	}
	if err := unix.Shutdown(fd, unix.SHUT_WR); err != nil {
		return fmt.Errorf("shutdown(SHUT_WR) in repair mode: %w", err)
	}
	return setQueue(fd, tcpNoQueue)
}

// replayPeerFIN makes a socket receive its peer's FIN again: seq is the
// FIN's sequence number, ack acknowledges what the peer had acknowledged.
func replayPeerFIN(fd int, st *TCPState, ack uint32, want int) error {
	seg := tcpSegment{from: st.Remote, to: st.Local, seq: st.RcvSeq - 1, ack: ack,
		flags: tcpFlagFIN | tcpFlagACK, window: uint16(st.Window[winSndWnd] >> st.SndWscale)}
	if err := inject(seg); err != nil {
		return err
	}
	return waitState(fd, want, "the peer's FIN replayed")
}

// sendSeq is the sequence number after the data of the send queue (before
// our FIN, if it was sent).
func (st *TCPState) sendSeq() uint32 {
	if ourFIN(st.State) {
		return st.SndSeq - 1
	}
	if st.State == StateSynSent {
		return st.SndSeq - 1 // the SYN
	}
	return st.SndSeq
}

// recvSeq is the sequence number after the data of the receive queue
// (before the peer's FIN, if it was received).
func (st *TCPState) recvSeq() uint32 {
	if peerFIN(st.State) {
		return st.RcvSeq - 1
	}
	return st.RcvSeq
}

// setWindow sets TCP_REPAIR_WINDOW (repair mode).
func setWindow(fd int, w [5]uint32) error {
	if err := sys.Setsockopt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR_WINDOW, unsafe.Pointer(&w), unsafe.Sizeof(w)); err != nil {
		return fmt.Errorf("TCP_REPAIR_WINDOW: %w", err)
	}
	return nil
}

// Window indexes of struct tcp_repair_window.
const (
	winSndWl1 = iota
	winSndWnd
	winMax
	winRcvWnd
	winRcvWup
)

// windowBeforeFIN is the window to set while the receive side ends before
// the peer's FIN (rcv_nxt one less): rcv_wup may not be past rcv_nxt, and
// the right edge of the window stays where it was.
func windowBeforeFIN(w [5]uint32, rcvNxt uint32) [5]uint32 {
	if d := int32(w[winRcvWup] - rcvNxt); d > 0 {
		w[winRcvWup] = rcvNxt
		w[winRcvWnd] += uint32(d)
	}
	return w
}

// replayClose brings a rebuilt connection, still in repair mode with its
// queues and window, to its saved state by replaying the FINs (see the
// top of this file). It returns with the socket still in repair mode,
// except for what must follow the unsent data (afterUnsent).
func replayClose(fd int, st *TCPState, sendQLen int) (afterUnsent func() error, err error) {
	state := st.State
	sendStart := st.sendSeq() - uint32(sendQLen)
	inRepair := ourFIN(state) && !st.FinUnsent
	if ourFINFirst(state) && inRepair {
		if err := queueFIN(fd); err != nil {
			return nil, err
		}
	}
	if peerFIN(state) && (!ourFINFirst(state) || inRepair) {
		want := StateCloseWait
		if ourFINFirst(state) {
			want = StateClosing
		}
		if err := replayPeerFIN(fd, st, sendStart, want); err != nil {
			return nil, err
		}
	}
	if state == StateLastAck && inRepair {
		if err := queueFIN(fd); err != nil {
			return nil, err
		}
	}
	if state == StateFinWait2 {
		seg := tcpSegment{from: st.Remote, to: st.Local, seq: st.RcvSeq, ack: st.SndSeq,
			flags: tcpFlagACK, window: uint16(st.Window[winSndWnd] >> st.SndWscale)}
		if err := inject(seg); err != nil {
			return nil, err
		}
		if err := waitState(fd, StateFinWait2, "the peer's acknowledgment of our FIN replayed"); err != nil {
			return nil, err
		}
	}
	w := st.Window
	if peerFIN(state) && ourFINFirst(state) && !inRepair {
		w = windowBeforeFIN(w, st.recvSeq()) // the peer's FIN comes later
	}
	if err := setWindow(fd, w); err != nil {
		return nil, err
	}
	if !ourFIN(state) || inRepair {
		return nil, nil
	}
	// Our FIN had not been sent: it follows the unsent data, and the
	// peer's FIN of a CLOSING connection follows it.
	return func() error {
		if err := unix.Shutdown(fd, unix.SHUT_WR); err != nil {
			return fmt.Errorf("shutdown(SHUT_WR): %w", err)
		}
		if state == StateClosing {
			return replayPeerFIN(fd, st, sendStart, StateClosing)
		}
		return nil
	}, nil
}
