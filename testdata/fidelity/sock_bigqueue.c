/*
 * sock_bigqueue MB: a TCP connection within the process whose queues hold
 * MB megabytes the server has not read (large buffers set by the
 * program: part in the server's receive queue, part in the client's send
 * queue, sent or not). After the restore (which must not hang) the server
 * reads every byte in order, the buffer sizes read back the same, and
 * the connection carries data both ways.
 */
#include "sock.h"

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: sock_bigqueue LOG MB");
	size_t n = (size_t)atoi(argv[2]) << 20;
	unsigned char *big = malloc(n), *got = malloc(n);
	FID_SETUP(big && got, "malloc");
	for (size_t i = 0; i < n; i++)
		big[i] = pattern(11, i);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof a;
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	FID_SETUP(bind(ls, (struct sockaddr *)&a, l) == 0 && listen(ls, 1) == 0, "listen");
	FID_SETUP(getsockname(ls, (struct sockaddr *)&a, &l) == 0, "getsockname");
	int c = socket(AF_INET, SOCK_STREAM, 0);
	SETOPT(c, SOL_SOCKET, SO_SNDBUFFORCE, (int)n);
	FID_SETUP(connect(c, (struct sockaddr *)&a, l) == 0, "connect");
	int s = accept(ls, NULL, NULL);
	FID_SETUP(s >= 0, "accept");
	SETOPT(s, SOL_SOCKET, SO_RCVBUFFORCE, (int)n / 2);
	WATCH(c, "client", SOL_SOCKET, SO_SNDBUF);
	WATCH(c, "client", SOL_SOCKET, SO_BUF_LOCK);
	WATCH(s, "server", SOL_SOCKET, SO_RCVBUF);
	WATCH(s, "server", SOL_SOCKET, SO_BUF_LOCK);
	/* Write until the queues are full or all is written. */
	size_t done = 0;
	while (done < n) {
		struct pollfd p = {c, POLLOUT, 0};
		if (poll(&p, 1, 500) != 1)
			break;
		ssize_t k = send(c, big + done, n - done, MSG_DONTWAIT);
		if (k < 0 && errno == EAGAIN)
			continue;
		FID_SETUP(k > 0, "send");
		done += k;
	}
	fid_line("queued %zu bytes", done);
	fid_ready();
	fid_wait();
	check_watches();
	FID_EXPECT(read_exact(s, got, done) == 0, "server: read the %zu queued bytes", done);
	FID_EXPECT(memcmp(got, big, done) == 0, "server: the queued bytes differ");
	char h[4];
	FID_EXPECT(write_all(s, "pong", 4) == 0 && read_exact(c, h, 4) == 0 && memcmp(h, "pong", 4) == 0, "pong after");
	FID_EXPECT(write_all(c, "ping", 4) == 0 && read_exact(s, h, 4) == 0 && memcmp(h, "ping", 4) == 0, "ping after");
	return fid_done();
}
