/*
 * tcpstate LOG MODE ADDR PORT: a TCP connection to a peer outside the dump
 * (the test), brought into a state before the dump; after the restore
 * (SIGTERM, blocked, is the signal to check) it checks from inside that
 * the state and the timestamp clock are as they were, says "checked" (the
 * peer waits for it before it moves), then plays its part
 * of the end of the connection and writes PASS or FAIL.
 *   close_wait  the peer sent 3000 bytes and its FIN: read them, end of
 *               file, then send "bye" and close;
 *   fin_wait2   we sent "data" and our FIN, acknowledged: read "more",
 *               then end of file;
 *   fin_wait1   we filled the peer's window, then our FIN: the peer reads
 *               everything and our FIN; end of file when it closes;
 *   syn_sent    our SYN is not answered (the listener's queue is full):
 *               once connected, read "hi";
 *   syn_answered the same, but the queue has room by the time of the
 *               restore: the SYN the restore sends is answered, and
 *               none is sent again (TCP_INFO tcpi_total_retrans 0);
 *   tcp_close   an established connection restored with --tcp-close: in
 *               state CLOSE, read gives end of file, write EPIPE.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "say.h"

static int state_of(int fd)
{
	struct tcp_info ti;
	socklen_t l = sizeof ti;
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0)
		return -1;
	return ti.tcpi_state;
}

static int wait_state(int fd, int st)
{
	for (int i = 0; i < 10000 && state_of(fd) != st; i++)
		usleep(1000);
	return state_of(fd) == st;
}

static unsigned char pattern(size_t i) { return (unsigned char)(i * 2654435761u >> 7); }

/* expect reads n bytes of the pattern (or of s if given), then end of
 * file if eof. */
static void expect(int fd, size_t n, const char *s, int eof)
{
	size_t got = 0;
	unsigned char buf[4096];
	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 10000) != 1) {
			fail("read: nothing for 10 s after %zu bytes", got);
			return;
		}
		ssize_t k = read(fd, buf, sizeof buf);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (k < 0) {
			fail("read after %zu bytes: %s", got, strerror(errno));
			return;
		}
		if (k == 0) {
			if (got != n)
				fail("end of file after %zu of %zu bytes", got, n);
			else if (!eof)
				fail("end of file, not expected");
			return;
		}
		for (ssize_t i = 0; i < k; i++)
			if (got + i >= n || buf[i] != (s ? (unsigned char)s[got + i] : pattern(got + i))) {
				fail("byte %zu differs or is too many", got + i);
				return;
			}
		got += k;
		if (got == n && !eof)
			return;
	}
}

int main(int argc, char **argv)
{
	if (argc != 5)
		return 2;
	logf = fopen(argv[1], "a");
	const char *mode = argv[2];
	sigset_t term;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, NULL);
	say("start pid=%d", getpid());
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	socklen_t l;
	int v6 = strchr(argv[3], ':') != NULL;
	if (v6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(atoi(argv[4]));
		inet_pton(AF_INET6, argv[3], &a->sin6_addr);
		l = sizeof *a;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		a->sin_family = AF_INET;
		a->sin_port = htons(atoi(argv[4]));
		inet_pton(AF_INET, argv[3], &a->sin_addr);
		l = sizeof *a;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM, 0);
	int want = -1;
	int syn = strcmp(mode, "syn_sent") == 0 || strcmp(mode, "syn_answered") == 0;
	if (syn) {
		fcntl(fd, F_SETFL, O_NONBLOCK);
		if (connect(fd, (struct sockaddr *)&ss, l) == 0 || errno != EINPROGRESS) {
			say("FAIL: setup: connect: %s", strerror(errno));
			return 1;
		}
		usleep(100000);
		want = 2;
	} else {
		if (strcmp(mode, "fin_wait1") == 0) {
			int v = 4096;
			setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
		}
		if (connect(fd, (struct sockaddr *)&ss, l) < 0) {
			say("FAIL: setup: connect: %s", strerror(errno));
			return 1;
		}
	}
	size_t sent = 0;
	if (strcmp(mode, "close_wait") == 0) {
		want = TCP_CLOSE_WAIT;
	} else if (strcmp(mode, "tcp_close") == 0) {
		if (write(fd, "unacked?", 8) != 8) {
			say("FAIL: setup: write");
			return 1;
		}
		want = TCP_ESTABLISHED;
	} else if (strcmp(mode, "fin_wait2") == 0) {
		if (write(fd, "data", 4) != 4 || shutdown(fd, SHUT_WR) < 0) {
			say("FAIL: setup: write");
			return 1;
		}
		want = TCP_FIN_WAIT2;
	} else if (strcmp(mode, "fin_wait1") == 0) {
		unsigned char buf[4096];
		for (int idle = 0; idle < 100;) {
			for (size_t i = 0; i < sizeof buf; i++)
				buf[i] = pattern(sent + i);
			ssize_t k = send(fd, buf, sizeof buf, MSG_DONTWAIT);
			if (k > 0)
				sent += k, idle = 0;
			else
				idle++, usleep(1000);
		}
		shutdown(fd, SHUT_WR);
		want = TCP_FIN_WAIT1;
	}
	if (!wait_state(fd, want)) {
		say("FAIL: setup: state %d, want %d", state_of(fd), want);
		return 1;
	}
	struct sockaddr_storage me;
	socklen_t ml = sizeof me;
	getsockname(fd, (struct sockaddr *)&me, &ml);
	int port = ntohs(me.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&me)->sin6_port : ((struct sockaddr_in *)&me)->sin_port);
	unsigned ts0 = 0;
	socklen_t tl = sizeof ts0;
	getsockopt(fd, IPPROTO_TCP, TCP_TIMESTAMP, &ts0, &tl);
	say("ready state=%d port=%d sent=%zu", want, port, sent);
	while (sigwaitinfo(&term, NULL) != SIGTERM)
		;
	/* From inside: the same state, the timestamp clock went on from
	 * where it was. */
	int closed = strcmp(mode, "tcp_close") == 0;
	int answered = strcmp(mode, "syn_answered") == 0;
	if (answered && state_of(fd) == TCP_ESTABLISHED)
		; /* the answer to the restore's SYN came already */
	else if (state_of(fd) != (closed ? TCP_CLOSE : want))
		fail("state %d, want %d", state_of(fd), closed ? TCP_CLOSE : want);
	unsigned ts1 = 0;
	tl = sizeof ts1;
	if (want != 2 && !closed) {
		getsockopt(fd, IPPROTO_TCP, TCP_TIMESTAMP, &ts1, &tl);
		if ((int)(ts1 - ts0) < 0 || ts1 - ts0 > 60000)
			fail("TCP_TIMESTAMP %u, was %u", ts1, ts0);
	}
	say("checked");
	if (strcmp(mode, "close_wait") == 0) {
		expect(fd, 3000, NULL, 1);
		if (write(fd, "bye", 3) != 3)
			fail("write: %s", strerror(errno));
		shutdown(fd, SHUT_WR);
	} else if (strcmp(mode, "fin_wait2") == 0) {
		expect(fd, 4, "more", 1);
	} else if (strcmp(mode, "fin_wait1") == 0) {
		/* Our FIN acknowledged (FIN_WAIT2), then the peer's (closed). */
		for (int i = 0; i < 10000 && state_of(fd) == TCP_FIN_WAIT1; i++)
			usleep(1000);
		if (state_of(fd) != TCP_FIN_WAIT2 && state_of(fd) != TCP_CLOSE)
			fail("our FIN not acknowledged: state %d", state_of(fd));
		expect(fd, 0, NULL, 1);
	} else if (closed) {
		char c;
		ssize_t r = read(fd, &c, 1);
		if (r != 0)
			fail("read: %zd (%s), want end of file", r, r < 0 ? strerror(errno) : "data");
		if (send(fd, "x", 1, MSG_NOSIGNAL) != -1 || errno != EPIPE)
			fail("write: %s, want EPIPE", strerror(errno));
	} else if (syn) {
		struct pollfd p = {fd, POLLOUT, 0};
		poll(&p, 1, 20000);
		int err = 0;
		socklen_t el = sizeof err;
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
		if (err || state_of(fd) != TCP_ESTABLISHED)
			fail("connect: %s, state %d", strerror(err), state_of(fd));
		fcntl(fd, F_SETFL, 0);
		expect(fd, 2, "hi", 0);
		struct tcp_info ti;
		socklen_t til = sizeof ti;
		if (answered && getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &til) == 0 && ti.tcpi_total_retrans != 0)
			fail("%u segments sent again since the restore: its first SYN was lost", ti.tcpi_total_retrans);
	}
	int err = 0;
	socklen_t el = sizeof err;
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
	if (err)
		fail("SO_ERROR %s", strerror(err));
	if (why[0])
		say("FAIL: %s", why);
	else
		say("PASS");
	close(fd);
	return 0;
}
