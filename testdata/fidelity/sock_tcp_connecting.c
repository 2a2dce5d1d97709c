/*
 * sock_tcp_connecting MODE FAMILY (tcp4, tcp6, mapped): a TCP connection
 * whose connect() the socket layer remembers, with bytes in both
 * directions that nobody has read yet:
 *   nonblocking   a non-blocking connect (EINPROGRESS) never called
 *                 again: the socket layer still calls it connecting, and
 *                 connect() returns 0 once, then EISCONN;
 *   blocking      a blocking connect: EISCONN at once;
 *   close_wait_nb a non-blocking connect, then the peer's FIN (CLOSE_WAIT):
 *                 still connecting;
 *   fin_wait2_nb  a non-blocking connect, then our FIN (shutdown makes it
 *                 connected).
 * A twin connection made the same way is asked connect() twice before the
 * dump; after the restore the connection must give the same answers,
 * after every byte, from inside and from the peer, and its TCP state.
 */
#include "sock.h"

static int v6, mapped;

static int new_socket(void) { return inet_socket(SOCK_STREAM, v6, mapped); }

static void wait_state(int fd, int st)
{
	FID_SETUP(tcp_state_within(fd, st), "TCP state %d, want %d", tcp_state(fd), st);
}

enum { TO_CLI = 30000, TO_SRV = 20000 };

struct conn {
	int cli, srv, state;
	struct sockaddr_storage to;
	socklen_t tol;
};

/* make connects a client to a listener of its own, as mode says, and
 * leaves TO_CLI bytes for the client and TO_SRV for the peer unread. */
static struct conn make(const char *mode)
{
	struct conn c;
	c.tol = loopback_addr(&c.to, 0, v6, mapped);
	int ls = new_socket();
	FID_SETUP(bind(ls, (struct sockaddr *)&c.to, c.tol) == 0 && listen(ls, 1) == 0, "listen");
	FID_SETUP(getsockname(ls, (struct sockaddr *)&c.to, &c.tol) == 0, "getsockname");
	c.cli = new_socket();
	if (strcmp(mode, "blocking") == 0) {
		FID_SETUP(connect(c.cli, (struct sockaddr *)&c.to, c.tol) == 0, "connect");
	} else {
		FID_SETUP(fcntl(c.cli, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
		FID_SETUP(connect(c.cli, (struct sockaddr *)&c.to, c.tol) < 0 && errno == EINPROGRESS, "connect in progress");
		wait_state(c.cli, 1);
		FID_SETUP(fcntl(c.cli, F_SETFL, 0) == 0, "O_NONBLOCK off");
	}
	c.srv = accept(ls, NULL, NULL);
	FID_SETUP(c.srv >= 0, "accept");
	close(ls);
	unsigned char buf[TO_CLI];
	for (size_t i = 0; i < TO_CLI; i++)
		buf[i] = pattern(1, i);
	FID_SETUP(write_all(c.srv, buf, TO_CLI) == 0, "write to the client");
	for (size_t i = 0; i < TO_SRV; i++)
		buf[i] = pattern(2, i);
	FID_SETUP(write_all(c.cli, buf, TO_SRV) == 0, "write to the peer");
	c.state = 1;
	if (strcmp(mode, "close_wait_nb") == 0) {
		FID_SETUP(shutdown(c.srv, SHUT_WR) == 0, "shutdown");
		c.state = 8;
	} else if (strcmp(mode, "fin_wait2_nb") == 0) {
		FID_SETUP(shutdown(c.cli, SHUT_WR) == 0, "shutdown");
		c.state = 5;
	}
	wait_state(c.cli, c.state);
	return c;
}

/* connects is what connect() to the peer gives twice. */
static void connects(struct conn *c, char *out, size_t len)
{
	errno = 0;
	int a = connect(c->cli, (struct sockaddr *)&c->to, c->tol);
	int ae = a < 0 ? errno : 0;
	errno = 0;
	int b = connect(c->cli, (struct sockaddr *)&c->to, c->tol);
	snprintf(out, len, "connect %d/%d then %d/%d", a, ae, b, b < 0 ? errno : 0);
}

/* check_stream reads n bytes of seed's pattern from fd. */
static void check_stream(int fd, const char *who, unsigned seed, size_t n)
{
	unsigned char buf[TO_CLI];
	if (read_exact(fd, buf, n) < 0) {
		fid_fail("%s: read %zu bytes: %s", who, n, strerror(errno));
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (buf[i] != pattern(seed, i)) {
			fid_fail("%s: byte %zu differs", who, i);
			return;
		}
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 4, "usage: sock_tcp_connecting LOG MODE FAMILY");
	const char *mode = argv[2], *fam = argv[3];
	v6 = strcmp(fam, "tcp4") != 0;
	mapped = strcmp(fam, "mapped") == 0;
	signal(SIGPIPE, SIG_IGN);
	char twin_connects[128], got[128];
	struct conn twin = make(mode);
	connects(&twin, twin_connects, sizeof twin_connects);
	close(twin.cli);
	close(twin.srv);
	struct conn c = make(mode);
	fid_ready();
	fid_wait();
	FID_EXPECT(tcp_state(c.cli) == c.state, "TCP state %d, want %d", tcp_state(c.cli), c.state);
	connects(&c, got, sizeof got);
	FID_EXPECT(strcmp(got, twin_connects) == 0, "%s, want %s (as its twin)", got, twin_connects);
	check_stream(c.cli, "client", 1, TO_CLI);
	check_stream(c.srv, "peer", 2, TO_SRV);
	if (c.state == 8) {
		char b;
		FID_EXPECT(read(c.cli, &b, 1) == 0, "client: no end of file after the peer's FIN");
	}
	return fid_done();
}
