/*
 * ringjob: one process of a parallel job of N processes forming a ring
 * over TCP (the test of group checkpoint, parity recovery and migration).
 *
 *   ringjob LOG INDEX N LISTEN_IP:PORT RIGHT_IP:PORT STOPFILE DELAY_MS MEM_MB
 *
 * Process INDEX listens on LISTEN, connects to its right-hand neighbour
 * RIGHT (retrying until it is up) and accepts its left-hand one. A token
 * {round, sum} goes around the ring: every process, on receiving it, mixes
 * its index and the round into sum (mix below, replayed by the test),
 * checks its own memory, logs a line and passes it on after DELAY_MS.
 * Process 0 starts round 1 and, when the token comes back, starts the next
 * round — unless STOPFILE exists: then it sends a stop token around and
 * logs "done rounds=R sum=S". Every process exits 0 after forwarding stop.
 *
 * Log lines (one write(2) each, to LOG opened once with O_APPEND):
 *   start pid=P index=I
 *   tick K round=R sum=S pid=P lport=L rport=Q
 *       K counts the tokens this process handled: 1, 2, 3, ... with no gap
 *       and no repeat; L and Q are the local ports of the connections to
 *       the left and right neighbours (they must never change)
 *   done rounds=R sum=S        (process 0)
 *   bye K                      (every process)
 *   FAIL WHAT                  (and exit 1)
 *
 * MEM_MB of heap holds a pattern that changes with every token and is
 * checked on every token: a restore that loses or mixes pages shows.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int logfd;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
	va_end(ap);
	buf[n++] = '\n';
	if (write(logfd, buf, n) != n)
		exit(3);
}

#define FAIL(...) do { logf_("FAIL " __VA_ARGS__); exit(1); } while (0)

static uint64_t mix(uint64_t sum, uint64_t index, uint64_t round)
{
	uint64_t x = sum ^ ((index + 1) * 0x9E3779B97F4A7C15ull) ^ (round << 17);
	x ^= x >> 31;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 29;
	return x;
}

static struct sockaddr_in parse(const char *s)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	char host[64];
	const char *colon = strrchr(s, ':');
	if (!colon || colon - s >= (int)sizeof host)
		FAIL("bad address %s", s);
	memcpy(host, s, colon - s);
	host[colon - s] = 0;
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		FAIL("bad address %s", s);
	a.sin_port = htons(atoi(colon + 1));
	return a;
}

static int lport(int fd)
{
	struct sockaddr_in a;
	socklen_t l = sizeof a;
	getsockname(fd, (struct sockaddr *)&a, &l);
	return ntohs(a.sin_port);
}

static void xread(int fd, void *p, size_t n)
{
	while (n) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			FAIL("read from the left neighbour: %s", r == 0 ? "EOF" : strerror(errno));
		p = (char *)p + r;
		n -= r;
	}
}

static void xwrite(int fd, const void *p, size_t n)
{
	while (n) {
		ssize_t r = write(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			FAIL("write to the right neighbour: %s", strerror(errno));
		p = (const char *)p + r;
		n -= r;
	}
}

/* checksum is position-dependent: lost, zeroed or swapped pages change it. */
static uint64_t checksum(const uint64_t *mem, size_t words)
{
	uint64_t c = 0;
	for (size_t i = 0; i < words; i++)
		c += mem[i] * (2 * i + 1);
	return c;
}

static uint64_t expect; /* what checksum(mem) must be */

/* touch changes one word per token (tracking expect) and checks the whole
 * buffer against expect. */
static void touch(uint64_t *mem, size_t words, uint64_t handled, uint64_t sum)
{
	size_t i = (handled * 7919) % words;
	uint64_t old = mem[i], new = old ^ sum;
	mem[i] = new;
	expect += (new - old) * (2 * i + 1);
	if (checksum(mem, words) != expect)
		FAIL("memory checksum wrong after token %llu", (unsigned long long)handled);
}

struct token {
	uint64_t round, sum;
};

#define STOP UINT64_MAX

int main(int argc, char **argv)
{
	if (argc != 9) {
		fprintf(stderr, "usage: ringjob LOG INDEX N LISTEN RIGHT STOPFILE DELAY_MS MEM_MB\n");
		return 2;
	}
	logfd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (logfd < 0)
		return 3;
	int index = atoi(argv[2]), n = atoi(argv[3]);
	struct sockaddr_in me = parse(argv[4]), right = parse(argv[5]);
	if (n < 2 || index < 0 || index >= n)
		FAIL("index %d of %d", index, n);
	const char *stopfile = argv[6];
	int delay = atoi(argv[7]);
	size_t words = (size_t)atoi(argv[8]) << 17; /* MiB of uint64 */
	uint64_t *mem = malloc(words * 8);
	if (!mem)
		FAIL("malloc");
	for (size_t i = 0; i < words; i++)
		mem[i] = i * 0x9E3779B97F4A7C15ull;
	expect = checksum(mem, words);
	logf_("start pid=%d index=%d", getpid(), index);

	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(l, (struct sockaddr *)&me, sizeof me) || listen(l, 4))
		FAIL("listen on %s: %s", argv[4], strerror(errno));
	int r = -1;
	for (int try = 0; try < 1000; try++) {
		r = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (connect(r, (struct sockaddr *)&right, sizeof right) == 0)
			break;
		close(r);
		r = -1;
		usleep(10000);
	}
	if (r < 0)
		FAIL("connect to %s", argv[5]);
	int left = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	if (left < 0)
		FAIL("accept: %s", strerror(errno));
	setsockopt(r, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

	uint64_t handled = 0;
	struct token t = {1, 0};
	if (index == 0) {
		t.sum = mix(0, 0, 1);
		handled++;
		touch(mem, words, handled, t.sum);
		logf_("tick %llu round=%llu sum=%llu pid=%d lport=%d rport=%d", (unsigned long long)handled,
		      (unsigned long long)t.round, (unsigned long long)t.sum, getpid(), lport(left), lport(r));
		xwrite(r, &t, sizeof t);
	}
	for (;;) {
		xread(left, &t, sizeof t);
		if (t.round == STOP) {
			if (index != 0)
				xwrite(r, &t, sizeof t);
			break;
		}
		if (index == 0) {
			if (access(stopfile, F_OK) == 0) {
				logf_("done rounds=%llu sum=%llu", (unsigned long long)t.round, (unsigned long long)t.sum);
				struct token stop = {STOP, 0};
				xwrite(r, &stop, sizeof stop);
				xread(left, &stop, sizeof stop);
				break;
			}
			t.round++;
		}
		t.sum = mix(t.sum, index, t.round);
		handled++;
		touch(mem, words, handled, t.sum);
		logf_("tick %llu round=%llu sum=%llu pid=%d lport=%d rport=%d", (unsigned long long)handled,
		      (unsigned long long)t.round, (unsigned long long)t.sum, getpid(), lport(left), lport(r));
		if (delay)
			usleep(delay * 1000);
		xwrite(r, &t, sizeof t);
	}
	logf_("bye %llu", (unsigned long long)handled);
	return 0;
}
