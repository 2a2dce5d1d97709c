/*
 * fd_epoll: an epoll set in which one pipe is registered under three fd
 * numbers: two that still hold it, and one that was closed since and now
 * holds an eventfd, itself registered under the same number. After the
 * restore the set has the same items (fdinfo tfd numbers and the files
 * behind them) and reports each one's events with its data.
 */
#include "fidelity.h"
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>

struct item {
	int tfd;
	unsigned long ino;
};

/* items reads the tfd numbers and inodes of an epoll set's fdinfo. */
static int items(int epfd, struct item *out, int max)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/self/fdinfo/%d", epfd);
	if (fid_read_file(path, buf, sizeof buf) < 0)
		return -1;
	int n = 0;
	for (char *l = strtok(buf, "\n"); l && n < max; l = strtok(NULL, "\n")) {
		int tfd;
		unsigned long ino;
		char *i = strstr(l, "ino:");
		if (sscanf(l, "tfd: %d", &tfd) == 1 && i && sscanf(i, "ino:%lx", &ino) == 1)
			out[n++] = (struct item){tfd, ino};
	}
	return n;
}

static int has(struct item *it, int n, int tfd, unsigned long ino)
{
	for (int i = 0; i < n; i++)
		if (it[i].tfd == tfd && it[i].ino == ino)
			return 1;
	return 0;
}

static unsigned long ino_of(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/* ready returns the data of the ready items as a bit set. */
static unsigned ready(int epfd)
{
	struct epoll_event ev[8];
	int n = epoll_wait(epfd, ev, 8, 0);
	unsigned bits = 0;
	for (int i = 0; i < n; i++)
		bits |= 1u << ev[i].data.u64;
	return bits;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	int p[2];
	FID_SETUP(pipe(p) == 0, "pipe");
	int epfd = epoll_create1(EPOLL_CLOEXEC);
	int a = p[0], b = dup(p[0]), c = dup(p[0]);
	struct epoll_event ev = {.events = EPOLLIN};
	ev.data.u64 = 1;
	FID_SETUP(epoll_ctl(epfd, EPOLL_CTL_ADD, a, &ev) == 0, "add a");
	ev.data.u64 = 2;
	FID_SETUP(epoll_ctl(epfd, EPOLL_CTL_ADD, b, &ev) == 0, "add b");
	ev.data.u64 = 3;
	FID_SETUP(epoll_ctl(epfd, EPOLL_CTL_ADD, c, &ev) == 0, "add c");
	close(c);
	int e = eventfd(0, EFD_NONBLOCK);
	FID_SETUP(e == c, "the eventfd got fd %d, not the closed %d", e, c);
	ev.data.u64 = 4;
	FID_SETUP(epoll_ctl(epfd, EPOLL_CTL_ADD, e, &ev) == 0, "add the eventfd under the same number");
	struct item want[8];
	int nwant = items(epfd, want, 8);
	FID_SETUP(nwant == 4, "%d items", nwant);

	fid_ready();
	fid_wait();

	struct item got[8];
	int ngot = items(epfd, got, 8);
	FID_EXPECT(ngot == 4, "%d items after the restore, want 4", ngot);
	unsigned long pipe_ino = ino_of(a), ev_ino = ino_of(e);
	FID_EXPECT(has(got, ngot, a, pipe_ino) && has(got, ngot, b, pipe_ino) && has(got, ngot, c, pipe_ino),
		   "the pipe is not registered under fds %d, %d and %d", a, b, c);
	FID_EXPECT(has(got, ngot, c, ev_ino), "the eventfd is not registered under fd %d", c);
	FID_EXPECT(ready(epfd) == 0, "items ready before any event: %#x", ready(epfd));
	FID_EXPECT(write(p[1], "x", 1) == 1, "write");
	unsigned r = ready(epfd);
	FID_EXPECT(r == (1u << 1 | 1u << 2 | 1u << 3), "after a write to the pipe the ready items are %#x, want 0xe", r);
	uint64_t one = 1;
	FID_EXPECT(write(e, &one, 8) == 8, "eventfd write");
	r = ready(epfd);
	FID_EXPECT(r == 0x1e, "with the eventfd readable too the ready items are %#x, want 0x1e", r);
	FID_EXPECT(fcntl(e, F_GETFD) == 0, "FD_CLOEXEC of the eventfd changed");
	return fid_done();
}
