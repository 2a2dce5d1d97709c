package sockets

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// inetDiagShutdown is INET_DIAG_SHUTDOWN: a socket's sk_shutdown bits,
// which sock_diag gives for every inet socket.
const inetDiagShutdown = 8

// inetShutdown reads what shutdown() closed on the inet socket fd (one of
// ckpt's fds), as the kernel's sk_shutdown bits (1 receive, 2 send), from
// sock_diag: poll shows the receive side of a datagram socket, but not a
// send side shut alone, after which a send fails with EPIPE. ok is false
// when sock_diag does not list the socket (an unbound datagram socket is
// not hashed).
func inetShutdown(fd, family, protocol int) (bits int, ok bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, false, fmt.Errorf("fstat: %w", err)
	}
	// struct nlmsghdr + struct inet_diag_req_v2, every state.
	req := inetDiagRequest(byte(family), byte(protocol), 0xffffffff, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	le := binary.LittleEndian
	err = sockDiagDump(fd, req, func(d []byte) bool {
		// struct inet_diag_msg is 72 bytes, idiag_inode at 68.
		if len(d) < 72 || uint64(le.Uint32(d[68:])) != st.Ino {
			return false
		}
		ok = true
		diagAttrs(d[72:], func(typ uint16, v []byte) {
			if typ == inetDiagShutdown && len(v) >= 1 {
				bits = int(v[0]) & 3
			}
		})
		return true
	})
	if err != nil {
		return 0, false, err
	}
	return bits, ok, nil
}
