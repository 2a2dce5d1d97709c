package sockets

import (
	"encoding/binary"
	"fmt"

	"syscall"

	"golang.org/x/sys/unix"
)

// SocketPolicies tells whether any socket of the caller's network
// namespace (the calling thread's: run it in sys.InNetns) has a
// per-socket IPsec policy (IP_XFRM_POLICY, IPV6_XFRM_POLICY): the
// kernel counts them by direction, and XFRM_MSG_GETSPDINFO gives the
// counts (inscnt, outscnt, fwdscnt of struct xfrmu_spdinfo). Without
// NETLINK_XFRM (module xfrm_user) it says true with the error: whether
// there are some is not known.
func SocketPolicies() (bool, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_XFRM)
	if err != nil {
		return true, fmt.Errorf("NETLINK_XFRM socket: %w", err)
	}
	defer unix.Close(fd)
	const getSPDInfo = 0x25 // XFRM_MSG_GETSPDINFO
	req := make([]byte, unix.NLMSG_HDRLEN+4)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], getSPDInfo)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(req[8:], 1)
	binary.NativeEndian.PutUint32(req[unix.NLMSG_HDRLEN:], 0xffffffff)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return true, fmt.Errorf("XFRM_MSG_GETSPDINFO: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return true, fmt.Errorf("XFRM_MSG_GETSPDINFO: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil || len(msgs) == 0 {
		return true, fmt.Errorf("XFRM_MSG_GETSPDINFO: reply: %v", err)
	}
	m := msgs[0]
	if m.Header.Type == unix.NLMSG_ERROR {
		if len(m.Data) >= 4 {
			return true, fmt.Errorf("XFRM_MSG_GETSPDINFO: %w", unix.Errno(-int32(binary.NativeEndian.Uint32(m.Data))))
		}
		return true, fmt.Errorf("XFRM_MSG_GETSPDINFO: error reply")
	}
	if len(m.Data) < 4 {
		return true, fmt.Errorf("XFRM_MSG_GETSPDINFO: short reply")
	}
	// The reply is a u32 of flags, then attributes.
	for b := m.Data[4:]; len(b) >= unix.SizeofNlAttr; {
		l := int(binary.NativeEndian.Uint16(b[0:]))
		typ := binary.NativeEndian.Uint16(b[2:])
		if l < unix.SizeofNlAttr || l > len(b) {
			break
		}
		if typ == 1 && l >= unix.SizeofNlAttr+24 { // XFRMA_SPD_INFO
			v := b[unix.SizeofNlAttr:]
			socket := binary.NativeEndian.Uint32(v[12:]) + binary.NativeEndian.Uint32(v[16:]) + binary.NativeEndian.Uint32(v[20:])
			return socket != 0, nil
		}
		b = b[min(len(b), (l+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1)):]
	}
	return true, fmt.Errorf("XFRM_MSG_GETSPDINFO: no XFRMA_SPD_INFO in the reply")
}
