/*
 * fd_flags: the status flags of open file descriptions of every common
 * kind (F_GETFL: O_NONBLOCK, O_APPEND, O_NOATIME, O_DSYNC, O_ASYNC, access
 * mode), FD_CLOEXEC per fd (F_GETFD) where two fds share one description,
 * positions (shared by dup'ed fds), and the F_SETOWN_EX/F_SETSIG owner.
 * Each must come back exactly, and shared descriptions stay shared.
 */
#include "fidelity.h"
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>

/* the flags F_GETFL shows that a program can set or see (O_LARGEFILE is
 * set by every open on x86-64 and by none of pipe2/socket/eventfd). */
#define SHOWN (O_ACCMODE | O_APPEND | O_NONBLOCK | O_ASYNC | O_DIRECT | O_NOATIME | O_SYNC | O_DSYNC | O_PATH)

struct want {
	const char *name;
	int fd;
	int fl;      /* F_GETFL & SHOWN */
	int cloexec; /* FD_CLOEXEC */
	off_t pos;   /* -1: not seekable */
};

static struct want w[32];
static int nw;

static void add(const char *name, int fd)
{
	FID_SETUP(fd >= 0, "%s", name);
	int fl = fcntl(fd, F_GETFL);
	int fdfl = fcntl(fd, F_GETFD);
	FID_SETUP(fl >= 0 && fdfl >= 0, "%s: fcntl", name);
	off_t pos = lseek(fd, 0, SEEK_CUR);
	w[nw++] = (struct want){name, fd, fl & SHOWN, fdfl & FD_CLOEXEC, pos};
}

static void setfl(int fd, int add)
{
	int fl = fcntl(fd, F_GETFL);
	FID_SETUP(fl >= 0 && fcntl(fd, F_SETFL, fl | add) == 0, "F_SETFL %#o on %d", add, fd);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	char path[4096];
	snprintf(path, sizeof path, "%s.data", argv[1]);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	FID_SETUP(fd >= 0 && write(fd, "0123456789", 10) == 10, "data file");
	close(fd);

	/* pipe: read end non-blocking and close-on-exec, write end neither;
	 * a dup of the read end without FD_CLOEXEC shares its description. */
	int p[2];
	FID_SETUP(pipe2(p, O_CLOEXEC) == 0, "pipe2");
	setfl(p[0], O_NONBLOCK);
	FID_SETUP(fcntl(p[1], F_SETFD, 0) == 0, "F_SETFD");
	FID_SETUP(write(p[1], "xy", 2) == 2, "pipe write");
	add("pipe read end", p[0]);
	add("pipe write end", p[1]);
	int pdup = dup(p[0]);
	add("dup of the pipe read end", pdup);

	/* a pipe whose write end gets O_NONBLOCK|O_ASYNC with an owner and a
	 * signal: SIGIO delivery set up as F_SETOWN_EX/F_SETSIG. */
	int q[2];
	FID_SETUP(pipe(q) == 0, "pipe");
	struct f_owner_ex ow = {F_OWNER_PID, getpid()};
	FID_SETUP(fcntl(q[0], F_SETOWN_EX, &ow) == 0, "F_SETOWN_EX");
	FID_SETUP(fcntl(q[0], F_SETSIG, SIGUSR1) == 0, "F_SETSIG");
	setfl(q[0], O_ASYNC | O_NONBLOCK);
	add("async pipe read end", q[0]);
	add("async pipe write end", q[1]);

	/* regular files: O_APPEND read-write at offset 4 shared by a dup,
	 * O_WRONLY|O_NOATIME|O_DSYNC, read-only non-blocking at offset 7. */
	int a = open(path, O_RDWR | O_APPEND);
	FID_SETUP(a >= 0 && lseek(a, 4, SEEK_SET) == 4, "append file");
	add("O_APPEND file", a);
	int adup = fcntl(a, F_DUPFD_CLOEXEC, 20);
	add("dup of the O_APPEND file", adup);
	add("O_NOATIME|O_DSYNC file", open(path, O_WRONLY | O_NOATIME | O_DSYNC | O_CLOEXEC));
	int r = open(path, O_RDONLY | O_NONBLOCK);
	FID_SETUP(r >= 0 && lseek(r, 7, SEEK_SET) == 7, "read-only file");
	add("O_NONBLOCK read-only file", r);
	add("/dev/null O_WRONLY|O_APPEND", open("/dev/null", O_WRONLY | O_APPEND));
	add("directory", open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));

	/* sockets: one end of a pair non-blocking, the other not. */
	int sv[2];
	FID_SETUP(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0, "socketpair");
	int fl = fcntl(sv[1], F_GETFL);
	FID_SETUP(fcntl(sv[1], F_SETFL, fl & ~O_NONBLOCK) == 0, "clear O_NONBLOCK");
	add("non-blocking socket", sv[0]);
	add("blocking socket", sv[1]);

	/* event files. */
	add("eventfd", eventfd(3, EFD_NONBLOCK));
	add("eventfd blocking close-on-exec", eventfd(0, EFD_CLOEXEC));
	add("timerfd", timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
	sigset_t usr2;
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	add("signalfd", signalfd(-1, &usr2, SFD_NONBLOCK));

	fid_ready();
	fid_wait();

	for (int i = 0; i < nw; i++) {
		int fl = fcntl(w[i].fd, F_GETFL), fdfl = fcntl(w[i].fd, F_GETFD);
		FID_EXPECT(fl >= 0 && (fl & SHOWN) == w[i].fl, "%s (fd %d): F_GETFL %#o, want %#o", w[i].name, w[i].fd,
			   fl & SHOWN, w[i].fl);
		FID_EXPECT(fdfl >= 0 && (fdfl & FD_CLOEXEC) == w[i].cloexec, "%s (fd %d): FD_CLOEXEC %d, want %d", w[i].name,
			   w[i].fd, fdfl & FD_CLOEXEC, w[i].cloexec);
		off_t pos = lseek(w[i].fd, 0, SEEK_CUR);
		FID_EXPECT(pos == w[i].pos, "%s (fd %d): position %ld, want %ld", w[i].name, w[i].fd, (long)pos, (long)w[i].pos);
	}
	struct f_owner_ex got;
	FID_EXPECT(fcntl(q[0], F_GETOWN_EX, &got) == 0 && got.type == F_OWNER_PID && got.pid == getpid(),
		   "F_GETOWN_EX: type %d pid %d, want %d %d", got.type, got.pid, F_OWNER_PID, getpid());
	FID_EXPECT(fcntl(q[0], F_GETSIG) == SIGUSR1, "F_GETSIG %d, want %d", fcntl(q[0], F_GETSIG), SIGUSR1);

	/* shared descriptions stay shared: a flag set through one fd shows
	 * through the other, a read through one moves the other. */
	setfl(pdup, O_APPEND);
	FID_EXPECT(fcntl(p[0], F_GETFL) & O_APPEND, "the pipe read end and its dup no longer share a description");
	char c;
	FID_EXPECT(lseek(adup, 0, SEEK_SET) == 0 && read(adup, &c, 1) == 1 && lseek(a, 0, SEEK_CUR) == 1,
		   "the O_APPEND file and its dup no longer share their position");
	char buf[4] = {0};
	FID_EXPECT(read(p[0], buf, sizeof buf) == 2 && memcmp(buf, "xy", 2) == 0, "pipe data %.2s, want xy", buf);
	FID_EXPECT(read(p[0], buf, 1) < 0 && errno == EAGAIN, "empty non-blocking pipe: read did not say EAGAIN");
	unlink(path);
	return fid_done();
}
