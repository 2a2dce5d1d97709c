/*
 * fd_flock_owner: flock locks belong to an open file description, and
 * /proc/locks (and /proc/PID/fdinfo) name the process that took each one.
 *  - file A: the parent takes LOCK_EX, forks, and closes its fd: only the
 *    child holds the description, the lock still names the parent;
 *  - file B: the child takes LOCK_SH on a description it shares with the
 *    parent: the lock names the child.
 * After the restore each lock is there once, of its mode, naming the
 * process that took it, and still excludes others. Arguments: DIR/.
 */
#include "fidelity.h"
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>

/* lockpid finds the flock lock on inode ino in /proc/locks: its pid and
 * mode ('W' or 'R'); the number of such locks is returned. */
static int lockpid(ino_t ino, int *pid, char *mode)
{
	FILE *f = fopen("/proc/locks", "r");
	if (!f)
		return -1;
	char line[256];
	int n = 0;
	while (fgets(line, sizeof line, f)) {
		char kind[16], adv[16], rw[16];
		int p;
		unsigned maj, min;
		unsigned long i;
		if (strstr(line, "->"))
			continue;
		if (sscanf(line, "%*d: %15s %15s %15s %d %x:%x:%lu", kind, adv, rw, &p, &maj, &min, &i) != 7)
			continue;
		if (strcmp(kind, "FLOCK") || i != ino)
			continue;
		n++;
		*pid = p;
		*mode = rw[0];
	}
	fclose(f);
	return n;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc >= 3, "usage: LOG DIR/");
	char a[4096], b[4096];
	snprintf(a, sizeof a, "%sA", argv[2]);
	snprintf(b, sizeof b, "%sB", argv[2]);
	int fa = open(a, O_RDWR | O_CREAT, 0644), fb = open(b, O_RDWR | O_CREAT, 0644);
	FID_SETUP(fa >= 0 && fb >= 0, "open");
	struct stat sa, sb;
	FID_SETUP(fstat(fa, &sa) == 0 && fstat(fb, &sb) == 0, "fstat");
	FID_SETUP(flock(fa, LOCK_EX) == 0, "flock A");
	int ready[2], res[2];
	FID_SETUP(pipe(ready) == 0 && pipe(res) == 0, "pipe");
	pid_t child = fork();
	FID_SETUP(child >= 0, "fork");
	if (child == 0) {
		if (flock(fb, LOCK_SH) != 0)
			_exit(1);
		char c = 0;
		if (write(ready[1], &c, 1) != 1)
			_exit(1);
		fid_wait();
		/* still ours after the restore: A cannot be locked through a new
		 * description, B can be shared but not taken exclusively. */
		int other = open(a, O_RDONLY), bad = 0;
		if (other < 0 || flock(other, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK)
			bad |= 1;
		int ob = open(b, O_RDONLY);
		if (ob < 0 || flock(ob, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK)
			bad |= 2;
		if (write(res[1], &bad, sizeof bad) != sizeof bad)
			_exit(1);
		_exit(0);
	}
	char c;
	FID_SETUP(read(ready[0], &c, 1) == 1, "child ready");
	close(fa); /* the child's fd holds A's description and its lock */
	int pid, n;
	char mode;
	FID_SETUP(lockpid(sa.st_ino, &pid, &mode) == 1 && pid == getpid() && mode == 'W', "A locked by the parent");
	FID_SETUP(lockpid(sb.st_ino, &pid, &mode) == 1 && pid == child && mode == 'R', "B locked by the child");

	fid_ready();
	fid_wait();

	n = lockpid(sa.st_ino, &pid, &mode);
	FID_EXPECT(n == 1 && pid == getpid() && mode == 'W', "A: %d flock locks, pid %d mode %c; want 1, pid %d, W", n, pid, mode,
		   getpid());
	n = lockpid(sb.st_ino, &pid, &mode);
	FID_EXPECT(n == 1 && pid == child && mode == 'R', "B: %d flock locks, pid %d mode %c; want 1, pid %d, R", n, pid, mode, child);
	kill(child, SIGTERM);
	int bad = -1, st;
	FID_EXPECT(read(res[0], &bad, sizeof bad) == sizeof bad && bad == 0, "locks no longer exclude others (%d)", bad);
	FID_EXPECT(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	return fid_done();
}
