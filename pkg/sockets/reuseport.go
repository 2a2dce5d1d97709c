package sockets

import (
	"encoding/binary"
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
