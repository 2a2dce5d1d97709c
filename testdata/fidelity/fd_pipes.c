/*
 * fd_pipes: pipes whose other end is closed, or held by a child of the
 * tree. A read end whose writers are all gone still holds its data, then
 * reads EOF; a write end whose readers are gone gets EPIPE; a pipe shared
 * with a child carries data both ways after the restore, and its read end
 * sees EOF once the child exits.
 */
#include "fidelity.h"
#include <sys/wait.h>

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	int a[2], b[2], up[2], down[2];
	/* a: writer closed, data left in the pipe. */
	FID_SETUP(pipe(a) == 0 && write(a[1], "left behind", 11) == 11, "pipe a");
	close(a[1]);
	/* b: reader closed. */
	FID_SETUP(pipe(b) == 0, "pipe b");
	close(b[0]);
	/* up: child -> parent, down: parent -> child. */
	FID_SETUP(pipe(up) == 0 && pipe(down) == 0, "pipes up/down");
	pid_t child = fork();
	FID_SETUP(child >= 0, "fork");
	if (child == 0) {
		close(up[0]);
		close(down[1]);
		close(a[0]);
		close(b[1]);
		if (write(up[1], "from child", 10) != 10)
			_exit(10);
		char buf[8];
		ssize_t n = read(down[0], buf, sizeof buf);
		if (n != 3 || memcmp(buf, "bye", 3) != 0)
			_exit(11);
		if (write(up[1], "ok", 2) != 2)
			_exit(12);
		n = read(down[0], buf, sizeof buf); /* EOF: the parent closed it */
		_exit(n == 0 ? 0 : 13);
	}
	close(up[1]);
	close(down[0]);
	char buf[32];
	/* wait until the child's data is in the pipe, then leave it there */
	fd_set rd;
	FD_ZERO(&rd);
	FD_SET(up[0], &rd);
	FID_SETUP(select(up[0] + 1, &rd, NULL, NULL, NULL) == 1, "select");

	fid_ready();
	fid_wait();

	ssize_t n = read(a[0], buf, sizeof buf);
	FID_EXPECT(n == 11 && memcmp(buf, "left behind", 11) == 0, "pipe without writers: read %zd bytes, want 'left behind'", n);
	n = read(a[0], buf, sizeof buf);
	FID_EXPECT(n == 0, "pipe without writers: read %zd (%s) after the data, want EOF", n, n < 0 ? strerror(errno) : "");
	n = write(b[1], "x", 1);
	FID_EXPECT(n < 0 && errno == EPIPE, "pipe without readers: write gave %zd (%s), want EPIPE", n, strerror(errno));
	n = read(up[0], buf, 10);
	FID_EXPECT(n == 10 && memcmp(buf, "from child", 10) == 0, "pipe from the child: %zd bytes", n);
	FID_EXPECT(write(down[1], "bye", 3) == 3, "pipe to the child: %s", strerror(errno));
	n = read(up[0], buf, 2);
	FID_EXPECT(n == 2 && memcmp(buf, "ok", 2) == 0, "the child did not answer (%zd)", n);
	close(down[1]);
	int st = 0;
	FID_EXPECT(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child ended with status %#x", st);
	n = read(up[0], buf, sizeof buf);
	FID_EXPECT(n == 0, "pipe from the exited child: read %zd, want EOF", n);
	return fid_done();
}
