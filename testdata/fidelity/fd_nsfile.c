/*
 * fd_nsfile MODE: open namespace files (/proc/PID/ns/TYPE, of the nsfs
 * file system), which a program keeps to setns(2) into later.
 *   own    the process's own net, uts and ipc namespaces: after the
 *          restore each fd is still that namespace (the same link text
 *          and inode as /proc/self/ns/TYPE), and setns into it works;
 *   other  a uts namespace of a child made with unshare: no restore can
 *          make that namespace again, the dump must refuse it by name.
 * Run as root.
 */
#include "fidelity.h"
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>

static int same_ns(int fd, const char *type, char *why, size_t n)
{
	char path[64], a[128] = {0}, b[128] = {0};
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	if (readlink(path, a, sizeof a - 1) < 0)
		return snprintf(why, n, "readlink fd %d: %s", fd, strerror(errno)), 0;
	snprintf(path, sizeof path, "/proc/self/ns/%s", type);
	if (readlink(path, b, sizeof b - 1) < 0)
		return snprintf(why, n, "readlink %s: %s", path, strerror(errno)), 0;
	struct stat s1, s2;
	if (fstat(fd, &s1) || stat(path, &s2))
		return snprintf(why, n, "stat: %s", strerror(errno)), 0;
	if (strcmp(a, b) || s1.st_ino != s2.st_ino || s1.st_dev != s2.st_dev)
		return snprintf(why, n, "fd %d is %s (inode %lu), the %s namespace is %s (inode %lu)", fd, a,
				(unsigned long)s1.st_ino, type, b, (unsigned long)s2.st_ino),
		       0;
	return 1;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: fd_nsfile LOG own|other");
	if (strcmp(argv[2], "other") == 0) {
		int p[2];
		FID_SETUP(pipe(p) == 0, "pipe");
		pid_t c = fork();
		FID_SETUP(c >= 0, "fork");
		if (c == 0) {
			char ok = unshare(CLONE_NEWUTS) == 0 ? 'y' : 'n';
			write(p[1], &ok, 1);
			for (;;)
				pause();
		}
		char ok;
		FID_SETUP(read(p[0], &ok, 1) == 1 && ok == 'y', "unshare in the child");
		char path[64];
		snprintf(path, sizeof path, "/proc/%d/ns/uts", c);
		int fd = open(path, O_RDONLY);
		FID_SETUP(fd >= 0, "open %s", path);
		kill(c, SIGKILL);
		waitpid(c, NULL, 0);
		struct stat st;
		FID_SETUP(fstat(fd, &st) == 0, "fstat");
		fid_ready();
		fid_wait();
		struct stat now;
		FID_EXPECT(fstat(fd, &now) == 0 && now.st_ino == st.st_ino, "the child's uts namespace fd changed");
		FID_EXPECT(setns(fd, CLONE_NEWUTS) == 0, "setns into the kept namespace: %s", strerror(errno));
		return fid_done();
	}
	const char *types[] = {"net", "uts", "ipc"};
	int fds[3];
	for (int i = 0; i < 3; i++) {
		char path[64];
		snprintf(path, sizeof path, "/proc/self/ns/%s", types[i]);
		fds[i] = open(path, O_RDONLY);
		FID_SETUP(fds[i] >= 0, "open %s", path);
	}

	fid_ready();
	fid_wait();

	for (int i = 0; i < 3; i++) {
		char why[512];
		FID_EXPECT(same_ns(fds[i], types[i], why, sizeof why), "%s", why);
	}
	FID_EXPECT(setns(fds[0], CLONE_NEWNET) == 0, "setns net: %s", strerror(errno));
	return fid_done();
}
