package sockets

import (
	"errors"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// inetDiagMD5Sig is INET_DIAG_MD5SIG: the TCP-MD5 keys of a socket, which
// sock_diag gives a requester with CAP_NET_ADMIN and nothing else can read.
const inetDiagMD5Sig = 18

// hasMD5Keys asks sock_diag whether the TCP socket local-remote (remote
// invalid for a listener) has TCP-MD5 keys (TCP_MD5SIG).
func hasMD5Keys(fd int, local, remote netip.AddrPort) (bool, error) {
	// A reply without keys fits 4 KiB; one with many is asked again
	// with room for it.
	msgs, err := md5Reply(fd, local, remote, 4096)
	var cut *truncatedError
	if errors.As(err, &cut) {
		msgs, err = md5Reply(fd, local, remote, cut.Size)
	}
	if err != nil {
		return false, err
	}
	md5 := false
	for _, m := range msgs {
		if m.Header.Type != sockDiagByFamily || len(m.Data) < 72 {
			continue // an error: no such socket (not hashed), nothing to say
		}
		diagAttrs(m.Data[72:], func(typ uint16, _ []byte) { md5 = md5 || typ == inetDiagMD5Sig })
	}
	return md5, nil
}

// md5Reply asks sock_diag for the TCP socket local-remote with its aux
// attributes (the keys among them), read into a buffer of size bytes.
func md5Reply(fd int, local, remote netip.AddrPort, size int) ([]syscall.NetlinkMessage, error) {
	req := tcpPairRequest(local, remote, 0xffffffff, unix.NLM_F_REQUEST) // every state
	req[18] = 1 << (2 - 1)                                               // idiag_ext INET_DIAG_INFO: with the aux attributes
	nl, err := sockDiagRequest(fd, req)
	if err != nil {
		return nil, err
	}
	defer nl.Close()
	return sockDiagReceive(nl, make([]byte, size))
}
