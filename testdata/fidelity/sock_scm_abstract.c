/*
 * sock_scm_abstract: UNIX sockets bound to abstract names, in flight in
 * their own and each other's queues (CRIU's zdtm static/scm06): a
 * datagram pair a-b, a bound to "\0\0...-a", b to "\0\0...-b" (a NUL
 * right after the leading one: names are bytes, not strings), then
 * queued for a (sent by b): "b:a" with a, "b:b" with b; queued for b
 * (sent by a): "a:a" with a, "a:b" with b; and a socket c, unconnected,
 * bound to "\0\0...-c", holds "a:c" with b, sent by a (recvfrom names
 * a: every byte of its name). Once the process is killed
 * the two sockets hold each other: only the kernel's garbage collector
 * frees them and their names, and a restore that binds the names first
 * finds them taken.
 *
 * A datagram pair e-f with one name: e bound to "\0\0...-e", f unnamed;
 * queued for e: "f:e" with f, for f: "e:f" with e.
 *
 * A socket g, unconnected, bound to "\0\0...-g", and h bound to
 * "\0\0...-h" connected to g: queued for g, "h:g" with h (sent by h);
 * a socket k, unconnected, bound to "\0\0...-k": queued for k, "h:k"
 * with g (sent by h); h then shut down for sending (the restore sends
 * "h:k" again from h before it shuts h down).
 *
 * Both pairs were made by socketpair and bound since: their SO_PEERCRED
 * names the process (a pair connected through names would show none).
 *
 * With "one", b is closed: it lives only in the queues, and is found
 * through a's.
 *
 * With "unheld", only a datagram pair p-q made by socketpair (p bound to
 * "\0\0...-p") is in flight, both ends, in the queue of y (x-y a
 * stream pair), and closed: no process holds an end to make the pair
 * again in (its SO_PEERCRED names the process): the dump must refuse it.
 *
 * After the restore each read must give the same bytes, the sender's
 * name (every byte, its length), the same socket in flight (kcmp with a,
 * getsockname for b), both names and the connection (getpeername, a
 * message each way), and nothing more.
 */
#include "fidelity.h"
#include <stddef.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>

#ifndef KCMP_FILE
#define KCMP_FILE 0
#endif

/* name is an abstract name: "\0\0" then text. */
struct name {
	struct sockaddr_un a;
	socklen_t len;
};

static void mkname(struct name *n, const char *text)
{
	memset(n, 0, sizeof *n);
	n->a.sun_family = AF_UNIX;
	size_t l = strlen(text);
	memcpy(n->a.sun_path + 2, text, l);
	n->len = offsetof(struct sockaddr_un, sun_path) + 2 + l;
}

static int samename(const struct sockaddr_un *a, socklen_t len, const struct name *want)
{
	return len == want->len && memcmp(a, &want->a, len) == 0;
}

/* sendfd_to sends b with the file fd, to the socket named to (NULL: to
 * the peer). */
static void sendfd_to(int s, const char *b, int fd, const struct name *to)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	memset(cbuf, 0, sizeof cbuf);
	struct iovec io = {(void *)b, strlen(b)};
	struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	if (to)
		m.msg_name = (void *)&to->a, m.msg_namelen = to->len;
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof fd);
	FID_SETUP(sendmsg(s, &m, 0) == (ssize_t)strlen(b), "sendmsg %s", b);
}

static void sendfd(int s, const char *b, int fd) { sendfd_to(s, b, fd, NULL); }

/* expect reads one message from s: data want, sent by from, with one
 * file in flight (returned, -1 if none). */
static int expect(int s, const char *what, const char *want, const struct name *from)
{
	char data[64] = {0}, cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct sockaddr_un sa;
	struct iovec io = {data, sizeof data - 1};
	struct msghdr m = {.msg_name = &sa, .msg_namelen = sizeof sa, .msg_iov = &io, .msg_iovlen = 1,
			   .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	ssize_t n = recvmsg(s, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0) {
		fid_fail("%s: recvmsg: %s", what, strerror(errno));
		return -1;
	}
	FID_EXPECT(strcmp(data, want) == 0, "%s: read %s, want %s", what, data, want);
	FID_EXPECT(samename(&sa, m.msg_namelen, from), "%s: sender name of %u bytes %.*s, want %u bytes %s", what, m.msg_namelen,
		   (int)(m.msg_namelen > 4 ? m.msg_namelen - 4 : 0), sa.sun_path + 2, from->len, from->a.sun_path + 2);
	int fd = -1, nf = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			nf += (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			memcpy(&fd, CMSG_DATA(c), sizeof fd);
		}
	}
	FID_EXPECT(nf == 1, "%s: %d files in flight, want 1", what, nf);
	return nf == 1 ? fd : -1;
}

static int same(int a, int b)
{
	pid_t me = getpid();
	return syscall(SYS_kcmp, me, me, KCMP_FILE, a, b) == 0;
}

/* expect_names checks a socket's own and peer names. */
static void expect_names(int s, const char *what, const struct name *self, const struct name *peer)
{
	struct sockaddr_un sa;
	socklen_t l = sizeof sa;
	FID_EXPECT(getsockname(s, (struct sockaddr *)&sa, &l) == 0 && samename(&sa, l, self), "%s: getsockname: %u bytes %.*s",
		   what, l, (int)(l > 4 ? l - 4 : 0), sa.sun_path + 2);
	l = sizeof sa;
	FID_EXPECT(getpeername(s, (struct sockaddr *)&sa, &l) == 0 && samename(&sa, l, peer), "%s: getpeername: %u bytes %.*s",
		   what, l, (int)(l > 4 ? l - 4 : 0), sa.sun_path + 2);
}

/* expect_cred checks SO_PEERCRED of a pair the process made. */
static void expect_cred(int s, const char *what)
{
	struct ucred c = {0};
	socklen_t l = sizeof c;
	FID_EXPECT(getsockopt(s, SOL_SOCKET, SO_PEERCRED, &c, &l) == 0 && c.pid == getpid() && c.uid == geteuid() && c.gid == getegid(),
		   "%s: SO_PEERCRED pid %d uid %d gid %d, want %d %d %d", what, c.pid, c.uid, c.gid, getpid(), geteuid(), getegid());
}

static void expect_empty(int s, const char *what)
{
	char c;
	FID_EXPECT(recv(s, &c, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN, "%s: more messages queued", what);
}

static int unheld(void)
{
	struct name np;
	char text[64];
	snprintf(text, sizeof text, "ckpt-scm-abstract-%d-p", getpid());
	mkname(&np, text);
	int pq[2], xy[2];
	FID_SETUP(socketpair(AF_UNIX, SOCK_DGRAM, 0, pq) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, xy) == 0, "socketpairs");
	FID_SETUP(bind(pq[0], (struct sockaddr *)&np.a, np.len) == 0, "bind p");
	sendfd(xy[0], "p", pq[0]);
	sendfd(xy[0], "q", pq[1]);
	close(pq[0]), close(pq[1]);
	fid_ready();
	fid_wait();
	/* Refused: the original goes on untouched. */
	int rp = -1, rq = -1;
	char buf[2], cbuf[CMSG_SPACE(sizeof(int))];
	for (int i = 0; i < 2; i++) {
		struct iovec io = {buf, 1};
		struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		if (recvmsg(xy[1], &m, MSG_DONTWAIT) != 1 || !CMSG_FIRSTHDR(&m)) {
			fid_fail("y: message %d: %s", i, strerror(errno));
			break;
		}
		memcpy(i ? &rq : &rp, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(int));
	}
	if (rp >= 0 && rq >= 0) {
		expect_names(rp, "p", &np, &(struct name){.a.sun_family = AF_UNIX, .len = sizeof(sa_family_t)});
		FID_EXPECT(send(rq, "z", 1, 0) == 1 && recv(rp, buf, 1, MSG_DONTWAIT) == 1 && buf[0] == 'z', "q to p");
	}
	return fid_done();
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	int one = argc > 2 && strcmp(argv[2], "one") == 0;
	if (argc > 2 && strcmp(argv[2], "unheld") == 0)
		return unheld();
	struct name na, nb, nc, ne, ng, nh, nk, unnamed_from = {.len = 0}, unnamed_peer = {.a.sun_family = AF_UNIX, .len = sizeof(sa_family_t)};
	char text[64];
	snprintf(text, sizeof text, "ckpt-scm-abstract-%d-a", getpid());
	mkname(&na, text);
	snprintf(text, sizeof text, "ckpt-scm-abstract-%d-b", getpid());
	mkname(&nb, text);
	snprintf(text, sizeof text, "ckpt-scm-abstract-%d-c", getpid());
	mkname(&nc, text);
	snprintf(text, sizeof text, "ckpt-scm-abstract-%d-e", getpid());
	mkname(&ne, text);
	snprintf(text, sizeof text, "ckpt-scm-abstract-%d-g", getpid());
	mkname(&ng, text);
	snprintf(text, sizeof text, "ckpt-scm-abstract-%d-h", getpid());
	mkname(&nh, text);
	snprintf(text, sizeof text, "ckpt-scm-abstract-%d-k", getpid());
	mkname(&nk, text);

	int ab[2];
	FID_SETUP(socketpair(AF_UNIX, SOCK_DGRAM, 0, ab) == 0, "socketpair");
	FID_SETUP(bind(ab[0], (struct sockaddr *)&na.a, na.len) == 0, "bind a");
	FID_SETUP(bind(ab[1], (struct sockaddr *)&nb.a, nb.len) == 0, "bind b");
	int a = ab[0], b = ab[1];
	int c = socket(AF_UNIX, SOCK_DGRAM, 0);
	FID_SETUP(c >= 0 && bind(c, (struct sockaddr *)&nc.a, nc.len) == 0, "bind c");
	sendfd(b, "b:a", a);
	sendfd(b, "b:b", b);
	sendfd(a, "a:a", a);
	sendfd(a, "a:b", b);
	sendfd_to(a, "a:c", b, &nc);
	int ef[2];
	FID_SETUP(socketpair(AF_UNIX, SOCK_DGRAM, 0, ef) == 0, "socketpair ef");
	FID_SETUP(bind(ef[0], (struct sockaddr *)&ne.a, ne.len) == 0, "bind e");
	int e = ef[0], f = ef[1];
	sendfd(f, "f:e", f);
	sendfd(e, "e:f", e);
	int g = socket(AF_UNIX, SOCK_DGRAM, 0), h = socket(AF_UNIX, SOCK_DGRAM, 0);
	FID_SETUP(g >= 0 && bind(g, (struct sockaddr *)&ng.a, ng.len) == 0, "bind g");
	FID_SETUP(h >= 0 && bind(h, (struct sockaddr *)&nh.a, nh.len) == 0, "bind h");
	FID_SETUP(connect(h, (struct sockaddr *)&ng.a, ng.len) == 0, "connect h to g");
	sendfd(h, "h:g", h);
	int k = socket(AF_UNIX, SOCK_DGRAM, 0);
	FID_SETUP(k >= 0 && bind(k, (struct sockaddr *)&nk.a, nk.len) == 0, "bind k");
	sendfd_to(h, "h:k", g, &nk);
	FID_SETUP(shutdown(h, SHUT_WR) == 0, "shutdown h");
	if (one)
		close(b);

	fid_ready();
	fid_wait();

	int ra = expect(a, "a 1", "b:a", &nb);
	if (ra >= 0)
		FID_EXPECT(same(ra, a), "a 1: the socket in flight is not a");
	int rb = expect(a, "a 2", "b:b", &nb);
	expect_empty(a, "a");
	expect_names(a, "a", &na, &nb);
	if (rb >= 0) {
		if (!one)
			FID_EXPECT(same(rb, b), "a 2: the socket in flight is not b");
		expect_names(rb, "b in flight", &nb, &na);
		expect_cred(rb, "b in flight");
		int ra2 = expect(rb, "b 1", "a:a", &na);
		if (ra2 >= 0)
			FID_EXPECT(same(ra2, a), "b 1: the socket in flight is not a");
		int rb2 = expect(rb, "b 2", "a:b", &na);
		if (rb2 >= 0)
			FID_EXPECT(same(rb2, rb), "b 2: the socket in flight is not b");
		expect_empty(rb, "b");
		int rb3 = expect(c, "c", "a:c", &na);
		if (rb3 >= 0) {
			FID_EXPECT(same(rb3, rb), "c: the socket in flight is not b");
			close(rb3);
		}
		expect_empty(c, "c");
		/* The pair still works both ways. */
		char buf[8] = {0};
		FID_EXPECT(send(a, "ping", 4, 0) == 4 && recv(rb, buf, sizeof buf, MSG_DONTWAIT) == 4 && memcmp(buf, "ping", 4) == 0,
			   "a to b: %s", buf);
		FID_EXPECT(send(rb, "pong", 4, 0) == 4 && recv(a, buf, sizeof buf, MSG_DONTWAIT) == 4 && memcmp(buf, "pong", 4) == 0,
			   "b to a: %s", buf);
		if (ra2 >= 0)
			close(ra2);
		if (rb2 >= 0)
			close(rb2);
		close(rb);
	}
	if (ra >= 0)
		close(ra);

	expect_cred(a, "a");
	expect_cred(e, "e");
	expect_cred(f, "f");
	int rf = expect(e, "e", "f:e", &unnamed_from);
	if (rf >= 0) {
		FID_EXPECT(same(rf, f), "e: the socket in flight is not f");
		close(rf);
	}
	expect_empty(e, "e");
	int re = expect(f, "f", "e:f", &ne);
	if (re >= 0) {
		FID_EXPECT(same(re, e), "f: the socket in flight is not e");
		close(re);
	}
	expect_empty(f, "f");
	expect_names(e, "e", &ne, &unnamed_peer);
	expect_names(f, "f", &unnamed_peer, &ne);
	int rh = expect(g, "g", "h:g", &nh);
	if (rh >= 0) {
		FID_EXPECT(same(rh, h), "g: the socket in flight is not h");
		close(rh);
	}
	expect_empty(g, "g");
	expect_names(h, "h", &nh, &ng);
	int rg = expect(k, "k", "h:k", &nh);
	if (rg >= 0) {
		FID_EXPECT(same(rg, g), "k: the socket in flight is not g");
		close(rg);
	}
	expect_empty(k, "k");
	FID_EXPECT(send(h, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EPIPE, "h: not shut down for sending");
	return fid_done();
}
