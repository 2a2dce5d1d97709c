/*
 * pty_hung_up: slaves of a pseudo-terminal whose master was closed: the
 * pty is hung up, /dev/pts/N is gone, and what is left is visible: the
 * fds read end of file, fail writes and terminal ioctls with EIO, and
 * their /proc/self/fd links name "/dev/pts/N (deleted)". Two slaves are
 * open (one made the controlling terminal before the hang-up, which took
 * it away). After the restore all of that is as it was.
 */
#include "fidelity.h"
#include <sys/ioctl.h>
#include <termios.h>

static int link_of(int fd, char *buf, size_t n)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	ssize_t r = readlink(path, buf, n - 1);
	if (r < 0)
		return -1;
	buf[r] = 0;
	return 0;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	setsid(); /* fails if already a group leader: then no terminal is taken */
	int m = posix_openpt(O_RDWR | O_NOCTTY);
	FID_SETUP(m >= 0 && grantpt(m) == 0 && unlockpt(m) == 0, "posix_openpt");
	char name[64];
	FID_SETUP(ptsname_r(m, name, sizeof name) == 0, "ptsname");
	int s1 = open(name, O_RDWR), s2 = open(name, O_RDWR | O_NOCTTY);
	FID_SETUP(s1 >= 0 && s2 >= 0, "open %s", name);
	signal(SIGHUP, SIG_IGN);
	FID_SETUP(close(m) == 0, "close the master");
	FID_SETUP(access(name, F_OK) != 0, "%s still exists", name);
	char l1[128], l2[128];
	FID_SETUP(link_of(s1, l1, sizeof l1) == 0 && link_of(s2, l2, sizeof l2) == 0, "readlink");
	int tty = open("/dev/tty", O_RDWR);
	int had_tty = tty >= 0;
	if (tty >= 0)
		close(tty);

	fid_ready();
	fid_wait();

	char now[128], c;
	struct termios t;
	int fds[2] = {s1, s2};
	const char *want[2] = {l1, l2};
	for (int i = 0; i < 2; i++) {
		FID_EXPECT(link_of(fds[i], now, sizeof now) == 0 && strcmp(now, want[i]) == 0, "fd %d is %s, was %s", fds[i], now,
			   want[i]);
		FID_EXPECT(read(fds[i], &c, 1) == 0, "fd %d does not read end of file", fds[i]);
		FID_EXPECT(write(fds[i], "x", 1) < 0 && errno == EIO, "writing fd %d does not fail with EIO", fds[i]);
		FID_EXPECT(tcgetattr(fds[i], &t) < 0 && errno == EIO, "tcgetattr of fd %d does not fail with EIO", fds[i]);
	}
	FID_EXPECT(access(name, F_OK) != 0, "%s exists again", name);
	tty = open("/dev/tty", O_RDWR);
	FID_EXPECT((tty >= 0) == had_tty, "controlling terminal: %d, before %d", tty >= 0, had_tty);
	return fid_done();
}
