package sockets

import (
	"golang.org/x/sys/unix"
)

// How says how an option of the inventory is saved and rebuilt.
type How int

// The ways an option is handled.
const (
	// Int is read with getsockopt and set back with setsockopt, as an int.
	Int How = iota
	// Bytes is read as the bytes getsockopt gives (a name, a struct) and
	// set back as they are.
	Bytes
	// Buffer is SO_SNDBUF/SO_RCVBUF: getsockopt gives the kernel's doubled
	// value; it is set back halved with SO_SNDBUFFORCE/SO_RCVBUFFORCE
	// (no limit, exact), and SO_BUF_LOCK is set after it.
	Buffer
	// Filter is a classic BPF program (SO_ATTACH_FILTER), read with
	// SO_GET_FILTER; an eBPF program (SO_ATTACH_BPF) cannot be read back
	// and the socket is refused.
	Filter
	// Refuse means the socket is refused by name when the option is set.
	Refuse
	// Derived follows from what else is restored (type, address, peer,
	// queues, route): rebuilt with the socket, not set.
	Derived
	// Identity is a value the kernel assigns (a cookie, a NAPI id) that a
	// program can read and nobody can set: it differs after a restore.
	Identity
	// Kernel is state a program sets and no getsockopt lists: the dump
	// reads it from the kernel with BPF (bpftask.SockReader, through
	// the dump's Hidden), and restores it (multicast memberships,
	// multicast.go) or refuses the socket by name.
	Kernel
)

// Kinds of sockets an option applies to.
const (
	onTCP = 1 << iota
	onUDP
	onUnix
	onINET = onTCP | onUDP
	onAll  = onINET | onUnix
)

// Option is one row of the inventory of what a program can observe or set
// through getsockopt/setsockopt on the sockets ckpt saves.
type Option struct {
	Level int
	Name  int
	Label string // "SOL_SOCKET SO_REUSEADDR"
	On    int    // onTCP, onUDP, onUnix
	How   How
	Size  int // bytes read for How == Bytes
	// Late options are set after the socket is connected and its queues
	// are filled (in table order): keepalive arms its timer only on a
	// connected socket, the buffers and the filter come last.
	Late bool
	// Unconnected options are only kept on sockets that are not an
	// established TCP connection (for those, repair mode sets them).
	Unconnected bool
	Note        string
}

// Options is the inventory, in the order the options are set back. Every
// option a program can observe at SOL_SOCKET, IPPROTO_IP, IPPROTO_IPV6,
// IPPROTO_TCP and IPPROTO_UDP on a TCP, UDP or UNIX socket is here; there
// are none at SOL_UNIX. A value equal to a new socket's (of the same family,
// type and protocol) is not saved.
var Options = []Option{
	// SOL_SOCKET
	{unix.SOL_SOCKET, unix.SO_DEBUG, "SOL_SOCKET SO_DEBUG", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_REUSEADDR, "SOL_SOCKET SO_REUSEADDR", onAll, Int, 0, false, false, "an established connection gets it after repair mode, which clears it"},
	{unix.SOL_SOCKET, unix.SO_REUSEPORT, "SOL_SOCKET SO_REUSEPORT", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_DONTROUTE, "SOL_SOCKET SO_DONTROUTE", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_BROADCAST, "SOL_SOCKET SO_BROADCAST", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_OOBINLINE, "SOL_SOCKET SO_OOBINLINE", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_NO_CHECK, "SOL_SOCKET SO_NO_CHECK", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_LINGER, "SOL_SOCKET SO_LINGER", onAll, Bytes, 8, false, false, "struct linger"},
	{unix.SOL_SOCKET, unix.SO_PASSCRED, "SOL_SOCKET SO_PASSCRED", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_PASSPIDFD, "SOL_SOCKET SO_PASSPIDFD", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_PASSSEC, "SOL_SOCKET SO_PASSSEC", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_PASSRIGHTS, "SOL_SOCKET SO_PASSRIGHTS", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_RCVTIMEO, "SOL_SOCKET SO_RCVTIMEO", onAll, Bytes, 16, false, false, "struct timeval"},
	{unix.SOL_SOCKET, unix.SO_SNDTIMEO, "SOL_SOCKET SO_SNDTIMEO", onAll, Bytes, 16, false, false, "struct timeval"},
	{unix.SOL_SOCKET, unix.SO_TIMESTAMP, "SOL_SOCKET SO_TIMESTAMP_OLD", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, "SOL_SOCKET SO_TIMESTAMPNS_OLD", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_TIMESTAMP_NEW, "SOL_SOCKET SO_TIMESTAMP_NEW", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_TIMESTAMPNS_NEW, "SOL_SOCKET SO_TIMESTAMPNS_NEW", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_TIMESTAMPING, "SOL_SOCKET SO_TIMESTAMPING", onAll, Bytes, 8, false, false, "struct so_timestamping (flags, bind_phc)"},
	{unix.SOL_SOCKET, unix.SO_TXTIME, "SOL_SOCKET SO_TXTIME", onAll, Bytes, 8, false, false, "struct sock_txtime"},
	{unix.SOL_SOCKET, unix.SO_MARK, "SOL_SOCKET SO_MARK", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_RCVMARK, "SOL_SOCKET SO_RCVMARK", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_RCVPRIORITY, "SOL_SOCKET SO_RCVPRIORITY", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_RXQ_OVFL, "SOL_SOCKET SO_RXQ_OVFL", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_WIFI_STATUS, "SOL_SOCKET SO_WIFI_STATUS", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_NOFCS, "SOL_SOCKET SO_NOFCS", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_SELECT_ERR_QUEUE, "SOL_SOCKET SO_SELECT_ERR_QUEUE", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_BUSY_POLL, "SOL_SOCKET SO_BUSY_POLL", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_PREFER_BUSY_POLL, "SOL_SOCKET SO_PREFER_BUSY_POLL", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_BUSY_POLL_BUDGET, "SOL_SOCKET SO_BUSY_POLL_BUDGET", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE, "SOL_SOCKET SO_MAX_PACING_RATE", onAll, Bytes, 8, false, false, "unsigned long"},
	{unix.SOL_SOCKET, unix.SO_INCOMING_CPU, "SOL_SOCKET SO_INCOMING_CPU", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_ZEROCOPY, "SOL_SOCKET SO_ZEROCOPY", onAll, Int, 0, false, false, "pending completions are on the error queue: refused (SO_ERROR)"},
	{unix.SOL_SOCKET, unix.SO_TXREHASH, "SOL_SOCKET SO_TXREHASH", onAll, Int, 0, false, false, "255 (the default) is set as -1"},
	{unix.SOL_SOCKET, unix.SO_RESERVE_MEM, "SOL_SOCKET SO_RESERVE_MEM", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_BINDTODEVICE, "SOL_SOCKET SO_BINDTODEVICE", onAll, Bytes, unix.IFNAMSIZ, false, false, "by name, before bind"},
	{unix.SOL_SOCKET, unix.SO_INQ, "SOL_SOCKET SO_INQ", onAll, Int, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_PRIORITY, "SOL_SOCKET SO_PRIORITY", onAll, Int, 0, true, false, "after IP_TOS, which sets it too"},
	{unix.SOL_SOCKET, unix.SO_KEEPALIVE, "SOL_SOCKET SO_KEEPALIVE", onAll, Int, 0, true, false, "after connect: arms the keepalive timer"},
	{unix.SOL_SOCKET, unix.SO_RCVLOWAT, "SOL_SOCKET SO_RCVLOWAT", onAll, Int, 0, true, false, "before the buffers: on TCP it can grow the receive buffer"},
	{unix.SOL_SOCKET, unix.SO_PEEK_OFF, "SOL_SOCKET SO_PEEK_OFF", onAll, Int, 0, true, false, "after the queues are filled; the dump's own peeks put it back"},
	{unix.SOL_SOCKET, unix.SO_SNDBUF, "SOL_SOCKET SO_SNDBUF", onAll, Buffer, 0, true, false, "set with SO_SNDBUFFORCE to half the value read"},
	{unix.SOL_SOCKET, unix.SO_RCVBUF, "SOL_SOCKET SO_RCVBUF", onAll, Buffer, 0, true, false, "set with SO_RCVBUFFORCE to half the value read"},
	{unix.SOL_SOCKET, unix.SO_BUF_LOCK, "SOL_SOCKET SO_BUF_LOCK", onAll, Int, 0, true, false, "after the buffers (which lock them): whether the program set them"},
	{unix.SOL_SOCKET, unix.SO_GET_FILTER, "SOL_SOCKET SO_ATTACH_FILTER", onAll, Filter, 0, true, false, "classic BPF, read with SO_GET_FILTER; SO_ATTACH_BPF (eBPF) refused"},
	{unix.SOL_SOCKET, unix.SO_LOCK_FILTER, "SOL_SOCKET SO_LOCK_FILTER", onAll, Int, 0, true, false, "after the filter"},
	{unix.SOL_SOCKET, unix.SO_ERROR, "SOL_SOCKET SO_ERROR", onAll, Refuse, 0, false, false, "a pending error or error queue (POLLERR; reading would clear it)"},
	{unix.SOL_SOCKET, unix.SO_TYPE, "SOL_SOCKET SO_TYPE", onAll, Derived, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_PROTOCOL, "SOL_SOCKET SO_PROTOCOL", onAll, Derived, 0, false, false, "IPPROTO_MPTCP: listeners and sockets never connected rebuilt as MPTCP (mptcp.go); MPTCP connections refused"},
	{unix.SOL_SOCKET, unix.SO_DOMAIN, "SOL_SOCKET SO_DOMAIN", onAll, Derived, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_ACCEPTCONN, "SOL_SOCKET SO_ACCEPTCONN", onAll, Derived, 0, false, false, "listen"},
	{unix.SOL_SOCKET, unix.SO_PEERNAME, "SOL_SOCKET SO_PEERNAME", onAll, Derived, 0, false, false, "connect"},
	{unix.SOL_SOCKET, unix.SO_BINDTOIFINDEX, "SOL_SOCKET SO_BINDTOIFINDEX", onAll, Derived, 0, false, false, "SO_BINDTODEVICE, by name"},
	{unix.SOL_SOCKET, unix.SO_SNDLOWAT, "SOL_SOCKET SO_SNDLOWAT", onAll, Derived, 0, false, false, "always 1"},
	{unix.SOL_SOCKET, unix.SO_MEMINFO, "SOL_SOCKET SO_MEMINFO", onAll, Derived, 0, false, false, "queues"},
	{unix.SOL_SOCKET, unix.SO_PEERCRED, "SOL_SOCKET SO_PEERCRED", onAll, Identity, 0, false, false, "a UNIX pair rebuilt by ckpt-redo shows ckpt-redo's pid (issue 12)"},
	{unix.SOL_SOCKET, unix.SO_PEERPIDFD, "SOL_SOCKET SO_PEERPIDFD", onAll, Identity, 0, false, false, "as SO_PEERCRED"},
	{unix.SOL_SOCKET, unix.SO_PEERGROUPS, "SOL_SOCKET SO_PEERGROUPS", onAll, Identity, 0, false, false, "as SO_PEERCRED"},
	{unix.SOL_SOCKET, unix.SO_PEERSEC, "SOL_SOCKET SO_PEERSEC", onAll, Identity, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_COOKIE, "SOL_SOCKET SO_COOKIE", onAll, Identity, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_NETNS_COOKIE, "SOL_SOCKET SO_NETNS_COOKIE", onAll, Identity, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_INCOMING_NAPI_ID, "SOL_SOCKET SO_INCOMING_NAPI_ID", onAll, Identity, 0, false, false, ""},
	{unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, "SOL_SOCKET SO_ATTACH_REUSEPORT_CBPF", onINET, Refuse, 0, false, false, "no getsockopt: read with BPF (sk_reuseport_cb->prog) when SO_REUSEPORT is on; refused"},
	{unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, "SOL_SOCKET SO_ATTACH_REUSEPORT_EBPF", onINET, Refuse, 0, false, false, "as SO_ATTACH_REUSEPORT_CBPF"},

	// IPPROTO_IP: on IPv4 sockets and IPv6 ones (v4-mapped traffic).
	{unix.IPPROTO_IP, unix.IP_TOS, "IPPROTO_IP IP_TOS", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_TTL, "IPPROTO_IP IP_TTL", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_OPTIONS, "IPPROTO_IP IP_OPTIONS", onINET, Bytes, 40, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_RECVOPTS, "IPPROTO_IP IP_RECVOPTS", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_RETOPTS, "IPPROTO_IP IP_RETOPTS", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_PKTINFO, "IPPROTO_IP IP_PKTINFO", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_RECVTTL, "IPPROTO_IP IP_RECVTTL", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_RECVTOS, "IPPROTO_IP IP_RECVTOS", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, "IPPROTO_IP IP_MTU_DISCOVER", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_RECVERR, "IPPROTO_IP IP_RECVERR", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_RECVERR_RFC4884, "IPPROTO_IP IP_RECVERR_RFC4884", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_FREEBIND, "IPPROTO_IP IP_FREEBIND", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_TRANSPARENT, "IPPROTO_IP IP_TRANSPARENT", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_PASSSEC, "IPPROTO_IP IP_PASSSEC", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_MINTTL, "IPPROTO_IP IP_MINTTL", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_NODEFRAG, "IPPROTO_IP IP_NODEFRAG", onINET, Int, 0, false, false, "raw sockets only"},
	{unix.IPPROTO_IP, unix.IP_CHECKSUM, "IPPROTO_IP IP_CHECKSUM", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, "IPPROTO_IP IP_BIND_ADDRESS_NO_PORT", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_RECVORIGDSTADDR, "IPPROTO_IP IP_RECVORIGDSTADDR", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, "IPPROTO_IP IP_MULTICAST_TTL", onUDP, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, "IPPROTO_IP IP_MULTICAST_LOOP", onUDP, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, "IPPROTO_IP IP_MULTICAST_TTL (TCP)", onTCP, Derived, 0, false, false, "multicast options cannot be set on TCP; an accepted connection shows its SYN's TTL, a restored one the default"},
	{unix.IPPROTO_IP, unix.IP_MULTICAST_IF, "IPPROTO_IP IP_MULTICAST_IF", onUDP, Bytes, 4, false, false, "the address; an interface index set with ip_mreqn is not readable"},
	{unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, "IPPROTO_IP IP_MULTICAST_ALL", onUDP, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_UNICAST_IF, "IPPROTO_IP IP_UNICAST_IF", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_RECVFRAGSIZE, "IPPROTO_IP IP_RECVFRAGSIZE", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_LOCAL_PORT_RANGE, "IPPROTO_IP IP_LOCAL_PORT_RANGE", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_MTU, "IPPROTO_IP IP_MTU", onINET, Derived, 0, false, false, "route"},
	{unix.IPPROTO_IP, unix.IP_PROTOCOL, "IPPROTO_IP IP_PROTOCOL", onINET, Derived, 0, false, false, ""},
	{unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, "IPPROTO_IP IP_ADD_MEMBERSHIP", onUDP, Kernel, 0, false, false, "memberships and source filters (IP_ADD_SOURCE_MEMBERSHIP, IP_BLOCK_SOURCE, MCAST_JOIN_GROUP, MCAST_JOIN_SOURCE_GROUP, MCAST_MSFILTER...): no getsockopt lists them; read with BPF (inet_sk->mc_list) when /proc/net/igmp shows groups beyond the kernel's, joined again after bind with IP_ADD_MEMBERSHIP and MCAST_MSFILTER, the interface by name"},
	{unix.IPPROTO_IP, unix.IP_XFRM_POLICY, "IPPROTO_IP IP_XFRM_POLICY", onINET, Refuse, 0, false, false, "per-socket IPsec policy: read with BPF (sk_policy) when the namespace counts socket policies (XFRM_MSG_GETSPDINFO); refused"},

	// IPPROTO_IPV6: on IPv6 sockets.
	{unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, "IPPROTO_IPV6 IPV6_V6ONLY", onINET, Int, 0, false, false, "before bind"},
	{unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, "IPPROTO_IPV6 IPV6_UNICAST_HOPS", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, "IPPROTO_IPV6 IPV6_MULTICAST_HOPS", onUDP, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_LOOP, "IPPROTO_IPV6 IPV6_MULTICAST_LOOP", onUDP, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, "IPPROTO_IPV6 IPV6_MULTICAST_IF", onUDP, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, "IPPROTO_IPV6 IPV6_MULTICAST_IF (TCP)", onTCP, Derived, 0, false, false, "TCP cannot set it; an accepted connection shows its SYN's interface"},
	{unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, "IPPROTO_IPV6 IPV6_MULTICAST_HOPS (TCP)", onTCP, Derived, 0, false, false, "TCP cannot set it; an accepted connection shows its SYN's hop limit"},
	{unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_ALL, "IPPROTO_IPV6 IPV6_MULTICAST_ALL", onUDP, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_UNICAST_IF, "IPPROTO_IPV6 IPV6_UNICAST_IF", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_TCLASS, "IPPROTO_IPV6 IPV6_TCLASS", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, "IPPROTO_IPV6 IPV6_RECVPKTINFO", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_2292PKTINFO, "IPPROTO_IPV6 IPV6_2292PKTINFO", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, "IPPROTO_IPV6 IPV6_RECVHOPLIMIT", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_2292HOPLIMIT, "IPPROTO_IPV6 IPV6_2292HOPLIMIT", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVRTHDR, "IPPROTO_IPV6 IPV6_RECVRTHDR", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_2292RTHDR, "IPPROTO_IPV6 IPV6_2292RTHDR", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVHOPOPTS, "IPPROTO_IPV6 IPV6_RECVHOPOPTS", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_2292HOPOPTS, "IPPROTO_IPV6 IPV6_2292HOPOPTS", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVDSTOPTS, "IPPROTO_IPV6 IPV6_RECVDSTOPTS", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_2292DSTOPTS, "IPPROTO_IPV6 IPV6_2292DSTOPTS", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, "IPPROTO_IPV6 IPV6_RECVTCLASS", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVPATHMTU, "IPPROTO_IPV6 IPV6_RECVPATHMTU", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, 11, "IPPROTO_IPV6 IPV6_FLOWINFO", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, 33, "IPPROTO_IPV6 IPV6_FLOWINFO_SEND", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, "IPPROTO_IPV6 IPV6_MTU_DISCOVER", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVERR, "IPPROTO_IPV6 IPV6_RECVERR", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVERR_RFC4884, "IPPROTO_IPV6 IPV6_RECVERR_RFC4884", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_FREEBIND, "IPPROTO_IPV6 IPV6_FREEBIND", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_TRANSPARENT, "IPPROTO_IPV6 IPV6_TRANSPARENT", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_AUTOFLOWLABEL, "IPPROTO_IPV6 IPV6_AUTOFLOWLABEL", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, "IPPROTO_IPV6 IPV6_DONTFRAG", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_ADDR_PREFERENCES, "IPPROTO_IPV6 IPV6_ADDR_PREFERENCES", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_MINHOPCOUNT, "IPPROTO_IPV6 IPV6_MINHOPCOUNT", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVORIGDSTADDR, "IPPROTO_IPV6 IPV6_RECVORIGDSTADDR", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVFRAGSIZE, "IPPROTO_IPV6 IPV6_RECVFRAGSIZE", onINET, Int, 0, false, false, ""},
	{unix.IPPROTO_IPV6, unix.IPV6_HOPOPTS, "IPPROTO_IPV6 IPV6_HOPOPTS", onINET, Bytes, 2048, false, false, "sticky option header"},
	{unix.IPPROTO_IPV6, unix.IPV6_RTHDRDSTOPTS, "IPPROTO_IPV6 IPV6_RTHDRDSTOPTS", onINET, Bytes, 2048, false, false, "sticky option header"},
	{unix.IPPROTO_IPV6, unix.IPV6_RTHDR, "IPPROTO_IPV6 IPV6_RTHDR", onINET, Bytes, 2048, false, false, "sticky option header"},
	{unix.IPPROTO_IPV6, unix.IPV6_DSTOPTS, "IPPROTO_IPV6 IPV6_DSTOPTS", onINET, Bytes, 2048, false, false, "sticky option header"},
	{unix.IPPROTO_IPV6, unix.IPV6_MTU, "IPPROTO_IPV6 IPV6_MTU", onINET, Derived, 0, false, false, "route"},
	{unix.IPPROTO_IPV6, unix.IPV6_ADD_MEMBERSHIP, "IPPROTO_IPV6 IPV6_ADD_MEMBERSHIP", onUDP, Kernel, 0, false, false, "as IP_ADD_MEMBERSHIP (ipv6_pinfo->ipv6_mc_list; /proc/net/igmp6)"},
	{unix.IPPROTO_IPV6, unix.IPV6_XFRM_POLICY, "IPPROTO_IPV6 IPV6_XFRM_POLICY", onINET, Refuse, 0, false, false, "as IP_XFRM_POLICY"},

	// IPPROTO_TCP
	{unix.IPPROTO_TCP, unix.TCP_NODELAY, "IPPROTO_TCP TCP_NODELAY", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_MAXSEG, "IPPROTO_TCP TCP_MAXSEG", onTCP, Int, 0, false, true, "a connection's MSS comes from repair mode"},
	{unix.IPPROTO_TCP, unix.TCP_CORK, "IPPROTO_TCP TCP_CORK", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, "IPPROTO_TCP TCP_KEEPIDLE", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, "IPPROTO_TCP TCP_KEEPINTVL", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, "IPPROTO_TCP TCP_KEEPCNT", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_SYNCNT, "IPPROTO_TCP TCP_SYNCNT", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_LINGER2, "IPPROTO_TCP TCP_LINGER2", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, "IPPROTO_TCP TCP_DEFER_ACCEPT", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_WINDOW_CLAMP, "IPPROTO_TCP TCP_WINDOW_CLAMP", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_CONGESTION, "IPPROTO_TCP TCP_CONGESTION", onTCP, Bytes, 16, false, false, "by name"},
	{unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, "IPPROTO_TCP TCP_USER_TIMEOUT", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, "IPPROTO_TCP TCP_NOTSENT_LOWAT", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_THIN_LINEAR_TIMEOUTS, "IPPROTO_TCP TCP_THIN_LINEAR_TIMEOUTS", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_SAVE_SYN, "IPPROTO_TCP TCP_SAVE_SYN", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_TX_DELAY, "IPPROTO_TCP TCP_TX_DELAY", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_INQ, "IPPROTO_TCP TCP_INQ", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_FASTOPEN, "IPPROTO_TCP TCP_FASTOPEN", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT, "IPPROTO_TCP TCP_FASTOPEN_CONNECT", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_FASTOPEN_NO_COOKIE, "IPPROTO_TCP TCP_FASTOPEN_NO_COOKIE", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_RTO_MIN_US, "IPPROTO_TCP TCP_RTO_MIN_US", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_RTO_MAX_MS, "IPPROTO_TCP TCP_RTO_MAX_MS", onTCP, Int, 0, false, false, ""},
	{unix.IPPROTO_TCP, unix.TCP_ULP, "IPPROTO_TCP TCP_ULP", onTCP, Refuse, 0, false, false, "an upper layer protocol (kTLS \"tls\"): its state cannot be read back"},
	{unix.IPPROTO_TCP, tcpAOInfo, "IPPROTO_TCP TCP_AO_INFO", onTCP, Refuse, 0, false, false, "TCP-AO keys cannot be read back"},
	{unix.IPPROTO_TCP, unix.TCP_MD5SIG, "IPPROTO_TCP TCP_MD5SIG", onTCP, Refuse, 0, false, false, "TCP-MD5 keys have no getsockopt: seen through sock_diag (INET_DIAG_MD5SIG) on listeners and connections in ckpt's network namespace"},
	{unix.IPPROTO_TCP, unix.TCP_FASTOPEN_KEY, "IPPROTO_TCP TCP_FASTOPEN_KEY", onTCP, Derived, 0, false, false, "the namespace's key unless set: not restored per socket"},
	{unix.IPPROTO_TCP, unix.TCP_QUICKACK, "IPPROTO_TCP TCP_QUICKACK", onTCP, Int, 0, true, false, "0 is the delayed-ACK (pingpong) mode a program set or the kernel entered; set after the queues"},
	{unix.IPPROTO_TCP, unix.TCP_INFO, "IPPROTO_TCP TCP_INFO", onTCP, Derived, 0, false, false, "state, sequence, window, options via repair; counters start again"},
	{unix.IPPROTO_TCP, unix.TCP_SAVED_SYN, "IPPROTO_TCP TCP_SAVED_SYN", onTCP, Refuse, 0, false, false, "reading frees it: read with BPF (tcp_sk->saved_syn) on a connection with TCP_SAVE_SYN; refused while held"},
	{unix.IPPROTO_TCP, unix.TCP_TIMESTAMP, "IPPROTO_TCP TCP_TIMESTAMP", onTCP, Derived, 0, false, false, "repair mode"},

	// IPPROTO_UDP
	{unix.IPPROTO_UDP, unix.UDP_CORK, "IPPROTO_UDP UDP_CORK", onUDP, Int, 0, false, false, "data corked and not sent is lost"},
	{unix.IPPROTO_UDP, unix.UDP_ENCAP, "IPPROTO_UDP UDP_ENCAP", onUDP, Int, 0, false, false, ""},
	{unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, "IPPROTO_UDP UDP_NO_CHECK6_TX", onUDP, Int, 0, false, false, ""},
	{unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, "IPPROTO_UDP UDP_NO_CHECK6_RX", onUDP, Int, 0, false, false, ""},
	{unix.IPPROTO_UDP, unix.UDP_SEGMENT, "IPPROTO_UDP UDP_SEGMENT", onUDP, Int, 0, false, false, ""},
	{unix.IPPROTO_UDP, unix.UDP_GRO, "IPPROTO_UDP UDP_GRO", onUDP, Int, 0, false, false, ""},
}

// tcpAOInfo is TCP_AO_INFO (linux/tcp.h), not in x/sys/unix.
const tcpAOInfo = 40
