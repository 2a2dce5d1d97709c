/*
 * pty_refused KIND: holds a pseudo-terminal in a state ckpt cannot
 * restore, which the dump must refuse by name, leaving it untouched:
 *
 *   packet_event  a packet-mode status event (TIOCPKT_FLUSHREAD) waits to
 *                 be read on the master: no call can make one again;
 *   queue_full    4095 bytes or more wait towards the slave (the line
 *                 discipline is full, more may wait behind it);
 *   ctty_mixed    a session leader took the slave as its controlling
 *                 terminal after forking a child, which has none: the
 *                 restore gives it to the whole session;
 *   never_opened  bytes written to a master whose slave was never opened:
 *                 only an open of the slave can read them.
 *
 * After the refused dump the program finds its state as it left it.
 */
#include "fidelity.h"
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>

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

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: pty_refused LOG KIND");
	const char *kind = argv[2];
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_NONBLOCK);
	FID_SETUP(m >= 0 && unlockpt(m) == 0, "posix_openpt");
	char slave[64];
	FID_SETUP(ptsname_r(m, slave, sizeof slave) == 0, "ptsname");
	if (strcmp(kind, "never_opened") == 0) {
		FID_SETUP(write(m, "hi\n", 3) == 3, "write master");
		fid_ready();
		fid_wait();
		int s = open(slave, O_RDWR | O_NOCTTY | O_NONBLOCK);
		char c[8];
		struct pollfd p = {s, POLLIN, 0};
		ssize_t n = s >= 0 && poll(&p, 1, 2000) == 1 ? read(s, c, sizeof c) : -1;
		FID_EXPECT(n == 3 && memcmp(c, "hi\n", 3) == 0, "the slave reads %zd bytes, want hi", n);
		return fid_done();
	}
	int s = open(slave, O_RDWR | O_NOCTTY | O_NONBLOCK);
	FID_SETUP(s >= 0, "open %s", slave);

	if (strcmp(kind, "packet_event") == 0) {
		int one = 1;
		FID_SETUP(ioctl(m, TIOCPKT, &one) == 0 && tcflush(s, TCIFLUSH) == 0, "packet mode and flush");
		struct pollfd p = {m, POLLPRI, 0};
		FID_SETUP(poll(&p, 1, 5000) == 1, "no packet event");
		fid_ready();
		fid_wait();
		char c[8];
		ssize_t n = read(m, c, sizeof c);
		FID_EXPECT(n == 1 && c[0] == TIOCPKT_FLUSHREAD, "packet event: read %zd bytes, first %#x", n, n > 0 ? c[0] : 0);
		return fid_done();
	}
	if (strcmp(kind, "queue_full") == 0) {
		struct termios t;
		FID_SETUP(tcgetattr(s, &t) == 0, "tcgetattr");
		cfmakeraw(&t);
		FID_SETUP(tcsetattr(s, TCSANOW, &t) == 0, "tcsetattr");
		char buf[5000];
		for (size_t i = 0; i < sizeof buf; i++)
			buf[i] = 'a' + i % 26;
		FID_SETUP(write(m, buf, sizeof buf) == sizeof buf, "write master");
		int q = 0;
		for (int i = 0; i < 5000 && (ioctl(s, TIOCINQ, &q) < 0 || q < 4095); i++)
			usleep(1000);
		FID_SETUP(q >= 4095, "only %d bytes queued", q);
		fid_ready();
		fid_wait();
		char got[6000];
		size_t n = 0;
		struct pollfd p = {s, POLLIN, 0};
		while (n < sizeof buf && poll(&p, 1, 2000) == 1) {
			ssize_t k = read(s, got + n, sizeof got - n);
			if (k <= 0)
				break;
			n += k;
		}
		FID_EXPECT(n == sizeof buf && memcmp(got, buf, n) == 0, "read %zu bytes back of %zu", n, sizeof buf);
		return fid_done();
	}
	if (strcmp(kind, "ctty_mixed") == 0) {
		int res[2];
		FID_SETUP(pipe(res) == 0, "pipe");
		pid_t leader = fork();
		FID_SETUP(leader >= 0, "fork");
		if (leader == 0) {
			setsid();
			pid_t c = fork();
			if (c == 0) {
				for (;;) /* until killed with the leader's group */
					pause();
			}
			int t = open(slave, O_RDWR); /* becomes the leader's terminal only */
			char ok = (t >= 0 && tty_nr_of(getpid()) > 0 && tty_nr_of(c) == 0) ? 'y' : 'n';
			write(res[1], &ok, 1);
			for (;;)
				pause();
		}
		char ok;
		FID_SETUP(read(res[0], &ok, 1) == 1 && ok == 'y', "the leader did not take the terminal alone");
		fid_ready();
		fid_wait();
		FID_EXPECT(tty_nr_of(leader) > 0, "the leader lost its terminal");
		kill(-leader, SIGKILL); /* the leader and its child */
		waitpid(leader, NULL, 0);
		return fid_done();
	}
	FID_SETUP(0, "unknown kind %s", kind);
	return 2;
}
