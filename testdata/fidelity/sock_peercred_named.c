/*
 * sock_peercred_named: SO_PEERCRED, SO_PEERPIDFD and SO_PEERGROUPS of UNIX
 * connections made through a name. The accepted end names the process
 * that called connect(), the connecting end the process that called
 * listen() (with its ids then), and a listener itself its listen():
 *   L1  an abstract stream listener, listen() called by P while its
 *       effective ids were 4321/1234 and its groups 77 and 1234; C1 (a
 *       child) connected (accepted by P: a1 in P, c1 in C1);
 *   L2  a seqpacket listener on a path, listen() by P as root; C2
 *       connected while its effective ids were 555/666 (accepted: a2 in
 *       P, c2 in C2), then P closed L2: a named pair whose listener is
 *       gone;
 *   C4  connected to L1 but not accepted before the dump (its own end
 *       names P's listen(), the end P accepts after the restore C4);
 *   C5  connected to L1 (accepted: a5), sent "bye" and exited: a5's peer
 *       is closed and names C5, gone; zp a pair made by P whose other
 *       end P closed.
 * After the restore each end must still name the same pid, uid, gid and
 * groups; the children check their ends when P says "go" and send their
 * findings back.
 *
 * With "gone", a child G makes a listener (listen() as 98/99) and a
 * client connected to it, passes both to P and exits; P accepts: the
 * listener and the client name G, the accepted end G too, all gone. The
 * restore calls listen() and connect() in helpers holding G's PID: the
 * same pids, ids and SO_PEERPIDFD answers after it.
 * With "outside", G's child GG does that and stays alive, orphaned,
 * outside the dump: the dump must refuse the listener.
 */
#include "fidelity.h"
#include <grp.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* checkp compares SO_PEERCRED of fd with pid/uid/gid, SO_PEERGROUPS with
 * the ng groups g (ng < 0: not checked) and the pid SO_PEERPIDFD names
 * with pid; it writes what differs into why (empty if nothing). */
static void checkp(int fd, const char *name, pid_t pid, uid_t uid, gid_t gid, const gid_t *g, int ng, char *why, size_t n)
{
	struct ucred uc;
	socklen_t l = sizeof uc;
	why[0] = 0;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) < 0) {
		snprintf(why, n, "%s: SO_PEERCRED: %s", name, strerror(errno));
		return;
	}
	if (uc.pid != pid || uc.uid != uid || uc.gid != gid) {
		snprintf(why, n, "%s: SO_PEERCRED pid %d uid %d gid %d, want %d %d %d", name, uc.pid, uc.uid, uc.gid, pid, uid, gid);
		return;
	}
	if (ng >= 0) {
		gid_t got[64];
		l = sizeof got;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, got, &l) < 0) {
			snprintf(why, n, "%s: SO_PEERGROUPS: %s", name, strerror(errno));
			return;
		}
		int k = l / sizeof(gid_t), same = k == ng;
		for (int i = 0; same && i < k; i++)
			same = got[i] == g[i];
		if (!same) {
			snprintf(why, n, "%s: SO_PEERGROUPS has %d groups (first %d), want %d", name, k, k ? (int)got[0] : -1, ng);
			return;
		}
	}
	int pfd;
	l = sizeof pfd;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pfd, &l) < 0) {
		if (errno != ENOPROTOOPT)
			snprintf(why, n, "%s: SO_PEERPIDFD: %s", name, strerror(errno));
		return;
	}
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pfd);
	int f = open(path, O_RDONLY);
	ssize_t r = f < 0 ? -1 : read(f, buf, sizeof buf - 1);
	close(f);
	close(pfd);
	buf[r > 0 ? r : 0] = 0;
	char *p = strstr(buf, "\nPid:");
	if (!p || atoi(p + 5) != pid)
		snprintf(why, n, "%s: SO_PEERPIDFD names %s, want pid %d", name, p ? p + 5 : "nothing", pid);
}

/* peerpidfd is the pid SO_PEERPIDFD of fd names (its fdinfo's Pid:), or
 * -errno. */
static int peerpidfd(int fd)
{
	int pfd;
	socklen_t l = sizeof pfd;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pfd, &l) < 0)
		return -errno;
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pfd);
	int f = open(path, O_RDONLY);
	ssize_t r = f < 0 ? -1 : read(f, buf, sizeof buf - 1);
	close(f);
	close(pfd);
	buf[r > 0 ? r : 0] = 0;
	char *p = strstr(buf, "\nPid:");
	return p ? atoi(p + 5) : -1000;
}

static socklen_t addr(struct sockaddr_un *a, const char *name)
{
	memset(a, 0, sizeof *a);
	a->sun_family = AF_UNIX;
	if (name[0] == '@') {
		memcpy(a->sun_path + 1, name + 1, strlen(name) - 1);
		return offsetof(struct sockaddr_un, sun_path) + strlen(name);
	}
	strcpy(a->sun_path, name);
	return sizeof *a;
}

/* child connects to name as euid/egid (0: root), then waits for "go" on
 * gofd and checks its end: peer pid ppid with lu/lg and groups lgr. */
static pid_t child(int type, const char *name, uid_t eu, gid_t eg, int *gofd, int *resfd, uid_t lu, gid_t lg, const gid_t *lgr,
		   int nlg)
{
	int go[2], res[2];
	FID_SETUP(pipe(go) == 0 && pipe(res) == 0, "pipes");
	pid_t ppid = getpid();
	pid_t c = fork();
	FID_SETUP(c >= 0, "fork");
	if (c == 0) {
		close(go[1]);
		close(res[0]);
		int s = socket(AF_UNIX, type, 0);
		struct sockaddr_un a;
		socklen_t al = addr(&a, name);
		if (eg)
			FID_SETUP(setresgid(-1, eg, -1) == 0, "setresgid");
		if (eu)
			FID_SETUP(setresuid(-1, eu, -1) == 0, "setresuid");
		FID_SETUP(s >= 0 && connect(s, (struct sockaddr *)&a, al) == 0, "connect %s", name);
		if (eu)
			FID_SETUP(setresuid(-1, 0, -1) == 0, "setresuid back");
		if (eg)
			FID_SETUP(setresgid(-1, 0, -1) == 0, "setresgid back");
		FID_SETUP(write(res[1], "c", 1) == 1, "connected");
		char x;
		if (read(go[0], &x, 1) != 1)
			_exit(0);
		char why[512];
		checkp(s, name, ppid, lu, lg, lgr, nlg, why, sizeof why);
		if (!why[0] && (send(s, "hi", 2, 0) != 2))
			snprintf(why, sizeof why, "%s: send: %s", name, strerror(errno));
		ssize_t w = write(res[1], why, strlen(why) + 1);
		(void)w;
		_exit(0);
	}
	close(go[0]);
	close(res[1]);
	char x;
	FID_SETUP(read(res[0], &x, 1) == 1, "child connected");
	*gofd = go[1], *resfd = res[0];
	return c;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	const char *mode = argc > 2 ? argv[2] : "";
	char l1name[64], l2name[128];
	snprintf(l1name, sizeof l1name, "@ckpt-pcn-%d", getpid());
	snprintf(l2name, sizeof l2name, "/tmp/ckpt-pcn-%d", getpid());
	unlink(l2name);
	struct sockaddr_un a;
	socklen_t al;

	if (strcmp(mode, "gone") == 0 || strcmp(mode, "outside") == 0) {
		int outside = strcmp(mode, "outside") == 0;
		int sp[2], stay[2];
		FID_SETUP(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0 && pipe(stay) == 0, "socketpair");
		pid_t g = fork();
		FID_SETUP(g >= 0, "fork");
		if (g == 0) {
			close(stay[1]);
			if (outside) {
				/* GG, orphaned at once, lives on outside the
				 * tree until P closes stay. */
				pid_t gg = fork();
				FID_SETUP(gg >= 0, "fork GG");
				if (gg > 0)
					_exit(0);
				/* Out of P's session too: nothing of the dump
				 * outside it but the listener's credentials. */
				FID_SETUP(setsid() > 0, "GG: setsid");
			}
			int l = socket(AF_UNIX, SOCK_STREAM, 0);
			al = addr(&a, l1name);
			FID_SETUP(l >= 0 && bind(l, (struct sockaddr *)&a, al) == 0, "G: bind");
			FID_SETUP(setresgid(-1, 99, -1) == 0 && setresuid(-1, 98, -1) == 0, "G: drop ids");
			FID_SETUP(listen(l, 4) == 0, "G: listen");
			FID_SETUP(setresuid(-1, 0, -1) == 0 && setresgid(-1, 0, -1) == 0, "G: ids back");
			int c3 = socket(AF_UNIX, SOCK_STREAM, 0);
			FID_SETUP(c3 >= 0 && connect(c3, (struct sockaddr *)&a, al) == 0, "G: connect");
			char cbuf[CMSG_SPACE(2 * sizeof(int))];
			struct iovec io = {"l", 1};
			struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
			struct cmsghdr *c = CMSG_FIRSTHDR(&m);
			c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(2 * sizeof(int));
			int pass[] = {l, c3};
			memcpy(CMSG_DATA(c), pass, sizeof pass);
			FID_SETUP(sendmsg(sp[1], &m, 0) == 1, "G: pass the listener");
			if (outside) {
				char x;
				while (read(stay[0], &x, 1) < 0 && errno == EINTR)
					;
			}
			_exit(0);
		}
		close(stay[0]);
		FID_SETUP(waitpid(g, NULL, 0) == g, "wait for G");
		char cbuf[CMSG_SPACE(2 * sizeof(int))], x;
		struct iovec io = {&x, 1};
		struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		FID_SETUP(recvmsg(sp[0], &m, 0) == 1 && CMSG_FIRSTHDR(&m), "receive the listener");
		int fds[2];
		memcpy(fds, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof fds);
		int l = fds[0], c3 = fds[1];
		int a3 = accept(l, NULL, NULL);
		FID_SETUP(a3 >= 0, "accept");
		struct ucred want[3];
		int pfd[3], socks[] = {l, c3, a3};
		const char *names[] = {"listener", "client", "accepted"};
		for (int i = 0; i < 3; i++) {
			socklen_t ul = sizeof want[i];
			FID_SETUP(getsockopt(socks[i], SOL_SOCKET, SO_PEERCRED, &want[i], &ul) == 0, "SO_PEERCRED");
			pfd[i] = peerpidfd(socks[i]);
		}
		FID_SETUP(want[0].uid == 98 && want[0].gid == 99 && want[1].uid == 98, "the listener's ids");
		fid_ready();
		fid_wait();
		for (int i = 0; i < 3; i++) {
			struct ucred uc;
			socklen_t ul = sizeof uc;
			FID_EXPECT(getsockopt(socks[i], SOL_SOCKET, SO_PEERCRED, &uc, &ul) == 0 && uc.pid == want[i].pid &&
					   uc.uid == want[i].uid && uc.gid == want[i].gid,
				   "%s: SO_PEERCRED pid %d uid %d gid %d, want %d %d %d", names[i], uc.pid, uc.uid, uc.gid, want[i].pid,
				   want[i].uid, want[i].gid);
			int now = peerpidfd(socks[i]);
			FID_EXPECT(now == pfd[i], "%s: SO_PEERPIDFD gives %d, it gave %d", names[i], now, pfd[i]);
		}
		FID_EXPECT(send(c3, "x", 1, 0) == 1 && recv(a3, &x, 1, 0) == 1, "the connection carries data");
		close(stay[1]);
		return fid_done();
	}

	/* L1: listen() as 4321/1234 with groups 77, 1234. */
	gid_t lgr[] = {77, 1234};
	int l1 = socket(AF_UNIX, SOCK_STREAM, 0);
	al = addr(&a, l1name);
	FID_SETUP(l1 >= 0 && bind(l1, (struct sockaddr *)&a, al) == 0, "bind L1");
	FID_SETUP(setgroups(2, lgr) == 0, "setgroups");
	FID_SETUP(setresgid(-1, 1234, -1) == 0 && setresuid(-1, 4321, -1) == 0, "drop ids");
	FID_SETUP(listen(l1, 8) == 0, "listen L1");
	FID_SETUP(setresuid(-1, 0, -1) == 0 && setresgid(-1, 0, -1) == 0 && setgroups(0, NULL) == 0, "ids back");
	int go1, res1;
	pid_t c1 = child(SOCK_STREAM, l1name, 0, 0, &go1, &res1, 4321, 1234, lgr, 2);
	int a1 = accept(l1, NULL, NULL);
	FID_SETUP(a1 >= 0, "accept a1");
	/* C5 connects, is accepted, closes its end and exits: a5's peer is
	 * closed, and its SO_PEERCRED names C5, gone. */
	pid_t c5 = fork();
	FID_SETUP(c5 >= 0, "fork C5");
	if (c5 == 0) {
		int s = socket(AF_UNIX, SOCK_STREAM, 0);
		al = addr(&a, l1name);
		FID_SETUP(s >= 0 && connect(s, (struct sockaddr *)&a, al) == 0 && send(s, "bye", 3, 0) == 3, "C5");
		_exit(0);
	}
	int a5 = accept(l1, NULL, NULL);
	FID_SETUP(a5 >= 0 && waitpid(c5, NULL, 0) == c5, "accept a5");
	int pfd5 = peerpidfd(a5);
	/* A pair made by P, one end closed after sending. */
	int zp[2];
	FID_SETUP(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, zp) == 0 && send(zp[1], "q", 1, 0) == 1, "pair zp");
	close(zp[1]);
	/* C4 waits in L1's accept queue over the dump. */
	int go4, res4;
	pid_t c4 = child(SOCK_STREAM, l1name, 0, 0, &go4, &res4, 4321, 1234, lgr, 2);

	/* L2: listen() as root; C2 connects as 555/666; L2 closed. */
	int l2 = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	al = addr(&a, l2name);
	FID_SETUP(l2 >= 0 && bind(l2, (struct sockaddr *)&a, al) == 0 && chmod(l2name, 0777) == 0 && listen(l2, 8) == 0, "L2");
	int go2, res2;
	pid_t c2 = child(SOCK_SEQPACKET, l2name, 555, 666, &go2, &res2, getuid(), getgid(), NULL, 0);
	int a2 = accept(l2, NULL, NULL);
	FID_SETUP(a2 >= 0, "accept a2");
	close(l2);

	fid_ready();
	fid_wait();

	char why[512];
	checkp(l1, "listener L1", getpid(), 4321, 1234, lgr, 2, why, sizeof why);
	FID_EXPECT(!why[0], "%s", why);
	checkp(a1, "accepted a1", c1, 0, 0, NULL, 0, why, sizeof why);
	FID_EXPECT(!why[0], "%s", why);
	checkp(a2, "accepted a2", c2, 555, 666, NULL, 0, why, sizeof why);
	FID_EXPECT(!why[0], "%s", why);
	checkp(zp[0], "pair end with its peer closed", getpid(), 0, 0, NULL, 0, why, sizeof why);
	FID_EXPECT(!why[0], "%s", why);
	char zb[4];
	FID_EXPECT(recv(zp[0], zb, sizeof zb, MSG_DONTWAIT) == 1 && recv(zp[0], zb, sizeof zb, MSG_DONTWAIT) == 0,
		   "the pair end with its peer closed: its message, then end of file");
	struct ucred u5;
	socklen_t u5l = sizeof u5;
	FID_EXPECT(getsockopt(a5, SOL_SOCKET, SO_PEERCRED, &u5, &u5l) == 0 && u5.pid == c5 && u5.uid == 0 && u5.gid == 0,
		   "a5 (its peer closed): SO_PEERCRED pid %d uid %d gid %d, want %d 0 0", u5.pid, u5.uid, u5.gid, c5);
	FID_EXPECT(peerpidfd(a5) == pfd5, "a5: SO_PEERPIDFD gives %d, it gave %d", peerpidfd(a5), pfd5);
	FID_EXPECT(recv(a5, zb, sizeof zb, MSG_DONTWAIT) == 3 && recv(a5, zb, sizeof zb, MSG_DONTWAIT) == 0, "a5: bye, then end of file");
	int a4 = accept(l1, NULL, NULL);
	FID_EXPECT(a4 >= 0, "accept a4: %s", strerror(errno));
	checkp(a4, "accepted a4 (from the accept queue)", c4, 0, 0, NULL, 0, why, sizeof why);
	FID_EXPECT(!why[0], "%s", why);
	struct {
		int go, res;
		pid_t pid;
		int acc;
	} kids[] = {{go1, res1, c1, a1}, {go2, res2, c2, a2}, {go4, res4, c4, a4}};
	for (int i = 0; i < 3; i++) {
		FID_EXPECT(write(kids[i].go, "g", 1) == 1, "go %d", i);
		char buf[512] = {0};
		ssize_t n = read(kids[i].res, buf, sizeof buf - 1);
		FID_EXPECT(n > 0 && buf[0] == 0, "child %d: %s", i, n > 0 ? buf : "no answer");
		char hi[4] = {0};
		FID_EXPECT(recv(kids[i].acc, hi, sizeof hi, 0) == 2 && memcmp(hi, "hi", 2) == 0, "child %d's data on the accepted end", i);
		FID_EXPECT(waitpid(kids[i].pid, NULL, 0) == kids[i].pid, "wait child %d", i);
	}
	unlink(l2name);
	return fid_done();
}
