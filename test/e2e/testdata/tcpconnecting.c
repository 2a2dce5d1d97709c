/*
 * tcpconnecting LOG ADDR PORT: a TCP connection to a peer outside the dump
 * (the test; with PORT 0, a listener of the program's own on ADDR, whose
 * accepted end is the peer, in the dump too; PORT -1: the same, the peer
 * then shut for writing, our end in CLOSE_WAIT) made by a non-blocking connect, as a Go program or an event
 * loop makes it: connect (EINPROGRESS), poll until writable, SO_ERROR 0,
 * and no connect() call again, so that the socket layer still calls it
 * connecting. It sends "hello" (which the peer does not read before the
 * dump) and says ready. After the restore (SIGTERM, blocked, is the
 * signal to check) connect() must return 0, then EISCONN, as it would
 * have; it reads "world", which the peer had sent before the dump,
 * sends "after" and writes PASS or FAIL.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "say.h"

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	logf = fopen(argv[1], "a");
	sigset_t term;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, NULL);
	say("start pid=%d", getpid());
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
	inet_pton(AF_INET, argv[2], &a.sin_addr);
	int ls = -1, peer = -1, close_wait = atoi(argv[3]) < 0;
	if (close_wait)
		a.sin_port = 0;
	if (a.sin_port == 0) {
		socklen_t al = sizeof a;
		ls = socket(AF_INET, SOCK_STREAM, 0);
		if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 1) < 0 || getsockname(ls, (struct sockaddr *)&a, &al) < 0) {
			say("FAIL: setup: listen: %s", strerror(errno));
			return 1;
		}
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 || errno != EINPROGRESS) {
		say("FAIL: setup: connect: %s", strerror(errno));
		return 1;
	}
	struct pollfd p = {fd, POLLOUT, 0};
	int e = 0;
	socklen_t l = sizeof e;
	if (poll(&p, 1, 10000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0 || e != 0) {
		say("FAIL: setup: connect did not complete: %s", strerror(e));
		return 1;
	}
	if (write(fd, "hello", 5) != 5) {
		say("FAIL: setup: write: %s", strerror(errno));
		return 1;
	}
	if (ls >= 0) {
		peer = accept(ls, NULL, NULL);
		close(ls);
		if (peer < 0 || write(peer, "world", 5) != 5) {
			say("FAIL: setup: accept: %s", strerror(errno));
			return 1;
		}
		if (close_wait)
			shutdown(peer, SHUT_WR);
	}
	say("ready");
	int sig;
	sigwait(&term, &sig);
	errno = 0;
	int c1 = connect(fd, (struct sockaddr *)&a, sizeof a);
	int e1 = c1 < 0 ? errno : 0;
	errno = 0;
	int c2 = connect(fd, (struct sockaddr *)&a, sizeof a);
	int e2 = c2 < 0 ? errno : 0;
	if (c1 != 0 || c2 != -1 || e2 != EISCONN)
		fail("connect %d/%d then %d/%d, want 0 then EISCONN", c1, e1, c2, e2);
	char buf[16];
	size_t got = 0;
	while (got < 5) {
		struct pollfd q = {fd, POLLIN, 0};
		if (poll(&q, 1, 10000) != 1) {
			fail("read: nothing for 10 s after %zu bytes", got);
			break;
		}
		ssize_t k = read(fd, buf + got, 5 - got);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (k <= 0) {
			fail("read after %zu bytes: %zd %s", got, k, strerror(errno));
			break;
		}
		got += k;
	}
	if (got == 5 && memcmp(buf, "world", 5) != 0)
		fail("read %.5s, want world", buf);
	if (write(fd, "after", 5) != 5)
		fail("write: %s", strerror(errno));
	if (peer >= 0) { /* the peer reads what the test would */
		char pb[10];
		size_t pg = 0;
		while (pg < 10) {
			struct pollfd q = {peer, POLLIN, 0};
			if (poll(&q, 1, 10000) != 1)
				break;
			ssize_t k = read(peer, pb + pg, 10 - pg);
			if (k <= 0)
				break;
			pg += k;
		}
		if (pg != 10 || memcmp(pb, "helloafter", 10) != 0)
			fail("peer read %zu bytes %.*s, want helloafter", pg, (int)pg, pb);
	}
	say("checked");
	if (why[0])
		say("FAIL: %s", why);
	else
		say("PASS");
	pause();
	return 0;
}
