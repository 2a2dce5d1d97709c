package sockets

import (
	"net/netip"

	"golang.org/x/sys/unix"
)

// inetDiagMD5Sig is INET_DIAG_MD5SIG: the TCP-MD5 keys of a socket, which
// sock_diag gives a requester with CAP_NET_ADMIN and nothing else can read.
const inetDiagMD5Sig = 18

// hasMD5Keys asks sock_diag whether the TCP socket local-remote (remote
// invalid for a listener) has TCP-MD5 keys (TCP_MD5SIG).
func hasMD5Keys(local, remote netip.AddrPort) (bool, error) {
	req := tcpPairRequest(local, remote, 0xffffffff, unix.NLM_F_REQUEST) // every state
	req[18] = 1 << (2 - 1)                                               // idiag_ext INET_DIAG_INFO: with the aux attributes
	nl, err := sockDiagRequest(req)
	if err != nil {
		return false, err
	}
	defer nl.Close()
	msgs, err := sockDiagReceive(nl, make([]byte, 1<<16))
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
