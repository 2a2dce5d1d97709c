package sockets

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// diagRequest is a sock_diag request of size bytes: a struct nlmsghdr
// (SOCK_DIAG_BY_FAMILY, the given netlink flags, sequence 1) and a zeroed
// request after it, at [16:], for the caller to fill.
func diagRequest(size int, flags uint16) []byte {
	req := make([]byte, size)
	le := binary.LittleEndian
	le.PutUint32(req[0:], uint32(size))
	le.PutUint16(req[4:], sockDiagByFamily)
	le.PutUint16(req[6:], flags)
	le.PutUint32(req[8:], 1)
	return req
}

// inetDiagRequest is a struct nlmsghdr and struct inet_diag_req_v2 for
// sockets of family and protocol in the states of the mask states, with
// no socket cookie. The socket id (ports at [24:], addresses at [28:] and
// [44:]) is left for the caller to fill.
func inetDiagRequest(family, protocol byte, states uint32, flags uint16) []byte {
	req := diagRequest(16+56, flags)
	le := binary.LittleEndian
	req[16], req[17] = family, protocol
	le.PutUint32(req[20:], states)
	le.PutUint32(req[24+40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	le.PutUint32(req[24+44:], 0xffffffff)
	return req
}

// tcpPairRequest is an inetDiagRequest for the TCP socket local-remote
// (of local's family; an invalid remote address, a listener's, stays
// zero) in the states of the mask states.
func tcpPairRequest(local, remote netip.AddrPort, states uint32, flags uint16) []byte {
	family := byte(unix.AF_INET)
	if local.Addr().Is6() {
		family = unix.AF_INET6
	}
	req := inetDiagRequest(family, unix.IPPROTO_TCP, states, flags)
	id := req[24:] // struct inet_diag_sockid
	binary.BigEndian.PutUint16(id[0:], local.Port())
	binary.BigEndian.PutUint16(id[2:], remote.Port())
	put := func(b []byte, a netip.Addr) {
		switch {
		case !a.IsValid():
		case family == unix.AF_INET:
			a4 := a.Unmap().As4()
			copy(b, a4[:])
		default:
			a16 := a.As16()
			copy(b, a16[:])
		}
	}
	put(id[4:20], local.Addr())
	put(id[20:36], remote.Addr())
	return req
}

// sockDiagRequest opens a NETLINK_SOCK_DIAG socket in the network
// namespace of the socket of (ckpt's own for of < 0, see diagSocket) and
// sends it req (a struct nlmsghdr and its request).
func sockDiagRequest(of int, req []byte) (*sys.FD, error) {
	nl, err := diagSocket(of)
	if err != nil {
		return nil, fmt.Errorf("sock_diag: %w", err)
	}
	if err := unix.Sendto(nl.Int(), req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		nl.Close()
		return nil, fmt.Errorf("sock_diag: send: %w", err)
	}
	return nl, nil
}

// truncatedError is a sock_diag reply larger than the buffer it was read
// into: Size is its length.
type truncatedError struct{ Size int }

func (e *truncatedError) Error() string {
	return fmt.Sprintf("sock_diag: a reply of %d bytes was cut", e.Size)
}

// sockDiagReceive reads one batch of replies from nl; one larger than buf
// gives a *truncatedError.
func sockDiagReceive(nl *sys.FD, buf []byte) ([]syscall.NetlinkMessage, error) {
	n, _, err := unix.Recvfrom(nl.Int(), buf, unix.MSG_TRUNC)
	if err != nil {
		return nil, fmt.Errorf("sock_diag: receive: %w", err)
	}
	if n > len(buf) {
		return nil, &truncatedError{Size: n}
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return nil, fmt.Errorf("sock_diag: %w", err)
	}
	return msgs, nil
}

// sockDiagDump sends the dump request req (NLM_F_DUMP) and hands the data
// of every reply to each, until the dump is done or each says stop.
func sockDiagDump(of int, req []byte, each func(data []byte) (stop bool)) error {
	nl, err := sockDiagRequest(of, req)
	if err != nil {
		return err
	}
	defer nl.Close()
	buf := make([]byte, 1<<16)
	for {
		msgs, err := sockDiagReceive(nl, buf)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				return fmt.Errorf("sock_diag: error reply")
			}
			if each(m.Data) {
				return nil
			}
		}
	}
}

// diagAttrs hands each netlink attribute of b (type, value) to each.
func diagAttrs(b []byte, each func(typ uint16, v []byte)) {
	le := binary.LittleEndian
	for len(b) >= 4 {
		l, typ := int(le.Uint16(b[0:])), le.Uint16(b[2:])
		if l < 4 || l > len(b) {
			return
		}
		each(typ, b[4:l])
		b = b[min((l+3)&^3, len(b)):]
	}
}
