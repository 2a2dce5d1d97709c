/*
 * sock_mptcp LOG FAMILY (tcp4 | tcp6): MPTCP sockets that are not
 * connections (what Go's net.Listen makes since Go 1.24): a listener with
 * SO_REUSEADDR, options and a backlog of 5, a socket bound and never
 * connected, and one neither bound nor connected. After the restore each
 * is still MPTCP (SO_PROTOCOL), at the same address, with the same
 * options and backlog (tcp_info), and the listener accepts a new plain
 * TCP client (an accepted TCP socket) and a new MPTCP one (an accepted
 * MPTCP socket), data going both ways on each; the bound socket can still
 * listen on its port.
 */
#include "sock.h"

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif

/* proto is fd's SO_PROTOCOL, -1 if unreadable. */
static int proto(int fd)
{
	int p = -1;
	socklen_t l = sizeof p;
	if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &p, &l) < 0)
		return -1;
	return p;
}

/* backlog is the backlog tcp_info gives a listener (tcpi_sacked). */
static int backlog(int fd)
{
	struct tcp_info ti;
	socklen_t l = sizeof ti;
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0)
		return -1;
	return ti.tcpi_sacked;
}

/* exchange connects a client (MPTCP if mp) to the listener at a, accepts
 * it and sends a line each way; want is the accepted socket's protocol. */
static void exchange(int lst, struct sockaddr_storage *a, socklen_t al, int mp, int want)
{
	const char *what = mp ? "MPTCP client" : "TCP client";
	int c = socket(a->ss_family, SOCK_STREAM, mp ? IPPROTO_MPTCP : 0);
	if (c < 0 || connect(c, (struct sockaddr *)a, al) < 0) {
		fid_fail("%s: connect: %s", what, strerror(errno));
		return;
	}
	struct pollfd p = {lst, POLLIN, 0};
	if (poll(&p, 1, 10000) != 1) {
		fid_fail("%s: not accepted", what);
		return;
	}
	int s = accept(lst, NULL, NULL);
	if (s < 0) {
		fid_fail("%s: accept: %s", what, strerror(errno));
		return;
	}
	FID_EXPECT(proto(s) == want, "%s: the accepted socket's SO_PROTOCOL %d, want %d", what, proto(s), want);
	char buf[16];
	FID_EXPECT(write_all(c, "to server", 9) == 0 && read_exact(s, buf, 9) == 0 && memcmp(buf, "to server", 9) == 0,
		   "%s: data to the server", what);
	FID_EXPECT(write_all(s, "to client", 9) == 0 && read_exact(c, buf, 9) == 0 && memcmp(buf, "to client", 9) == 0,
		   "%s: data to the client", what);
	close(c);
	close(s);
}

static int same_name(int fd, struct sockaddr_storage *want, socklen_t wl)
{
	struct sockaddr_storage now;
	socklen_t l = sizeof now;
	memset(&now, 0, sizeof now);
	return getsockname(fd, (struct sockaddr *)&now, &l) == 0 && l == wl && memcmp(&now, want, l) == 0;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: sock_mptcp LOG tcp4|tcp6");
	int v6 = strcmp(argv[2], "tcp6") == 0;
	int family = v6 ? AF_INET6 : AF_INET;

	int lst = socket(family, SOCK_STREAM, IPPROTO_MPTCP);
	if (lst < 0)
		fid_skip("no MPTCP here (net.mptcp.enabled=0?)");
	SETOPT(lst, SOL_SOCKET, SO_REUSEADDR, 1);
	SETOPT(lst, SOL_SOCKET, SO_KEEPALIVE, 1);
	SETOPT(lst, SOL_SOCKET, SO_PRIORITY, 3);
	SETOPT(lst, SOL_SOCKET, SO_RCVBUF, 100000);
	SETOPT(lst, IPPROTO_TCP, TCP_NODELAY, 1);
	SETOPT(lst, IPPROTO_TCP, TCP_KEEPIDLE, 77);
	if (v6)
		SETOPT(lst, IPPROTO_IPV6, IPV6_V6ONLY, 1);
	struct sockaddr_storage la;
	socklen_t ll = loopback_addr(&la, 0, v6, 0);
	FID_SETUP(bind(lst, (struct sockaddr *)&la, ll) == 0, "bind: %s", strerror(errno));
	FID_SETUP(listen(lst, 5) == 0, "listen: %s", strerror(errno));
	ll = sizeof la;
	FID_SETUP(getsockname(lst, (struct sockaddr *)&la, &ll) == 0, "getsockname");
	FID_SETUP(proto(lst) == IPPROTO_MPTCP, "listener SO_PROTOCOL %d", proto(lst));
	FID_SETUP(backlog(lst) == 5, "backlog %d", backlog(lst));
	WATCH(lst, "listener", SOL_SOCKET, SO_PROTOCOL);
	WATCH(lst, "listener", SOL_SOCKET, SO_TYPE);
	WATCH(lst, "listener", SOL_SOCKET, SO_DOMAIN);
	WATCH(lst, "listener", SOL_SOCKET, SO_ACCEPTCONN);
	WATCH(lst, "listener", SOL_SOCKET, SO_REUSEADDR);
	WATCH(lst, "listener", SOL_SOCKET, SO_REUSEPORT);
	WATCH(lst, "listener", SOL_SOCKET, SO_KEEPALIVE);
	WATCH(lst, "listener", SOL_SOCKET, SO_PRIORITY);
	WATCH(lst, "listener", SOL_SOCKET, SO_RCVBUF);
	WATCH(lst, "listener", SOL_SOCKET, SO_SNDBUF);
	WATCH(lst, "listener", IPPROTO_TCP, TCP_NODELAY);
	WATCH(lst, "listener", IPPROTO_TCP, TCP_KEEPIDLE);
	if (v6)
		WATCH(lst, "listener", IPPROTO_IPV6, IPV6_V6ONLY);

	int bound = socket(family, SOCK_STREAM, IPPROTO_MPTCP);
	struct sockaddr_storage ba;
	socklen_t bl = loopback_addr(&ba, 0, v6, 0);
	FID_SETUP(bound >= 0 && bind(bound, (struct sockaddr *)&ba, bl) == 0, "bind: %s", strerror(errno));
	bl = sizeof ba;
	FID_SETUP(getsockname(bound, (struct sockaddr *)&ba, &bl) == 0, "getsockname");
	WATCH(bound, "bound", SOL_SOCKET, SO_PROTOCOL);
	WATCH(bound, "bound", SOL_SOCKET, SO_ACCEPTCONN);

	int unbound = socket(family, SOCK_STREAM, IPPROTO_MPTCP);
	FID_SETUP(unbound >= 0, "socket");
	struct sockaddr_storage ua;
	socklen_t ul = sizeof ua;
	FID_SETUP(getsockname(unbound, (struct sockaddr *)&ua, &ul) == 0, "getsockname");
	WATCH(unbound, "unbound", SOL_SOCKET, SO_PROTOCOL);
	WATCH(unbound, "unbound", SOL_SOCKET, SO_DOMAIN);

	fid_ready();
	fid_wait();

	check_watches();
	FID_EXPECT(same_name(lst, &la, ll), "listener: getsockname changed");
	FID_EXPECT(backlog(lst) == 5, "listener: backlog %d, want 5", backlog(lst));
	FID_EXPECT(tcp_state(lst) == TCP_LISTEN, "listener: state %d", tcp_state(lst));
	FID_EXPECT(same_name(bound, &ba, bl), "bound: getsockname changed");
	FID_EXPECT(same_name(unbound, &ua, ul), "unbound: getsockname changed");
	exchange(lst, &la, ll, 0, IPPROTO_TCP);
	exchange(lst, &la, ll, 1, IPPROTO_MPTCP);
	/* The bound socket still holds its port: it can listen there. */
	FID_EXPECT(listen(bound, 1) == 0 && same_name(bound, &ba, bl), "bound: listen on its port: %s", strerror(errno));
	return fid_done();
}
