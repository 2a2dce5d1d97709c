/*
 * sock_unix_file DIR/ MODE: the file a UNIX socket bound to a path name
 * makes, read back after the restore:
 *
 *   owner     a listener and a datagram socket whose files have another
 *             owner and permissions than a new bind would give them;
 *   relative  sockets bound to relative names in the working directory
 *             (getsockname says the relative name; a connect by that
 *             name reaches them); one with a datagram queued;
 *   gone      names removed after the bind, their directory too: a
 *             listener with an accepted connection, a datagram socket
 *             another one connected to, a datagram pair both bound to
 *             one name in turn, two sockets bound in turn to the name a
 *             third holds now; after the restore the names and the
 *             directory are still gone, getsockname and getpeername
 *             still say them, data still flows, and the name held goes
 *             to its holder;
 *   orphan    a bound datagram socket another one had connected to and
 *             that exited after sending a datagram: it reads the
 *             datagram, and a new socket connects to it by name;
 *   moved     a socket bound to a relative name in a directory the
 *             process left since: refused (where the name lies is not
 *             known).
 */
#include "sock.h"
#include <sys/stat.h>
#include <sys/wait.h>

static const char *dir;
static int rel; /* names are relative to the working directory */

static void path_of(struct sockaddr_un *a, const char *name)
{
	memset(a, 0, sizeof *a);
	a->sun_family = AF_UNIX;
	if (name[0] == '/' || rel)
		snprintf(a->sun_path, sizeof a->sun_path, "%s", name);
	else
		snprintf(a->sun_path, sizeof a->sun_path, "%s/%s", dir, name);
}

static int bound(int type, const char *name)
{
	struct sockaddr_un a;
	path_of(&a, name);
	int fd = socket(AF_UNIX, type, 0);
	FID_SETUP(fd >= 0, "socket");
	FID_SETUP(bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "bind %s: %s", a.sun_path, strerror(errno));
	return fd;
}

static int connected(int type, const char *name)
{
	struct sockaddr_un a;
	path_of(&a, name);
	int fd = socket(AF_UNIX, type, 0);
	FID_SETUP(fd >= 0, "socket");
	FID_SETUP(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect %s: %s", a.sun_path, strerror(errno));
	return fd;
}

/* name_is checks what getsockname (or getpeername) says. */
static void name_is(int fd, int peer, const char *who, const char *want)
{
	struct sockaddr_un a;
	socklen_t l = sizeof a;
	memset(&a, 0, sizeof a);
	int r = peer ? getpeername(fd, (struct sockaddr *)&a, &l) : getsockname(fd, (struct sockaddr *)&a, &l);
	FID_EXPECT(r == 0 && strcmp(a.sun_path, want) == 0, "%s: %s is \"%s\", want \"%s\"", who, peer ? "getpeername" : "getsockname", a.sun_path, want);
}

static void flows(int from, int to, const char *who)
{
	FID_EXPECT(write_all(from, who, strlen(who)) == 0, "%s: write: %s", who, strerror(errno));
	char buf[64] = {0};
	FID_EXPECT(read_exact(to, buf, strlen(who)) == 0 && memcmp(buf, who, strlen(who)) == 0, "%s: not received", who);
}

static void owner(void)
{
	umask(077);
	int l = bound(SOCK_STREAM, "l.sock");
	FID_SETUP(listen(l, 4) == 0, "listen");
	int d = bound(SOCK_DGRAM, "d.sock");
	char lp[256], dp[256];
	snprintf(lp, sizeof lp, "%s/l.sock", dir);
	snprintf(dp, sizeof dp, "%s/d.sock", dir);
	FID_SETUP(chown(lp, 4242, 4343) == 0 && chmod(lp, 0640) == 0, "chown/chmod %s", lp);
	FID_SETUP(chown(dp, 0, 4343) == 0 && chmod(dp, 02604) == 0, "chown/chmod %s", dp);
	struct stat want[2];
	FID_SETUP(stat(lp, &want[0]) == 0 && stat(dp, &want[1]) == 0, "stat");
	fid_ready();
	fid_wait();
	const char *paths[2] = {lp, dp};
	for (int i = 0; i < 2; i++) {
		struct stat now;
		FID_EXPECT(stat(paths[i], &now) == 0, "%s: %s", paths[i], strerror(errno));
		FID_EXPECT(S_ISSOCK(now.st_mode) && now.st_mode == want[i].st_mode && now.st_uid == want[i].st_uid && now.st_gid == want[i].st_gid,
			   "%s: mode %o owner %d:%d, want mode %o owner %d:%d", paths[i], now.st_mode, now.st_uid, now.st_gid,
			   want[i].st_mode, want[i].st_uid, want[i].st_gid);
	}
	int c = connected(SOCK_STREAM, "l.sock");
	int s = accept(l, NULL, NULL);
	FID_EXPECT(s >= 0, "accept");
	flows(c, s, "owner-stream");
	int dc = connected(SOCK_DGRAM, "d.sock");
	flows(dc, d, "owner-dgram");
}

static void relative(void)
{
	FID_SETUP(chdir(dir) == 0, "chdir %s", dir);
	rel = 1;
	int l = bound(SOCK_STREAM, "rel.sock");
	FID_SETUP(listen(l, 4) == 0, "listen");
	int d = bound(SOCK_DGRAM, "reld.sock");
	struct sockaddr_un a;
	path_of(&a, "reld.sock");
	int tmp = socket(AF_UNIX, SOCK_DGRAM, 0);
	FID_SETUP(sendto(tmp, "queued", 6, 0, (struct sockaddr *)&a, sizeof a) == 6, "sendto");
	close(tmp);
	fid_ready();
	fid_wait();
	name_is(l, 0, "listener", "rel.sock");
	name_is(d, 0, "datagram", "reld.sock");
	char buf[8] = {0};
	FID_EXPECT(recv(d, buf, sizeof buf, MSG_DONTWAIT) == 6 && memcmp(buf, "queued", 6) == 0, "the queued datagram");
	int c = connected(SOCK_STREAM, "rel.sock");
	int s = accept(l, NULL, NULL);
	FID_EXPECT(s >= 0, "accept");
	name_is(c, 1, "client", "rel.sock");
	flows(c, s, "relative-stream");
	int dc = connected(SOCK_DGRAM, "reld.sock");
	flows(dc, d, "relative-dgram");
}

static void gone(void)
{
	char g[256], lp[256], dp[256], pp[256], alive[256];
	snprintf(g, sizeof g, "%s/g", dir);
	snprintf(lp, sizeof lp, "%s/l", g);
	snprintf(dp, sizeof dp, "%s/d", g);
	snprintf(pp, sizeof pp, "%s/p", g);
	snprintf(alive, sizeof alive, "%s/alive", dir);
	FID_SETUP(mkdir(g, 0755) == 0, "mkdir %s", g);
	int l = bound(SOCK_STREAM, lp);
	FID_SETUP(listen(l, 4) == 0, "listen");
	int c = connected(SOCK_STREAM, lp);
	int s = accept(l, NULL, NULL);
	FID_SETUP(s >= 0, "accept");
	int d = bound(SOCK_DGRAM, dp);
	int dc = connected(SOCK_DGRAM, dp);
	int p[2];
	FID_SETUP(socketpair(AF_UNIX, SOCK_DGRAM, 0, p) == 0, "socketpair");
	struct sockaddr_un pa;
	path_of(&pa, pp);
	FID_SETUP(bind(p[0], (struct sockaddr *)&pa, sizeof pa) == 0 && unlink(pp) == 0, "bind pair 0");
	FID_SETUP(bind(p[1], (struct sockaddr *)&pa, sizeof pa) == 0 && unlink(pp) == 0, "bind pair 1");
	FID_SETUP(unlink(lp) == 0 && unlink(dp) == 0 && rmdir(g) == 0, "remove %s", g);
	/* two names taken in turn, the third holds it */
	int old1 = bound(SOCK_DGRAM, alive);
	FID_SETUP(unlink(alive) == 0, "unlink");
	int old2 = bound(SOCK_DGRAM, alive);
	FID_SETUP(unlink(alive) == 0, "unlink");
	int holder = bound(SOCK_DGRAM, alive);
	fid_ready();
	fid_wait();
	struct stat st;
	FID_EXPECT(stat(g, &st) < 0 && errno == ENOENT, "%s exists again", g);
	name_is(l, 0, "listener", lp);
	name_is(c, 1, "client", lp);
	name_is(d, 0, "datagram server", dp);
	name_is(dc, 1, "datagram client", dp);
	name_is(p[0], 0, "pair 0", pp);
	name_is(p[1], 0, "pair 1", pp);
	name_is(old1, 0, "old1", alive);
	name_is(old2, 0, "old2", alive);
	flows(c, s, "gone-stream");
	flows(s, c, "gone-stream-back");
	flows(dc, d, "gone-dgram");
	flows(p[0], p[1], "pair-0-to-1");
	flows(p[1], p[0], "pair-1-to-0");
	int hc = connected(SOCK_DGRAM, alive);
	flows(hc, holder, "held-name");
}

static void orphan(void)
{
	int d = bound(SOCK_DGRAM, "o.sock");
	pid_t pid = fork();
	FID_SETUP(pid >= 0, "fork");
	if (pid == 0) {
		int c = connected(SOCK_DGRAM, "o.sock");
		_exit(send(c, "orphan", 6, 0) == 6 ? 0 : 1);
	}
	int status;
	FID_SETUP(waitpid(pid, &status, 0) == pid && status == 0, "child");
	fid_ready();
	fid_wait();
	char buf[8] = {0};
	FID_EXPECT(recv(d, buf, sizeof buf, MSG_DONTWAIT) == 6 && memcmp(buf, "orphan", 6) == 0, "the datagram of the gone client");
	int c = connected(SOCK_DGRAM, "o.sock");
	flows(c, d, "orphan-new-client");
}

static void moved(void)
{
	char sub[256];
	snprintf(sub, sizeof sub, "%s/sub", dir);
	FID_SETUP(mkdir(sub, 0755) == 0 && chdir(sub) == 0, "mkdir/chdir %s", sub);
	rel = 1;
	int l = bound(SOCK_STREAM, "moved.sock");
	FID_SETUP(listen(l, 4) == 0, "listen");
	FID_SETUP(chdir(dir) == 0, "chdir %s", dir);
	fid_ready();
	fid_wait();
	FID_SETUP(chdir(sub) == 0, "chdir %s", sub);
	int c = connected(SOCK_STREAM, "moved.sock");
	int s = accept(l, NULL, NULL);
	FID_EXPECT(s >= 0, "accept");
	flows(c, s, "moved-stream");
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc > 3, "usage: sock_unix_file LOG DIR MODE");
	dir = argv[2];
	size_t n = strlen(dir);
	static char d[256];
	snprintf(d, sizeof d, "%.*s", (int)(n > 1 && dir[n - 1] == '/' ? n - 1 : n), dir);
	dir = d;
	const char *mode = argv[3];
	if (!strcmp(mode, "owner"))
		owner();
	else if (!strcmp(mode, "relative"))
		relative();
	else if (!strcmp(mode, "gone"))
		gone();
	else if (!strcmp(mode, "orphan"))
		orphan();
	else if (!strcmp(mode, "moved"))
		moved();
	else
		FID_SETUP(0, "unknown mode %s", mode);
	return fid_done();
}
