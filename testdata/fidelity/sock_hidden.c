/*
 * sock_hidden KIND: socket state no getsockopt lists, which the dump reads
 * from the kernel (pkg/bpftask sockextra.go):
 *
 *   mcast4          a UDP socket joined to three IPv4 groups on the
 *                   loopback interface: one any-source, one in include
 *                   mode with a source (IP_ADD_SOURCE_MEMBERSHIP), one in
 *                   exclude mode with a blocked source (IP_BLOCK_SOURCE);
 *   raw4            an IPv4 raw socket (protocol 253) joined to an
 *                   any-source group and an include-mode one on the
 *                   loopback interface;
 *   mcast6          an IPv6 UDP socket joined to a group on the interface
 *                   of the ff00::/8 route, a source blocked;
 *   reuseport_cbpf  a UDP socket of an SO_REUSEPORT group with a classic
 *                   BPF program (refused);
 *   saved_syn       an accepted TCP connection holding the SYN its
 *                   listener saved (TCP_SAVE_SYN), not read (refused);
 *   xfrm            a UDP socket with a per-socket IPsec policy
 *                   (IP_XFRM_POLICY; refused).
 *
 * After the restore each group's filter is checked with
 * getsockopt(MCAST_MSFILTER) and a datagram sent to each group from a
 * source it admits must arrive.
 */
#include "fidelity.h"
#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/xfrm.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

struct group {
	struct sockaddr_storage addr;
	int ifindex;
	int include;
	int nsrc;
	struct sockaddr_storage src;
};

static struct sockaddr_storage v4(const char *s)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *a = (struct sockaddr_in *)&ss;
	a->sin_family = AF_INET;
	FID_SETUP(inet_pton(AF_INET, s, &a->sin_addr) == 1, "address %s", s);
	return ss;
}

static struct sockaddr_storage v6(const char *s)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in6 a = {.sin6_family = AF_INET6};
	FID_SETUP(inet_pton(AF_INET6, s, &a.sin6_addr) == 1, "address %s", s);
	memcpy(&ss, &a, sizeof a);
	return ss;
}

/* check_filter compares getsockopt(MCAST_MSFILTER) for g with g. */
static void check_filter(int fd, int level, struct group *g, const char *name)
{
	char buf[GROUP_FILTER_SIZE(4)];
	struct group_filter *gf = (struct group_filter *)buf;
	memset(buf, 0, sizeof buf);
	gf->gf_interface = g->ifindex;
	gf->gf_group = g->addr;
	gf->gf_numsrc = 4;
	socklen_t l = sizeof buf;
	if (getsockopt(fd, level, MCAST_MSFILTER, gf, &l) < 0) {
		FID_EXPECT(0, "%s: getsockopt MCAST_MSFILTER: %s", name, strerror(errno));
		return;
	}
	FID_EXPECT(gf->gf_fmode == (uint32_t)(g->include ? MCAST_INCLUDE : MCAST_EXCLUDE), "%s: filter mode %u", name, gf->gf_fmode);
	FID_EXPECT(gf->gf_numsrc == (uint32_t)g->nsrc, "%s: %u sources, want %d", name, gf->gf_numsrc, g->nsrc);
	if (g->nsrc == 1 && gf->gf_numsrc == 1) {
		size_t n = g->addr.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
		FID_EXPECT(memcmp(&gf->gf_slist[0], &g->src, n) == 0, "%s: another source", name);
	}
}

/* receives sends a datagram to g's group on port from the sender s and
 * waits (5 s at most) for it on fd. */
static void receives(int fd, int s, struct group *g, int port, const char *name)
{
	struct sockaddr_storage to = g->addr;
	socklen_t tl = sizeof(struct sockaddr_in);
	if (to.ss_family == AF_INET)
		((struct sockaddr_in *)&to)->sin_port = htons(port);
	else {
		((struct sockaddr_in6 *)&to)->sin6_port = htons(port);
		tl = sizeof(struct sockaddr_in6);
	}
	char msg[32], got[64];
	int n = snprintf(msg, sizeof msg, "to %s", name);
	/* Datagrams of an earlier group may be queued still: read until
	 * this one comes. */
	for (int tries = 0; tries < 50; tries++) {
		if (tries % 10 == 0 && sendto(s, msg, n, 0, (struct sockaddr *)&to, tl) != n) {
			FID_EXPECT(0, "%s: sendto: %s", name, strerror(errno));
			return;
		}
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 100) != 1)
			continue;
		/* A raw socket gets the IP header first. */
		ssize_t r = recv(fd, got, sizeof got, MSG_DONTWAIT);
		if (r >= n && memcmp(got + r - n, msg, n) == 0)
			return;
	}
	FID_EXPECT(0, "%s: the datagram sent to the group did not arrive", name);
}

static int port_of(int fd)
{
	struct sockaddr_storage a;
	socklen_t l = sizeof a;
	FID_SETUP(getsockname(fd, (struct sockaddr *)&a, &l) == 0, "getsockname");
	return a.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&a)->sin_port) : ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
}

/* mcast4 (raw: raw4) joins three groups, or two on a raw socket. */
static int mcast4(int raw)
{
	int fd = raw ? socket(AF_INET, SOCK_RAW, 253) : socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in any = {.sin_family = AF_INET};
	FID_SETUP(fd >= 0 && (raw || bind(fd, (struct sockaddr *)&any, sizeof any) == 0), "socket, bind: %s", strerror(errno));
	int port = raw ? 0 : port_of(fd), zero = 0, ng = raw ? 2 : 3;
	/* Only the groups it joined reach it (not every group the host
	 * receives, on its port). */
	FID_SETUP(setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof zero) == 0, "IP_MULTICAST_ALL");
	/* Groups of this process's own: other tests may join others. */
	unsigned p = getpid();
	char name[3][32];
	struct group g[3] = {0};
	for (int i = 0; i < 3; i++) {
		snprintf(name[i], sizeof name[i], "239.%u.%u.%d", (p >> 8) & 255, p & 255, i + 1);
		g[i].addr = v4(name[i]);
		g[i].ifindex = 1;
	}
	struct in_addr lo = {htonl(INADDR_LOOPBACK)}, other;
	inet_pton(AF_INET, "127.0.0.2", &other);
	struct ip_mreqn m = {.imr_multiaddr = ((struct sockaddr_in *)&g[0].addr)->sin_addr, .imr_ifindex = 1};
	FID_SETUP(setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) == 0, "IP_ADD_MEMBERSHIP: %s", strerror(errno));
	struct ip_mreq_source ms = {.imr_multiaddr = ((struct sockaddr_in *)&g[1].addr)->sin_addr, .imr_interface = lo, .imr_sourceaddr = lo};
	FID_SETUP(setsockopt(fd, IPPROTO_IP, IP_ADD_SOURCE_MEMBERSHIP, &ms, sizeof ms) == 0, "IP_ADD_SOURCE_MEMBERSHIP: %s", strerror(errno));
	g[1].include = 1, g[1].nsrc = 1, g[1].src = v4("127.0.0.1");
	if (!raw) {
		m.imr_multiaddr = ((struct sockaddr_in *)&g[2].addr)->sin_addr;
		FID_SETUP(setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) == 0, "IP_ADD_MEMBERSHIP: %s", strerror(errno));
		ms.imr_multiaddr = m.imr_multiaddr, ms.imr_interface = lo, ms.imr_sourceaddr = other;
		FID_SETUP(setsockopt(fd, IPPROTO_IP, IP_BLOCK_SOURCE, &ms, sizeof ms) == 0, "IP_BLOCK_SOURCE: %s", strerror(errno));
		g[2].nsrc = 1, g[2].src = v4("127.0.0.2");
	}
	for (int i = 0; i < ng; i++)
		check_filter(fd, IPPROTO_IP, &g[i], name[i]);
	FID_SETUP(!fid_failed, "filters as set: %s", fid_why);
	fid_ready();
	fid_wait();
	for (int i = 0; i < ng; i++)
		check_filter(fd, IPPROTO_IP, &g[i], name[i]);
	/* The sender: from 127.0.0.1, out of the loopback interface. */
	int s = raw ? socket(AF_INET, SOCK_RAW, 253) : socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr = lo};
	struct ip_mreqn out = {.imr_ifindex = 1};
	FID_SETUP(bind(s, (struct sockaddr *)&from, sizeof from) == 0, "bind the sender");
	FID_SETUP(setsockopt(s, IPPROTO_IP, IP_MULTICAST_IF, &out, sizeof out) == 0, "IP_MULTICAST_IF");
	for (int i = 0; i < ng; i++)
		receives(fd, s, &g[i], port, name[i]);
	return fid_done();
}

static int mcast6(void)
{
	int fd = socket(AF_INET6, SOCK_DGRAM, 0);
	struct sockaddr_in6 any = {.sin6_family = AF_INET6};
	FID_SETUP(bind(fd, (struct sockaddr *)&any, sizeof any) == 0, "bind");
	int port = port_of(fd), zero = 0;
	FID_SETUP(setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_ALL, &zero, sizeof zero) == 0, "IPV6_MULTICAST_ALL");
	unsigned p = getpid();
	char name[64];
	snprintf(name, sizeof name, "ff12::c4:%x:%x", (p >> 16) & 0xffff, p & 0xffff);
	struct group g = {.addr = v6(name)};
	/* Interface 0: the kernel joins on the interface of the group's
	 * route, and keeps its index. */
	struct ipv6_mreq m = {.ipv6mr_multiaddr = ((struct sockaddr_in6 *)&g.addr)->sin6_addr};
	if (setsockopt(fd, IPPROTO_IPV6, IPV6_ADD_MEMBERSHIP, &m, sizeof m) < 0) {
		char why[128];
		snprintf(why, sizeof why, "no IPv6 multicast route: IPV6_ADD_MEMBERSHIP: %s", strerror(errno));
		fid_skip(why);
	}
	/* The index the kernel chose: the one MCAST_MSFILTER knows. */
	struct if_nameindex *ifs = if_nameindex();
	FID_SETUP(ifs != NULL, "if_nameindex");
	for (struct if_nameindex *i = ifs; i->if_index && !g.ifindex; i++) {
		char buf[GROUP_FILTER_SIZE(1)];
		struct group_filter *gf = (struct group_filter *)buf;
		memset(buf, 0, sizeof buf);
		gf->gf_interface = i->if_index, gf->gf_group = g.addr, gf->gf_numsrc = 1;
		socklen_t l = sizeof buf;
		if (getsockopt(fd, IPPROTO_IPV6, MCAST_MSFILTER, gf, &l) == 0)
			g.ifindex = i->if_index;
	}
	if_freenameindex(ifs);
	FID_SETUP(g.ifindex != 0, "no interface has the group");
	struct group_source_req b = {.gsr_interface = g.ifindex};
	memcpy(&b.gsr_group, &g.addr, sizeof(struct sockaddr_in6));
	g.nsrc = 1, g.src = v6("fd00::c4");
	memcpy(&b.gsr_source, &g.src, sizeof(struct sockaddr_in6));
	FID_SETUP(setsockopt(fd, IPPROTO_IPV6, MCAST_BLOCK_SOURCE, &b, sizeof b) == 0, "MCAST_BLOCK_SOURCE: %s", strerror(errno));
	check_filter(fd, IPPROTO_IPV6, &g, name);
	FID_SETUP(!fid_failed, "filter as set: %s", fid_why);
	fid_ready();
	fid_wait();
	check_filter(fd, IPPROTO_IPV6, &g, name);
	int s = socket(AF_INET6, SOCK_DGRAM, 0);
	receives(fd, s, &g, port, name);
	return fid_done();
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: sock_hidden LOG KIND");
	const char *kind = argv[2];
	if (strcmp(kind, "mcast4") == 0 || strcmp(kind, "raw4") == 0)
		return mcast4(strcmp(kind, "raw4") == 0);
	if (strcmp(kind, "mcast6") == 0)
		return mcast6();
	int fd = -1, srv = -1;
	if (strcmp(kind, "reuseport_cbpf") == 0) {
		fd = socket(AF_INET, SOCK_DGRAM, 0);
		int one = 1;
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		FID_SETUP(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) == 0, "SO_REUSEPORT");
		FID_SETUP(bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "bind");
		struct sock_filter ret = BPF_STMT(BPF_RET | BPF_K, 0);
		struct sock_fprog prog = {.len = 1, .filter = &ret};
		FID_SETUP(setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog) == 0, "SO_ATTACH_REUSEPORT_CBPF: %s", strerror(errno));
	} else if (strcmp(kind, "saved_syn") == 0) {
		int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t l = sizeof a;
		FID_SETUP(setsockopt(ls, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof one) == 0, "TCP_SAVE_SYN");
		FID_SETUP(bind(ls, (struct sockaddr *)&a, l) == 0 && listen(ls, 4) == 0, "listen");
		FID_SETUP(getsockname(ls, (struct sockaddr *)&a, &l) == 0, "getsockname");
		fd = socket(AF_INET, SOCK_STREAM, 0);
		FID_SETUP(connect(fd, (struct sockaddr *)&a, l) == 0, "connect");
		srv = accept(ls, NULL, NULL);
		FID_SETUP(srv >= 0, "accept");
		close(ls);
	} else if (strcmp(kind, "xfrm") == 0) {
		fd = socket(AF_INET, SOCK_DGRAM, 0);
		struct xfrm_userpolicy_info pol = {0};
		pol.sel.family = AF_INET;
		pol.lft.soft_byte_limit = pol.lft.hard_byte_limit = XFRM_INF;
		pol.lft.soft_packet_limit = pol.lft.hard_packet_limit = XFRM_INF;
		pol.dir = XFRM_POLICY_OUT, pol.action = XFRM_POLICY_ALLOW, pol.share = XFRM_SHARE_ANY;
		if (setsockopt(fd, IPPROTO_IP, IP_XFRM_POLICY, &pol, sizeof pol) < 0) {
			char why[128];
			snprintf(why, sizeof why, "IP_XFRM_POLICY: %s", strerror(errno));
			fid_skip(why);
		}
	} else {
		FID_SETUP(0, "unknown kind %s", kind);
	}
	fid_ready();
	fid_wait();
	if (srv >= 0) {
		/* Untouched, the SYN is still there. */
		char syn[512];
		socklen_t l = sizeof syn;
		FID_EXPECT(getsockopt(srv, IPPROTO_TCP, TCP_SAVED_SYN, syn, &l) == 0 && l > 0, "TCP_SAVED_SYN: %s, %u bytes", strerror(errno), l);
	}
	int t;
	socklen_t tl = sizeof t;
	FID_EXPECT(getsockopt(fd, SOL_SOCKET, SO_TYPE, &t, &tl) == 0, "the socket is gone");
	return fid_done();
}
