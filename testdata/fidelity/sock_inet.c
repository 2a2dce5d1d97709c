/*
 * sock_inet MODE (tcp4, tcp6, mapped, udp4, udp6): TCP listener, client
 * and accepted ends (or UDP sockets) with the options programs set
 * (SOL_SOCKET, IP, IPv6, TCP, UDP: REUSEADDR, BINDTODEVICE, a classic
 * filter and SO_LOCK_FILTER, buffers, timeouts, TOS, TTL, FREEBIND,
 * V6ONLY, TCP keepalive...), data queued both ways, and a socket shut
 * down for reading. After the restore every option reads back the same,
 * the queued data arrives whole, the listener accepts, the shut down
 * socket reads end of file.
 */
#include "sock.h"
#include <netinet/udp.h>

static int v6, mapped, udp;

static socklen_t addr_of(struct sockaddr_storage *ss, int port) { return loopback_addr(ss, port, v6, mapped); }

static int port_of(int fd)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof ss;
	FID_SETUP(getsockname(fd, (struct sockaddr *)&ss, &l) == 0, "getsockname");
	return ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port : ((struct sockaddr_in6 *)&ss)->sin6_port);
}

static int new_socket(void) { return inet_socket(udp ? SOCK_DGRAM : SOCK_STREAM, v6, mapped); }

/* options sets the options every socket of the case gets, then watches
 * them (and a few left at their defaults). */
static void options(int fd, const char *who)
{
	struct timeval tv = {2, 5};
	struct linger lg = {1, 4};
	SETOPT(fd, SOL_SOCKET, SO_REUSEADDR, 1);
	SETOPT(fd, SOL_SOCKET, SO_KEEPALIVE, 1);
	SETOPT(fd, SOL_SOCKET, SO_PRIORITY, 5);
	SETOPT(fd, SOL_SOCKET, SO_MARK, 7);
	SETOPTP(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	SETOPTP(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	SETOPTP(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	SETOPT(fd, SOL_SOCKET, SO_RCVBUF, 300000);
	SETOPT(fd, SOL_SOCKET, SO_SNDBUF, 150000);
	SETOPTP(fd, SOL_SOCKET, SO_BINDTODEVICE, "lo", 3);
	SETOPT(fd, SOL_SOCKET, SO_TIMESTAMPNS, 1);
	int locked = 0;
	socklen_t ll = sizeof locked;
	getsockopt(fd, SOL_SOCKET, SO_LOCK_FILTER, &locked, &ll);
	if (!locked) { /* an accepted socket has the listener's */
		accept_all(fd);
		SETOPT(fd, SOL_SOCKET, SO_LOCK_FILTER, 1);
	}
	if (!v6 || mapped) {
		SETOPT(fd, IPPROTO_IP, IP_TOS, 0x10);
		SETOPT(fd, IPPROTO_IP, IP_TTL, 33);
		SETOPT(fd, IPPROTO_IP, IP_FREEBIND, 1);
		SETOPT(fd, IPPROTO_IP, IP_RECVERR, 1);
	}
	if (v6) {
		SETOPT(fd, IPPROTO_IPV6, IPV6_TCLASS, 0x20);
		SETOPT(fd, IPPROTO_IPV6, IPV6_UNICAST_HOPS, 17);
		SETOPT(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1);
	}
	if (udp) {
		SETOPT(fd, IPPROTO_UDP, UDP_SEGMENT, 1000);
	} else {
		SETOPT(fd, IPPROTO_TCP, TCP_NODELAY, 1);
		SETOPT(fd, IPPROTO_TCP, TCP_KEEPIDLE, 77);
		SETOPT(fd, IPPROTO_TCP, TCP_KEEPINTVL, 11);
		SETOPT(fd, IPPROTO_TCP, TCP_KEEPCNT, 4);
		SETOPT(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, 12345);
		SETOPT(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, 1 << 20);
		setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, "reno", 4); /* if the kernel has it */
	}
#define SOL(n) {n, #n}
	struct {
		int name;
		const char *label;
	} sol[] = {SOL(SO_REUSEADDR), SOL(SO_REUSEPORT), SOL(SO_KEEPALIVE), SOL(SO_PRIORITY), SOL(SO_MARK), SOL(SO_RCVTIMEO),
		   SOL(SO_SNDTIMEO), SOL(SO_LINGER), SOL(SO_RCVBUF), SOL(SO_SNDBUF), SOL(SO_BUF_LOCK), SOL(SO_BINDTODEVICE),
		   SOL(SO_TIMESTAMPNS), SOL(SO_LOCK_FILTER), SOL(SO_RCVLOWAT), SOL(SO_BROADCAST), SOL(SO_OOBINLINE),
		   SOL(SO_DONTROUTE), SOL(SO_TYPE), SOL(SO_PROTOCOL), SOL(SO_DOMAIN)};
	for (size_t i = 0; i < sizeof sol / sizeof sol[0]; i++)
		watch(fd, who, SOL_SOCKET, sol[i].name, sol[i].label);
	if (!v6 || mapped) {
		WATCH(fd, who, IPPROTO_IP, IP_TOS);
		WATCH(fd, who, IPPROTO_IP, IP_TTL);
		WATCH(fd, who, IPPROTO_IP, IP_FREEBIND);
		WATCH(fd, who, IPPROTO_IP, IP_RECVERR);
	}
	if (v6) {
		WATCH(fd, who, IPPROTO_IPV6, IPV6_V6ONLY);
		WATCH(fd, who, IPPROTO_IPV6, IPV6_TCLASS);
		WATCH(fd, who, IPPROTO_IPV6, IPV6_UNICAST_HOPS);
		WATCH(fd, who, IPPROTO_IPV6, IPV6_RECVPKTINFO);
	}
	if (udp) {
		WATCH(fd, who, IPPROTO_UDP, UDP_SEGMENT);
	} else {
		WATCH(fd, who, IPPROTO_TCP, TCP_NODELAY);
		WATCH(fd, who, IPPROTO_TCP, TCP_KEEPIDLE);
		WATCH(fd, who, IPPROTO_TCP, TCP_KEEPINTVL);
		WATCH(fd, who, IPPROTO_TCP, TCP_KEEPCNT);
		WATCH(fd, who, IPPROTO_TCP, TCP_USER_TIMEOUT);
		WATCH(fd, who, IPPROTO_TCP, TCP_NOTSENT_LOWAT);
		WATCH(fd, who, IPPROTO_TCP, TCP_CONGESTION);
	}
	/* The filter reads back the same program. */
	struct sock_filter code[4];
	socklen_t n = 4;
	FID_SETUP(getsockopt(fd, SOL_SOCKET, SO_GET_FILTER, code, &n) == 0 && n == 1, "SO_GET_FILTER");
}

static void check_filter(int fd, const char *who)
{
	struct sock_filter code[4];
	socklen_t n = 4;
	int r = getsockopt(fd, SOL_SOCKET, SO_GET_FILTER, code, &n);
	FID_EXPECT(r == 0 && n == 1 && code[0].code == (BPF_RET | BPF_K) && code[0].k == 0xffffffff,
		   "%s: socket filter: r=%d n=%u, want the 1-instruction program", who, r, n);
}

/* shut_rd_eof says whether the receive side is shut down: poll gives
 * POLLRDHUP (and a TCP read gives end of file). */
static int shut_rd_eof(int fd)
{
	struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
	if (poll(&p, 1, 0) != 1 || !(p.revents & POLLRDHUP))
		return 0;
	char c;
	return udp || recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: sock_inet LOG tcp4|tcp6|mapped|udp4|udp6");
	const char *mode = argv[2];
	v6 = strcmp(mode, "tcp6") == 0 || strcmp(mode, "mapped") == 0 || strcmp(mode, "udp6") == 0;
	mapped = strcmp(mode, "mapped") == 0;
	udp = strncmp(mode, "udp", 3) == 0;
	struct sockaddr_storage ss;
	socklen_t sl;
	enum { BIG = 100000 };
	static unsigned char big[BIG], got[BIG];
	for (size_t i = 0; i < BIG; i++)
		big[i] = pattern(3, i);

	if (udp) {
		int srv = new_socket(), cli = new_socket(), shut = new_socket();
		options(srv, "server");
		options(cli, "client");
		sl = addr_of(&ss, 0);
		FID_SETUP(bind(srv, (struct sockaddr *)&ss, sl) == 0, "bind");
		FID_SETUP(bind(cli, (struct sockaddr *)&ss, sl) == 0, "bind");
		int sport = port_of(srv), cport = port_of(cli);
		sl = addr_of(&ss, sport);
		FID_SETUP(connect(cli, (struct sockaddr *)&ss, sl) == 0, "connect");
		for (int i = 0; i < 3; i++) {
			char m[16];
			int k = snprintf(m, sizeof m, "dgram %d", i);
			FID_SETUP(send(cli, m, k, 0) == k, "send");
		}
		FID_SETUP(bind(shut, (struct sockaddr *)&ss, addr_of(&ss, 0)) == 0, "bind");
		shutdown(shut, SHUT_RD); /* ENOTCONN, but shut all the same */
		FID_SETUP(shut_rd_eof(shut), "SHUT_RD on UDP");
		fid_ready();
		fid_wait();
		check_watches();
		check_filter(srv, "server");
		for (int i = 0; i < 3; i++) {
			char m[32], want[16];
			struct sockaddr_storage from;
			socklen_t fl = sizeof from;
			snprintf(want, sizeof want, "dgram %d", i);
			ssize_t k = recvfrom(srv, m, sizeof m - 1, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
			FID_EXPECT(k == (ssize_t)strlen(want) && memcmp(m, want, k) == 0, "datagram %d: %zd bytes", i, k);
			FID_EXPECT(k < 0 || ntohs(from.ss_family == AF_INET ? ((struct sockaddr_in *)&from)->sin_port : ((struct sockaddr_in6 *)&from)->sin6_port) == cport,
				   "datagram %d from another port", i);
		}
		FID_EXPECT(shut_rd_eof(shut), "the UDP socket shut down for reading is open again");
		FID_EXPECT(send(cli, "after", 5, 0) == 5, "send after: %s", strerror(errno));
		char m[8];
		struct pollfd p = {srv, POLLIN, 0};
		FID_EXPECT(poll(&p, 1, 5000) == 1 && recv(srv, m, sizeof m, 0) == 5, "datagram after the restore");
		return fid_done();
	}

	int l = new_socket();
	options(l, "listener");
	SETOPT(l, IPPROTO_TCP, TCP_DEFER_ACCEPT, 5);
	SETOPT(l, IPPROTO_TCP, TCP_MAXSEG, 1000);
	WATCH(l, "listener", IPPROTO_TCP, TCP_DEFER_ACCEPT);
	WATCH(l, "listener", IPPROTO_TCP, TCP_MAXSEG);
	sl = addr_of(&ss, 0);
	FID_SETUP(bind(l, (struct sockaddr *)&ss, sl) == 0, "bind");
	FID_SETUP(listen(l, 9) == 0, "listen");
	WATCH(l, "listener", SOL_SOCKET, SO_ACCEPTCONN);
	int port = port_of(l);
	sl = addr_of(&ss, port);
	int c = new_socket();
	FID_SETUP(connect(c, (struct sockaddr *)&ss, sl) == 0, "connect");
	FID_SETUP(send(c, "hello", 5, 0) == 5, "send"); /* TCP_DEFER_ACCEPT waits for data */
	int s = accept(l, NULL, NULL);
	FID_SETUP(s >= 0, "accept");
	options(c, "client");
	options(s, "server");
	/* A second connection, shut down for reading on the client side. */
	int c2 = new_socket();
	FID_SETUP(connect(c2, (struct sockaddr *)&ss, sl) == 0, "connect");
	FID_SETUP(send(c2, "x", 1, 0) == 1, "send");
	int s2 = accept(l, NULL, NULL);
	FID_SETUP(s2 >= 0, "accept");
	FID_SETUP(shutdown(c2, SHUT_RD) == 0, "shutdown");
	FID_SETUP(shut_rd_eof(c2), "SHUT_RD on TCP");
	/* Queued both ways: BIG bytes the client has not read, 5 the server
	 * has not read. */
	FID_SETUP(write_all(s, big, BIG) == 0, "send big");
	fid_ready();
	fid_wait();
	check_watches();
	check_filter(c, "client");
	check_filter(s, "server");
	char h[6] = {0};
	FID_EXPECT(read_exact(s, h, 5) == 0 && memcmp(h, "hello", 5) == 0, "server: queued hello: %s", h);
	FID_EXPECT(read_exact(c, got, BIG) == 0 && memcmp(got, big, BIG) == 0, "client: the queued %d bytes", BIG);
	FID_EXPECT(shut_rd_eof(c2), "the connection shut down for reading is open again");
	char x;
	FID_EXPECT(read_exact(s2, &x, 1) == 0 && x == 'x', "server 2: queued byte");
	/* Both ways after the restore, and the listener accepts. */
	FID_EXPECT(write_all(c, "ping", 4) == 0 && read_exact(s, h, 4) == 0 && memcmp(h, "ping", 4) == 0, "ping after");
	FID_EXPECT(write_all(s, "pong", 4) == 0 && read_exact(c, h, 4) == 0 && memcmp(h, "pong", 4) == 0, "pong after");
	int c3 = new_socket();
	FID_EXPECT(connect(c3, (struct sockaddr *)&ss, sl) == 0, "connect to the restored listener: %s", strerror(errno));
	send(c3, "y", 1, 0);
	struct pollfd p = {l, POLLIN, 0};
	FID_EXPECT(poll(&p, 1, 10000) == 1 && accept(l, NULL, NULL) >= 0, "accept on the restored listener");
	return fid_done();
}
