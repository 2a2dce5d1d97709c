/*
 * sock_peercred: SO_PEERCRED (and SO_PEERPIDFD) of UNIX socket pairs,
 * which name the process that made the pair and its effective ids then:
 *   sp1  made by the parent P, one end in P, one in its child C;
 *   sp2  made by C, one end passed to P (SCM_RIGHTS, received before the
 *        dump), one kept;
 *   sp3  made by C while its effective ids were 4321/1234 and its groups
 *        77 and 1234 (SO_PEERGROUPS), both in C.
 * After the restore each end must still name the same pid, uid and gid
 * (and its SO_PEERPIDFD the same pid), and carry data. C checks its own
 * ends when P says "go" on sp1 and sends its findings back.
 *
 * With the argument "gone", C makes a pair, passes both ends to P and
 * exits: the pair names a process that is gone; the restore makes it in
 * a helper holding C's PID, and it must name C (SO_PEERPIDFD: gone)
 * after it. With "outside", C's child D, orphaned and in a session of its
 * own, makes the pair and stays alive outside the dump: the dump must
 * refuse it.
 */
#include "fidelity.h"
#include <sys/socket.h>
#include <grp.h>
#include <sys/wait.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* checkp compares SO_PEERCRED of fd with pid/uid/gid and the pid its
 * SO_PEERPIDFD names with pfdpid (-1: a process that is gone); it writes
 * what differs into why (empty if nothing). */
static void checkp(int fd, const char *name, pid_t pid, uid_t uid, gid_t gid, pid_t pfdpid, char *why, size_t n)
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
	if (!p || atoi(p + 5) != pfdpid)
		snprintf(why, n, "%s: SO_PEERPIDFD names %s, want pid %d", name, p ? p + 5 : "nothing", pfdpid);
}

static void check(int fd, const char *name, pid_t pid, uid_t uid, gid_t gid, char *why, size_t n)
{
	checkp(fd, name, pid, uid, gid, pid, why, n);
}

static int roundtrip(int a, int b)
{
	char c = 0;
	return write(a, "x", 1) == 1 && read(b, &c, 1) == 1 && c == 'x';
}

/* gone: the child c (or, outside, its child D) makes a pair, passes
 * both ends over sp1, exits (D once P closes stay). */
static int gone(pid_t c, int sp1[2], int outside, int stay[2])
{
	if (c == 0) {
		int pr[2];
		close(stay[1]);
		if (outside) {
			pid_t d = fork();
			if (d < 0)
				_exit(2);
			if (d > 0)
				_exit(0);
			if (setsid() < 0)
				_exit(2);
		}
		char b = 'f';
		struct iovec io = {&b, 1};
		char cbuf[CMSG_SPACE(2 * sizeof(int))];
		struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, pr) < 0)
			_exit(2);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(2 * sizeof(int));
		memcpy(CMSG_DATA(cm), pr, 2 * sizeof(int));
		if (sendmsg(sp1[1], &m, 0) != 1)
			_exit(2);
		if (outside) {
			char x;
			while (read(stay[0], &x, 1) < 0 && errno == EINTR)
				;
		}
		_exit(0);
	}
	close(stay[0]);
	pid_t maker = c;
	char b;
	int pr[2], st;
	struct iovec io = {&b, 1};
	char cbuf[CMSG_SPACE(2 * sizeof(int))];
	struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	FID_SETUP(recvmsg(sp1[0], &m, 0) == 1 && CMSG_FIRSTHDR(&m), "recvmsg");
	memcpy(pr, CMSG_DATA(CMSG_FIRSTHDR(&m)), 2 * sizeof(int));
	FID_SETUP(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child");
	if (outside) {
		struct ucred uc;
		socklen_t l = sizeof uc;
		FID_SETUP(getsockopt(pr[0], SOL_SOCKET, SO_PEERCRED, &uc, &l) == 0, "SO_PEERCRED");
		maker = uc.pid;
	}
	fid_ready();
	fid_wait();
	char why[256];
	checkp(pr[0], "pair made by the gone child", maker, 0, 0, outside ? maker : -1, why, sizeof why);
	FID_EXPECT(!why[0], "%s", why);
	FID_EXPECT(roundtrip(pr[0], pr[1]), "the pair carries no data");
	close(stay[1]);
	return fid_done();
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	int sp1[2], report[2];
	FID_SETUP(socketpair(AF_UNIX, SOCK_STREAM, 0, sp1) == 0, "socketpair sp1");
	FID_SETUP(pipe(report) == 0, "pipe");
	pid_t parent = getpid();
	int stay[2];
	FID_SETUP(pipe(stay) == 0, "pipe");
	pid_t c = fork();
	FID_SETUP(c >= 0, "fork");
	if (argc > 2 && (strcmp(argv[2], "gone") == 0 || strcmp(argv[2], "outside") == 0))
		return gone(c, sp1, strcmp(argv[2], "outside") == 0, stay);
	if (c == 0) {
		close(sp1[0]);
		close(report[0]);
		int sp2[2], sp3[2];
		if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp2) < 0)
			_exit(2);
		gid_t gs[2] = {77, 1234}, none[1] = {0};
		if (setgroups(2, gs) < 0 || setresgid(-1, 1234, -1) < 0 || setresuid(-1, 4321, -1) < 0)
			_exit(2);
		if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sp3) < 0)
			_exit(2);
		if (setresuid(-1, 0, -1) < 0 || setresgid(-1, 0, -1) < 0 || setgroups(1, none) < 0)
			_exit(2);
		/* Pass sp2[1] to the parent. */
		char b = 'f';
		struct iovec io = {&b, 1};
		char cbuf[CMSG_SPACE(sizeof(int))];
		struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &sp2[1], sizeof(int));
		if (sendmsg(sp1[1], &m, 0) != 1)
			_exit(2);
		close(sp2[1]);
		/* Wait for "go", then check. */
		if (read(sp1[1], &b, 1) != 1)
			_exit(2);
		char why[512] = "", w[256];
		check(sp1[1], "child sp1", parent, 0, 0, w, sizeof w);
		strcat(why, w);
		check(sp2[0], "child sp2", getpid(), 0, 0, w, sizeof w);
		strcat(why, w);
		check(sp3[0], "child sp3a", getpid(), 4321, 1234, w, sizeof w);
		strcat(why, w);
		check(sp3[1], "child sp3b", getpid(), 4321, 1234, w, sizeof w);
		strcat(why, w);
		gid_t pg[8];
		socklen_t gl = sizeof pg;
		if (getsockopt(sp3[0], SOL_SOCKET, SO_PEERGROUPS, pg, &gl) < 0 || gl != 2 * sizeof(gid_t) || pg[0] != 77 || pg[1] != 1234)
			strcat(why, "child sp3: SO_PEERGROUPS differ; ");
		if (!roundtrip(sp3[0], sp3[1]))
			strcat(why, "child: sp3 carries no data");
		if (write(sp2[0], "y", 1) != 1)
			strcat(why, "child: sp2 write");
		if (write(report[1], why, strlen(why)) < 0)
			_exit(2);
		_exit(0);
	}
	close(sp1[1]);
	close(report[1]);
	char b;
	struct iovec io = {&b, 1};
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	FID_SETUP(recvmsg(sp1[0], &m, 0) == 1, "recvmsg");
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	FID_SETUP(cm && cm->cmsg_type == SCM_RIGHTS, "no fd passed");
	int sp2end;
	memcpy(&sp2end, CMSG_DATA(cm), sizeof(int));
	char why[256];
	check(sp1[0], "parent sp1", parent, 0, 0, why, sizeof why);
	FID_SETUP(!why[0], "before the dump: %s", why);
	check(sp2end, "parent sp2", c, 0, 0, why, sizeof why);
	FID_SETUP(!why[0], "before the dump: %s", why);

	fid_ready();
	fid_wait();

	check(sp1[0], "parent sp1", parent, 0, 0, why, sizeof why);
	FID_EXPECT(!why[0], "%s", why);
	check(sp2end, "parent sp2", c, 0, 0, why, sizeof why);
	FID_EXPECT(!why[0], "%s", why);
	FID_EXPECT(write(sp1[0], "g", 1) == 1, "go to the child");
	char rep[1024];
	ssize_t n = read(report[0], rep, sizeof rep - 1);
	rep[n > 0 ? n : 0] = 0;
	FID_EXPECT(n == 0, "%s", n < 0 ? "no report from the child" : rep);
	FID_EXPECT(read(sp2end, &b, 1) == 1 && b == 'y', "sp2 carries no data");
	int st;
	FID_EXPECT(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	return fid_done();
}
