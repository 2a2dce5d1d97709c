/*
 * fd_locks DIR: POSIX (fcntl) locks, an OFD lock and flock locks. After
 * the restore the process holds them again with the same ranges and modes
 * (fdinfo "lock:" lines), and another process is locked out exactly as
 * before: its conflicting requests fail, its compatible ones succeed.
 */
#include "fidelity.h"
#include <sys/file.h>
#include <sys/wait.h>

static int setlk(int fd, int cmd, short type, off_t start, off_t len)
{
	struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
	return fcntl(fd, cmd, &l);
}

/* locklines copies the "lock:" lines of an fd's fdinfo without the pid
 * and device fields, which may differ. */
static void locklines(int fd, char *out, size_t len)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
	out[0] = 0;
	if (fid_read_file(path, buf, sizeof buf) < 0)
		return;
	for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n")) {
		char type[16], mode[16], adv[16], start[32], end[32];
		int n;
		if (sscanf(l, "lock: %d: %15s %15s %15s %*s %*s %31s %31s", &n, type, adv, mode, start, end) == 6) {
			size_t k = strlen(out);
			snprintf(out + k, len - k, "%s %s %s %s-%s;", type, adv, mode, start, end);
		}
	}
}

/* probe runs in a child: another process must be locked out exactly as
 * the locks say. It returns a bit per unexpected answer. */
static int probe(const char *a, const char *b, const char *c)
{
	int bad = 0;
	int fa = open(a, O_RDWR), fb = open(b, O_RDWR), fc = open(c, O_RDWR);
	if (fa < 0 || fb < 0 || fc < 0)
		return 1 << 15;
	if (setlk(fa, F_SETLK, F_WRLCK, 0, 1) == 0 || errno != EAGAIN)
		bad |= 1; /* POSIX write lock 0-9 */
	if (setlk(fa, F_SETLK, F_WRLCK, 5000, 1) == 0 || (errno != EAGAIN && errno != EACCES))
		bad |= 2; /* POSIX read lock 100-EOF */
	if (setlk(fa, F_SETLK, F_RDLCK, 200, 1) != 0)
		bad |= 4; /* read-read is compatible */
	if (setlk(fa, F_OFD_SETLK, F_WRLCK, 52, 1) == 0 || errno != EAGAIN)
		bad |= 8; /* OFD write lock 50-54 */
	if (setlk(fa, F_OFD_SETLK, F_WRLCK, 20, 2) != 0)
		bad |= 16; /* nothing there */
	if (flock(fb, LOCK_SH | LOCK_NB) == 0 || errno != EWOULDBLOCK)
		bad |= 32; /* flock exclusive */
	if (flock(fc, LOCK_SH | LOCK_NB) != 0)
		bad |= 64; /* flock shared */
	flock(fc, LOCK_UN);
	if (flock(fc, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK)
		bad |= 128;
	return bad;
}

static int run_probe(const char *a, const char *b, const char *c)
{
	pid_t p = fork();
	if (p == 0)
		_exit(probe(a, b, c));
	int st = 0;
	if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: fd_locks LOG DIR");
	char a[4096], b[4096], c[4096];
	snprintf(a, sizeof a, "%s/a.dat", argv[2]);
	snprintf(b, sizeof b, "%s/b.dat", argv[2]);
	snprintf(c, sizeof c, "%s/c.dat", argv[2]);
	int pa = open(a, O_RDWR | O_CREAT, 0644);
	int oa = open(a, O_RDWR);
	int fb = open(b, O_RDWR | O_CREAT, 0644);
	int fc = open(c, O_RDWR | O_CREAT, 0644);
	FID_SETUP(pa >= 0 && oa >= 0 && fb >= 0 && fc >= 0, "open");
	FID_SETUP(setlk(pa, F_SETLK, F_WRLCK, 0, 10) == 0, "POSIX write lock");
	FID_SETUP(setlk(pa, F_SETLK, F_RDLCK, 100, 0) == 0, "POSIX read lock");
	FID_SETUP(setlk(oa, F_OFD_SETLK, F_WRLCK, 50, 5) == 0, "OFD lock");
	FID_SETUP(flock(fb, LOCK_EX) == 0 && flock(fc, LOCK_SH) == 0, "flock");
	int fc2 = dup(fc);
	char want[4][512], got[512];
	int fds[4] = {pa, oa, fb, fc2};
	for (int i = 0; i < 4; i++)
		locklines(fds[i], want[i], sizeof want[i]);
	int bad = run_probe(a, b, c);
	FID_SETUP(bad == 0, "probe before the dump: %#x", bad);

	fid_ready();
	fid_wait();

	for (int i = 0; i < 4; i++) {
		locklines(fds[i], got, sizeof got);
		FID_EXPECT(strcmp(got, want[i]) == 0, "fd %d: locks '%s', want '%s'", fds[i], got, want[i]);
	}
	bad = run_probe(a, b, c);
	FID_EXPECT(bad == 0, "another process was not locked out as before: %#x", bad);
	return fid_done();
}
