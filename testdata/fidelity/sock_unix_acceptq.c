/*
 * sock_unix_acceptq: UNIX connections waiting in a listener's accept
 * queue over the dump, with what their clients sent before the accept.
 * P listens on L (an abstract stream name); in L's queue, in order:
 *   C1  a child that connected as euid 555/egid 666 with groups 77, 88
 *       and sent "one" and "two-two"; it lives on, holding its end;
 *   C2  a child bound to an abstract name that connected as 777/888
 *       with group 99, sent "bye" and a piece of 10000 bytes (the kernel
 *       puts most of it in pages), and exited: its client end is closed
 *       (the accepted end still names it as its peer);
 *   c3  P's own client, which sent "cred" with credentials of its
 *       choosing (SCM_CREDENTIALS pid P, uid 1234, gid 5678), then "fd"
 *       with the write end of a pipe P keeps (SCM_RIGHTS), then shut
 *       down its sending side;
 *   c4  a client P connected and gave to a child D, closing its own
 *       copy: the accepted end names P, not D, the holder.
 * On S (an abstract seqpacket name), a client of P sent the messages
 * "m1" and "m22" and was closed; another, which P keeps, sent "k1", an
 * empty message and "k333".
 * After the restore P accepts: each connection in the same order, with
 * the same SO_PEERCRED and SO_PEERGROUPS (the process that connected,
 * C2 gone), the same bytes (the credentials of c3's piece seen with
 * SO_PASSCRED, its file in flight the same pipe), the same message boundaries on S, end of file where the
 * client closed or shut down; C1 then checks its own end and sends
 * "three", which P reads too. Nothing more waits.
 */
#include "fidelity.h"
#include <grp.h>
#include <poll.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

static socklen_t addr(struct sockaddr_un *a, const char *name)
{
	memset(a, 0, sizeof *a);
	a->sun_family = AF_UNIX;
	memcpy(a->sun_path + 1, name, strlen(name));
	return offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name);
}

/* as connects a new socket of type (bound to the abstract name bind_to
 * if not NULL) to name with the effective ids eu/eg and the groups g (in
 * a child: its ids are its own). */
static int as(int type, const char *name, uid_t eu, gid_t eg, const gid_t *g, int ng, const char *bind_to)
{
	struct sockaddr_un a;
	socklen_t al = addr(&a, name);
	int s = socket(AF_UNIX, type, 0);
	FID_SETUP(s >= 0, "socket");
	if (bind_to) {
		struct sockaddr_un b;
		socklen_t bl = addr(&b, bind_to);
		FID_SETUP(bind(s, (struct sockaddr *)&b, bl) == 0, "bind %s", bind_to);
	}
	FID_SETUP(setgroups(ng, g) == 0 && setresgid(-1, eg, -1) == 0 && setresuid(-1, eu, -1) == 0, "drop ids");
	FID_SETUP(connect(s, (struct sockaddr *)&a, al) == 0, "connect %s", name);
	FID_SETUP(setresuid(-1, 0, -1) == 0 && setresgid(-1, 0, -1) == 0, "ids back");
	return s;
}

/* peer checks SO_PEERCRED and SO_PEERGROUPS of fd. */
static void peer(int fd, const char *what, pid_t pid, uid_t uid, gid_t gid, const gid_t *g, int ng)
{
	struct ucred uc;
	socklen_t l = sizeof uc;
	FID_EXPECT(getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) == 0 && uc.pid == pid && uc.uid == uid && uc.gid == gid,
		   "%s: SO_PEERCRED pid %d uid %d gid %d, want %d %d %d", what, uc.pid, uc.uid, uc.gid, pid, uid, gid);
	gid_t got[16];
	l = sizeof got;
	int ok = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, got, &l) == 0 && (int)(l / sizeof(gid_t)) == ng;
	for (int i = 0; ok && i < ng; i++)
		ok = got[i] == g[i];
	FID_EXPECT(ok, "%s: SO_PEERGROUPS: %d groups, want %d", what, (int)(l / sizeof(gid_t)), ng);
}

/* drain reads what fd holds now (up to n bytes). */
static ssize_t drain(int fd, char *buf, size_t n)
{
	size_t got = 0;
	for (;;) {
		ssize_t r = recv(fd, buf + got, n - got, MSG_DONTWAIT);
		if (r <= 0)
			return got ? (ssize_t)got : r;
		got += r;
	}
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	char lname[64], sname[64];
	snprintf(lname, sizeof lname, "ckpt-uaq-%d", getpid());
	snprintf(sname, sizeof sname, "ckpt-uaq-s-%d", getpid());
	struct sockaddr_un a;
	socklen_t al = addr(&a, lname);
	int l = socket(AF_UNIX, SOCK_STREAM, 0);
	FID_SETUP(l >= 0 && bind(l, (struct sockaddr *)&a, al) == 0 && listen(l, 8) == 0, "listen L");
	pid_t me = getpid();
	const char *mode = argc > 2 ? argv[2] : "";
	if (mode[0]) {
		/* "path DIR/": a client bound to a path name in DIR sent
		 * and was closed (its socket file stays); restored, the
		 * accepted end names that path as its peer's. "self": a
		 * client sent itself (SCM_RIGHTS) and stays. Refused:
		 * "oob", a waiting client sent out-of-band data; "relative",
		 * a closed client was bound to a relative path name;
		 * "outside", the client was connected by a process alive
		 * outside the dump. */
		int s = socket(AF_UNIX, SOCK_STREAM, 0);
		FID_SETUP(s >= 0, "socket");
		int stay[2] = {-1, -1};
		if (strcmp(mode, "outside") == 0) {
			/* GG, orphaned and in a session of its own, connects
			 * and hands the client to P, then lives on outside the
			 * dump until P closes stay: the accepted end would name
			 * it. */
			int sp[2];
			FID_SETUP(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0 && pipe(stay) == 0, "socketpair");
			pid_t g = fork();
			FID_SETUP(g >= 0, "fork");
			if (g == 0) {
				close(stay[1]);
				if (fork() != 0)
					_exit(0);
				FID_SETUP(setsid() > 0, "GG: setsid");
				int cs = socket(AF_UNIX, SOCK_STREAM, 0);
				FID_SETUP(cs >= 0 && connect(cs, (struct sockaddr *)&a, al) == 0 && send(cs, "data", 4, 0) == 4, "GG: connect");
				char cbuf[CMSG_SPACE(sizeof(int))];
				struct iovec io = {"c", 1};
				struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
				struct cmsghdr *c = CMSG_FIRSTHDR(&m);
				c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
				memcpy(CMSG_DATA(c), &cs, sizeof cs);
				FID_SETUP(sendmsg(sp[1], &m, 0) == 1, "GG: pass the client");
				char x;
				while (read(stay[0], &x, 1) < 0 && errno == EINTR)
					;
				_exit(0);
			}
			close(stay[0]);
			FID_SETUP(waitpid(g, NULL, 0) == g, "wait for G");
			char cbuf[CMSG_SPACE(sizeof(int))], x;
			struct iovec io = {&x, 1};
			struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
			FID_SETUP(recvmsg(sp[0], &m, 0) == 1 && CMSG_FIRSTHDR(&m), "receive the client");
			close(s);
			memcpy(&s, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof s);
			close(sp[0]);
			close(sp[1]);
		}
		char bname[200] = "";
		if (strcmp(mode, "path") == 0)
			snprintf(bname, sizeof bname, "%sclient.sock", argc > 3 ? argv[3] : "/tmp/");
		else if (strcmp(mode, "relative") == 0)
			snprintf(bname, sizeof bname, "ckpt-uaq-c-%d", getpid());
		if (bname[0]) {
			struct sockaddr_un b = {.sun_family = AF_UNIX};
			unlink(bname);
			strcpy(b.sun_path, bname);
			FID_SETUP(bind(s, (struct sockaddr *)&b, sizeof b) == 0, "bind the client to %s", bname);
		}
		if (strcmp(mode, "self") == 0) {
			/* The client sends itself (SCM_RIGHTS) and stays. */
			char cb[CMSG_SPACE(sizeof(int))];
			struct iovec io = {"data", 4};
			struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cb, .msg_controllen = sizeof cb};
			struct cmsghdr *c = CMSG_FIRSTHDR(&m);
			c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &s, sizeof s);
			FID_SETUP(connect(s, (struct sockaddr *)&a, al) == 0 && sendmsg(s, &m, 0) == 4, "connect, send itself");
		} else if (stay[1] < 0)
			FID_SETUP(connect(s, (struct sockaddr *)&a, al) == 0 && send(s, "data", 4, 0) == 4, "connect, send");
		if (strcmp(mode, "oob") == 0)
			FID_SETUP(send(s, "!", 1, MSG_OOB) == 1, "send out-of-band");
		else if (stay[1] < 0 && strcmp(mode, "self") != 0)
			close(s);
		fid_ready();
		fid_wait();
		struct sockaddr_un pa;
		socklen_t pl = sizeof pa;
		memset(&pa, 0, sizeof pa);
		int c = accept(l, (struct sockaddr *)&pa, &pl);
		char buf[8], cb[CMSG_SPACE(sizeof(int))];
		struct iovec io = {buf, sizeof buf};
		struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cb, .msg_controllen = sizeof cb};
		FID_EXPECT(c >= 0 && recvmsg(c, &m, MSG_DONTWAIT) == 4 && memcmp(buf, "data", 4) == 0, "the waiting connection's data");
		if (strcmp(mode, "self") == 0) {
			struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
			int got = -1;
			if (cm && cm->cmsg_type == SCM_RIGHTS)
				memcpy(&got, CMSG_DATA(cm), sizeof got);
			struct stat s1, s2;
			FID_EXPECT(got >= 0 && fstat(got, &s1) == 0 && fstat(s, &s2) == 0 && s1.st_ino == s2.st_ino,
				   "the file in flight is not the client itself");
		}
		if (strcmp(mode, "oob") != 0 && strcmp(mode, "self") != 0 && stay[1] < 0)
			FID_EXPECT(recv(c, buf, sizeof buf, MSG_DONTWAIT) == 0, "no end of file");
		if (stay[1] >= 0)
			close(stay[1]);
		if (bname[0]) {
			FID_EXPECT(pl > offsetof(struct sockaddr_un, sun_path) && strcmp(pa.sun_path, bname) == 0,
				   "the accepted end's peer is %s, want %s", pl > offsetof(struct sockaddr_un, sun_path) ? pa.sun_path : "unnamed", bname);
			struct stat st;
			FID_EXPECT(lstat(bname, &st) == 0 && S_ISSOCK(st.st_mode), "the closed client's socket file %s is gone", bname);
			unlink(bname);
		}
		return fid_done();
	}

	/* C1: connects, sends, keeps its end; after "go" checks it, sends
	 * "three" and reports. */
	int go[2], res[2];
	FID_SETUP(pipe(go) == 0 && pipe(res) == 0, "pipes");
	gid_t g1[] = {77, 88};
	pid_t c1 = fork();
	FID_SETUP(c1 >= 0, "fork C1");
	if (c1 == 0) {
		close(go[1]);
		close(res[0]);
		int s = as(SOCK_STREAM, lname, 555, 666, g1, 2, NULL);
		FID_SETUP(send(s, "one", 3, 0) == 3 && send(s, "two-two", 7, 0) == 7, "C1: send");
		FID_SETUP(write(res[1], "c", 1) == 1, "C1: ready");
		char x, why[256] = "";
		if (read(go[0], &x, 1) != 1)
			_exit(0);
		struct ucred uc;
		socklen_t ul = sizeof uc;
		if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &uc, &ul) < 0 || uc.pid != me || uc.uid != 0 || uc.gid != 0)
			snprintf(why, sizeof why, "C1: its end's SO_PEERCRED pid %d uid %d gid %d, want %d 0 0", uc.pid, uc.uid, uc.gid, me);
		else if (send(s, "three", 5, 0) != 5)
			snprintf(why, sizeof why, "C1: send three: %s", strerror(errno));
		ssize_t w = write(res[1], why, strlen(why) + 1);
		(void)w;
		_exit(0);
	}
	close(go[0]);
	close(res[1]);
	char x;
	FID_SETUP(read(res[0], &x, 1) == 1, "C1 connected");

	/* C2: connects, sends, exits. */
	static char big[10000];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (char)(i * 7 + (i >> 8));
	gid_t g2[] = {99};
	char c2name[64];
	snprintf(c2name, sizeof c2name, "ckpt-uaq-c2-%d", getpid());
	pid_t c2 = fork();
	FID_SETUP(c2 >= 0, "fork C2");
	if (c2 == 0) {
		int s = as(SOCK_STREAM, lname, 777, 888, g2, 1, c2name);
		FID_SETUP(send(s, "bye", 3, 0) == 3 && send(s, big, sizeof big, 0) == sizeof big, "C2: send");
		_exit(0);
	}
	int st;
	FID_SETUP(waitpid(c2, &st, 0) == c2 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "C2");

	/* c3: P's own client, a piece with chosen credentials, then
	 * SHUT_WR. */
	int c3 = socket(AF_UNIX, SOCK_STREAM, 0);
	FID_SETUP(c3 >= 0 && connect(c3, (struct sockaddr *)&a, al) == 0, "connect c3");
	char cbuf[CMSG_SPACE(sizeof(struct ucred))];
	struct iovec io = {"cred", 4};
	struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_CREDENTIALS, c->cmsg_len = CMSG_LEN(sizeof(struct ucred));
	struct ucred cr = {.pid = me, .uid = 1234, .gid = 5678};
	memcpy(CMSG_DATA(c), &cr, sizeof cr);
	FID_SETUP(sendmsg(c3, &m, 0) == 4, "c3: send");
	/* ... then "fd" with the write end of a pipe P keeps (SCM_RIGHTS). */
	int pp[2];
	FID_SETUP(pipe(pp) == 0, "pipe");
	char rbuf[CMSG_SPACE(sizeof(int))];
	io = (struct iovec){"fd", 2};
	m = (struct msghdr){.msg_iov = &io, .msg_iovlen = 1, .msg_control = rbuf, .msg_controllen = sizeof rbuf};
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &pp[1], sizeof(int));
	FID_SETUP(sendmsg(c3, &m, 0) == 2 && shutdown(c3, SHUT_WR) == 0, "c3: send a file");

	/* c4: P connects, sends nothing, gives the client to a child D and
	 * closes its own copy: the accepted end names P, not D. */
	int c4 = socket(AF_UNIX, SOCK_STREAM, 0);
	FID_SETUP(c4 >= 0 && connect(c4, (struct sockaddr *)&a, al) == 0, "connect c4");
	int dgo[2];
	FID_SETUP(pipe(dgo) == 0, "pipe");
	pid_t d = fork();
	FID_SETUP(d >= 0, "fork D");
	if (d == 0) {
		close(dgo[1]);
		char y;
		while (read(dgo[0], &y, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(dgo[0]);
	close(c4);

	/* S: a seqpacket client sends two messages and is closed. */
	struct sockaddr_un sa;
	socklen_t sal = addr(&sa, sname);
	int sl = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	FID_SETUP(sl >= 0 && bind(sl, (struct sockaddr *)&sa, sal) == 0 && listen(sl, 4) == 0, "listen S");
	int sc = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	FID_SETUP(sc >= 0 && connect(sc, (struct sockaddr *)&sa, sal) == 0, "connect to S");
	FID_SETUP(send(sc, "m1", 2, 0) == 2 && send(sc, "m22", 3, 0) == 3, "send to S");
	close(sc);
	/* ... and another, which P keeps, sent "k1", an empty message and
	 * "k333". */
	int sk = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	FID_SETUP(sk >= 0 && connect(sk, (struct sockaddr *)&sa, sal) == 0, "connect to S again");
	FID_SETUP(send(sk, "k1", 2, 0) == 2 && send(sk, "", 0, 0) == 0 && send(sk, "k333", 4, 0) == 4, "send to S again");

	fid_ready();
	fid_wait();

	char buf[16384];
	/* C1's connection. */
	int a1 = accept(l, NULL, NULL);
	FID_EXPECT(a1 >= 0, "accept C1: %s", strerror(errno));
	peer(a1, "C1's connection", c1, 555, 666, g1, 2);
	ssize_t n = drain(a1, buf, sizeof buf);
	FID_EXPECT(n == 10 && memcmp(buf, "onetwo-two", 10) == 0, "C1's connection: %zd bytes (%.*s), want onetwo-two", n,
		   (int)(n > 0 ? n : 0), buf);
	/* C2's, its client gone. */
	struct sockaddr_un pa;
	socklen_t pl = sizeof pa;
	memset(&pa, 0, sizeof pa);
	int a2 = accept(l, (struct sockaddr *)&pa, &pl);
	FID_EXPECT(a2 >= 0, "accept C2: %s", strerror(errno));
	FID_EXPECT(pl == offsetof(struct sockaddr_un, sun_path) + 1 + strlen(c2name) && pa.sun_path[0] == 0 &&
			   memcmp(pa.sun_path + 1, c2name, strlen(c2name)) == 0,
		   "C2's connection: its peer's name (%d bytes) is not @%s", (int)pl, c2name);
	peer(a2, "C2's connection", c2, 777, 888, g2, 1);
	n = drain(a2, buf, sizeof buf);
	FID_EXPECT(n == 3 + (ssize_t)sizeof big && memcmp(buf, "bye", 3) == 0 && memcmp(buf + 3, big, sizeof big) == 0,
		   "C2's connection: %zd bytes, want bye and %zu bytes", n, sizeof big);
	FID_EXPECT(recv(a2, buf, 1, MSG_DONTWAIT) == 0, "C2's connection: no end of file");
	/* c3's, credentials seen with SO_PASSCRED. */
	int a3 = accept(l, NULL, NULL);
	FID_EXPECT(a3 >= 0, "accept c3: %s", strerror(errno));
	peer(a3, "c3's connection", me, 0, 0, NULL, 0);
	int on = 1;
	FID_EXPECT(setsockopt(a3, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) == 0, "SO_PASSCRED");
	io = (struct iovec){buf, sizeof buf};
	m = (struct msghdr){.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	n = recvmsg(a3, &m, MSG_DONTWAIT);
	c = CMSG_FIRSTHDR(&m);
	struct ucred got = {0};
	if (c && c->cmsg_type == SCM_CREDENTIALS)
		memcpy(&got, CMSG_DATA(c), sizeof got);
	FID_EXPECT(n == 4 && memcmp(buf, "cred", 4) == 0 && got.pid == me && got.uid == 1234 && got.gid == 5678,
		   "c3's connection: %zd bytes, credentials pid %d uid %d gid %d, want cred from %d 1234 5678", n, got.pid, got.uid,
		   got.gid, me);
	char rcv[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
	io = (struct iovec){buf, sizeof buf};
	m = (struct msghdr){.msg_iov = &io, .msg_iovlen = 1, .msg_control = rcv, .msg_controllen = sizeof rcv};
	n = recvmsg(a3, &m, MSG_DONTWAIT);
	int passed = -1;
	for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(&passed, CMSG_DATA(c), sizeof passed);
	FID_EXPECT(n == 2 && memcmp(buf, "fd", 2) == 0 && passed >= 0, "c3's connection: %zd bytes, file %d; want fd with a file", n, passed);
	if (passed >= 0) {
		char pb[4] = "";
		FID_EXPECT(write(passed, "via", 3) == 3 && read(pp[0], pb, 3) == 3 && memcmp(pb, "via", 3) == 0,
			   "c3's connection: the file in flight is not the write end of P's pipe");
	}
	FID_EXPECT(recv(a3, buf, 1, MSG_DONTWAIT) == 0, "c3's connection: no end of file");
	/* c4's, made by P, its client held by D. */
	int a4 = accept(l, NULL, NULL);
	FID_EXPECT(a4 >= 0, "accept c4: %s", strerror(errno));
	peer(a4, "c4's connection (its client held by D)", me, 0, 0, NULL, 0);
	close(dgo[1]);
	FID_EXPECT(waitpid(d, &st, 0) == d, "wait for D");
	/* Nothing more waits on L. */
	struct pollfd lp = {l, POLLIN, 0};
	FID_EXPECT(poll(&lp, 1, 0) == 0, "L: another connection waits");
	/* S: the two messages, then end of file. */
	int as1 = accept(sl, NULL, NULL);
	FID_EXPECT(as1 >= 0, "accept on S: %s", strerror(errno));
	ssize_t m1 = recv(as1, buf, sizeof buf, MSG_DONTWAIT);
	ssize_t m2 = recv(as1, buf + 8, sizeof buf - 8, MSG_DONTWAIT);
	FID_EXPECT(m1 == 2 && memcmp(buf, "m1", 2) == 0 && m2 == 3 && memcmp(buf + 8, "m22", 3) == 0,
		   "S: messages of %zd and %zd bytes, want m1 and m22", m1, m2);
	FID_EXPECT(recv(as1, buf, sizeof buf, MSG_DONTWAIT) == 0, "S: no end of file");
	int as2 = accept(sl, NULL, NULL);
	FID_EXPECT(as2 >= 0, "accept on S again: %s", strerror(errno));
	ssize_t k1 = recv(as2, buf, sizeof buf, MSG_DONTWAIT);
	ssize_t k2 = recv(as2, buf + 8, sizeof buf - 8, MSG_DONTWAIT);
	ssize_t k3 = recv(as2, buf + 16, sizeof buf - 16, MSG_DONTWAIT);
	FID_EXPECT(k1 == 2 && memcmp(buf, "k1", 2) == 0 && k2 == 0 && k3 == 4 && memcmp(buf + 16, "k333", 4) == 0,
		   "S, the kept client: messages of %zd, %zd and %zd bytes, want k1, empty, k333", k1, k2, k3);
	FID_EXPECT(recv(as2, buf, sizeof buf, MSG_DONTWAIT) < 0 && errno == EAGAIN, "S, the kept client: more queued");
	FID_EXPECT(send(sk, "late", 4, 0) == 4 && recv(as2, buf, sizeof buf, 0) == 4, "S, the kept client: a message after");
	/* C1 checks its end and sends more. */
	FID_EXPECT(write(go[1], "g", 1) == 1, "go");
	char why[256] = "";
	FID_EXPECT(read(res[0], why, sizeof why) > 0, "C1's report");
	FID_EXPECT(!why[0], "%s", why);
	struct pollfd p = {a1, POLLIN, 0};
	FID_EXPECT(poll(&p, 1, 5000) == 1 && drain(a1, buf, sizeof buf) == 5 && memcmp(buf, "three", 5) == 0, "C1's three");
	FID_EXPECT(waitpid(c1, &st, 0) == c1, "wait for C1");
	return fid_done();
}
