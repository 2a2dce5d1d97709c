/*
 * fd_shared_table: a parent and a child made with clone(CLONE_FILES)
 * (without CLONE_THREAD) share one file descriptor table: an fd one of
 * them opens is the other's too. The dump must refuse it by name; after
 * the refused dump the table is still shared.
 */
#include "fidelity.h"
#include <sched.h>
#include <sys/wait.h>

static int go[2];

static int child(void *arg)
{
	(void)arg;
	char c;
	/* wait for the parent's word, then find the fd it opened */
	if (read(go[0], &c, 1) != 1)
		return 1;
	return fcntl((int)(unsigned char)c, F_GETFD) < 0 ? 2 : 0;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(pipe(go) == 0, "pipe");
	static char stack[64 * 1024];
	pid_t pid = clone(child, stack + sizeof stack, CLONE_FILES | SIGCHLD, NULL);
	FID_SETUP(pid > 0, "clone CLONE_FILES");

	fid_ready();
	fid_wait();

	int fd = open("/dev/null", O_RDONLY);
	FID_EXPECT(fd >= 0 && fd < 256, "open: %d", fd);
	char c = (char)fd;
	FID_EXPECT(write(go[1], &c, 1) == 1, "write");
	int st = 0;
	FID_EXPECT(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		   "the child does not see fd %d the parent opened (status %#x): the table is no longer shared", fd, st);
	return fid_done();
}
