/*
 * sock_unix DIR: UNIX sockets in the states programs leave them in: a
 * stream pair with data queued both ways, options and one end shut down
 * for writing; a seqpacket pair with an empty message among others;
 * seqpacket and stream sockets whose peer closed, with data left; a
 * datagram socket with messages from an unnamed, an abstract and a path
 * sender; a datagram pair; an unconnected socket, a bound one and a
 * listener. After the restore every option, message (with its
 * boundaries and sender), end of file and shutdown reads the same.
 */
#include "sock.h"
#include <stddef.h>

static void sun_of(struct sockaddr_un *a, socklen_t *l, const char *name)
{
	memset(a, 0, sizeof *a);
	a->sun_family = AF_UNIX;
	size_t n = strlen(name);
	memcpy(a->sun_path, name, n);
	if (name[0] == '@')
		a->sun_path[0] = 0;
	else
		n++;
	*l = offsetof(struct sockaddr_un, sun_path) + n;
}

static void watch_common(int fd, const char *who)
{
	WATCH(fd, who, SOL_SOCKET, SO_PASSCRED);
	WATCH(fd, who, SOL_SOCKET, SO_SNDBUF);
	WATCH(fd, who, SOL_SOCKET, SO_RCVBUF);
	WATCH(fd, who, SOL_SOCKET, SO_BUF_LOCK);
	WATCH(fd, who, SOL_SOCKET, SO_RCVTIMEO);
	WATCH(fd, who, SOL_SOCKET, SO_PEEK_OFF);
	WATCH(fd, who, SOL_SOCKET, SO_TYPE);
	WATCH(fd, who, SOL_SOCKET, SO_ACCEPTCONN);
}

/* expect_msg reads one message (no wait) and compares it. */
static void expect_msg(int fd, const char *want, size_t len, const char *who)
{
	char buf[256];
	ssize_t k = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
	FID_EXPECT(k == (ssize_t)len && memcmp(buf, want, len) == 0, "%s: read %zd bytes (%s), want %zu", who, k,
		   k < 0 ? strerror(errno) : "", len);
}

static void expect_from(int fd, const char *want, const char *from)
{
	char buf[64];
	struct sockaddr_un a;
	socklen_t l = sizeof a;
	memset(&a, 0, sizeof a);
	ssize_t k = recvfrom(fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&a, &l);
	FID_EXPECT(k == (ssize_t)strlen(want) && memcmp(buf, want, k) == 0, "datagram %s: %zd bytes", want, k);
	char name[110] = "";
	size_t n = l > offsetof(struct sockaddr_un, sun_path) ? l - offsetof(struct sockaddr_un, sun_path) : 0;
	if (n > 0 && a.sun_path[0] == 0) {
		name[0] = '@';
		memcpy(name + 1, a.sun_path + 1, n - 1);
		name[n] = 0;
	} else if (n > 0) {
		snprintf(name, sizeof name, "%s", a.sun_path);
	}
	FID_EXPECT(strcmp(name, from) == 0, "datagram %s from %s, want %s", want, name, from);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: sock_unix LOG DIR");
	const char *dir = argv[2];
	struct timeval tv = {3, 7};
	int sp[2], sq[2], se[2], sf[2], sd[2];

	/* Stream pair: options, data both ways, a SHUT_WR. */
	FID_SETUP(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0, "socketpair");
	SETOPT(sp[0], SOL_SOCKET, SO_PASSCRED, 1);
	SETOPTP(sp[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	SETOPT(sp[1], SOL_SOCKET, SO_SNDBUF, 70000);
	SETOPT(sp[1], SOL_SOCKET, SO_PEEK_OFF, 1);
	FID_SETUP(send(sp[0], "to-b", 4, 0) == 4 && send(sp[1], "to-a", 4, 0) == 4, "send");
	FID_SETUP(shutdown(sp[0], SHUT_WR) == 0, "shutdown");
	watch_common(sp[0], "stream a");
	watch_common(sp[1], "stream b");

	/* Seqpacket pair with an empty message. */
	FID_SETUP(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sq) == 0, "socketpair");
	FID_SETUP(send(sq[1], "one", 3, 0) == 3 && send(sq[1], "", 0, 0) == 0 && send(sq[1], "three", 5, 0) == 5, "send");
	watch_common(sq[0], "seqpacket");

	/* Peers closed with data left. */
	FID_SETUP(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, se) == 0, "socketpair");
	FID_SETUP(send(se[1], "last words", 10, 0) == 10, "send");
	close(se[1]);
	FID_SETUP(socketpair(AF_UNIX, SOCK_STREAM, 0, sf) == 0, "socketpair");
	FID_SETUP(send(sf[1], "bye", 3, 0) == 3, "send");
	close(sf[1]);

	/* A datagram server with messages from three senders. */
	char srvname[64], absname[64], pathname[200];
	snprintf(srvname, sizeof srvname, "@sock_unix-srv-%d", getpid());
	snprintf(absname, sizeof absname, "@sock_unix-cli-%d", getpid());
	snprintf(pathname, sizeof pathname, "%s/cli", dir);
	struct sockaddr_un a;
	socklen_t al;
	int g = socket(AF_UNIX, SOCK_DGRAM, 0);
	sun_of(&a, &al, srvname);
	FID_SETUP(bind(g, (struct sockaddr *)&a, al) == 0, "bind");
	const char *froms[] = {"", absname, pathname};
	for (int i = 0; i < 3; i++) {
		int c = socket(AF_UNIX, SOCK_DGRAM, 0);
		struct sockaddr_un ca;
		socklen_t cl;
		if (froms[i][0]) {
			sun_of(&ca, &cl, froms[i]);
			FID_SETUP(bind(c, (struct sockaddr *)&ca, cl) == 0, "bind %s", froms[i]);
		}
		char m[8];
		snprintf(m, sizeof m, "m%d", i);
		FID_SETUP(sendto(c, m, 2, 0, (struct sockaddr *)&a, al) == 2, "sendto");
		close(c);
	}
	unlink(pathname);
	watch_common(g, "datagram server");

	/* A datagram pair. */
	FID_SETUP(socketpair(AF_UNIX, SOCK_DGRAM, 0, sd) == 0, "socketpair");
	FID_SETUP(send(sd[0], "d1", 2, 0) == 2 && send(sd[1], "d2", 2, 0) == 2, "send");

	/* Unconnected, bound, listening. */
	int j = socket(AF_UNIX, SOCK_STREAM, 0);
	int k = socket(AF_UNIX, SOCK_STREAM, 0);
	char kpath[200], lpath[200];
	snprintf(kpath, sizeof kpath, "%s/k", dir);
	snprintf(lpath, sizeof lpath, "%s/l", dir);
	sun_of(&a, &al, kpath);
	FID_SETUP(bind(k, (struct sockaddr *)&a, al) == 0, "bind k");
	int l = socket(AF_UNIX, SOCK_STREAM, 0);
	sun_of(&a, &al, lpath);
	FID_SETUP(bind(l, (struct sockaddr *)&a, al) == 0 && listen(l, 5) == 0, "listen");
	/* A listener with two connections waiting to be accepted. */
	char aqpath[200], n2path[200];
	snprintf(aqpath, sizeof aqpath, "%s/aq", dir);
	snprintf(n2path, sizeof n2path, "%s/n2", dir);
	int aq = socket(AF_UNIX, SOCK_STREAM, 0);
	sun_of(&a, &al, aqpath);
	FID_SETUP(bind(aq, (struct sockaddr *)&a, al) == 0 && listen(aq, 5) == 0, "listen aq");
	int n1 = socket(AF_UNIX, SOCK_STREAM, 0), n2 = socket(AF_UNIX, SOCK_STREAM, 0);
	FID_SETUP(connect(n1, (struct sockaddr *)&a, al) == 0, "connect n1");
	struct sockaddr_un b2;
	socklen_t b2l;
	sun_of(&b2, &b2l, n2path);
	FID_SETUP(bind(n2, (struct sockaddr *)&b2, b2l) == 0 && connect(n2, (struct sockaddr *)&a, al) == 0, "connect n2");
	watch_common(aq, "accept queue listener");
	watch_common(n1, "waiting client");
	/* Connections the listener l accepted: names from the listener,
	 * data queued both ways; one whose client closed. */
	int m1 = socket(AF_UNIX, SOCK_STREAM, 0), m3 = socket(AF_UNIX, SOCK_STREAM, 0);
	sun_of(&a, &al, lpath);
	FID_SETUP(connect(m1, (struct sockaddr *)&a, al) == 0, "connect m1");
	int m2 = accept(l, NULL, NULL);
	FID_SETUP(m2 >= 0, "accept m2");
	FID_SETUP(connect(m3, (struct sockaddr *)&a, al) == 0, "connect m3");
	int m4 = accept(l, NULL, NULL);
	FID_SETUP(m4 >= 0, "accept m4");
	FID_SETUP(send(m1, "c2s", 3, 0) == 3 && send(m2, "s2c", 3, 0) == 3 && send(m3, "gone", 4, 0) == 4, "send");
	close(m3);
	/* A stream peer closed with data unread: ECONNRESET pending. */
	int rp[2];
	FID_SETUP(socketpair(AF_UNIX, SOCK_STREAM, 0, rp) == 0, "socketpair");
	FID_SETUP(send(rp[1], "before", 6, 0) == 6 && send(rp[0], "unread", 6, 0) == 6, "send");
	close(rp[1]);
	/* A connection whose listener was closed since, and a datagram pair
	 * of two named sockets connected to each other. */
	char gpath[200], xpath[200], ypath[200];
	snprintf(gpath, sizeof gpath, "%s/gone", dir);
	snprintf(xpath, sizeof xpath, "%s/x", dir);
	snprintf(ypath, sizeof ypath, "%s/y", dir);
	int gl = socket(AF_UNIX, SOCK_STREAM, 0), gc = socket(AF_UNIX, SOCK_STREAM, 0);
	sun_of(&a, &al, gpath);
	FID_SETUP(bind(gl, (struct sockaddr *)&a, al) == 0 && listen(gl, 1) == 0 && connect(gc, (struct sockaddr *)&a, al) == 0, "gone listener");
	int gs = accept(gl, NULL, NULL);
	FID_SETUP(gs >= 0, "accept");
	close(gl);
	FID_SETUP(send(gc, "to gs", 5, 0) == 5, "send");
	int dx = socket(AF_UNIX, SOCK_DGRAM, 0), dy = socket(AF_UNIX, SOCK_DGRAM, 0);
	struct sockaddr_un xa, ya;
	socklen_t xl, yl;
	sun_of(&xa, &xl, xpath);
	sun_of(&ya, &yl, ypath);
	FID_SETUP(bind(dx, (struct sockaddr *)&xa, xl) == 0 && bind(dy, (struct sockaddr *)&ya, yl) == 0, "bind x y");
	FID_SETUP(connect(dx, (struct sockaddr *)&ya, yl) == 0 && connect(dy, (struct sockaddr *)&xa, xl) == 0, "connect x y");
	FID_SETUP(send(dx, "x2y", 3, 0) == 3, "send x2y");
	watch_common(m2, "accepted");
	/* A named datagram socket with two sockets connected to it one way,
	 * one of them named, messages queued both ways. */
	char srv2[64], c2path[200];
	snprintf(srv2, sizeof srv2, "@sock_unix-srv2-%d", getpid());
	snprintf(c2path, sizeof c2path, "%s/c2", dir);
	int d0 = socket(AF_UNIX, SOCK_DGRAM, 0), d1 = socket(AF_UNIX, SOCK_DGRAM, 0), d2 = socket(AF_UNIX, SOCK_DGRAM, 0);
	struct sockaddr_un sa2, ca2;
	socklen_t sl2, cl2;
	sun_of(&sa2, &sl2, srv2);
	sun_of(&ca2, &cl2, c2path);
	FID_SETUP(bind(d0, (struct sockaddr *)&sa2, sl2) == 0, "bind srv2");
	FID_SETUP(bind(d2, (struct sockaddr *)&ca2, cl2) == 0, "bind c2");
	FID_SETUP(connect(d1, (struct sockaddr *)&sa2, sl2) == 0 && connect(d2, (struct sockaddr *)&sa2, sl2) == 0, "connect to srv2");
	FID_SETUP(send(d1, "from d1", 7, 0) == 7 && send(d2, "from d2", 7, 0) == 7, "send to srv2");
	FID_SETUP(sendto(d0, "to d2", 5, 0, (struct sockaddr *)&ca2, cl2) == 5, "send to d2");
	watch_common(d1, "connected one way");
	watch_common(j, "unconnected");
	watch_common(k, "bound");
	watch_common(l, "listener");

	fid_ready();
	fid_wait();
	check_watches();
	SETOPT(sp[1], SOL_SOCKET, SO_PEEK_OFF, -1);
	expect_msg(sp[0], "to-a", 4, "stream a");
	expect_msg(sp[1], "to-b", 4, "stream b");
	expect_msg(sp[1], "", 0, "stream b, end of file");
	FID_EXPECT(send(sp[0], "x", 1, MSG_NOSIGNAL) < 0 && errno == EPIPE, "stream a writes after SHUT_WR");
	FID_EXPECT(send(sp[1], "y", 1, 0) == 1, "stream b still writes");
	expect_msg(sp[0], "y", 1, "stream a after");
	expect_msg(sq[0], "one", 3, "seqpacket 1");
	expect_msg(sq[0], "", 0, "seqpacket 2 (empty)");
	expect_msg(sq[0], "three", 5, "seqpacket 3");
	char c;
	FID_EXPECT(recv(sq[0], &c, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN, "seqpacket: more queued");
	expect_msg(se[0], "last words", 10, "seqpacket peer closed");
	expect_msg(se[0], "", 0, "seqpacket peer closed, end");
	expect_msg(sf[0], "bye", 3, "stream peer closed");
	expect_msg(sf[0], "", 0, "stream peer closed, end");
	FID_EXPECT(send(sf[0], "z", 1, MSG_NOSIGNAL) < 0 && errno == EPIPE, "write to a closed peer");
	for (int i = 0; i < 3; i++) {
		char m[8];
		snprintf(m, sizeof m, "m%d", i);
		expect_from(g, m, froms[i]);
	}
	expect_msg(sd[1], "d1", 2, "datagram pair b");
	expect_msg(sd[0], "d2", 2, "datagram pair a");
	struct sockaddr_un ka;
	socklen_t kl = sizeof ka;
	FID_EXPECT(getsockname(k, (struct sockaddr *)&ka, &kl) == 0 && strcmp(ka.sun_path, kpath) == 0, "bound socket name");
	sun_of(&a, &al, lpath);
	FID_EXPECT(connect(j, (struct sockaddr *)&a, al) == 0, "connect to the listener: %s", strerror(errno));
	struct pollfd p = {l, POLLIN, 0};
	FID_EXPECT(poll(&p, 1, 5000) == 1 && accept(l, NULL, NULL) >= 0, "accept");
	struct sockaddr_un gn;
	socklen_t gnl = sizeof gn;
	memset(&gn, 0, sizeof gn);
	FID_EXPECT(getsockname(gs, (struct sockaddr *)&gn, &gnl) == 0 && strcmp(gn.sun_path, gpath) == 0, "accepted (listener gone) name %s", gn.sun_path);
	gnl = sizeof gn;
	memset(&gn, 0, sizeof gn);
	FID_EXPECT(getpeername(gc, (struct sockaddr *)&gn, &gnl) == 0 && strcmp(gn.sun_path, gpath) == 0, "client (listener gone) peer %s", gn.sun_path);
	expect_msg(gs, "to gs", 5, "accepted (listener gone)");
	expect_from(dy, "x2y", xpath);
	FID_EXPECT(send(dy, "y2x", 3, 0) == 3, "send y2x");
	expect_from(dx, "y2x", ypath);
	int rerr = 0;
	socklen_t rl = sizeof rerr;
	FID_EXPECT(getsockopt(rp[0], SOL_SOCKET, SO_ERROR, &rerr, &rl) == 0 && rerr == ECONNRESET, "reset by the closed peer: SO_ERROR %d", rerr);
	expect_msg(rp[0], "before", 6, "reset: data before the close");
	expect_msg(rp[0], "", 0, "reset: end of file");
	expect_from(d0, "from d1", "");
	expect_from(d0, "from d2", c2path);
	expect_from(d2, "to d2", srv2);
	FID_EXPECT(send(d1, "again", 5, 0) == 5, "send on the one-way connection: %s", strerror(errno));
	expect_from(d0, "again", "");
	struct sockaddr_un pn;
	socklen_t pnl = sizeof pn;
	FID_EXPECT(getpeername(d1, (struct sockaddr *)&pn, &pnl) == 0 && pn.sun_path[0] == 0 && strcmp(pn.sun_path + 1, srv2 + 1) == 0,
		   "one-way peer name");
	/* The accepted connections bear the listener's name. */
	struct sockaddr_un na;
	socklen_t nl = sizeof na;
	memset(&na, 0, sizeof na);
	FID_EXPECT(getsockname(m2, (struct sockaddr *)&na, &nl) == 0 && strcmp(na.sun_path, lpath) == 0, "accepted socket name %s", na.sun_path);
	nl = sizeof na;
	memset(&na, 0, sizeof na);
	FID_EXPECT(getpeername(m1, (struct sockaddr *)&na, &nl) == 0 && strcmp(na.sun_path, lpath) == 0, "client's peer name %s", na.sun_path);
	nl = sizeof na;
	memset(&na, 0, sizeof na);
	FID_EXPECT(getsockname(m4, (struct sockaddr *)&na, &nl) == 0 && strcmp(na.sun_path, lpath) == 0, "closed client's server name %s", na.sun_path);
	expect_msg(m2, "c2s", 3, "accepted: from the client");
	expect_msg(m1, "s2c", 3, "client: from the server");
	expect_msg(m4, "gone", 4, "accepted: from the closed client");
	expect_msg(m4, "", 0, "accepted: end of file from the closed client");
	/* The waiting connections, in order, from the same clients. */
	for (int i = 0; i < 2; i++) {
		struct sockaddr_un pa;
		socklen_t pl = sizeof pa;
		memset(&pa, 0, sizeof pa);
		p.fd = aq;
		int s2 = poll(&p, 1, 5000) == 1 ? accept(aq, (struct sockaddr *)&pa, &pl) : -1;
		FID_EXPECT(s2 >= 0, "accept waiting connection %d: %s", i, strerror(errno));
		if (s2 < 0)
			continue;
		const char *want = i == 0 ? "" : n2path;
		FID_EXPECT(strcmp(pl > offsetof(struct sockaddr_un, sun_path) ? pa.sun_path : "", want) == 0,
			   "waiting connection %d from %s, want %s", i, pa.sun_path, want);
		int cl = i == 0 ? n1 : n2;
		FID_EXPECT(send(cl, "c", 1, 0) == 1 && recv(s2, &c, 1, 0) == 1 && c == 'c', "waiting connection %d: client to server", i);
		FID_EXPECT(send(s2, "s", 1, 0) == 1 && recv(cl, &c, 1, 0) == 1 && c == 's', "waiting connection %d: server to client", i);
	}
	return fid_done();
}
