/*
 * fd_shared_table MODE: processes sharing one file descriptor table
 * (clone with CLONE_FILES, without CLONE_THREAD): an fd one of them opens
 * or closes is the others' too.
 *   parent    the parent, a child made with CLONE_FILES and a grandchild
 *             made with CLONE_FILES by that child share one table; a second
 *             child made without it has a copy. After the restore an fd
 *             the parent opens is seen by the child and the grandchild,
 *             not by the second child, and an fd the grandchild closes is
 *             gone for the parent;
 *   siblings  two children made with CLONE_FILES, after which the parent
 *             gave the table up (unshare CLONE_FILES): they share a table
 *             their parent does not have, which no clone from the parent
 *             can make again: the dump must refuse it by name.
 */
#include "fidelity.h"
#include <sched.h>
#include <sys/wait.h>

static int cmd[2], res[2];

/* member waits for a command: 'o N' reports whether fd N is open, 'c N'
 * closes fd N, 'q' quits. */
static int member(void *arg)
{
	(void)arg;
	unsigned char c[2];
	while (read(cmd[0], c, 2) == 2) {
		char r = 0;
		if (c[0] == 'o')
			r = fcntl(c[1], F_GETFD) >= 0;
		else if (c[0] == 'c')
			r = close(c[1]) == 0;
		else
			return 0;
		if (write(res[1], &r, 1) != 1)
			return 1;
	}
	return 1;
}

static char ask(int to, char what, int fd)
{
	(void)to;
	unsigned char c[2] = {(unsigned char)what, (unsigned char)fd};
	char r = -1;
	if (write(cmd[1], c, 2) != 2 || read(res[0], &r, 1) != 1)
		return -1;
	return r;
}

static char stack1[64 * 1024], stack2[64 * 1024], stack3[64 * 1024];
static int cmd2[2], res2[2];

static void quit(int fd)
{
	unsigned char q[2] = {'q', 0};
	if (write(fd, q, 2) != 2)
		fid_fail("cannot tell a member to quit");
}

/* child: shares the parent's table and makes a grandchild sharing it too */
static int child(void *arg)
{
	(void)arg;
	pid_t g = clone(member, stack3 + sizeof stack3, CLONE_FILES | SIGCHLD, NULL);
	if (g < 0)
		return 1;
	int st;
	waitpid(g, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: fd_shared_table LOG parent|siblings");
	FID_SETUP(pipe(cmd) == 0 && pipe(res) == 0, "pipe");
	if (strcmp(argv[2], "siblings") == 0) {
		pid_t a = clone(member, stack1 + sizeof stack1, CLONE_FILES | SIGCHLD, NULL);
		pid_t b = clone(member, stack2 + sizeof stack2, CLONE_FILES | SIGCHLD, NULL);
		FID_SETUP(a > 0 && b > 0, "clone");
		FID_SETUP(unshare(CLONE_FILES) == 0, "unshare");
		fid_ready();
		fid_wait();
		/* untouched: what a member opens... is seen by the other member */
		FID_EXPECT(ask(0, 'o', cmd[0]) == 1, "a member lost the command pipe");
		quit(cmd[1]);
		quit(cmd[1]);
		waitpid(a, NULL, 0);
		waitpid(b, NULL, 0);
		return fid_done();
	}
	/* the grandchild (via child) answers on cmd/res; a second child with
	 * a copy of the table answers on cmd2/res2 */
	FID_SETUP(pipe(cmd2) == 0 && pipe(res2) == 0, "pipe");
	pid_t c = clone(child, stack1 + sizeof stack1, CLONE_FILES | SIGCHLD, NULL);
	FID_SETUP(c > 0, "clone CLONE_FILES");
	pid_t copy = fork();
	FID_SETUP(copy >= 0, "fork");
	if (copy == 0) {
		cmd[0] = cmd2[0];
		res[1] = res2[1];
		_exit(member(NULL));
	}
	int victim = open("/dev/null", O_RDONLY);
	FID_SETUP(victim >= 0, "open");

	fid_ready();
	fid_wait();

	int fd = open("/dev/null", O_RDONLY);
	FID_EXPECT(fd >= 0 && fd < 256, "open: %d", fd);
	FID_EXPECT(ask(0, 'o', fd) == 1, "the grandchild does not see fd %d the parent opened: the table is no longer shared", fd);
	unsigned char q[2] = {'o', (unsigned char)fd};
	char r = -1;
	FID_EXPECT(write(cmd2[1], q, 2) == 2 && read(res2[0], &r, 1) == 1 && r == 0, "the child with a copy sees fd %d (%d)", fd, r);
	FID_EXPECT(ask(0, 'c', victim) == 1, "the grandchild cannot close fd %d", victim);
	FID_EXPECT(fcntl(victim, F_GETFD) < 0, "fd %d the grandchild closed is still open in the parent", victim);
	quit(cmd[1]);
	quit(cmd2[1]);
	int st;
	FID_EXPECT(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	FID_EXPECT(waitpid(copy, &st, 0) == copy && WIFEXITED(st) && WEXITSTATUS(st) == 0, "second child status %#x", st);
	return fid_done();
}
