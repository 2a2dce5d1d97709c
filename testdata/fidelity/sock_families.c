/*
 * sock_families KIND: the inet sockets besides TCP and UDP, and the
 * families ckpt refuses.
 *   udplite4, udplite6  UDP-Lite with checksum coverage and IP_TOS, bound
 *                       to loopback and connected to itself;
 *   ping4, ping6        ICMP ping sockets bound (their identifier) and
 *                       connected to loopback, with IP_TTL: an echo
 *                       round trip before and after;
 *   ping4_unbound       an ICMP ping socket never bound nor used (not
 *                       hashed yet): an echo sent to loopback after;
 *   raw4                raw ICMP with ICMP_FILTER (all blocked), IP_TTL,
 *                       IP_HDRINCL, bound; raw IPPROTO_RAW;
 *   raw6                raw ICMPv6 with ICMP6_FILTER, bound; raw protocol
 *                       253 with IPV6_CHECKSUM;
 *   packet              a packet socket bound to lo and ethertype 0x88b5,
 *                       with PACKET_AUXDATA: a frame to itself after;
 *   packet_spkt         old SOCK_PACKET sockets (bound by device name),
 *                       one bound to lo, one not: the same names after;
 *   packet_members      a packet socket receiving nothing (protocol 0)
 *                       with TPACKET_V2, a receive ring and memberships
 *                       on lo (promiscuous twice, a multicast address);
 *                       one bound to lo with a transmit ring, in a fanout
 *                       group: rings, group and memberships still there
 *                       after;
 *   netlink             NETLINK_ROUTE autobound (its port id), in group 34,
 *                       with NETLINK_EXT_ACK: a RTM_GETLINK dump after;
 * each checked after the restore for its names and options; and refused:
 *   netlink_queued (a reply waiting), packet_ring (a receive ring that
 *   may hold frames), packet_mapped (a ring mapped),
 *   raw_queued (a raw socket with packets queued).
 * Ping sockets need net.ipv4.ping_group_range to include gid 0: the case
 * sets it when socket() says EACCES.
 */
#include "fidelity.h"
#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/icmp6.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>

#ifndef IPPROTO_UDPLITE
#define IPPROTO_UDPLITE 136
#endif
#define UDPLITE_SEND_CSCOV 10
#define UDPLITE_RECV_CSCOV 11
#ifndef ICMP_FILTER
#define ICMP_FILTER 1 /* linux/icmp.h, which clashes with netinet/ip_icmp.h */
#endif
struct icmp_filter {
	unsigned int data;
};

static int geti(int fd, int level, int name)
{
	int v = -1;
	socklen_t l = sizeof v;
	if (getsockopt(fd, level, name, &v, &l) < 0)
		return -1000 - errno;
	return v;
}

struct names {
	struct sockaddr_storage local, peer;
	socklen_t ll, pl;
};

static void names_of(int fd, struct names *n)
{
	memset(n, 0, sizeof *n);
	n->ll = n->pl = sizeof n->local;
	getsockname(fd, (struct sockaddr *)&n->local, &n->ll);
	if (getpeername(fd, (struct sockaddr *)&n->peer, &n->pl) < 0)
		n->pl = 0;
}

static int same_names(int fd, struct names *want)
{
	struct names got;
	names_of(fd, &got);
	return got.ll == want->ll && got.pl == want->pl && memcmp(&got.local, &want->local, got.ll) == 0 &&
	       memcmp(&got.peer, &want->peer, got.pl) == 0;
}

static int loopback(int family, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	if (family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;
		a->sin_family = AF_INET;
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		return sizeof *a;
	}
	struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
	a->sin6_family = AF_INET6;
	a->sin6_addr = in6addr_loopback;
	return sizeof *a;
}

/* ping_socket makes an ICMP ping socket, allowing gid 0 if need be. */
static int ping_socket(int family)
{
	int proto = family == AF_INET ? IPPROTO_ICMP : IPPROTO_ICMPV6;
	int fd = socket(family, SOCK_DGRAM, proto);
	if (fd < 0 && errno == EACCES) {
		int f = open("/proc/sys/net/ipv4/ping_group_range", O_WRONLY);
		FID_SETUP(f >= 0 && write(f, "0 0", 3) == 3, "allow ping sockets to gid 0");
		close(f);
		fd = socket(family, SOCK_DGRAM, proto);
	}
	return fd;
}

/* echo sends an echo request with seq on a connected ping socket and
 * waits for its reply. */
static int echo(int fd, int family, int seq)
{
	unsigned char req[16] = {0}, rep[256];
	req[0] = family == AF_INET ? ICMP_ECHO : ICMP6_ECHO_REQUEST;
	req[6] = seq >> 8;
	req[7] = seq & 0xff;
	memcpy(req + 8, "ckptping", 8);
	if (send(fd, req, sizeof req, 0) != sizeof req)
		return 0;
	for (int i = 0; i < 10; i++) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 500) != 1)
			continue;
		ssize_t n = recv(fd, rep, sizeof rep, 0);
		int reply = family == AF_INET ? ICMP_ECHOREPLY : ICMP6_ECHO_REPLY;
		if (n >= 8 && rep[0] == reply && rep[6] == (seq >> 8) && rep[7] == (seq & 0xff))
			return 1;
	}
	return 0;
}

/* getlink sends a RTM_GETLINK dump request; with wait it reads the
 * replies up to NLMSG_DONE. */
static int getlink(int fd, int wait)
{
	struct {
		struct nlmsghdr h;
		struct ifinfomsg i;
	} req = {.h = {.nlmsg_len = sizeof req, .nlmsg_type = RTM_GETLINK, .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 7}};
	req.i.ifi_family = AF_UNSPEC;
	if (send(fd, &req, sizeof req, 0) != sizeof req)
		return 0;
	if (!wait)
		return 1;
	static char buf[65536];
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof buf, 0);
		if (n <= 0)
			return 0;
		for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n))
			if (h->nlmsg_type == NLMSG_DONE)
				return 1;
	}
}

/* frame sends an ethertype 0x88b5 frame on lo from the bound packet
 * socket fd, receives it, and drains the copies (outgoing and incoming). */
static int frame(int fd)
{
	struct sockaddr_ll to = {.sll_family = AF_PACKET, .sll_protocol = htons(0x88b5), .sll_ifindex = if_nametoindex("lo"), .sll_halen = 6};
	if (sendto(fd, "ckptframe", 9, 0, (struct sockaddr *)&to, sizeof to) != 9)
		return 0;
	char b[64];
	struct pollfd p = {fd, POLLIN, 0};
	int got = 0;
	while (poll(&p, 1, got ? 100 : 2000) == 1) {
		ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
		if (n == 9 && memcmp(b, "ckptframe", 9) == 0)
			got = 1;
	}
	return got;
}

/* promiscuity_of_lo is lo's promiscuity count (ip -d link), which a
 * PACKET_MR_PROMISC membership raises; -1 if unknown. */
static int promiscuity_of_lo(void)
{
	FILE *p = popen("ip -d link show lo 2>/dev/null", "r");
	char line[512];
	int n = -1;
	while (p && fgets(line, sizeof line, p)) {
		char *at = strstr(line, "promiscuity ");
		if (at)
			sscanf(at, "promiscuity %d", &n);
	}
	if (p)
		pclose(p);
	return n;
}

/* mcast_on_lo says whether /proc/net/dev_mcast lists addr on lo. */
static int mcast_on_lo(const char *addr)
{
	FILE *f = fopen("/proc/net/dev_mcast", "r");
	char line[256], dev[32], a[64];
	int idx, users, global, found = 0;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "%d %31s %d %d %63s", &idx, dev, &users, &global, a) == 5 && !strcmp(dev, "lo") && !strcmp(a, addr))
			found = 1;
	if (f)
		fclose(f);
	return found;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc > 2, "usage: sock_families LOG KIND");
	const char *kind = argv[2];
	int fd = -1, fd2 = -1, family = strchr(kind, '6') ? AF_INET6 : AF_INET;
	struct sockaddr_storage lo;
	socklen_t lol = loopback(family, &lo);
	int v;
	struct names n1, n2;
	if (strncmp(kind, "udplite", 7) == 0) {
		fd = socket(family, SOCK_DGRAM, IPPROTO_UDPLITE);
		FID_SETUP(fd >= 0, "socket UDP-Lite");
		v = 20;
		FID_SETUP(setsockopt(fd, IPPROTO_UDPLITE, UDPLITE_SEND_CSCOV, &v, sizeof v) == 0, "SEND_CSCOV");
		v = 24;
		FID_SETUP(setsockopt(fd, IPPROTO_UDPLITE, UDPLITE_RECV_CSCOV, &v, sizeof v) == 0, "RECV_CSCOV");
		v = 0x10;
		FID_SETUP(setsockopt(fd, family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6, family == AF_INET ? IP_TOS : IPV6_TCLASS, &v, sizeof v) == 0, "TOS");
		FID_SETUP(bind(fd, (struct sockaddr *)&lo, lol) == 0, "bind");
		struct sockaddr_storage me;
		socklen_t ml = sizeof me;
		FID_SETUP(getsockname(fd, (struct sockaddr *)&me, &ml) == 0 && connect(fd, (struct sockaddr *)&me, ml) == 0, "connect to itself");
	} else if (strcmp(kind, "ping4_unbound") == 0) {
		fd = ping_socket(AF_INET);
		if (fd < 0 && (errno == EAFNOSUPPORT || errno == EPROTONOSUPPORT)) {
			fid_skip("no ping sockets");
			return 0;
		}
		FID_SETUP(fd >= 0, "ping socket");
	} else if (strncmp(kind, "ping", 4) == 0) {
		fd = ping_socket(family);
		if (fd < 0 && (errno == EAFNOSUPPORT || errno == EPROTONOSUPPORT)) {
			fid_skip("no ping sockets");
			return 0;
		}
		FID_SETUP(fd >= 0, "ping socket");
		v = 33;
		FID_SETUP(setsockopt(fd, family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6, family == AF_INET ? IP_TTL : IPV6_UNICAST_HOPS, &v, sizeof v) == 0, "TTL");
		FID_SETUP(bind(fd, (struct sockaddr *)&lo, lol) == 0, "bind");
		FID_SETUP(connect(fd, (struct sockaddr *)&lo, lol) == 0, "connect");
		FID_SETUP(echo(fd, family, 1), "echo before the dump");
	} else if (strcmp(kind, "raw4") == 0) {
		fd = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
		FID_SETUP(fd >= 0, "raw ICMP");
		struct icmp_filter flt = {~0u};
		FID_SETUP(setsockopt(fd, SOL_RAW, ICMP_FILTER, &flt, sizeof flt) == 0, "ICMP_FILTER");
		v = 17;
		FID_SETUP(setsockopt(fd, IPPROTO_IP, IP_TTL, &v, sizeof v) == 0, "TTL");
		v = 1;
		FID_SETUP(setsockopt(fd, IPPROTO_IP, IP_HDRINCL, &v, sizeof v) == 0, "HDRINCL");
		FID_SETUP(bind(fd, (struct sockaddr *)&lo, lol) == 0, "bind");
		fd2 = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
		FID_SETUP(fd2 >= 0, "raw IPPROTO_RAW");
	} else if (strcmp(kind, "raw6") == 0) {
		fd = socket(AF_INET6, SOCK_RAW, IPPROTO_ICMPV6);
		FID_SETUP(fd >= 0, "raw ICMPv6");
		struct icmp6_filter flt;
		ICMP6_FILTER_SETBLOCKALL(&flt);
		ICMP6_FILTER_SETPASS(ICMP6_ECHO_REPLY, &flt);
		FID_SETUP(setsockopt(fd, IPPROTO_ICMPV6, ICMP6_FILTER, &flt, sizeof flt) == 0, "ICMP6_FILTER");
		FID_SETUP(bind(fd, (struct sockaddr *)&lo, lol) == 0, "bind");
		fd2 = socket(AF_INET6, SOCK_RAW, 253);
		FID_SETUP(fd2 >= 0, "raw 253");
		v = 2;
		FID_SETUP(setsockopt(fd2, IPPROTO_IPV6, IPV6_CHECKSUM, &v, sizeof v) == 0, "IPV6_CHECKSUM");
	} else if (strncmp(kind, "netlink", 7) == 0) {
		fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
		struct sockaddr_nl a = {.nl_family = AF_NETLINK};
		FID_SETUP(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "netlink");
		v = 34; /* RTNLGRP_MCTP_IFADDR: quiet here */
		FID_SETUP(setsockopt(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &v, sizeof v) == 0, "join group 34");
		v = 1;
		FID_SETUP(setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &v, sizeof v) == 0, "NETLINK_EXT_ACK");
		if (strcmp(kind, "netlink_queued") == 0)
			FID_SETUP(getlink(fd, 0), "RTM_GETLINK request");
		else
			FID_SETUP(getlink(fd, 1), "RTM_GETLINK before the dump");
	} else if (strcmp(kind, "packet") == 0) {
		fd = socket(AF_PACKET, SOCK_DGRAM, 0);
		FID_SETUP(fd >= 0, "packet socket");
		v = 1;
		FID_SETUP(setsockopt(fd, SOL_PACKET, PACKET_AUXDATA, &v, sizeof v) == 0, "PACKET_AUXDATA");
		struct sockaddr_ll a = {.sll_family = AF_PACKET, .sll_protocol = htons(0x88b5), .sll_ifindex = if_nametoindex("lo")};
		FID_SETUP(bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "bind to lo");
		FID_SETUP(frame(fd), "a frame to itself before the dump");
	} else if (strcmp(kind, "packet_spkt") == 0) {
		fd = socket(AF_PACKET, SOCK_PACKET, htons(0x88b6));
		fd2 = socket(AF_PACKET, SOCK_PACKET, htons(0x88b6));
		FID_SETUP(fd >= 0 && fd2 >= 0, "SOCK_PACKET sockets");
		struct sockaddr a = {.sa_family = AF_PACKET};
		strcpy(a.sa_data, "lo");
		FID_SETUP(bind(fd, &a, sizeof a) == 0, "bind to lo by name");
	} else if (strcmp(kind, "packet_members") == 0) {
		fd = socket(AF_PACKET, SOCK_RAW, 0);
		fd2 = socket(AF_PACKET, SOCK_DGRAM, htons(0x88b5));
		FID_SETUP(fd >= 0 && fd2 >= 0, "packet sockets");
		v = TPACKET_V2;
		FID_SETUP(setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v) == 0, "PACKET_VERSION");
		struct tpacket_req r = {.tp_block_size = 4096, .tp_block_nr = 1, .tp_frame_size = 2048, .tp_frame_nr = 2};
		FID_SETUP(setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &r, sizeof r) == 0, "PACKET_RX_RING");
		struct packet_mreq m = {.mr_ifindex = if_nametoindex("lo"), .mr_type = PACKET_MR_PROMISC};
		FID_SETUP(setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &m, sizeof m) == 0, "PROMISC");
		FID_SETUP(setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &m, sizeof m) == 0, "PROMISC again");
		struct packet_mreq mc = {.mr_ifindex = if_nametoindex("lo"), .mr_type = PACKET_MR_MULTICAST, .mr_alen = 6, .mr_address = {0x01, 0x00, 0x5e, 0x00, 0x00, 0x42}};
		FID_SETUP(setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mc, sizeof mc) == 0, "MULTICAST");
		struct sockaddr_ll a = {.sll_family = AF_PACKET, .sll_protocol = htons(0x88b5), .sll_ifindex = if_nametoindex("lo")};
		FID_SETUP(bind(fd2, (struct sockaddr *)&a, sizeof a) == 0, "bind to lo");
		FID_SETUP(setsockopt(fd2, SOL_PACKET, PACKET_TX_RING, &r, sizeof r) == 0, "PACKET_TX_RING");
		v = 0x4242 | PACKET_FANOUT_CPU << 16;
		FID_SETUP(setsockopt(fd2, SOL_PACKET, PACKET_FANOUT, &v, sizeof v) == 0, "PACKET_FANOUT");
	} else if (strcmp(kind, "packet_mapped") == 0) {
		fd = socket(AF_PACKET, SOCK_RAW, 0);
		struct tpacket_req r = {.tp_block_size = 4096, .tp_block_nr = 1, .tp_frame_size = 2048, .tp_frame_nr = 2};
		FID_SETUP(fd >= 0 && setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &r, sizeof r) == 0, "PACKET_RX_RING");
		FID_SETUP(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) != MAP_FAILED, "mmap the ring");
	} else if (strcmp(kind, "packet_ring") == 0) {
		fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
		struct tpacket_req r = {.tp_block_size = 4096, .tp_block_nr = 1, .tp_frame_size = 2048, .tp_frame_nr = 2};
		FID_SETUP(fd >= 0 && setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &r, sizeof r) == 0, "PACKET_RX_RING");
	} else if (strcmp(kind, "raw_queued") == 0) {
		fd = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
		FID_SETUP(fd >= 0, "raw ICMP");
		unsigned char req[8] = {ICMP_ECHO, 0, 0xf7, 0xff, 0, 0, 0, 0}; /* checksum of this header */
		FID_SETUP(sendto(fd, req, sizeof req, 0, (struct sockaddr *)&lo, lol) == sizeof req, "send an echo");
		struct pollfd p = {fd, POLLIN, 0};
		FID_SETUP(poll(&p, 1, 2000) == 1, "nothing queued");
	} else {
		FID_SETUP(0, "unknown kind %s", kind);
	}
	names_of(fd, &n1);
	if (fd2 >= 0)
		names_of(fd2, &n2);

	fid_ready();
	fid_wait();

	FID_EXPECT(same_names(fd, &n1), "names of the socket differ");
	FID_EXPECT(fd2 < 0 || same_names(fd2, &n2), "names of the second socket differ");
	if (strncmp(kind, "udplite", 7) == 0) {
		FID_EXPECT(geti(fd, SOL_SOCKET, SO_PROTOCOL) == IPPROTO_UDPLITE, "protocol %d", geti(fd, SOL_SOCKET, SO_PROTOCOL));
		FID_EXPECT(geti(fd, IPPROTO_UDPLITE, UDPLITE_SEND_CSCOV) == 20, "SEND_CSCOV %d", geti(fd, IPPROTO_UDPLITE, UDPLITE_SEND_CSCOV));
		FID_EXPECT(geti(fd, IPPROTO_UDPLITE, UDPLITE_RECV_CSCOV) == 24, "RECV_CSCOV %d", geti(fd, IPPROTO_UDPLITE, UDPLITE_RECV_CSCOV));
		v = geti(fd, family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6, family == AF_INET ? IP_TOS : IPV6_TCLASS);
		FID_EXPECT(v == 0x10, "TOS %d", v);
		char b[8] = {0};
		FID_EXPECT(send(fd, "hello", 5, 0) == 5 && recv(fd, b, sizeof b, 0) == 5 && memcmp(b, "hello", 5) == 0, "no datagram to itself");
	} else if (strcmp(kind, "ping4_unbound") == 0) {
		FID_EXPECT(connect(fd, (struct sockaddr *)&lo, lol) == 0 && echo(fd, AF_INET, 3), "no echo reply after the restore");
	} else if (strncmp(kind, "ping", 4) == 0) {
		v = geti(fd, family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6, family == AF_INET ? IP_TTL : IPV6_UNICAST_HOPS);
		FID_EXPECT(v == 33, "TTL %d", v);
		FID_EXPECT(echo(fd, family, 2), "no echo reply after the restore");
	} else if (strcmp(kind, "raw4") == 0) {
		struct icmp_filter flt = {0};
		socklen_t l = sizeof flt;
		FID_EXPECT(getsockopt(fd, SOL_RAW, ICMP_FILTER, &flt, &l) == 0 && flt.data == ~0u, "ICMP_FILTER %#x", flt.data);
		FID_EXPECT(geti(fd, IPPROTO_IP, IP_TTL) == 17, "TTL %d", geti(fd, IPPROTO_IP, IP_TTL));
		FID_EXPECT(geti(fd, IPPROTO_IP, IP_HDRINCL) == 1, "HDRINCL %d", geti(fd, IPPROTO_IP, IP_HDRINCL));
		FID_EXPECT(geti(fd2, SOL_SOCKET, SO_PROTOCOL) == IPPROTO_RAW && geti(fd2, IPPROTO_IP, IP_HDRINCL) == 1, "the IPPROTO_RAW socket");
	} else if (strcmp(kind, "raw6") == 0) {
		struct icmp6_filter flt;
		socklen_t l = sizeof flt;
		FID_EXPECT(getsockopt(fd, IPPROTO_ICMPV6, ICMP6_FILTER, &flt, &l) == 0 && ICMP6_FILTER_WILLPASS(ICMP6_ECHO_REPLY, &flt) &&
				   ICMP6_FILTER_WILLBLOCK(ICMP6_ECHO_REQUEST, &flt),
			   "ICMP6_FILTER");
		FID_EXPECT(geti(fd2, SOL_SOCKET, SO_PROTOCOL) == 253, "protocol %d", geti(fd2, SOL_SOCKET, SO_PROTOCOL));
		FID_EXPECT(geti(fd2, IPPROTO_IPV6, IPV6_CHECKSUM) == 2, "IPV6_CHECKSUM %d", geti(fd2, IPPROTO_IPV6, IPV6_CHECKSUM));
	} else if (strcmp(kind, "netlink") == 0) {
		unsigned int groups[4] = {0};
		socklen_t l = sizeof groups;
		FID_EXPECT(getsockopt(fd, SOL_NETLINK, NETLINK_LIST_MEMBERSHIPS, groups, &l) == 0 && groups[0] == 0 && groups[1] == 1u << 1,
			   "memberships %#x %#x, want group 34", groups[0], groups[1]);
		FID_EXPECT(geti(fd, SOL_NETLINK, NETLINK_EXT_ACK) == 1, "NETLINK_EXT_ACK %d", geti(fd, SOL_NETLINK, NETLINK_EXT_ACK));
		FID_EXPECT(((struct sockaddr_nl *)&n1.local)->nl_pid == (unsigned)getpid(), "port id %u, want the pid", ((struct sockaddr_nl *)&n1.local)->nl_pid);
		FID_EXPECT(getlink(fd, 1), "no RTM_GETLINK reply after the restore");
	} else if (strcmp(kind, "netlink_queued") == 0) {
		char b[256];
		FID_EXPECT(recv(fd, b, sizeof b, MSG_DONTWAIT) > 0, "the queued reply");
	} else if (strcmp(kind, "packet") == 0) {
		FID_EXPECT(geti(fd, SOL_PACKET, PACKET_AUXDATA) == 1, "PACKET_AUXDATA %d", geti(fd, SOL_PACKET, PACKET_AUXDATA));
		FID_EXPECT(frame(fd), "no frame to itself after the restore");
	} else if (strcmp(kind, "packet_members") == 0) {
		FID_EXPECT(geti(fd, SOL_PACKET, PACKET_VERSION) == TPACKET_V2, "PACKET_VERSION %d", geti(fd, SOL_PACKET, PACKET_VERSION));
		struct tpacket_req r = {.tp_block_size = 4096, .tp_block_nr = 1, .tp_frame_size = 2048, .tp_frame_nr = 2};
		FID_EXPECT(setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &r, sizeof r) < 0 && errno == EBUSY, "no receive ring (setting one: %s)", strerror(errno));
		FID_EXPECT(setsockopt(fd2, SOL_PACKET, PACKET_TX_RING, &r, sizeof r) < 0 && errno == EBUSY, "no transmit ring (setting one: %s)", strerror(errno));
		FID_EXPECT(geti(fd2, SOL_PACKET, PACKET_FANOUT) == (0x4242 | PACKET_FANOUT_CPU << 16), "PACKET_FANOUT %#x", geti(fd2, SOL_PACKET, PACKET_FANOUT));
		FID_EXPECT(promiscuity_of_lo() > 0, "lo is not promiscuous (promiscuity %d)", promiscuity_of_lo());
		FID_EXPECT(mcast_on_lo("01005e000042"), "the multicast address is not on lo (/proc/net/dev_mcast)");
		struct packet_mreq m = {.mr_ifindex = if_nametoindex("lo"), .mr_type = PACKET_MR_PROMISC};
		FID_EXPECT(setsockopt(fd, SOL_PACKET, PACKET_DROP_MEMBERSHIP, &m, sizeof m) == 0, "PROMISC membership gone");
		FID_EXPECT(setsockopt(fd, SOL_PACKET, PACKET_DROP_MEMBERSHIP, &m, sizeof m) == 0, "second PROMISC membership gone");
		struct packet_mreq mc = {.mr_ifindex = if_nametoindex("lo"), .mr_type = PACKET_MR_MULTICAST, .mr_alen = 6, .mr_address = {0x01, 0x00, 0x5e, 0x00, 0x00, 0x42}};
		FID_EXPECT(setsockopt(fd, SOL_PACKET, PACKET_DROP_MEMBERSHIP, &mc, sizeof mc) == 0, "MULTICAST membership gone");
	} else if (strcmp(kind, "packet_ring") == 0 || strcmp(kind, "packet_mapped") == 0) {
		FID_EXPECT(geti(fd, SOL_SOCKET, SO_DOMAIN) == AF_PACKET, "packet socket");
	} else if (strcmp(kind, "raw_queued") == 0) {
		char b[256];
		FID_EXPECT(recv(fd, b, sizeof b, MSG_DONTWAIT) > 0, "the queued packet");
	}
	return fid_done();
}
