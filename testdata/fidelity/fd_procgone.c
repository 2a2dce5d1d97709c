/*
 * fd_procgone: files of the /proc directory of a child that has exited
 * and been reaped since they were opened: /proc/PID/status and the
 * directory /proc/PID itself. After the restore they are the same: their
 * links name the same paths, reading says ESRCH, nothing can be opened
 * below the directory, no process holds the PID, and no SIGCHLD came
 * (the restore opens them while a short-lived process holds the PID).
 *
 *   cwd   the process also works in /proc/PID (zdtm unhashed_proc): after
 *         the restore getcwd still fails with ENOENT, /proc/self/cwd links
 *         to the same path, nothing opens below it.
 */
#include "fidelity.h"
#include <sys/wait.h>

static volatile sig_atomic_t chld;
static void on_chld(int sig) { (void)sig; chld++; }

static void link_of(int fd, char *out, size_t len)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, out, len - 1);
	out[n > 0 ? n : 0] = 0;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	struct sigaction sa = {.sa_handler = on_chld, .sa_flags = SA_RESTART};
	FID_SETUP(sigaction(SIGCHLD, &sa, NULL) == 0, "sigaction");
	int go[2];
	FID_SETUP(pipe(go) == 0, "pipe");
	pid_t c = fork();
	FID_SETUP(c >= 0, "fork");
	if (c == 0) {
		char x;
		read(go[0], &x, 1);
		_exit(0);
	}
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/status", c);
	int st = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof path, "/proc/%d", c);
	int dir = open(path, O_RDONLY | O_DIRECTORY);
	FID_SETUP(st >= 0 && dir >= 0, "open /proc/%d", c);
	int in_cwd = argc > 2 && strcmp(argv[2], "cwd") == 0;
	FID_SETUP(!in_cwd || chdir(path) == 0, "chdir %s: %s", path, strerror(errno));
	FID_SETUP(write(go[1], "x", 1) == 1 && waitpid(c, NULL, 0) == c, "reap the child");
	char st_link[128], dir_link[128];
	link_of(st, st_link, sizeof st_link);
	link_of(dir, dir_link, sizeof dir_link);
	char buf[64];
	FID_SETUP(read(st, buf, sizeof buf) < 0 && errno == ESRCH, "read of the gone child's status: %s", strerror(errno));
	char cwd_link[128] = "", cwdbuf[256];
	if (in_cwd) {
		ssize_t n = readlink("/proc/self/cwd", cwd_link, sizeof cwd_link - 1);
		cwd_link[n > 0 ? n : 0] = 0;
		FID_SETUP(getcwd(cwdbuf, sizeof cwdbuf) == NULL && errno == ENOENT, "getcwd in the gone directory: %s", strerror(errno));
	}
	int before = chld;
	fid_ready();
	fid_wait();
	char now[128];
	link_of(st, now, sizeof now);
	FID_EXPECT(strcmp(now, st_link) == 0, "status fd links to %s, want %s", now, st_link);
	link_of(dir, now, sizeof now);
	FID_EXPECT(strcmp(now, dir_link) == 0, "directory fd links to %s, want %s", now, dir_link);
	errno = 0;
	FID_EXPECT(read(st, buf, sizeof buf) < 0 && errno == ESRCH, "read of status: %s, want ESRCH", strerror(errno));
	FID_EXPECT((fcntl(st, F_GETFD) & FD_CLOEXEC) && !(fcntl(dir, F_GETFD) & FD_CLOEXEC), "close-on-exec flags changed");
	FID_EXPECT(openat(dir, "status", O_RDONLY) < 0, "a file opened below the gone directory");
	if (in_cwd) {
		ssize_t n = readlink("/proc/self/cwd", now, sizeof now - 1);
		now[n > 0 ? n : 0] = 0;
		FID_EXPECT(strcmp(now, cwd_link) == 0, "working directory links to %s, want %s", now, cwd_link);
		errno = 0;
		FID_EXPECT(getcwd(cwdbuf, sizeof cwdbuf) == NULL && errno == ENOENT, "getcwd: %s, want ENOENT",
			   errno ? strerror(errno) : cwdbuf);
		FID_EXPECT(open("status", O_RDONLY) < 0, "a file opened below the gone working directory");
	}
	FID_EXPECT(kill(c, 0) < 0 && errno == ESRCH, "a process holds PID %d", c);
	FID_EXPECT(chld == before, "%d SIGCHLD since the dump", (int)(chld - before));
	FID_EXPECT(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD, "a child to reap");
	return fid_done();
}
