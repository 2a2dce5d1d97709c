/*
 * sock_scm: messages queued in UNIX sockets with files in flight
 * (SCM_RIGHTS) and credentials (SCM_CREDENTIALS), read only after the
 * restore:
 *   stream pair a-b, queued for b: "hello", then "F1" with a regular file
 *     f also open in P (offset 5), the read end of a pipe holding
 *     "pipedata" (write end w kept), a itself, and a file g no fd holds
 *     (offset 3, O_APPEND); then "tail" with the same credentials.
 *   seqpacket pair c-d, queued for d: "m1" with d itself, "" (empty),
 *     "m3" with x, one end of a pair x-y whose other end y P keeps
 *     ("xq" queued in x for x's new holder).
 *   datagram pair e-h, queued for h: "nocred" (sent before h set
 *     SO_PASSCRED: no credentials), "child" sent by the child C (its
 *     pid), "forged" sent by P with credentials pid P uid 1234 gid 4321,
 *     "gone" sent by a child G that has exited since (its pid).
 * After the restore each read must give the same bytes, boundaries,
 * files (the same descriptions as the fds of P: kcmp; their positions,
 * flags and contents) and credentials.
 *
 * With "epoll", an epoll instance is in flight: the dump must refuse it.
 * With "deep", a socket no process holds is in flight with, in its own
 * queue, another such socket: the dump must refuse it. With "listener",
 * a listener and the client waiting in its queue are in flight, neither
 * held by a process: the dump must refuse them (they are made in the
 * processes their credentials name, with a socket of theirs some
 * process holds).
 */
#include "sock.h"
#include <sys/epoll.h>
#include <sys/socket.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

/* got is what one recvmsg gave. */
struct got {
	ssize_t n;
	char data[256];
	int fds[8], nf;
	int hascred;
	struct ucred cred;
};

static void recvone(int s, size_t size, struct got *g)
{
	char cbuf[CMSG_SPACE(8 * sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
	struct iovec io = {g->data, size};
	struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	memset(g, 0, sizeof *g);
	g->n = recvmsg(s, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (g->n < 0)
		return;
	g->data[g->n] = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			g->nf = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			memcpy(g->fds, CMSG_DATA(c), g->nf * sizeof(int));
		}
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
			g->hascred = 1;
			memcpy(&g->cred, CMSG_DATA(c), sizeof g->cred);
		}
	}
}

static void expect_msg(struct got *g, const char *what, const char *want, int nf)
{
	FID_EXPECT(g->n == (ssize_t)strlen(want) && strcmp(g->data, want) == 0, "%s: read %zd bytes %.*s, want %s", what, g->n,
		   (int)(g->n > 0 ? g->n : 0), g->data, want);
	FID_EXPECT(g->nf == nf, "%s: %d files in flight, want %d", what, g->nf, nf);
}

static void expect_cred(struct got *g, const char *what, pid_t pid, uid_t uid, gid_t gid)
{
	FID_EXPECT(g->hascred && g->cred.pid == pid && g->cred.uid == uid && g->cred.gid == gid,
		   "%s: credentials pid %d uid %d gid %d, want %d %d %d", what, g->cred.pid, g->cred.uid, g->cred.gid, pid, uid, gid);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	const char *mode = argc > 2 ? argv[2] : "";
	char tmpl[] = "/tmp/sock_scm_XXXXXX";
	char *dir = mkdtemp(tmpl);
	FID_SETUP(dir, "mkdtemp");
	char fpath[256], gpath[256];
	snprintf(fpath, sizeof fpath, "%s/f", dir);
	snprintf(gpath, sizeof gpath, "%s/g", dir);

	int ab[2], cd[2], eh[2], xy[2], pw[2];
	FID_SETUP(socketpair(AF_UNIX, SOCK_STREAM, 0, ab) == 0, "socketpair ab");
	FID_SETUP(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, cd) == 0, "socketpair cd");
	FID_SETUP(socketpair(AF_UNIX, SOCK_DGRAM, 0, eh) == 0, "socketpair eh");
	FID_SETUP(socketpair(AF_UNIX, SOCK_STREAM, 0, xy) == 0, "socketpair xy");
	FID_SETUP(pipe(pw) == 0, "pipe");

	if (*mode) {
		if (strcmp(mode, "epoll") == 0) {
			int ep = epoll_create1(0);
			FID_SETUP(ep >= 0, "epoll_create1");
			sendfds(ab[0], "E", 1, &ep, 1, NULL);
			close(ep);
		} else if (strcmp(mode, "listener") == 0) {
			/* A listener and the client waiting in its queue,
			 * both in flight only. */
			int l = socket(AF_UNIX, SOCK_STREAM, 0), c = socket(AF_UNIX, SOCK_STREAM, 0);
			struct sockaddr_un a = {.sun_family = AF_UNIX};
			socklen_t al = offsetof(struct sockaddr_un, sun_path) + 1 +
				       snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "ckpt-scm-%d", getpid());
			FID_SETUP(l >= 0 && bind(l, (struct sockaddr *)&a, al) == 0 && listen(l, 4) == 0, "listener");
			FID_SETUP(c >= 0 && connect(c, (struct sockaddr *)&a, al) == 0, "connect");
			int lc[] = {l, c};
			sendfds(ab[0], "L", 1, lc, 2, NULL);
			close(l), close(c);
		} else {
			int zz[2];
			FID_SETUP(socketpair(AF_UNIX, SOCK_STREAM, 0, zz) == 0, "socketpair zz");
			sendfds(xy[1], "z", 1, &zz[0], 1, NULL); /* zz[0] in flight in x */
			sendfds(ab[0], "x", 1, &xy[0], 1, NULL); /* x in flight in b */
			close(zz[0]), close(zz[1]), close(xy[0]), close(xy[1]);
		}
		fid_ready();
		fid_wait();
		/* refused: the original goes on untouched. */
		struct got r;
		recvone(ab[1], sizeof r.data - 1, &r);
		FID_EXPECT(r.n == 1 && r.nf >= 1, "the message with files in flight: %zd bytes, %d files", r.n, r.nf);
		rmdir(dir);
		return fid_done();
	}

	int f = open(fpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	FID_SETUP(f >= 0 && write(f, "0123456789", 10) == 10 && lseek(f, 5, SEEK_SET) == 5, "file f");
	int g = open(gpath, O_RDWR | O_CREAT | O_APPEND, 0600);
	FID_SETUP(g >= 0 && write(g, "abcdefgh", 8) == 8 && lseek(g, 3, SEEK_SET) == 3, "file g");
	FID_SETUP(write(pw[1], "pipedata", 8) == 8, "pipe data");

	/* stream a -> b */
	sendfds(ab[0], "hello", 5, NULL, 0, NULL);
	int f1[] = {f, pw[0], ab[0], g};
	sendfds(ab[0], "F1", 2, f1, 4, NULL);
	sendfds(ab[0], "tail", 4, NULL, 0, NULL);
	close(g);
	close(pw[0]);

	/* seqpacket c -> d */
	FID_SETUP(send(xy[1], "xq", 2, 0) == 2, "send xq");
	sendfds(cd[0], "m1", 2, &cd[1], 1, NULL);
	sendfds(cd[0], "", 0, NULL, 0, NULL);
	sendfds(cd[0], "m3", 2, &xy[0], 1, NULL);
	close(xy[0]);

	/* datagram e -> h */
	sendfds(eh[0], "nocred", 6, NULL, 0, NULL);
	int on = 1;
	FID_SETUP(setsockopt(eh[1], SOL_SOCKET, SO_PASSCRED, &on, sizeof on) == 0, "SO_PASSCRED");
	int go[2], sent[2];
	FID_SETUP(pipe(go) == 0 && pipe(sent) == 0, "pipes");
	pid_t c = fork();
	FID_SETUP(c >= 0, "fork");
	if (c == 0) {
		close(go[1]);
		sendfds(eh[0], "child", 5, NULL, 0, NULL);
		FID_SETUP(write(sent[1], "s", 1) == 1, "C: write");
		char x;
		while (read(go[0], &x, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(go[0]);
	close(sent[1]);
	char sx;
	FID_SETUP(read(sent[0], &sx, 1) == 1, "wait for C's message");
	close(sent[0]);
	struct ucred forged = {getpid(), 1234, 4321};
	pid_t gone = fork();
	FID_SETUP(gone >= 0, "fork");
	if (gone == 0) {
		sendfds(eh[0], "gone", 4, NULL, 0, NULL);
		_exit(0);
	}
	FID_SETUP(waitpid(gone, NULL, 0) == gone, "wait for G");
	sendfds(eh[0], "forged", 6, NULL, 0, &forged);

	fid_ready();
	fid_wait();

	struct got r;
	/* b: "hello" and "F1" come in one read with the files (a read goes
	 * on across pieces up to one with files); then "tail". */
	recvone(ab[1], sizeof r.data - 1, &r);
	expect_msg(&r, "b first read", "helloF1", 4);
	if (r.nf == 4) {
		int rf = r.fds[0], rr = r.fds[1], ra = r.fds[2], rg = r.fds[3];
		FID_EXPECT(same(rf, f), "f in flight is not the description of P's fd");
		FID_EXPECT(lseek(rf, 0, SEEK_CUR) == 5, "f in flight at %ld, want 5", (long)lseek(rf, 0, SEEK_CUR));
		lseek(f, 7, SEEK_SET);
		FID_EXPECT(lseek(rf, 0, SEEK_CUR) == 7, "f in flight does not share P's offset");
		char buf[32] = {0};
		FID_EXPECT(read(rr, buf, sizeof buf) == 8 && memcmp(buf, "pipedata", 8) == 0, "the pipe in flight reads %s", buf);
		FID_EXPECT(write(pw[1], "more", 4) == 4 && read(rr, buf, sizeof buf) == 4 && memcmp(buf, "more", 4) == 0,
			   "the pipe in flight is not the one P writes");
		FID_EXPECT(same(ra, ab[0]), "a in flight is not P's a");
		FID_EXPECT(lseek(rg, 0, SEEK_CUR) == 3, "g in flight at %ld, want 3", (long)lseek(rg, 0, SEEK_CUR));
		FID_EXPECT((fcntl(rg, F_GETFL) & O_APPEND) != 0, "g in flight lost O_APPEND");
		memset(buf, 0, sizeof buf);
		FID_EXPECT(read(rg, buf, 5) == 5 && memcmp(buf, "defgh", 5) == 0, "g in flight reads %s", buf);
		FID_EXPECT(send(ra, "via", 3, 0) == 3, "send on a in flight");
	}
	/* "tail" and what a sent since: no credentials asked, one piece. */
	recvone(ab[1], sizeof r.data - 1, &r);
	expect_msg(&r, "b second read", "tailvia", 0);

	/* d */
	recvone(cd[1], sizeof r.data - 1, &r);
	expect_msg(&r, "d m1", "m1", 1);
	if (r.nf == 1)
		FID_EXPECT(same(r.fds[0], cd[1]), "d in flight in its own queue is not d");
	recvone(cd[1], sizeof r.data - 1, &r);
	expect_msg(&r, "d empty message", "", 0);
	recvone(cd[1], sizeof r.data - 1, &r);
	expect_msg(&r, "d m3", "m3", 1);
	if (r.nf == 1) {
		int x = r.fds[0];
		struct got q;
		recvone(x, sizeof q.data - 1, &q);
		expect_msg(&q, "x", "xq", 0);
		FID_EXPECT(send(x, "yy", 2, 0) == 2, "send on x");
		recvone(xy[1], sizeof q.data - 1, &q);
		expect_msg(&q, "y", "yy", 0);
	}

	/* h, with SO_PASSCRED */
	int seen[4] = {0};
	for (int i = 0; i < 4; i++) {
		recvone(eh[1], sizeof r.data - 1, &r);
		if (r.n < 0) {
			fid_fail("h: message %d: %s", i, strerror(errno));
			break;
		}
		if (strcmp(r.data, "nocred") == 0) {
			seen[0]++;
			expect_cred(&r, "nocred", 0, 65534, 65534);
		} else if (strcmp(r.data, "child") == 0) {
			seen[1]++;
			expect_cred(&r, "child", c, getuid(), getgid());
		} else if (strcmp(r.data, "gone") == 0) {
			seen[2]++;
			expect_cred(&r, "gone", gone, getuid(), getgid());
		} else if (strcmp(r.data, "forged") == 0) {
			seen[3]++;
			expect_cred(&r, "forged", getpid(), 1234, 4321);
		} else
			fid_fail("h: unexpected message %s", r.data);
	}
	FID_EXPECT(seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && seen[3] == 1, "h: messages seen %d %d %d %d", seen[0], seen[1],
		   seen[2], seen[3]);
	recvone(eh[1], sizeof r.data - 1, &r);
	FID_EXPECT(r.n < 0 && errno == EAGAIN, "h: more messages");

	close(go[1]);
	FID_EXPECT(waitpid(c, NULL, 0) == c, "wait for C");
	unlink(fpath), unlink(gpath), rmdir(dir);
	return fid_done();
}
