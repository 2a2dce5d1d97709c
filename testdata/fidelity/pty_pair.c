/*
 * pty_pair: a pseudo-terminal pair the program opened itself (master and
 * slave in the dump), its settings changed (termios, window size, packet
 * mode, exclusive mode), data queued both ways (a partial line towards
 * the slave in canonical mode, output towards the master), a second
 * pair locked again after its slave was opened (a new open of the slave
 * fails; a master whose slave was never opened is refused, see
 * pty_refused), and a child leading a session whose controlling
 * terminal is the slave, with a grandchild's group in the foreground.
 * After the restore everything is as it was, from inside: the indexes
 * (ttyname), the settings, the queued bytes (the partial line still
 * partial), the controlling terminal and its foreground group.
 */
#include "fidelity.h"
#include <poll.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <asm/termbits.h>

/* glibc's termios.h clashes with asm/termbits.h: declare what is used. */
extern int posix_openpt(int);
extern int unlockpt(int);

static int ptn(int m)
{
	int n = -1;
	ioctl(m, TIOCGPTN, &n);
	return n;
}

static int tty_nr_of(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	if (fid_read_file(path, buf, sizeof buf) < 0)
		return -1;
	char *p = strrchr(buf, ')');
	int tty = -1;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %d", &tty) != 1)
		return -1;
	return tty;
}

/* wait_in polls fd for input up to 5 s. */
static int wait_in(int fd)
{
	struct pollfd p = {fd, POLLIN, 0};
	return poll(&p, 1, 5000) == 1;
}

static void expect_read(int fd, const char *want, size_t len, const char *what)
{
	char buf[256];
	ssize_t n = read(fd, buf, sizeof buf);
	FID_EXPECT(n == (ssize_t)len && memcmp(buf, want, len) == 0, "%s: read %zd bytes \"%.*s\", want %zu \"%.*s\" (%s)", what, n,
		   (int)(n > 0 ? n : 0), buf, len, (int)len, want, n < 0 ? strerror(errno) : "");
}

/* child leads a session whose controlling terminal is the slave, with
 * its child's group in the foreground; after go is readable it checks
 * them and writes its findings to res. */
static int child(const char *slave, int go, int res)
{
	char why[1024] = "";
	size_t wl = 0;
#define CHK(c, ...) \
	do { \
		if (!(c)) \
			wl += snprintf(why + wl, sizeof why - wl, __VA_ARGS__), wl += snprintf(why + wl, sizeof why - wl, "; "); \
	} while (0)
	if (setsid() < 0)
		_exit(10);
	int s = open(slave, O_RDWR); /* no O_NOCTTY: it becomes the controlling terminal */
	if (s < 0 || dup2(s, 0) < 0)
		_exit(11);
	close(s);
	int gsync[2];
	if (pipe(gsync) < 0)
		_exit(12);
	pid_t gc = fork();
	if (gc == 0) {
		setpgid(0, 0);
		char c;
		close(gsync[1]);
		read(gsync[0], &c, 1); /* until the child closes it */
		_exit(0);
	}
	setpgid(gc, gc);
	if (ioctl(0, TIOCSPGRP, &gc) < 0)
		_exit(13);
	char c = 'r';
	if (write(res, &c, 1) != 1)
		_exit(14);
	if (read(go, &c, 1) != 1)
		_exit(15);
	char name[64];
	snprintf(name, sizeof name, "%s", ttyname(0) ? ttyname(0) : "none");
	CHK(strcmp(name, slave) == 0, "child: ttyname(0) %s, want %s", name, slave);
	pid_t fg = -1, sid = -1;
	CHK(ioctl(0, TIOCGPGRP, &fg) == 0 && fg == gc, "child: foreground group %d, want %d", fg, gc);
	CHK(ioctl(0, TIOCGSID, &sid) == 0 && sid == getpid(), "child: terminal's session %d, want %d", sid, getpid());
	CHK(getsid(0) == getpid(), "child: session %d", getsid(0));
	struct stat st;
	stat(slave, &st);
	CHK(tty_nr_of(getpid()) == (int)st.st_rdev, "child: tty_nr %#x, want %#x", tty_nr_of(getpid()), (int)st.st_rdev);
	CHK(tty_nr_of(gc) == (int)st.st_rdev, "grandchild: tty_nr %#x, want %#x", tty_nr_of(gc), (int)st.st_rdev);
	int t = open("/dev/tty", O_RDWR | O_NOCTTY);
	CHK(t >= 0, "child: open /dev/tty: %s", strerror(errno));
	close(gsync[1]);
	waitpid(gc, NULL, 0);
	if (wl == 0)
		snprintf(why, sizeof why, "ok");
	write(res, why, strlen(why));
	_exit(0);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	int m = posix_openpt(O_RDWR | O_NOCTTY);
	FID_SETUP(m >= 0 && unlockpt(m) == 0, "posix_openpt");
	int n = ptn(m);
	char slave[64];
	snprintf(slave, sizeof slave, "/dev/pts/%d", n);
	int s = open(slave, O_RDWR | O_NOCTTY | O_NONBLOCK);
	FID_SETUP(s >= 0, "open %s", slave);

	int go[2], res[2];
	FID_SETUP(pipe(go) == 0 && pipe(res) == 0, "pipe");
	pid_t kid = fork();
	FID_SETUP(kid >= 0, "fork");
	if (kid == 0) {
		close(go[1]);
		close(res[0]);
		child(slave, go[0], res[1]);
	}
	close(go[0]);
	close(res[1]);
	char c;
	FID_SETUP(read(res[0], &c, 1) == 1 && c == 'r', "child setup failed");

	/* Settings, through the slave. */
	struct termios2 t;
	FID_SETUP(ioctl(s, TCGETS2, &t) == 0, "TCGETS2");
	t.c_lflag &= ~(ECHO | ECHOE | ECHOK);
	t.c_lflag |= ICANON;
	t.c_oflag &= ~ONLCR;
	t.c_iflag |= IUTF8;
	t.c_cc[VERASE] = 0x08;
	t.c_cc[VKILL] = 0x15;
	t.c_cflag &= ~CBAUD;
	t.c_cflag |= BOTHER;
	t.c_ispeed = t.c_ospeed = 57600;
	FID_SETUP(ioctl(s, TCSETS2, &t) == 0, "TCSETS2");
	FID_SETUP(ioctl(s, TCGETS2, &t) == 0, "TCGETS2");
	struct winsize ws = {.ws_row = 37, .ws_col = 111, .ws_xpixel = 888, .ws_ypixel = 666};
	FID_SETUP(ioctl(m, TIOCSWINSZ, &ws) == 0, "TIOCSWINSZ");
	int one = 1;
	FID_SETUP(ioctl(m, TIOCPKT, &one) == 0, "TIOCPKT");

	/* Data both ways: two lines and a partial one towards the slave,
	 * output towards the master. */
	const char in[] = "first line\nsecond\nhalf";
	FID_SETUP(write(m, in, sizeof in - 1) == sizeof in - 1, "write master");
	const char out[] = "out1\nout2";
	FID_SETUP(write(s, out, sizeof out - 1) == sizeof out - 1, "write slave");
	FID_SETUP(wait_in(s) && wait_in(m), "queued data did not arrive");
	/* The partial line is in the slave's line discipline once the master
	 * has nothing pending: poll until the second full line is readable
	 * (above) and give the flip buffer its push. */
	int q = 0;
	for (int i = 0; i < 5000 && (ioctl(m, TIOCINQ, &q) < 0 || q < (int)sizeof out - 1); i++)
		usleep(1000);
	FID_SETUP(ioctl(s, TIOCEXCL) == 0, "TIOCEXCL");
	FID_SETUP(fchown(s, 4321, 5) == 0 && fchmod(s, 0640) == 0, "chown, chmod %s", slave);

	/* A second pair, locked again once its slave is open. */
	int m2 = posix_openpt(O_RDWR | O_NOCTTY | O_NONBLOCK);
	FID_SETUP(m2 >= 0 && unlockpt(m2) == 0, "posix_openpt 2");
	int n2 = ptn(m2);
	char slave2[64];
	FID_SETUP(ptsname_r(m2, slave2, sizeof slave2) == 0, "ptsname 2");
	int s2 = open(slave2, O_RDWR | O_NOCTTY | O_NONBLOCK);
	FID_SETUP(s2 >= 0, "open %s", slave2);
	FID_SETUP(ioctl(m2, TIOCSPTLCK, &one) == 0, "lock the second pair");

	fid_ready();
	fid_wait();

	FID_EXPECT(ptn(m) == n, "master index %d, want %d", ptn(m), n);
	FID_EXPECT(ptn(m2) == n2, "locked master index %d, want %d", ptn(m2), n2);
	char name[64];
	snprintf(name, sizeof name, "%s", ttyname(s) ? ttyname(s) : "none");
	FID_EXPECT(strcmp(name, slave) == 0, "ttyname %s, want %s", name, slave);
	struct stat sst;
	FID_EXPECT(stat(slave, &sst) == 0 && sst.st_uid == 4321 && sst.st_gid == 5 && (sst.st_mode & 07777) == 0640, "%s: owner %d:%d mode %o",
		   slave, sst.st_uid, sst.st_gid, sst.st_mode & 07777);
	struct termios2 t2;
	FID_EXPECT(ioctl(s, TCGETS2, &t2) == 0 && memcmp(&t, &t2, sizeof t) == 0,
		   "termios iflag %#x oflag %#x cflag %#x lflag %#x speed %u, want %#x %#x %#x %#x %u", t2.c_iflag, t2.c_oflag, t2.c_cflag,
		   t2.c_lflag, t2.c_ospeed, t.c_iflag, t.c_oflag, t.c_cflag, t.c_lflag, t.c_ospeed);
	struct winsize ws2;
	FID_EXPECT(ioctl(s, TIOCGWINSZ, &ws2) == 0 && memcmp(&ws, &ws2, sizeof ws) == 0, "winsize %dx%d", ws2.ws_col, ws2.ws_row);
	int v = -1;
	FID_EXPECT(ioctl(m, TIOCGPKT, &v) == 0 && v == 1, "packet mode %d", v);
	v = -1;
	FID_EXPECT(ioctl(m, TIOCGPTLCK, &v) == 0 && v == 0, "lock %d", v);
	v = -1;
	FID_EXPECT(ioctl(m2, TIOCGPTLCK, &v) == 0 && v == 1, "second master: lock %d", v);
	v = -1;
	FID_EXPECT(ioctl(s, TIOCGEXCL, &v) == 0 && v == 1, "exclusive %d", v);
	FID_EXPECT((fcntl(s, F_GETFL) & (O_ACCMODE | O_NONBLOCK)) == (O_RDWR | O_NONBLOCK), "slave flags %#o", fcntl(s, F_GETFL));
	FID_EXPECT((fcntl(m2, F_GETFL) & O_NONBLOCK) != 0, "second master lost O_NONBLOCK");
	FID_EXPECT(read(m2, &c, 1) < 0 && errno == EAGAIN, "second master: read says %s", strerror(errno));
	int again = open(slave2, O_RDWR | O_NOCTTY | O_NONBLOCK);
	FID_EXPECT(again < 0 && errno == EIO, "second slave opened again through the lock (%s)", again < 0 ? strerror(errno) : "it opened");
	FID_EXPECT(fcntl(s2, F_GETFD) >= 0, "second slave fd lost");

	/* Queued data: packet mode puts TIOCPKT_DATA (0) first. */
	FID_EXPECT(wait_in(m), "nothing to read on the master");
	expect_read(m, "\0out1\nout2", 10, "master");
	expect_read(s, "first line\n", 11, "slave line 1");
	expect_read(s, "second\n", 7, "slave line 2");
	FID_EXPECT(read(s, &c, 1) < 0 && errno == EAGAIN, "the partial line is readable: %s", strerror(errno));
	FID_EXPECT(write(m, "way\n", 4) == 4, "write master");
	FID_EXPECT(wait_in(s), "the completed line did not come");
	expect_read(s, "halfway\n", 8, "slave line 3");
	FID_EXPECT(write(s, "more", 4) == 4, "write slave");
	FID_EXPECT(wait_in(m), "output did not come");
	expect_read(m, "\0more", 5, "master after");

	/* The child's controlling terminal. */
	FID_EXPECT(write(go[1], "g", 1) == 1, "wake the child");
	char why[1024] = {0};
	ssize_t k = read(res[0], why, sizeof why - 1);
	FID_EXPECT(k > 0 && strcmp(why, "ok") == 0, "%s", k > 0 ? why : "child said nothing");
	int status;
	FID_EXPECT(waitpid(kid, &status, 0) == kid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
	return fid_done();
}
