/*
 * sock_tcp_closed MODE FAMILY (tcp4, tcp6, mapped): a TCP socket in state
 * CLOSE after a connection, held open by the process:
 *   reset        reset by its peer, the error read (SO_ERROR);
 *   reset_data   the same with bytes received and not read;
 *   reset_bound  bound to a port before connecting (it keeps the port);
 *   reset_accepted  accepted from a listener on a port of its own, reset;
 *   fin_active   both FINs, ours first (TIME_WAIT handed to the kernel);
 *   fin_rdwr     shutdown(SHUT_RDWR), then the peer closes;
 *   fin_passive  both FINs, the peer's first (LAST_ACK, then CLOSE);
 *   reset_nb     reset after a non-blocking connect never called again
 *                (the socket layer still calls it connecting: connect()
 *                gives ECONNABORTED and disconnects it);
 *   reset_nb_shut the same, then shut down (disconnecting: connect() says
 *                EINVAL);
 *   refused_nb   a non-blocking connect refused, its error read;
 *   refused_nb_shut the same, then shut down (disconnecting);
 *   refused      a blocking connect refused (the kernel disconnected it);
 *   disconnected connect(AF_UNSPEC) after a connection (disconnected_bound:
 *                bound to an address first, which stays);
 *   reset_pending  reset, the error not read yet: refused by name.
 * A twin socket made the same way is used up before the dump (SO_ERROR,
 * two reads, a write, connect, listen); after the restore the socket must
 * show what it showed (state, poll, getsockname, getpeername, SO_PEERNAME,
 * TCP_MAXSEG, the tcp_info options, bytes queued, whether another socket
 * can bind its port) and, used up, give what the twin gave.
 */
#include "sock.h"
#include <sys/ioctl.h>

static int v6, mapped;

static socklen_t addr_of(struct sockaddr_storage *ss, int port) { return loopback_addr(ss, port, v6, mapped); }

static int port_of(const struct sockaddr_storage *ss)
{
	return ntohs(ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port : ((const struct sockaddr_in *)ss)->sin_port);
}

static int new_socket(void) { return inet_socket(SOCK_STREAM, v6, mapped); }


static void wait_state(int fd, int st)
{
	FID_SETUP(tcp_state_within(fd, st), "TCP state %d, want %d", tcp_state(fd), st);
}

/* free_port is a port nobody holds now. */
static int free_port(void)
{
	struct sockaddr_storage ss;
	socklen_t l = addr_of(&ss, 0);
	int fd = new_socket();
	FID_SETUP(bind(fd, (struct sockaddr *)&ss, l) == 0 && getsockname(fd, (struct sockaddr *)&ss, &l) == 0, "bind");
	close(fd);
	return port_of(&ss);
}

/* listener listens on a port of its own (explicit) or the kernel's. */
static int listener(int explicit, struct sockaddr_storage *ss, socklen_t *l)
{
	*l = addr_of(ss, explicit ? free_port() : 0);
	int ls = new_socket();
	SETOPT(ls, SOL_SOCKET, SO_REUSEADDR, 1);
	FID_SETUP(bind(ls, (struct sockaddr *)ss, *l) == 0 && listen(ls, 4) == 0, "listen");
	FID_SETUP(getsockname(ls, (struct sockaddr *)ss, l) == 0, "getsockname");
	return ls;
}

static void reset_by(int fd, int peer)
{
	struct linger lg = {1, 0};
	SETOPTP(peer, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	close(peer);
	wait_state(fd, 7);
}

static void read_error(int fd)
{
	int e = 0;
	socklen_t l = sizeof e;
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
}

/* make builds one closed socket of the mode. */
static int make(const char *mode)
{
	struct sockaddr_storage ss;
	socklen_t l;
	int fd, peer, ls;
	if (strncmp(mode, "reset", 5) == 0 && strcmp(mode, "reset_accepted") != 0) {
		ls = listener(0, &ss, &l);
		fd = new_socket();
		if (strcmp(mode, "reset_bound") == 0) {
			struct sockaddr_storage b;
			socklen_t bl = addr_of(&b, free_port());
			FID_SETUP(bind(fd, (struct sockaddr *)&b, bl) == 0, "bind");
		}
		if (strncmp(mode, "reset_nb", 8) == 0) {
			FID_SETUP(fcntl(fd, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
			FID_SETUP(connect(fd, (struct sockaddr *)&ss, l) < 0 && errno == EINPROGRESS, "connect in progress");
			wait_state(fd, 1);
			FID_SETUP(fcntl(fd, F_SETFL, 0) == 0, "O_NONBLOCK off");
		} else {
			FID_SETUP(connect(fd, (struct sockaddr *)&ss, l) == 0, "connect");
		}
		peer = accept(ls, NULL, NULL);
		FID_SETUP(peer >= 0, "accept");
		close(ls);
		if (strcmp(mode, "reset_data") == 0) {
			FID_SETUP(write_all(peer, "not read yet", 12) == 0, "write");
			for (int i = 0; i < 5000; i++) {
				int n = 0;
				if (ioctl(fd, FIONREAD, &n) == 0 && n == 12)
					break;
				usleep(1000);
			}
		}
		reset_by(fd, peer);
		if (strcmp(mode, "reset_pending") != 0)
			read_error(fd);
		if (strcmp(mode, "reset_nb_shut") == 0) /* connecting: disconnecting now */
			FID_SETUP(shutdown(fd, SHUT_RDWR) < 0 && errno == ENOTCONN, "shutdown");
		return fd;
	}
	if (strcmp(mode, "reset_accepted") == 0) {
		ls = listener(1, &ss, &l);
		peer = new_socket();
		FID_SETUP(connect(peer, (struct sockaddr *)&ss, l) == 0, "connect");
		fd = accept(ls, NULL, NULL);
		FID_SETUP(fd >= 0, "accept");
		close(ls);
		reset_by(fd, peer);
		read_error(fd);
		return fd;
	}
	if (strncmp(mode, "fin_", 4) == 0) {
		ls = listener(0, &ss, &l);
		fd = new_socket();
		FID_SETUP(connect(fd, (struct sockaddr *)&ss, l) == 0, "connect");
		peer = accept(ls, NULL, NULL);
		FID_SETUP(peer >= 0, "accept");
		close(ls);
		FID_SETUP(write_all(peer, "last words", 10) == 0, "write");
		if (strcmp(mode, "fin_passive") == 0) {
			FID_SETUP(shutdown(peer, SHUT_WR) == 0, "shutdown");
			wait_state(fd, 8);
			FID_SETUP(shutdown(fd, SHUT_WR) == 0, "shutdown");
			wait_state(fd, 7);
			close(peer);
			return fd;
		}
		for (int i = 0; i < 5000; i++) {
			int n = 0;
			if (ioctl(fd, FIONREAD, &n) == 0 && n == 10)
				break;
			usleep(1000);
		}
		FID_SETUP(shutdown(fd, strcmp(mode, "fin_rdwr") == 0 ? SHUT_RDWR : SHUT_WR) == 0, "shutdown");
		wait_state(fd, 5);
		close(peer);
		wait_state(fd, 7);
		return fd;
	}
	if (strncmp(mode, "refused", 7) == 0) {
		ls = new_socket(); /* a port nobody listens on */
		l = addr_of(&ss, 0);
		FID_SETUP(bind(ls, (struct sockaddr *)&ss, l) == 0 && getsockname(ls, (struct sockaddr *)&ss, &l) == 0, "bind");
		fd = new_socket();
		if (strncmp(mode, "refused_nb", 10) == 0) {
			FID_SETUP(fcntl(fd, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
			FID_SETUP(connect(fd, (struct sockaddr *)&ss, l) < 0 && errno == EINPROGRESS, "connect in progress");
			wait_state(fd, 7);
			read_error(fd);
			FID_SETUP(fcntl(fd, F_SETFL, 0) == 0, "O_NONBLOCK off");
			if (strcmp(mode, "refused_nb_shut") == 0) /* connecting: disconnecting now */
				FID_SETUP(shutdown(fd, SHUT_RDWR) < 0 && errno == ENOTCONN, "shutdown");
		} else {
			FID_SETUP(connect(fd, (struct sockaddr *)&ss, l) < 0 && errno == ECONNREFUSED, "connect refused");
		}
		close(ls);
		return fd;
	}
	if (strncmp(mode, "disconnected", 12) == 0) {
		ls = listener(0, &ss, &l);
		fd = new_socket();
		if (strcmp(mode, "disconnected_bound") == 0) { /* an address, the port bind's choice */
			struct sockaddr_storage b;
			socklen_t bl = addr_of(&b, 0);
			FID_SETUP(bind(fd, (struct sockaddr *)&b, bl) == 0, "bind");
		}
		FID_SETUP(connect(fd, (struct sockaddr *)&ss, l) == 0, "connect");
		peer = accept(ls, NULL, NULL);
		close(ls);
		struct sockaddr un = {.sa_family = AF_UNSPEC};
		FID_SETUP(connect(fd, &un, sizeof un) == 0, "disconnect");
		read_error(fd);
		close(peer);
		return fd;
	}
	FID_SETUP(0, "unknown mode %s", mode);
	return -1;
}

/* seen is what a program sees of a closed socket without changing it. */
static void seen(int fd, char *out, size_t len)
{
	struct pollfd p = {fd, POLLIN | POLLOUT | POLLRDHUP | POLLPRI, 0};
	poll(&p, 1, 0);
	struct sockaddr_storage name, peer, pn;
	socklen_t l = sizeof name;
	memset(&name, 0, sizeof name);
	getsockname(fd, (struct sockaddr *)&name, &l);
	char a[INET6_ADDRSTRLEN] = "";
	inet_ntop(name.ss_family, name.ss_family == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&name)->sin6_addr : (void *)&((struct sockaddr_in *)&name)->sin_addr, a, sizeof a);
	l = sizeof peer;
	errno = 0;
	int gp = getpeername(fd, (struct sockaddr *)&peer, &l);
	int gpe = errno;
	l = v6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	memset(&pn, 0, sizeof pn);
	errno = 0;
	int sp = getsockopt(fd, SOL_SOCKET, SO_PEERNAME, &pn, &l);
	int spe = errno;
	char pa[INET6_ADDRSTRLEN] = "";
	if (sp == 0)
		inet_ntop(pn.ss_family, pn.ss_family == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&pn)->sin6_addr : (void *)&((struct sockaddr_in *)&pn)->sin_addr, pa, sizeof pa);
	int mss = 0;
	l = sizeof mss;
	getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &l);
	struct tcp_info ti;
	l = sizeof ti;
	memset(&ti, 0, sizeof ti);
	getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l);
	int inq = -1;
	ioctl(fd, FIONREAD, &inq);
	snprintf(out, len, "state %d revents %#x name %s:%d getpeername %d/%d SO_PEERNAME %d/%d %s:%d TCP_MAXSEG %d options %#x wscale %d/%d inq %d",
		 ti.tcpi_state, p.revents, a, port_of(&name), gp, gpe, sp, spe, pa, sp == 0 ? port_of(&pn) : 0, mss,
		 ti.tcpi_options, ti.tcpi_snd_wscale, ti.tcpi_rcv_wscale, inq);
}

/* port_taken says whether another socket can bind fd's port. */
static int port_taken(int fd)
{
	struct sockaddr_storage name;
	socklen_t l = sizeof name;
	getsockname(fd, (struct sockaddr *)&name, &l);
	if (port_of(&name) == 0)
		return -1;
	int s2 = new_socket();
	int r = bind(s2, (struct sockaddr *)&name, l) < 0 && errno == EADDRINUSE;
	close(s2);
	return r;
}

/* use uses a closed socket up: what SO_ERROR, two reads, a write, a
 * connect (to an address of another family) twice and listen give. */
static void use(int fd, char *out, size_t len)
{
	int e = 0;
	socklen_t l = sizeof e;
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
	size_t n = snprintf(out, len, "SO_ERROR %d", e);
	for (int i = 0; i < 2 && n < len; i++) {
		char buf[64];
		errno = 0;
		ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
		n += snprintf(out + n, len - n, "; recv %zd %.*s/%d", r, r > 0 ? (int)r : 0, buf, r < 0 ? errno : 0);
	}
	errno = 0;
	ssize_t w = send(fd, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n < len)
		n += snprintf(out + n, len - n, "; send %zd/%d", w, w < 0 ? errno : 0);
	struct sockaddr_un un = {.sun_family = AF_UNIX, .sun_path = "/nonexistent"};
	errno = 0;
	int c = connect(fd, (struct sockaddr *)&un, sizeof un);
	if (n < len)
		n += snprintf(out + n, len - n, "; connect %d/%d", c, c < 0 ? errno : 0);
	errno = 0;
	c = connect(fd, (struct sockaddr *)&un, sizeof un);
	if (n < len)
		n += snprintf(out + n, len - n, " then %d/%d", c, c < 0 ? errno : 0);
	errno = 0;
	int li = listen(fd, 1);
	if (n < len)
		snprintf(out + n, len - n, "; listen %d/%d", li, li < 0 ? errno : 0);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 4, "usage: sock_tcp_closed LOG MODE FAMILY");
	const char *mode = argv[2], *fam = argv[3];
	v6 = strcmp(fam, "tcp4") != 0;
	mapped = strcmp(fam, "mapped") == 0;
	signal(SIGPIPE, SIG_IGN);
	char twin_seen[512], twin_used[512], before[512];
	int twin = make(mode);
	seen(twin, twin_seen, sizeof twin_seen);
	use(twin, twin_used, sizeof twin_used);
	close(twin);
	int fd = make(mode);
	seen(fd, before, sizeof before);
	/* The twin differs only by its ports. */
	FID_SETUP(strlen(before) > 0, "seen");
	int taken = port_taken(fd);
	fid_ready();
	fid_wait();
	char after[512], used[512];
	seen(fd, after, sizeof after);
	FID_EXPECT(strcmp(before, after) == 0, "closed socket: %s, was %s", after, before);
	/* A TIME_WAIT the connection left holds the port: network state,
	 * which a restore ends (see the inventory). */
	int compare = 1;
	if (strcmp(mode, "fin_active") != 0 && strcmp(mode, "fin_rdwr") != 0) {
		int now = port_taken(fd);
		if (now && !taken) {
			/* Taken since: by this socket (it cannot bind, EINVAL),
			 * or by another program of the machine. */
			struct sockaddr_storage name;
			socklen_t l = sizeof name;
			getsockname(fd, (struct sockaddr *)&name, &l);
			errno = 0;
			int b = bind(fd, (struct sockaddr *)&name, l);
			FID_EXPECT(!(b < 0 && errno == EINVAL), "the socket holds the port it had given back");
			compare = b < 0; /* bound now: no longer as its twin */
		} else {
			FID_EXPECT(now == taken, "another socket %s bind the port, %s before", now ? "cannot" : "can", taken ? "could not" : "could");
		}
	}
	use(fd, used, sizeof used);
	if (compare)
		FID_EXPECT(strcmp(used, twin_used) == 0, "used up: %s, want %s (as its twin)", used, twin_used);
	return fid_done();
}
