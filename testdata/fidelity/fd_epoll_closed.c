/*
 * fd_epoll_closed: an epoll set whose items were all registered under one
 * fd number that was closed afterwards (dup2 to it, EPOLL_CTL_ADD, close),
 * a number above every fd the process still has: the item's key is that
 * number, and no fd holds it any more. Both ends of many pipes are
 * registered so, each with its index as data. After the restore every
 * item must still be there, with its events and data, and report its own
 * pipe: writing into pipe i wakes the read item i, and every write end
 * item reports EPOLLOUT.
 */
#include "fidelity.h"
#include <sys/epoll.h>

#define NPIPES 100
#define KEYFD 250

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	int p[NPIPES][2];
	int ep = epoll_create1(EPOLL_CLOEXEC);
	FID_SETUP(ep >= 0, "epoll_create1");
	for (int i = 0; i < NPIPES; i++) {
		FID_SETUP(pipe2(p[i], O_NONBLOCK) == 0, "pipe %d", i);
		for (int end = 0; end < 2; end++) {
			struct epoll_event ev = {.events = end ? EPOLLOUT : EPOLLIN, .data.u64 = (uint64_t)i << 1 | end};
			FID_SETUP(dup2(p[i][end], KEYFD) == KEYFD, "dup2");
			FID_SETUP(epoll_ctl(ep, EPOLL_CTL_ADD, KEYFD, &ev) == 0, "EPOLL_CTL_ADD pipe %d end %d", i, end);
		}
	}
	FID_SETUP(close(KEYFD) == 0, "close the key fd");

	fid_ready();
	fid_wait();

	FID_EXPECT(fcntl(KEYFD, F_GETFD) < 0 && errno == EBADF, "fd %d is open again", KEYFD);
	/* every write end is writable: NPIPES EPOLLOUT items, no EPOLLIN yet */
	struct epoll_event evs[2 * NPIPES + 1];
	int n = epoll_wait(ep, evs, 2 * NPIPES + 1, 0);
	int outs = 0, ins = 0;
	for (int k = 0; k < n; k++) {
		if (evs[k].data.u64 & 1)
			outs += (evs[k].events & EPOLLOUT) != 0;
		else
			ins++;
	}
	FID_EXPECT(n == NPIPES && outs == NPIPES && ins == 0, "before writing: %d events, %d EPOLLOUT, %d read items", n, outs, ins);
	for (int i = 0; i < NPIPES; i += 7) {
		FID_SETUP(write(p[i][1], "x", 1) == 1, "write pipe %d", i);
		n = epoll_wait(ep, evs, 2 * NPIPES + 1, 0);
		int hit = 0;
		for (int k = 0; k < n; k++) {
			if (!(evs[k].data.u64 & 1)) {
				hit++;
				FID_EXPECT(evs[k].data.u64 >> 1 == (uint64_t)i && (evs[k].events & EPOLLIN),
					   "pipe %d written, read item %llu woke", i, (unsigned long long)(evs[k].data.u64 >> 1));
			}
		}
		FID_EXPECT(hit == 1, "pipe %d written: %d read items woke", i, hit);
		char c;
		FID_SETUP(read(p[i][0], &c, 1) == 1, "read pipe %d", i);
	}
	return fid_done();
}
