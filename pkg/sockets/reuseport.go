package sockets

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// listenersOn counts, through sock_diag, the TCP listeners of the
// network namespace of the socket fd bound to local (of its family).
func listenersOn(fd, family int, local netip.AddrPort) (int, error) {
	req := inetDiagRequest(byte(family), unix.IPPROTO_TCP, 1<<StateListen, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	be := binary.BigEndian
	n := 0
	err := sockDiagDump(fd, req, func(d []byte) bool {
		// struct inet_diag_msg: the socket id at 4 (sport, dport, src).
		if len(d) < 72 || be.Uint16(d[4:]) != local.Port() {
			return false
		}
		var a netip.Addr
		if family == unix.AF_INET {
			a = netip.AddrFrom4([4]byte(d[8:12]))
		} else {
			a = netip.AddrFrom16([16]byte(d[8:24]))
		}
		if a == local.Addr() || a.Unmap() == local.Addr().Unmap() && family == unix.AF_INET {
			n++
		}
		return false
	})
	return n, err
}

// reusePortOf is the SO_REUSEPORT value among saved options (0 when not
// saved: a new socket's).
func reusePortOf(s *image.Socket) int {
	for _, o := range s.Options {
		if o.Level == unix.SOL_SOCKET && o.Name == unix.SO_REUSEPORT {
			return o.Value
		}
	}
	return 0
}

// SettlePort sets the saved SO_REUSEPORT of a listener restored with it
// on (PortShared), once every listener of its group is there.
func SettlePort(fd int, s *image.Socket) error {
	if !s.PortShared {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, reusePortOf(s))
}

// ConnectMayChoosePort says whether connect could have chosen the local
// port of the TCP connection fd: the port is in ip_local_port_range, and
// no listener of fd's network namespace holds it for fd's address (a
// connection accepted from a listener shares its port). Only for such a
// port does the program's own bind look like connect's choice until the
// connection ends. seen caches the listener look-ups by local address.
func ConnectMayChoosePort(fd int, seen map[netip.AddrPort]bool) (bool, error) {
	la, err := unix.Getsockname(fd)
	if err != nil {
		return false, fmt.Errorf("getsockname: %w", err)
	}
	local := AddrPort(la)
	if !ephemeral(local.Port()) {
		return false, nil
	}
	if held, ok := seen[local]; ok {
		return !held, nil
	}
	family := unix.AF_INET
	if _, ok := la.(*unix.SockaddrInet6); ok {
		family = unix.AF_INET6
	}
	req := inetDiagRequest(byte(family), unix.IPPROTO_TCP, 1<<StateListen, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	held := false
	err = sockDiagDump(fd, req, func(d []byte) bool {
		// struct inet_diag_msg: the socket id at 4 (sport, dport, src).
		if len(d) < 72 || binary.BigEndian.Uint16(d[4:]) != local.Port() {
			return false
		}
		var a netip.Addr
		if family == unix.AF_INET {
			a = netip.AddrFrom4([4]byte(d[8:12]))
		} else {
			a = netip.AddrFrom16([16]byte(d[8:24]))
		}
		held = a.IsUnspecified() || a.Unmap() == local.Addr().Unmap()
		return held
	})
	if err != nil {
		return false, err
	}
	if seen != nil {
		seen[local] = held
	}
	return !held, nil
}
