/*
 * fd_pipe_reopen: one end of a pipe held through several open file
 * descriptions. open("/proc/self/fd/N") of a pipe end makes a new
 * description of the same pipe (with O_LARGEFILE, which pipe2 does not
 * set); its status flags are its own. Each description must come back as
 * a description of its own with exactly its flags: setting O_NONBLOCK on
 * one must not show on another, and the data must flow through all of
 * them as through one pipe.
 */
#include "fidelity.h"

static int getfl(int fd) { return fcntl(fd, F_GETFL); }

static int reopen(int fd, int mode)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	return open(path, mode);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);

	int p[2];
	FID_SETUP(pipe(p) == 0, "pipe");
	/* read end: the pipe's own description (blocking), a second one
	 * made by reopening it (non-blocking), a dup of the second. */
	int r2 = reopen(p[0], O_RDONLY);
	FID_SETUP(r2 >= 0, "reopen the read end");
	FID_SETUP(fcntl(r2, F_SETFL, getfl(r2) | O_NONBLOCK) == 0, "O_NONBLOCK");
	int r2dup = dup(r2);
	FID_SETUP(r2dup >= 0, "dup");
	/* write end: the pipe's own description made non-blocking, a
	 * reopened one left blocking. */
	FID_SETUP(fcntl(p[1], F_SETFL, getfl(p[1]) | O_NONBLOCK) == 0, "O_NONBLOCK on the write end");
	int w2 = reopen(p[1], O_WRONLY);
	FID_SETUP(w2 >= 0, "reopen the write end");
	FID_SETUP(write(w2, "abc", 3) == 3, "write");

	int fl[5] = {getfl(p[0]), getfl(r2), getfl(r2dup), getfl(p[1]), getfl(w2)};
	int fds[5] = {p[0], r2, r2dup, p[1], w2};
	const char *names[5] = {"read end", "reopened read end", "dup of the reopened read end", "write end",
				"reopened write end"};

	fid_ready();
	fid_wait();

	for (int i = 0; i < 5; i++) {
		int now = getfl(fds[i]);
		FID_EXPECT(now == fl[i], "%s (fd %d): flags %#o, want %#o", names[i], fds[i], now, fl[i]);
	}
	/* the descriptions are still distinct: O_NONBLOCK set on the pipe's
	 * own read end does not show on the reopened one, and the reverse. */
	FID_SETUP(fcntl(p[0], F_SETFL, getfl(p[0]) | O_NONBLOCK) == 0, "O_NONBLOCK after");
	FID_SETUP(fcntl(r2, F_SETFL, getfl(r2) & ~O_NONBLOCK) == 0, "clear O_NONBLOCK after");
	FID_EXPECT(getfl(r2dup) == (fl[1] & ~O_NONBLOCK), "the dup of the reopened read end no longer shares its description");
	FID_EXPECT((getfl(p[0]) & O_NONBLOCK) && !(getfl(r2) & O_NONBLOCK),
		   "the read end and the reopened read end share one description");
	/* one pipe: what was written comes out of any read description. */
	char buf[8] = {0};
	FID_EXPECT(read(p[0], buf, sizeof buf) == 3 && memcmp(buf, "abc", 3) == 0, "queued data: %.3s", buf);
	FID_EXPECT(write(p[1], "d", 1) == 1 && read(r2dup, buf, 1) == 1 && buf[0] == 'd', "data through the reopened end");
	FID_EXPECT(write(w2, "e", 1) == 1 && read(r2, buf, 1) == 1 && buf[0] == 'e', "data through the reopened write end");
	return fid_done();
}
