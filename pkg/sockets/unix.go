package sockets

import (
	"encoding/binary"
	"fmt"
	"strings"
	"syscall"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// UnixInfo is what sock_diag says about a UNIX socket.
type UnixInfo struct {
	Ino     uint32
	Type    int
	State   int
	Peer    uint32 // inode of the peer, 0 if none
	Name    string // bound name ("" unnamed, "@..." abstract)
	Pending int    // connections waiting (listeners), or queued bytes
	Backlog int    // listen backlog
}

const (
	sockDiagByFamily = 20
	udiagShowName    = 0x01
	udiagShowPeer    = 0x04
	udiagShowRqlen   = 0x10
	unixDiagName     = 0
	unixDiagPeer     = 2
	unixDiagRqlen    = 4
)

// UnixSockets lists the UNIX sockets of the caller's network namespace,
// by inode, through sock_diag.
func UnixSockets() (map[uint32]UnixInfo, error) {
	raw, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag: %w", err)
	}
	nl, _ := sys.NewFD(raw)
	defer nl.Close()
	fd := nl.Int()
	req := make([]byte, 16+24)
	le := binary.LittleEndian
	le.PutUint32(req[0:], uint32(len(req)))
	le.PutUint16(req[4:], sockDiagByFamily)
	le.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	le.PutUint32(req[8:], 1)
	req[16] = unix.AF_UNIX
	le.PutUint32(req[20:], 0xffffffff) // every state
	le.PutUint32(req[28:], udiagShowName|udiagShowPeer|udiagShowRqlen)
	le.PutUint32(req[32:], 0xffffffff) // cookie: none
	le.PutUint32(req[36:], 0xffffffff)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sock_diag: send: %w", err)
	}
	out := map[uint32]UnixInfo{}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("sock_diag: receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("sock_diag: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case syscall.NLMSG_DONE:
				return out, nil
			case syscall.NLMSG_ERROR:
				return nil, fmt.Errorf("sock_diag: error reply")
			}
			d := m.Data
			if len(d) < 16 {
				continue
			}
			info := UnixInfo{Type: int(d[1]), State: int(d[2]), Ino: le.Uint32(d[4:])}
			for a := d[16:]; len(a) >= 4; {
				l, typ := int(le.Uint16(a[0:])), le.Uint16(a[2:])
				if l < 4 || l > len(a) {
					break
				}
				v := a[4:l]
				switch typ {
				case unixDiagName:
					if len(v) > 0 && v[0] == 0 {
						info.Name = "@" + string(v[1:])
					} else {
						info.Name = strings.TrimRight(string(v), "\x00")
					}
				case unixDiagPeer:
					if len(v) >= 4 {
						info.Peer = le.Uint32(v)
					}
				case unixDiagRqlen:
					if len(v) >= 8 {
						info.Pending = int(le.Uint32(v))
						info.Backlog = int(le.Uint32(v[4:]))
					}
				}
				a = a[(l+3)&^3:]
			}
			out[info.Ino] = info
		}
	}
}

// PeekUnixQueue reads the receive queue of a UNIX socket (one of ckpt's
// fds) without consuming it: a stream socket's bytes as one message, a
// datagram or seqpacket socket's messages one by one (SO_PEEK_OFF). Queued
// file descriptors (SCM_RIGHTS) are refused.
func PeekUnixQueue(fd, typ int) ([][]byte, error) {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEEK_OFF, 0); err != nil {
		return nil, fmt.Errorf("SO_PEEK_OFF: %w", err)
	}
	defer unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEEK_OFF, -1)
	var out [][]byte
	buf := make([]byte, 1<<20)
	oob := make([]byte, unix.CmsgSpace(64*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_PEEK|unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
		if err == unix.EAGAIN {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("peek: %w", err)
		}
		if oobn > 0 {
			closeRights(oob[:oobn])
			return nil, fmt.Errorf("file descriptors queued in the socket (SCM_RIGHTS): %w", ErrState)
		}
		if n == 0 && typ == unix.SOCK_STREAM {
			return out, nil
		}
		out = append(out, append([]byte(nil), buf[:n]...))
	}
}

func closeRights(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		if fds, err := unix.ParseUnixRights(&m); err == nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
	}
}

// UnixPair makes a socketpair of type typ whose ends hold the given
// receive queues (sent from the other end: a stream's bytes, or each
// message of a datagram or seqpacket socket).
func UnixPair(typ int, queueA, queueB [][]byte) (int, int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("socketpair: %w", err)
	}
	for i, q := range [][][]byte{queueA, queueB} {
		from := fds[1-i]
		for _, m := range q {
			if err := sendAll(from, m); err != nil {
				unix.Close(fds[0])
				unix.Close(fds[1])
				return -1, -1, fmt.Errorf("refill queue: %w", err)
			}
		}
	}
	return fds[0], fds[1], nil
}

// UnixListenState is the state sock_diag gives a listening UNIX socket.
const UnixListenState = 10

// unixAddr converts a name as sock_diag gives it; x/sys/unix takes a
// leading "@" as an abstract name, as sock_diag writes it.
func unixAddr(name string) *unix.SockaddrUnix { return &unix.SockaddrUnix{Name: name} }

// OpenUnix builds a UNIX socket that is not connected to another one of
// the dump: bound to its name (a stale socket file of the dead process is
// replaced), listening with its backlog, or a datagram socket whose queued
// messages are sent to it again (their senders' addresses are lost).
func OpenUnix(typ int, name string, listen bool, backlog int, queue [][]byte) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	fail := func(err error) (int, error) {
		unix.Close(fd)
		return -1, err
	}
	if name != "" {
		addr := unixAddr(name)
		if name[0] != '@' {
			var st unix.Stat_t
			if unix.Lstat(name, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
				unix.Unlink(name)
			}
		}
		if err := unix.Bind(fd, addr); err != nil {
			return fail(fmt.Errorf("bind %s: %w", name, err))
		}
	}
	if listen {
		if err := unix.Listen(fd, max(backlog, 1)); err != nil {
			return fail(fmt.Errorf("listen: %w", err))
		}
	}
	if len(queue) > 0 {
		if name == "" || typ == unix.SOCK_STREAM {
			return fail(fmt.Errorf("queued data on an unconnected socket: %w", ErrState))
		}
		raw, err := unix.Socket(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		tmp, _ := sys.NewFD(raw)
		defer tmp.Close()
		for _, m := range queue {
			if err := unix.Sendto(tmp.Int(), m, 0, unixAddr(name)); err != nil {
				return fail(fmt.Errorf("refill queue: %w", err))
			}
		}
	}
	return fd, nil
}
