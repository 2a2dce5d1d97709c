/*
 * sock_inet_state MODE: inet socket state that is neither a queue nor a
 * plain option value, each read back after the restore:
 *
 *   quickack      TCP_QUICKACK turned off (the delayed-ACK mode) on a
 *                 socket never connected, a listener and both ends of a
 *                 connection;
 *   udp_shutdown  UDP sockets (IPv4, IPv6, connected or not) shut down
 *                 for sending only, for receiving only, and both: a
 *                 send on a shut send side fails with EPIPE, a shut
 *                 receive side polls POLLRDHUP;
 *   freebind      sockets bound to addresses the machine does not have,
 *                 with IP_FREEBIND, which one of them turned off after
 *                 the bind: same addresses, same IP_FREEBIND;
 *   reuseport     two TCP listeners on one port (SO_REUSEPORT), one of
 *                 which turned SO_REUSEPORT off after listening: same
 *                 values, and both still take connections on the port.
 */
#include "sock.h"

static struct sockaddr_in v4(const char *ip, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static struct sockaddr_in6 v6(const char *ip, int port)
{
	struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
	inet_pton(AF_INET6, ip, &a.sin6_addr);
	return a;
}

static int port_of(int fd)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof ss;
	FID_SETUP(getsockname(fd, (struct sockaddr *)&ss, &l) == 0, "getsockname");
	return ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port : ((struct sockaddr_in6 *)&ss)->sin6_port);
}

static int listener(int reuseport, int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	FID_SETUP(fd >= 0, "socket");
	if (reuseport)
		SETOPT(fd, SOL_SOCKET, SO_REUSEPORT, 1);
	struct sockaddr_in a = v4("127.0.0.1", port);
	FID_SETUP(bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "bind 127.0.0.1:%d: %s", port, strerror(errno));
	FID_SETUP(listen(fd, 8) == 0, "listen");
	return fd;
}

static void quickack(void)
{
	int lone = socket(AF_INET6, SOCK_STREAM, 0);
	FID_SETUP(lone >= 0, "socket");
	SETOPT(lone, IPPROTO_TCP, TCP_QUICKACK, 0);
	int l = listener(0, 0);
	SETOPT(l, IPPROTO_TCP, TCP_QUICKACK, 0);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = v4("127.0.0.1", port_of(l));
	FID_SETUP(connect(c, (struct sockaddr *)&a, sizeof a) == 0, "connect");
	int s = accept(l, NULL, NULL);
	FID_SETUP(s >= 0, "accept");
	SETOPT(c, IPPROTO_TCP, TCP_QUICKACK, 0);
	SETOPT(s, IPPROTO_TCP, TCP_QUICKACK, 0);
	WATCH(lone, "unconnected", IPPROTO_TCP, TCP_QUICKACK);
	WATCH(l, "listener", IPPROTO_TCP, TCP_QUICKACK);
	WATCH(c, "client", IPPROTO_TCP, TCP_QUICKACK);
	WATCH(s, "accepted", IPPROTO_TCP, TCP_QUICKACK);
	fid_ready();
	fid_wait();
	check_watches();
	int v = -1;
	socklen_t len = sizeof v;
	FID_EXPECT(getsockopt(lone, IPPROTO_TCP, TCP_QUICKACK, &v, &len) == 0 && v == 0, "unconnected TCP_QUICKACK %d, want 0", v);
	FID_EXPECT(write_all(c, "ping", 4) == 0, "client write");
	char buf[4];
	FID_EXPECT(read_exact(s, buf, 4) == 0 && memcmp(buf, "ping", 4) == 0, "accepted end reads what the client wrote");
}

/* udp pair: a bound socket of family fam, connected to peer unless
 * peer is NULL. */
static int udp(int fam, const struct sockaddr *self, socklen_t len)
{
	int fd = socket(fam, SOCK_DGRAM, 0);
	FID_SETUP(fd >= 0, "socket");
	FID_SETUP(bind(fd, self, len) == 0, "bind: %s", strerror(errno));
	return fd;
}

static void check_send(int fd, const char *who, const struct sockaddr *to, socklen_t len, int want_epipe)
{
	ssize_t n = sendto(fd, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL, to, len);
	if (want_epipe)
		FID_EXPECT(n < 0 && errno == EPIPE, "%s: send on a shut send side gave %zd (%s), want EPIPE", who, n, n < 0 ? strerror(errno) : "sent");
	else
		FID_EXPECT(n == 1, "%s: send: %s", who, strerror(errno));
}

static void check_recv(int fd, const char *who, int want_eof)
{
	struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
	if (want_eof) {
		FID_EXPECT(poll(&p, 1, 0) == 1 && (p.revents & POLLRDHUP), "%s: a shut receive side does not poll POLLRDHUP (revents %#x)", who, p.revents);
		return;
	}
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
	FID_EXPECT(n == 1, "%s: recv gave %zd (%s), want the datagram", who, n, n < 0 ? strerror(errno) : "");
}

static void udp_shutdown(void)
{
	struct sockaddr_in a4 = v4("127.0.0.1", 0), b4 = v4("127.0.0.1", 0);
	struct sockaddr_in6 a6 = v6("::1", 0);
	int wr4 = udp(AF_INET, (struct sockaddr *)&a4, sizeof a4);  /* connected, send side shut */
	int rd4 = udp(AF_INET, (struct sockaddr *)&b4, sizeof b4);  /* connected, receive side shut */
	int both6 = udp(AF_INET6, (struct sockaddr *)&a6, sizeof a6); /* unconnected, both shut */
	int wr6 = udp(AF_INET6, (struct sockaddr *)&a6, sizeof a6);   /* unconnected, send side shut */
	int sink6 = udp(AF_INET6, (struct sockaddr *)&a6, sizeof a6);
	struct sockaddr_in wr4a = v4("127.0.0.1", port_of(wr4)), rd4a = v4("127.0.0.1", port_of(rd4));
	struct sockaddr_in6 sink6a = v6("::1", port_of(sink6));
	FID_SETUP(connect(wr4, (struct sockaddr *)&rd4a, sizeof rd4a) == 0, "connect");
	FID_SETUP(connect(rd4, (struct sockaddr *)&wr4a, sizeof wr4a) == 0, "connect");
	FID_SETUP(shutdown(wr4, SHUT_WR) == 0, "shutdown");
	FID_SETUP(shutdown(rd4, SHUT_RD) == 0, "shutdown");
	/* unconnected: the flags are set, with ENOTCONN */
	shutdown(both6, SHUT_RDWR);
	shutdown(wr6, SHUT_WR);
	fid_ready();
	fid_wait();
	check_send(wr4, "IPv4 connected SHUT_WR", NULL, 0, 1);
	check_send(rd4, "IPv4 connected SHUT_RD", NULL, 0, 0);
	check_recv(wr4, "IPv4 connected SHUT_WR", 0);
	check_recv(rd4, "IPv4 connected SHUT_RD", 1);
	check_send(both6, "IPv6 SHUT_RDWR", (struct sockaddr *)&sink6a, sizeof sink6a, 1);
	check_recv(both6, "IPv6 SHUT_RDWR", 1);
	check_send(wr6, "IPv6 SHUT_WR", (struct sockaddr *)&sink6a, sizeof sink6a, 1);
	struct sockaddr_in6 wr6a = v6("::1", port_of(wr6));
	check_send(sink6, "IPv6 sink", (struct sockaddr *)&wr6a, sizeof wr6a, 0);
	struct pollfd p = {wr6, POLLIN, 0};
	FID_EXPECT(poll(&p, 1, 5000) == 1, "IPv6 SHUT_WR: the datagram sent to it did not come");
	check_recv(wr6, "IPv6 SHUT_WR", 0);
}

static void freebind(void)
{
	/* documentation prefixes: no machine has them */
	struct sockaddr_in6 a6 = v6("2001:db8::42:1", 0);
	struct sockaddr_in a4 = v4("192.0.2.42", 0);
	int kept6 = socket(AF_INET6, SOCK_DGRAM, 0), off6 = socket(AF_INET6, SOCK_DGRAM, 0), off4 = socket(AF_INET, SOCK_STREAM, 0);
	FID_SETUP(kept6 >= 0 && off6 >= 0 && off4 >= 0, "socket");
	SETOPT(kept6, SOL_IP, IP_FREEBIND, 1);
	SETOPT(off6, IPPROTO_IPV6, IPV6_FREEBIND, 1);
	SETOPT(off4, SOL_IP, IP_FREEBIND, 1);
	FID_SETUP(bind(kept6, (struct sockaddr *)&a6, sizeof a6) == 0, "bind kept6: %s", strerror(errno));
	FID_SETUP(bind(off6, (struct sockaddr *)&a6, sizeof a6) == 0, "bind off6: %s", strerror(errno));
	FID_SETUP(bind(off4, (struct sockaddr *)&a4, sizeof a4) == 0, "bind off4: %s", strerror(errno));
	SETOPT(off6, IPPROTO_IPV6, IPV6_FREEBIND, 0);
	SETOPT(off4, SOL_IP, IP_FREEBIND, 0);
	struct sockaddr_storage want[3];
	socklen_t wlen[3];
	int fds[3] = {kept6, off6, off4};
	for (int i = 0; i < 3; i++) {
		wlen[i] = sizeof want[i];
		FID_SETUP(getsockname(fds[i], (struct sockaddr *)&want[i], &wlen[i]) == 0, "getsockname");
	}
	WATCH(kept6, "kept6", SOL_IP, IP_FREEBIND);
	WATCH(off6, "off6", SOL_IP, IP_FREEBIND);
	WATCH(off6, "off6", IPPROTO_IPV6, IPV6_FREEBIND);
	WATCH(off4, "off4", SOL_IP, IP_FREEBIND);
	fid_ready();
	fid_wait();
	check_watches();
	for (int i = 0; i < 3; i++) {
		struct sockaddr_storage now;
		socklen_t l = sizeof now;
		FID_EXPECT(getsockname(fds[i], (struct sockaddr *)&now, &l) == 0 && l == wlen[i] && memcmp(&now, &want[i], l) == 0,
			   "socket %d: another address after the restore", i);
	}
}

static void reuseport(void)
{
	int off = listener(1, 0);
	int port = port_of(off);
	int on = listener(1, port);
	SETOPT(off, SOL_SOCKET, SO_REUSEPORT, 0);
	WATCH(off, "off", SOL_SOCKET, SO_REUSEPORT);
	WATCH(on, "on", SOL_SOCKET, SO_REUSEPORT);
	fid_ready();
	fid_wait();
	check_watches();
	/* the port still takes connections, accepted by one of the two */
	for (int i = 0; i < 4; i++) {
		int c = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = v4("127.0.0.1", port);
		FID_EXPECT(connect(c, (struct sockaddr *)&a, sizeof a) == 0, "connect %d: %s", i, strerror(errno));
		struct pollfd p[2] = {{off, POLLIN, 0}, {on, POLLIN, 0}};
		FID_EXPECT(poll(p, 2, 5000) >= 1, "connection %d accepted by no listener", i);
		int s = accept4(p[0].revents ? off : on, NULL, NULL, SOCK_NONBLOCK);
		FID_EXPECT(s >= 0, "accept %d: %s", i, strerror(errno));
		close(s);
		close(c);
	}
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	const char *mode = argc > 2 ? argv[2] : "";
	if (!strcmp(mode, "quickack"))
		quickack();
	else if (!strcmp(mode, "udp_shutdown"))
		udp_shutdown();
	else if (!strcmp(mode, "freebind"))
		freebind();
	else if (!strcmp(mode, "reuseport"))
		reuseport();
	else
		FID_SETUP(0, "unknown mode %s", mode);
	return fid_done();
}
