/*
 * sock_tcp_states MODE FAMILY (tcp4, tcp6, mapped): TCP sockets in the
 * states of a close, both ends in the process, with data queued:
 *   close_wait  the peer sent its FIN: one end in CLOSE_WAIT, the other
 *               in FIN_WAIT2;
 *   fin_wait1   our FIN waits behind data the peer has no room for;
 *   last_ack    the peer's FIN came, then ours, waiting behind data;
 *   reset       a connection reset by its peer (the error read): CLOSE,
 *               refused (getsockname shows a port given back);
 *   refused     a connect refused: disconnected by the kernel, a new socket;
 *   bound       bound to a port, never connected; unbound: never bound;
 *   closing     both FINs crossed: ours waits behind data the peer has no
 *               room for, the peer's came (CLOSING);
 *   syn_sent    a non-blocking connect to a listener outside the process
 *               whose accept queue is full: its SYNs go unanswered until
 *               the case tells that process (SIGUSR1) to accept;
 *   syn_recv    a listener whose connection TCP_DEFER_ACCEPT holds
 *               half-open (SYN_RECV, in no accept queue): refused by name.
 * After the restore each socket is in its state (TCP_INFO), reads every
 * byte once then end of file where the peer closed, and the connection
 * goes on to its end without a reset.
 */
#include "sock.h"
#include <sys/wait.h>

static int v6, mapped;
static pid_t outside; /* syn_sent: the listener's process */

static socklen_t addr_of(struct sockaddr_storage *ss, int port) { return loopback_addr(ss, port, v6, mapped); }

static int new_socket(void) { return inet_socket(SOCK_STREAM, v6, mapped); }


static int wait_state(int fd, int st) { return tcp_state_within(fd, st); }

/* pair connects a client to a listener whose accepted sockets get rcvbuf
 * (0: the default); the listener is closed. */
static void pair(int *cli, int *srv, int rcvbuf)
{
	struct sockaddr_storage ss;
	socklen_t l = addr_of(&ss, 0);
	int ls = new_socket();
	if (rcvbuf)
		SETOPT(ls, SOL_SOCKET, SO_RCVBUF, rcvbuf);
	FID_SETUP(bind(ls, (struct sockaddr *)&ss, l) == 0 && listen(ls, 4) == 0, "listen");
	FID_SETUP(getsockname(ls, (struct sockaddr *)&ss, &l) == 0, "getsockname");
	*cli = new_socket();
	FID_SETUP(connect(*cli, (struct sockaddr *)&ss, l) == 0, "connect");
	*srv = accept(ls, NULL, NULL);
	FID_SETUP(*srv >= 0, "accept");
	close(ls);
}

/* fill writes to fd until the peer's window and fd's buffer are full; it
 * returns how many bytes went. */
static size_t fill(int fd, unsigned seed)
{
	size_t n = 0;
	unsigned char buf[4096];
	for (int idle = 0; idle < 50;) {
		for (size_t i = 0; i < sizeof buf; i++)
			buf[i] = pattern(seed, n + i);
		ssize_t k = send(fd, buf, sizeof buf, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k > 0) {
			n += k;
			idle = 0;
		} else {
			idle++;
			usleep(1000);
		}
	}
	return n;
}

/* expect_stream reads n bytes of the pattern seed, then end of file if
 * eof: each byte once, no reset. */
static void expect_stream(int fd, const char *who, unsigned seed, size_t n, int eof)
{
	unsigned char buf[4096];
	size_t got = 0;
	while (got < n) {
		size_t want = n - got < sizeof buf ? n - got : sizeof buf;
		if (read_exact(fd, buf, want) != 0) {
			fid_fail("%s: read after %zu of %zu bytes: %s", who, got, n, strerror(errno));
			return;
		}
		for (size_t i = 0; i < want; i++)
			if (buf[i] != pattern(seed, got + i)) {
				fid_fail("%s: byte %zu differs", who, got + i);
				return;
			}
		got += want;
	}
	if (eof) {
		struct pollfd p = {fd, POLLIN, 0};
		poll(&p, 1, 10000);
		char c;
		ssize_t k = recv(fd, &c, 1, MSG_DONTWAIT);
		FID_EXPECT(k == 0, "%s: %zd at the end, want end of file (%s)", who, k, k < 0 ? strerror(errno) : "data");
	}
}

/* closed_behaviour is what a program sees of a closed socket: poll's
 * events, a read, a write, its name. */
static void closed_behaviour(int fd, char *out, size_t len)
{
	struct pollfd p = {fd, POLLIN | POLLOUT | POLLRDHUP, 0};
	poll(&p, 1, 0);
	char c;
	errno = 0;
	ssize_t r = recv(fd, &c, 1, MSG_DONTWAIT);
	int re = errno;
	errno = 0;
	ssize_t w = send(fd, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	int we = errno;
	struct sockaddr_storage ss;
	socklen_t l = sizeof ss;
	memset(&ss, 0, sizeof ss);
	getsockname(fd, (struct sockaddr *)&ss, &l);
	int port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
	snprintf(out, len, "state %d revents %#x read %zd/%d write %zd/%d port %d", tcp_state(fd), p.revents, r, re, w, we, port);
}

/* full_listener starts a process outside the case's tree (a grandchild,
 * reparented away) listening with a full accept queue; it accepts every
 * connection on SIGUSR1 and writes "hello" to each. It returns the
 * listener's address. */
static socklen_t full_listener(struct sockaddr_storage *ss)
{
	int p[2];
	FID_SETUP(pipe(p) == 0, "pipe");
	pid_t c = fork();
	FID_SETUP(c >= 0, "fork");
	if (c == 0) {
		if (fork() != 0)
			_exit(0);
		/* A session of its own: in the case's process group it would
		 * keep the case's PID in use, and the restore could not take
		 * it again. */
		setsid();
		close(p[0]);
		alarm(60);
		sigset_t usr1;
		sigemptyset(&usr1);
		sigaddset(&usr1, SIGUSR1);
		sigprocmask(SIG_BLOCK, &usr1, NULL);
		struct sockaddr_storage a;
		socklen_t l = addr_of(&a, 0);
		int ls = new_socket();
		if (bind(ls, (struct sockaddr *)&a, l) < 0 || listen(ls, 0) < 0 || getsockname(ls, (struct sockaddr *)&a, &l) < 0)
			_exit(1);
		for (int i = 0; i < 2; i++) { /* a backlog of 0 holds one */
			int f = new_socket();
			fcntl(f, F_SETFL, O_NONBLOCK);
			connect(f, (struct sockaddr *)&a, l);
		}
		usleep(50000);
		pid_t me = getpid();
		if (write(p[1], &me, sizeof me) != sizeof me || write(p[1], &a, sizeof a) != sizeof a)
			_exit(1);
		close(p[1]);
		int sig;
		sigwait(&usr1, &sig);
		for (;;) {
			int c2 = accept(ls, NULL, NULL);
			if (c2 >= 0 && write(c2, "hello", 5) != 5)
				_exit(1);
		}
	}
	close(p[1]);
	waitpid(c, NULL, 0);
	FID_SETUP(read(p[0], &outside, sizeof outside) == sizeof outside && read(p[0], ss, sizeof *ss) == sizeof *ss, "the outside listener");
	close(p[0]);
	return v6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 4, "usage: sock_tcp_states LOG MODE FAMILY");
	const char *mode = argv[2], *fam = argv[3];
	v6 = strcmp(fam, "tcp4") != 0;
	mapped = strcmp(fam, "mapped") == 0;
	int fd = -1, other = -1;
	size_t toFd = 0, toOther = 0;
	int closed = 0;
	char before[256] = "";
	if (strcmp(mode, "close_wait") == 0) {
		pair(&fd, &other, 0);
		toFd = 3000;
		unsigned char buf[3000];
		for (size_t i = 0; i < sizeof buf; i++)
			buf[i] = pattern(1, i);
		FID_SETUP(write_all(other, buf, sizeof buf) == 0, "write");
		FID_SETUP(shutdown(other, SHUT_WR) == 0, "shutdown");
		FID_SETUP(wait_state(fd, TCP_CLOSE_WAIT) && wait_state(other, TCP_FIN_WAIT2), "CLOSE_WAIT / FIN_WAIT2");
	} else if (strcmp(mode, "fin_wait1") == 0 || strcmp(mode, "last_ack") == 0) {
		pair(&fd, &other, 4096);
		SETOPT(fd, SOL_SOCKET, SO_SNDBUF, 4096);
		if (strcmp(mode, "last_ack") == 0) {
			FID_SETUP(shutdown(other, SHUT_WR) == 0, "shutdown");
			FID_SETUP(wait_state(fd, TCP_CLOSE_WAIT), "CLOSE_WAIT");
		}
		toOther = fill(fd, 2);
		FID_SETUP(shutdown(fd, SHUT_WR) == 0, "shutdown");
		FID_SETUP(wait_state(fd, strcmp(mode, "last_ack") == 0 ? TCP_LAST_ACK : TCP_FIN_WAIT1), "state after shutdown");
	} else if (strcmp(mode, "closing") == 0) {
		pair(&fd, &other, 4096);
		SETOPT(fd, SOL_SOCKET, SO_SNDBUF, 4096);
		toOther = fill(fd, 2);
		FID_SETUP(shutdown(fd, SHUT_WR) == 0, "shutdown");
		FID_SETUP(shutdown(other, SHUT_WR) == 0, "shutdown the peer");
		FID_SETUP(wait_state(fd, TCP_CLOSING), "CLOSING (state %d)", tcp_state(fd));
	} else if (strcmp(mode, "syn_sent") == 0) {
		struct sockaddr_storage ss;
		socklen_t l = full_listener(&ss);
		fd = new_socket();
		FID_SETUP(fcntl(fd, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
		FID_SETUP(connect(fd, (struct sockaddr *)&ss, l) < 0 && errno == EINPROGRESS, "connect in progress");
		usleep(20000);
		if (tcp_state(fd) != TCP_SYN_SENT) {
			kill(outside, SIGKILL);
			fid_skip("the SYN was answered: the accept queue did not fill");
		}
	} else if (strcmp(mode, "syn_recv") == 0) {
		struct sockaddr_storage ss;
		socklen_t l = addr_of(&ss, 0);
		fd = new_socket();
		SETOPT(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, 30);
		FID_SETUP(bind(fd, (struct sockaddr *)&ss, l) == 0 && listen(fd, 4) == 0, "listen");
		FID_SETUP(getsockname(fd, (struct sockaddr *)&ss, &l) == 0, "getsockname");
		other = new_socket();
		FID_SETUP(connect(other, (struct sockaddr *)&ss, l) == 0, "connect");
	} else if (strcmp(mode, "reset") == 0) {
		pair(&fd, &other, 0);
		struct linger lg = {1, 0};
		SETOPTP(other, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
		close(other);
		other = -1;
		FID_SETUP(wait_state(fd, TCP_CLOSE), "reset");
		char c;
		FID_SETUP(recv(fd, &c, 1, MSG_DONTWAIT) < 0 && errno == ECONNRESET, "ECONNRESET");
		closed = 1;
	} else if (strcmp(mode, "refused") == 0) {
		struct sockaddr_storage ss;
		socklen_t l = addr_of(&ss, 0);
		int ls = new_socket(); /* a port nobody listens on */
		FID_SETUP(bind(ls, (struct sockaddr *)&ss, l) == 0, "bind");
		FID_SETUP(getsockname(ls, (struct sockaddr *)&ss, &l) == 0, "getsockname");
		fd = new_socket();
		FID_SETUP(connect(fd, (struct sockaddr *)&ss, l) < 0 && errno == ECONNREFUSED, "connect refused");
		close(ls);
		closed = 1;
	} else if (strcmp(mode, "bound") == 0 || strcmp(mode, "unbound") == 0) {
		fd = new_socket();
		if (strcmp(mode, "bound") == 0) {
			struct sockaddr_storage ss;
			socklen_t l = addr_of(&ss, 0);
			FID_SETUP(bind(fd, (struct sockaddr *)&ss, l) == 0, "bind");
		}
		closed = 1;
	} else {
		FID_SETUP(0, "unknown mode %s", mode);
	}
	int stFd = tcp_state(fd), stOther = other >= 0 ? tcp_state(other) : -1;
	if (closed)
		closed_behaviour(fd, before, sizeof before);
	fid_ready();
	fid_wait();
	FID_EXPECT(tcp_state(fd) == stFd, "state %d, want %d", tcp_state(fd), stFd);
	if (other >= 0)
		FID_EXPECT(tcp_state(other) == stOther, "peer state %d, want %d", tcp_state(other), stOther);
	if (closed) {
		char after[256];
		closed_behaviour(fd, after, sizeof after);
		FID_EXPECT(strcmp(before, after) == 0, "closed socket: %s, was %s", after, before);
		if (strcmp(mode, "bound") == 0) {
			/* The port is still taken. */
			struct sockaddr_storage ss;
			socklen_t l = sizeof ss;
			getsockname(fd, (struct sockaddr *)&ss, &l);
			int s2 = new_socket();
			FID_EXPECT(bind(s2, (struct sockaddr *)&ss, l) < 0 && errno == EADDRINUSE, "the bound port is free after the restore");
			close(s2);
		}
		return fid_done();
	}
	if (strcmp(mode, "syn_sent") == 0) {
		/* Room in the queue: the next SYN is answered, one connection. */
		kill(outside, SIGUSR1);
		struct pollfd p = {fd, POLLOUT, 0};
		FID_EXPECT(poll(&p, 1, 15000) == 1, "not connected in 15 s (state %d)", tcp_state(fd));
		int err = 0;
		socklen_t l = sizeof err;
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
		FID_EXPECT(err == 0, "connect: %s", strerror(err));
		char b[5];
		FID_EXPECT(read_exact(fd, b, 5) == 0 && memcmp(b, "hello", 5) == 0, "no hello from the listener");
		kill(outside, SIGKILL);
		return fid_done();
	}
	if (strcmp(mode, "syn_recv") == 0) {
		/* Untouched: the client sends, the listener accepts it. */
		FID_EXPECT(write_all(other, "x", 1) == 0, "client write");
		struct pollfd p = {fd, POLLIN, 0};
		FID_EXPECT(poll(&p, 1, 10000) == 1, "the deferred connection never became acceptable");
		int c = accept(fd, NULL, NULL);
		char b;
		FID_EXPECT(c >= 0 && read_exact(c, &b, 1) == 0 && b == 'x', "accept and read");
		return fid_done();
	}
	/* Every byte once, each FIN once, then the connection ends. */
	if (strcmp(mode, "close_wait") == 0) {
		expect_stream(fd, "CLOSE_WAIT end", 1, toFd, 1);
		FID_EXPECT(write_all(fd, "bye", 3) == 0, "CLOSE_WAIT end: write");
		char b[3];
		FID_EXPECT(read_exact(other, b, 3) == 0 && memcmp(b, "bye", 3) == 0, "FIN_WAIT2 end: read");
		FID_EXPECT(shutdown(fd, SHUT_WR) == 0, "shutdown");
		expect_stream(other, "FIN_WAIT2 end", 0, 0, 1);
	} else {
		expect_stream(other, "peer", 2, toOther, 1);
		if (strcmp(mode, "fin_wait1") == 0) {
			FID_EXPECT(wait_state(fd, TCP_FIN_WAIT2), "FIN not acknowledged: state %d", tcp_state(fd));
			FID_EXPECT(shutdown(other, SHUT_WR) == 0, "shutdown");
			expect_stream(fd, "FIN_WAIT1 end", 0, 0, 1);
		}
		if (strcmp(mode, "closing") == 0)
			expect_stream(fd, "CLOSING end", 0, 0, 1);
	}
	FID_EXPECT(wait_state(fd, TCP_CLOSE), "connection end: state %d", tcp_state(fd));
	int err = 0;
	socklen_t l = sizeof err;
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
	FID_EXPECT(err == 0, "SO_ERROR %s", strerror(err));
	return fid_done();
}
