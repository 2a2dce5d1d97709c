package netlock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The part of nfnetlink_queue (linux/netfilter/nfnetlink_queue.h) a
// holder needs: bind a queue, receive the ids of the packets queued to it,
// and give them all one verdict at release. x/sys/unix does not define it.
const (
	nfqnlMsgPacket       = 0
	nfqnlMsgConfig       = 2
	nfqnlMsgVerdictBatch = 3

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2

	nfqaCfgCmd      = 1
	nfqaCfgParams   = 2
	nfqaCfgQueueMax = 3
	nfqaCfgMask     = 4
	nfqaCfgFlags    = 5

	nfqnlCfgCmdBind = 1
	nfqnlCopyMeta   = 1

	nfqaCfgFFailOpen = 1
	nfqaCfgFGSO      = 4

	nfAccept = 1
)

// QueueMaxLen is how many packets a holder's queue keeps: the kernel
// drops the packets queued beyond it (as the drop lock would: their
// senders retransmit them).
const QueueMaxLen = 8192

// Queue numbers a holder picks from: the first one that no ckpt lock
// table of the namespace names and that no other socket has bound.
const (
	QueueBase  = 0xc4c0
	QueueCount = 512
)

// ErrQueueBusy says that another socket has bound a queue number.
var ErrQueueBusy = errors.New("queue bound by another socket")

// nfqueue is a bound nfnetlink_queue queue: a netlink socket of its own
// (not a library's connection), so that it can be handed to another
// process, which then goes on reading what the kernel queued meanwhile.
type nfqueue struct {
	f   *os.File
	num uint16
	seq uint32
}

// openQueueSocket makes a NETLINK_NETFILTER socket in the network
// namespace netns (an fd, or negative for the caller's).
func openQueueSocket(netns int) (*os.File, error) {
	var sock *sys.FD
	err := sys.InNetns(netns, func() error {
		var err error
		sock, err = sys.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("nfnetlink: %w", err)
	}
	defer sock.Close()
	fd := sock.Int()
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("nfnetlink bind: %w", err)
	}
	// Room for the metadata of every packet the queue may hold: a packet
	// the kernel cannot deliver is dropped.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20); err != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	}
	return sock.File("nfnetlink"), nil
}

// bindQueue binds queue num on a new socket in the network namespace
// netns, copying only the packets' metadata (the holder needs their ids),
// without fail-open: a packet the queue cannot take is dropped, never let
// through.
func bindQueue(netns int, num uint16) (*nfqueue, error) {
	f, err := openQueueSocket(netns)
	if err != nil {
		return nil, err
	}
	q := &nfqueue{f: f, num: num}
	cmd := []byte{nfqnlCfgCmdBind, 0, 0, 0} // command, pad, pf (unused)
	if err := q.config(netlink.Attribute{Type: nfqaCfgCmd, Data: cmd}); err != nil {
		f.Close()
		// EBUSY: bound by another socket; EPERM: so, by another process.
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("queue %d: %w", num, ErrQueueBusy)
		}
		return nil, fmt.Errorf("bind queue %d: %w", num, err)
	}
	params := binary.BigEndian.AppendUint32(nil, 0xffff)
	params = append(params, nfqnlCopyMeta)
	if err := q.config(
		netlink.Attribute{Type: nfqaCfgParams, Data: params},
		netlink.Attribute{Type: nfqaCfgQueueMax, Data: binary.BigEndian.AppendUint32(nil, QueueMaxLen)},
		// Fail-open off, said explicitly; GSO packets are queued whole.
		netlink.Attribute{Type: nfqaCfgFlags, Data: binary.BigEndian.AppendUint32(nil, nfqaCfgFGSO)},
		netlink.Attribute{Type: nfqaCfgMask, Data: binary.BigEndian.AppendUint32(nil, nfqaCfgFFailOpen|nfqaCfgFGSO)},
	); err != nil {
		f.Close()
		return nil, fmt.Errorf("configure queue %d: %w", num, err)
	}
	return q, nil
}

// message builds an nfnetlink_queue message of type typ for the queue.
func (q *nfqueue) message(typ uint16, flags netlink.HeaderFlags, attrs ...netlink.Attribute) ([]byte, uint32, error) {
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return nil, 0, err
	}
	q.seq++
	m := netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_QUEUE<<8 | typ), Flags: flags, Sequence: q.seq},
		Data:   append([]byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, byte(q.num >> 8), byte(q.num)}, b...),
	}
	m.Header.Length = uint32(unix.NLMSG_HDRLEN + len(m.Data))
	out, err := m.MarshalBinary()
	return out, q.seq, err
}

func (q *nfqueue) send(b []byte) error {
	rc, err := q.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return serr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return serr
}

// read reads what the socket has until deadline, split into messages; a
// passed deadline is os.ErrDeadlineExceeded.
func (q *nfqueue) read(buf []byte, deadline time.Time) ([]netlink.Message, error) {
	if err := q.f.SetReadDeadline(deadline); err != nil {
		return nil, err
	}
	rc, err := q.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf, 0)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, rerr
	}
	var msgs []netlink.Message
	for b := buf[:n]; len(b) >= unix.NLMSG_HDRLEN; {
		l := int(binary.NativeEndian.Uint32(b))
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			break
		}
		var m netlink.Message
		if err := m.UnmarshalBinary(b[:l]); err == nil {
			msgs = append(msgs, m)
		}
		b = b[min(len(b), (l+unix.NLMSG_ALIGNTO-1)&^(unix.NLMSG_ALIGNTO-1)):]
	}
	return msgs, nil
}

// config sends a configuration message and waits for its
// acknowledgement (the kernel's error, if any).
func (q *nfqueue) config(attrs ...netlink.Attribute) error {
	b, seq, err := q.message(nfqnlMsgConfig, netlink.Request|netlink.Acknowledge, attrs...)
	if err != nil {
		return err
	}
	if err := q.send(b); err != nil {
		return err
	}
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(5 * time.Second)
	for {
		msgs, err := q.read(buf, deadline)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Type == netlink.Error && m.Header.Sequence == seq && len(m.Data) >= 4 {
				if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
					return unix.Errno(-e)
				}
				return nil
			}
		}
	}
}

// receive waits until deadline for queued packets and returns their ids;
// none and no error when the deadline passed.
func (q *nfqueue) receive(buf []byte, deadline time.Time) ([]uint32, error) {
	msgs, err := q.read(buf, deadline)
	if err != nil {
		if errors.Is(err, unix.ENOBUFS) || errors.Is(err, os.ErrDeadlineExceeded) {
			// ENOBUFS: the kernel could not deliver some packets, and
			// dropped them.
			return nil, nil
		}
		return nil, err
	}
	var ids []uint32
	for _, m := range msgs {
		if m.Header.Type != netlink.HeaderType(unix.NFNL_SUBSYS_QUEUE<<8|nfqnlMsgPacket) || len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			continue
		}
		for ad.Next() {
			if ad.Type() == nfqaPacketHdr {
				if b := ad.Bytes(); len(b) >= 4 {
					ids = append(ids, binary.BigEndian.Uint32(b))
				}
			}
		}
	}
	return ids, nil
}

// acceptAll gives NF_ACCEPT to every packet in the queue, read or not
// yet (last is the highest id read, 0 if none): they go on through the
// hooks after the one that queued them. A batch verdict covers the
// queued ids from the first on while they are not after the one it
// names, compared as the kernel does (nfq_id_after: (int32)(id - max) >
// 0). A quarter of the id space past the last one read covers the
// packets queued after it, and keeps the ones before it (as far back as
// a quarter of the space) from counting as after: with half the space,
// every id more than two before the last one read counted as after, the
// batch stopped at the first packet, and the table's removal dropped
// what it held.
func (q *nfqueue) acceptAll(last uint32) error {
	hdr := binary.BigEndian.AppendUint32(nil, nfAccept)
	hdr = binary.BigEndian.AppendUint32(hdr, last+1<<30)
	b, _, err := q.message(nfqnlMsgVerdictBatch, netlink.Request, netlink.Attribute{Type: nfqaVerdictHdr, Data: hdr})
	if err != nil {
		return err
	}
	return q.send(b)
}

func (q *nfqueue) close() error { return q.f.Close() }
