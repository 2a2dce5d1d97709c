/*
 * sock_peer LOG PORT: a TCP client of a peer outside the dump (the test),
 * with options set, data the peer sent that it has not read, and data it
 * sent that the peer has not read (protocol of testdata/fidelity/fidelity.h:
 * "ready", then SIGTERM, then PASS or FAIL). After SIGTERM it checks its
 * options, reads the 1 MiB the peer sent before the dump, sends "end" and
 * closes.
 */
#include "sock.h"
#include <sys/ioctl.h>

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: sock_peer LOG PORT");
	enum { IN = 1 << 20, OUT = 8 << 20 };
	static unsigned char in[IN], out[OUT];
	for (size_t i = 0; i < OUT; i++)
		out[i] = pattern(5, i);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	struct timeval tv = {4, 0};
	SETOPT(c, SOL_SOCKET, SO_REUSEADDR, 1);
	SETOPT(c, SOL_SOCKET, SO_RCVBUF, 2 * IN);
	SETOPT(c, SOL_SOCKET, SO_SNDBUF, OUT);
	SETOPT(c, SOL_SOCKET, SO_KEEPALIVE, 1);
	SETOPT(c, SOL_SOCKET, SO_MARK, 3);
	SETOPTP(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	SETOPT(c, IPPROTO_IP, IP_TOS, 0x08);
	SETOPT(c, IPPROTO_TCP, TCP_NODELAY, 1);
	SETOPT(c, IPPROTO_TCP, TCP_KEEPIDLE, 99);
	SETOPT(c, IPPROTO_TCP, TCP_USER_TIMEOUT, 30000);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2])), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	FID_SETUP(connect(c, (struct sockaddr *)&a, sizeof a) == 0, "connect");
	int names[] = {SO_REUSEADDR, SO_RCVBUF, SO_SNDBUF, SO_KEEPALIVE, SO_MARK, SO_SNDTIMEO, SO_BUF_LOCK};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		watch(c, "client", SOL_SOCKET, names[i], "SOL_SOCKET option");
	WATCH(c, "client", IPPROTO_IP, IP_TOS);
	WATCH(c, "client", IPPROTO_TCP, TCP_NODELAY);
	WATCH(c, "client", IPPROTO_TCP, TCP_KEEPIDLE);
	WATCH(c, "client", IPPROTO_TCP, TCP_USER_TIMEOUT);
	/* Send until the peer's window and our buffer are full. */
	size_t sent = 0;
	while (sent < OUT) {
		struct pollfd p = {c, POLLOUT, 0};
		if (poll(&p, 1, 300) != 1)
			break;
		ssize_t k = send(c, out + sent, OUT - sent, MSG_DONTWAIT);
		if (k < 0 && errno == EAGAIN)
			continue;
		FID_SETUP(k > 0, "send");
		sent += k;
	}
	/* The peer's 1 MiB sits in our receive queue. */
	for (int i = 0; i < 1000; i++) {
		int q = 0;
		ioctl(c, FIONREAD, &q);
		if (q >= IN)
			break;
		usleep(5000);
	}
	fid_line("sent %zu", sent);
	fid_ready();
	fid_wait();
	check_watches();
	FID_EXPECT(read_exact(c, in, IN) == 0, "read the peer's queued MiB");
	for (size_t i = 0; i < IN; i++)
		if (in[i] != pattern(9, i)) {
			fid_fail("byte %zu of the peer's data differs", i);
			break;
		}
	FID_EXPECT(write_all(c, "end", 3) == 0, "send end");
	close(c);
	return fid_done();
}
