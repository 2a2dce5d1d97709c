/*
 * evloop: a single-threaded event loop (usage: evloop LOG [closed]).
 *
 * The process never sleeps but in epoll_wait(-1), on:
 *  - a timerfd (CLOCK_MONOTONIC, 30 ms interval): each read is a tick line
 *    "tick N exp=K", K the expirations read;
 *  - an eventfd (EPOLLIN|EPOLLET) the loop writes a known value to every
 *    5th tick and reads back every 10th, before that tick's write: the
 *    value read must be the sum of the two writes before, so from tick 5
 *    on a non-zero count is always pending; every write must give an
 *    epoll event before the next one;
 *  - a pipe to itself: each tick writes one byte of a known sequence, read
 *    back on EPOLLIN (no gap, no repeat);
 *  - a signalfd for SIGUSR1 and SIGUSR2, which are blocked (besides SIGHUP,
 *    as in victim.h): this is how check and bye arrive;
 *  - not in epoll, a second signalfd for SIGRTMIN+6, blocked too: the
 *    sender queues exactly 3 of them (sigqueue, values 1, 2, 3, then 4, 5,
 *    6, ...) before every SIGUSR1, and the check reads them from it;
 *  - with "closed": one more eventfd, registered in epoll under an fd
 *    number that is then closed (the file lives on through a dup); every
 *    7th tick writes to it through the dup and its event must come, with
 *    the item's data.
 * A 256 KiB heap region changes every tick (victim.h regions).
 * A check verifies the queued SIGRTMIN+6, the signal mask and handlers,
 * the timerfd's interval,
 * the eventfd's pending count (fdinfo), the pipe's queued bytes, the epoll
 * items (fdinfo: fd numbers, event masks, data) and the region.
 */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "victim.h"
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>

#define SEED 0xe7e7100900000001ULL
#define INTERVAL_NS 30000000L

enum { D_TIMER = 0x71, D_EVENT = 0xe7, D_PIPE = 0x919e, D_SIG = 0x5197, D_GHOST = 0x9057 };

static int ep, tfd, efd, pfd[2], sfd, qfd, ghost_fd = -1, ghost_dup = -1;
static int q_last; /* value of the last SIGRTMIN+6 read */
static uint64_t ev_pending;     /* written to efd, not read back */
static unsigned long ev_armed;  /* tick of a write whose event has not come, 0 if none */
static unsigned long ghost_armed;
static unsigned long pipe_out, pipe_in;
static struct region reg;
static uint64_t checksum;

struct item {
	int fd;
	uint32_t events;
	uint64_t data;
};
static struct item items[5];
static int nitems;

static uint64_t ev_value(unsigned long t) { return t * 1000003 + 17; }
static unsigned char pipe_byte(unsigned long i) { return (unsigned char)(i * 11 + 3); }

static void add(int fd, uint32_t events, uint64_t data)
{
	struct epoll_event e = {.events = events, .data.u64 = data};
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) < 0)
		die("epoll_ctl");
	items[nitems++] = (struct item){fd, events, data};
}

/* fdinfo returns the text of /proc/self/fdinfo/FD in buf. */
static int fdinfo(int fd, char *buf, size_t len)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
	int f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return -1;
	ssize_t n = read(f, buf, len - 1);
	close(f);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return 0;
}

static int check_epoll(char *why, size_t len)
{
	char buf[4096];
	if (fdinfo(ep, buf, sizeof buf) < 0)
		return snprintf(why, len, "epoll fdinfo: %s", strerror(errno)), -1;
	int n = 0;
	for (char *l = strstr(buf, "tfd:"); l; l = strstr(l + 1, "tfd:")) {
		int fd;
		unsigned events;
		unsigned long long data;
		if (sscanf(l, "tfd: %d events: %x data: %llx", &fd, &events, &data) != 3)
			return snprintf(why, len, "epoll fdinfo line %.60s", l), -1;
		int found = 0;
		for (int i = 0; i < nitems; i++)
			if (items[i].fd == fd) {
				found = 1;
				/* fdinfo shows the mask with EPOLLERR|EPOLLHUP added */
				unsigned want = items[i].events | EPOLLERR | EPOLLHUP;
				if ((events | EPOLLERR | EPOLLHUP) != want || data != items[i].data)
					return snprintf(why, len, "epoll item fd %d: events %#x data %#llx, want %#x %#lx",
							fd, events, data, want, (unsigned long)items[i].data), -1;
			}
		if (!found)
			return snprintf(why, len, "epoll item fd %d was never added", fd), -1;
		n++;
	}
	if (n != nitems)
		return snprintf(why, len, "epoll has %d items, want %d", n, nitems), -1;
	return 0;
}

/* check_queue reads the 3 SIGRTMIN+6 queued before a check. */
static int check_queue(char *why, size_t len)
{
	int n = 0;
	for (;;) {
		struct signalfd_siginfo si;
		ssize_t r = read(qfd, &si, sizeof si);
		if (r < 0 && errno == EAGAIN)
			break;
		if (r != sizeof si)
			return snprintf(why, len, "queue signalfd read %zd: %s", r, strerror(errno)), -1;
		if ((int)si.ssi_signo != SIGRTMIN + 6 || si.ssi_code != SI_QUEUE || si.ssi_int != q_last + 1)
			return snprintf(why, len, "queued signal %u code %d value %d, want %d %d %d", si.ssi_signo,
					si.ssi_code, si.ssi_int, SIGRTMIN + 6, SI_QUEUE, q_last + 1), -1;
		q_last++;
		n++;
	}
	if (n != 3)
		return snprintf(why, len, "%d queued signals, want 3 (last value %d)", n, q_last), -1;
	return 0;
}

static int check(char *why, size_t len)
{
	sigset_t cur;
	if (check_queue(why, len) < 0)
		return -1;
	if (sigprocmask(SIG_BLOCK, NULL, &cur) < 0)
		return snprintf(why, len, "sigprocmask query"), -1;
	for (int s = 1; s <= SIGRTMAX; s++)
		if (sigismember(&cur, s) != (s == SIGHUP || s == SIGUSR1 || s == SIGUSR2 || s == SIGRTMIN + 6))
			return snprintf(why, len, "signal %d %sblocked", s, sigismember(&cur, s) ? "" : "not "), -1;
	if (check_handler(SIGUSR1, on_usr1, SIGUSR2, why, len) < 0 ||
	    check_handler(SIGUSR2, on_usr2, SIGUSR1, why, len) < 0)
		return -1;

	struct itimerspec its;
	if (timerfd_gettime(tfd, &its) < 0)
		return snprintf(why, len, "timerfd_gettime: %s", strerror(errno)), -1;
	if (its.it_interval.tv_sec != 0 || its.it_interval.tv_nsec != INTERVAL_NS)
		return snprintf(why, len, "timerfd interval %ld.%09ld", (long)its.it_interval.tv_sec,
				its.it_interval.tv_nsec), -1;
	if (its.it_value.tv_sec != 0 || its.it_value.tv_nsec > INTERVAL_NS ||
	    (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0))
		return snprintf(why, len, "timerfd value %ld.%09ld", (long)its.it_value.tv_sec,
				its.it_value.tv_nsec), -1;

	char buf[1024];
	unsigned long long count = ~0ULL;
	char *p;
	if (fdinfo(efd, buf, sizeof buf) < 0 || !(p = strstr(buf, "eventfd-count:")) ||
	    sscanf(p, "eventfd-count: %llx", &count) != 1 || count != ev_pending)
		return snprintf(why, len, "eventfd count %#llx, want %#lx", count, (unsigned long)ev_pending), -1;

	int queued = -1;
	if (ioctl(pfd[0], FIONREAD, &queued) < 0 || (unsigned long)queued != pipe_out - pipe_in)
		return snprintf(why, len, "pipe holds %d bytes, want %lu", queued, pipe_out - pipe_in), -1;

	if (check_epoll(why, len) < 0)
		return -1;
	return regions_verify(&reg, 1, SEED, ticks, checksum, why, len);
}

static void on_timer(void)
{
	uint64_t exp;
	ssize_t n = read(tfd, &exp, 8);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n != 8 || exp == 0) {
		vlog("check FAIL timerfd read %zd: %s", n, strerror(errno));
		return;
	}
	unsigned long t = ticks + 1;
	regions_mutate(&reg, 1, t, &checksum);
	ticks = t;

	unsigned char b = pipe_byte(pipe_out);
	if (write(pfd[1], &b, 1) != 1)
		die("pipe write");
	pipe_out++;

	if (t % 5 == 0) {
		if (ev_armed)
			vlog("check FAIL no epoll event for the eventfd write of tick %lu", ev_armed);
		if (t % 10 == 0) {
			uint64_t v = 0;
			if (read(efd, &v, 8) != 8 || v != ev_pending)
				vlog("check FAIL eventfd read %#lx, want %#lx", (unsigned long)v,
				     (unsigned long)ev_pending);
			ev_pending = 0;
		}
		uint64_t v = ev_value(t);
		if (write(efd, &v, 8) != 8)
			die("eventfd write");
		ev_pending += v;
		ev_armed = t;
	}
	if (ghost_dup >= 0 && t % 7 == 0) {
		if (ghost_armed)
			vlog("check FAIL no epoll event for the closed-fd item since tick %lu", ghost_armed);
		uint64_t one = 1;
		if (write(ghost_dup, &one, 8) != 8)
			die("eventfd write");
		ghost_armed = t;
	}
	vlog("tick %lu exp=%lu", t, (unsigned long)exp);
}

static void on_pipe(void)
{
	unsigned char b[64];
	ssize_t n = read(pfd[0], b, sizeof b);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		vlog("check FAIL pipe read %zd: %s", n, n < 0 ? strerror(errno) : "EOF");
		return;
	}
	for (ssize_t i = 0; i < n; i++, pipe_in++)
		if (b[i] != pipe_byte(pipe_in))
			vlog("check FAIL pipe byte %lu is %#x, want %#x", pipe_in, b[i], pipe_byte(pipe_in));
}

static void on_signal(void)
{
	struct signalfd_siginfo si;
	ssize_t n = read(sfd, &si, sizeof si);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n != sizeof si) {
		vlog("check FAIL signalfd read %zd: %s", n, strerror(errno));
		return;
	}
	if (si.ssi_signo == SIGUSR1) {
		char why[256] = "";
		if (check(why, sizeof why) == 0)
			vlog("check ok %lu", ticks);
		else
			vlog("check FAIL %s", why);
	} else if (si.ssi_signo == SIGUSR2) {
		vlog("bye %lu", ticks);
		exit(0);
	} else {
		vlog("check FAIL signalfd gave signal %u", si.ssi_signo);
	}
}

int main(int argc, char **argv)
{
	int closed = argc == 3 && strcmp(argv[2], "closed") == 0;
	if (argc == 3 && !closed) {
		fprintf(stderr, "usage: %s LOG [closed]\n", argv[0]);
		exit(2);
	}
	victim_start(argc, argv, argc == 3 ? 2 : 1, "LOG [closed]", O_WRONLY | O_CREAT | O_APPEND,
		     closed ? "closed=1" : "closed=0");
	sigset_t usr;
	sigemptyset(&usr);
	sigaddset(&usr, SIGUSR1);
	sigaddset(&usr, SIGUSR2);
	sigset_t q;
	sigemptyset(&q);
	sigaddset(&q, SIGRTMIN + 6);
	if (sigprocmask(SIG_BLOCK, &usr, NULL) < 0 || sigprocmask(SIG_BLOCK, &q, NULL) < 0)
		die("sigprocmask");
	if ((sfd = signalfd(-1, &usr, SFD_NONBLOCK | SFD_CLOEXEC)) < 0 ||
	    (qfd = signalfd(-1, &q, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
		die("signalfd");

	reg = (struct region){malloc(256 << 10), (256 << 10) / 8};
	if (!reg.w)
		die("malloc");
	checksum = regions_fill(&reg, 1, SEED);

	if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
		die("epoll_create1");
	if ((tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0)
		die("timerfd_create");
	if ((efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		die("eventfd");
	if (pipe2(pfd, O_NONBLOCK | O_CLOEXEC) < 0)
		die("pipe2");
	add(tfd, EPOLLIN, D_TIMER);
	add(efd, EPOLLIN | EPOLLET, D_EVENT);
	add(pfd[0], EPOLLIN, D_PIPE);
	add(sfd, EPOLLIN, D_SIG);
	if (closed) {
		if ((ghost_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
			die("eventfd");
		add(ghost_fd, EPOLLIN, D_GHOST);
		if ((ghost_dup = fcntl(ghost_fd, F_DUPFD_CLOEXEC, 20)) < 0)
			die("dup");
		close(ghost_fd); /* the item stays, keyed by a closed fd number */
	}
	struct itimerspec its = {{0, INTERVAL_NS}, {0, INTERVAL_NS}};
	if (timerfd_settime(tfd, 0, &its, NULL) < 0)
		die("timerfd_settime");

	for (;;) {
		struct epoll_event evs[8];
		int n = epoll_wait(ep, evs, 8, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			switch (evs[i].data.u64) {
			case D_TIMER:
				on_timer();
				break;
			case D_EVENT:
				ev_armed = 0; /* edge-triggered: not read here */
				break;
			case D_PIPE:
				on_pipe();
				break;
			case D_SIG:
				on_signal();
				break;
			case D_GHOST: {
				uint64_t v;
				if (read(ghost_dup, &v, 8) == 8)
					ghost_armed = 0;
				break;
			}
			default:
				vlog("check FAIL epoll event with data %#lx", (unsigned long)evs[i].data.u64);
			}
		}
	}
}
