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

// Listeners is the set of TCP listening addresses of a network
// namespace, listed once, and ip_local_port_range, read once
// (ConnectMayChoosePort); the zero value is
// empty and listed on first use.
type Listeners struct {
	listed bool
	ports  map[uint16][]netip.Addr // port -> listening addresses
	// ranged tells that lo, hi hold ip_local_port_range (ok: read).
	ranged, ok bool
	lo, hi     uint16
}

// list reads the listeners of the network namespace of the socket fd,
// IPv4 and IPv6, with one sock_diag dump each.
func (l *Listeners) list(fd int) error {
	l.ports = map[uint16][]netip.Addr{}
	for _, family := range []int{unix.AF_INET, unix.AF_INET6} {
		req := inetDiagRequest(byte(family), unix.IPPROTO_TCP, 1<<StateListen, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
		err := sockDiagDump(fd, req, func(d []byte) bool {
			// struct inet_diag_msg: the socket id at 4 (sport, dport, src).
			if len(d) < 72 {
				return false
			}
			var a netip.Addr
			if family == unix.AF_INET {
				a = netip.AddrFrom4([4]byte(d[8:12]))
			} else {
				a = netip.AddrFrom16([16]byte(d[8:24]))
			}
			port := binary.BigEndian.Uint16(d[4:])
			l.ports[port] = append(l.ports[port], a)
			return false
		})
		if err != nil {
			return err
		}
	}
	l.listed = true
	return nil
}

// ConnectMayChoosePort says whether connect could have chosen the local
// port of the TCP connection fd: the port is in ip_local_port_range, and
// no listener holds it for fd's address (a connection accepted from a
// listener shares its port). Only for such a port does the program's own
// bind look like connect's choice until the connection ends. ls lists the
// namespace's listeners on first need, once.
func ConnectMayChoosePort(fd int, ls *Listeners) (bool, error) {
	la, err := unix.Getsockname(fd)
	if err != nil {
		return false, fmt.Errorf("getsockname: %w", err)
	}
	local := AddrPort(la)
	if !ls.ranged {
		ls.lo, ls.hi, ls.ok = localPortRange()
		ls.ranged = true
	}
	if !ls.ok || local.Port() < ls.lo || local.Port() > ls.hi {
		return false, nil
	}
	if !ls.listed {
		if err := ls.list(fd); err != nil {
			return false, err
		}
	}
	for _, a := range ls.ports[local.Port()] {
		if a.IsUnspecified() || a.Unmap() == local.Addr().Unmap() {
			return false, nil
		}
	}
	return true, nil
}
