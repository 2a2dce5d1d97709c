package sockets

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// stateSynRecv is TCP_SYN_RECV, the state in which sock_diag lists the
// request sockets of a listener: connections whose handshake has not
// completed (the client's ACK has not come), or whose completion
// TCP_DEFER_ACCEPT holds back until the client sends data. They are in
// no accept queue (tcp_info does not count them) and nothing rebuilds
// them: a restored listener would answer their clients with a reset.
const stateSynRecv = 3

// halfOpen counts the request sockets (SYN_RECV) of the listeners on
// local, a listener's address (the wildcard address takes every address
// of its port); a dual-stack IPv6 listener's IPv4 clients are counted too.
func halfOpen(fd int, local netip.AddrPort, dualStack bool) (int, error) {
	families := []int{unix.AF_INET}
	if local.Addr().Is6() && !local.Addr().Is4In6() {
		families = []int{unix.AF_INET6}
		if dualStack {
			families = append(families, unix.AF_INET)
		}
	}
	n := 0
	for _, family := range families {
		req := inetDiagRequest(byte(family), unix.IPPROTO_TCP, 1<<stateSynRecv, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
		err := sockDiagDump(fd, req, func(d []byte) bool {
			if len(d) < 72 || binary.BigEndian.Uint16(d[4:]) != local.Port() {
				return false
			}
			var src netip.Addr
			if family == unix.AF_INET {
				src = netip.AddrFrom4([4]byte(d[8:12]))
			} else {
				src = netip.AddrFrom16([16]byte(d[8:24]))
			}
			if a := local.Addr(); a.IsUnspecified() || a.Unmap() == src.Unmap() {
				n++
			}
			return false
		})
		if err != nil {
			return 0, fmt.Errorf("sock_diag (half-open connections): %w", err)
		}
	}
	return n, nil
}

// halfOpenError is the refusal of a listener with half-open connections,
// or nil.
func halfOpenError(fd, family int) error {
	la, err := unix.Getsockname(fd)
	if err != nil {
		return fmt.Errorf("getsockname: %w", err)
	}
	dual := false
	if family == unix.AF_INET6 {
		v6only, _ := unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
		dual = v6only == 0
	}
	n, err := halfOpen(fd, AddrPort(la), dual)
	if err != nil || n == 0 {
		return err
	}
	return fmt.Errorf("listening socket with %d connections half-open (SYN_RECV: the handshake not complete, or its end held back by TCP_DEFER_ACCEPT until the client sends): %w", n, ErrAcceptQueue)
}
