/*
 * victim.h: the protocol shared by the C victims.
 *
 * A victim writes numbered progress lines to the log file argv[1], one
 * write(2) per line through a descriptor opened once at start:
 *
 *   start pid=PID ...        once, at start
 *   tick N ...               N = 1, 2, 3, ... with no gap and no repeat
 *   check ok N               after SIGUSR1, if all its own state is right
 *   check FAIL WHAT          after SIGUSR1 (or at once) if something is wrong
 *   bye N                    after SIGUSR2; then it exits 0
 *
 * SIGUSR1 and SIGUSR2 have handlers installed with sigaction (SA_RESTART,
 * sa_mask {SIGUSR2 or SIGUSR1, SIGTERM}) that only set a flag; SIGHUP is
 * blocked; SIGTERM is left default. Every check also verifies that these
 * dispositions and the blocked mask survived (victim_poll).
 *
 * It also holds the "regions" helpers used by static_counter and
 * dynamic_counter: memory filled with a pattern derived from a seed, a few
 * words of which change at every tick, checked by replaying every change
 * on a fresh copy.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int log_fd = -1;
static unsigned long ticks; /* number of the last tick line written */
static volatile sig_atomic_t want_check, want_bye;

static void on_usr1(int sig) { (void)sig; want_check = 1; }
static void on_usr2(int sig) { (void)sig; want_bye = 1; }

/* vlog writes one line with a single write(2); it exits 3 if it cannot. */
static void vlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void vlog(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		_exit(3);
	if (n > (int)sizeof buf - 2)
		n = sizeof buf - 2;
	buf[n++] = '\n';
	ssize_t w;
	do
		w = write(log_fd, buf, n);
	while (w < 0 && errno == EINTR);
	if (w != n)
		_exit(3);
}

static void die(const char *what)
{
	if (log_fd >= 0)
		vlog("check FAIL %s: %s", what, strerror(errno));
	perror(what);
	exit(2);
}

static void install(int sig, void (*fn)(int), int other)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = fn;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, other);
	sigaddset(&sa.sa_mask, SIGTERM);
	if (sigaction(sig, &sa, NULL) < 0)
		die("sigaction");
}

/* victim_start opens the log with oflags, sets up signals and writes the
 * start line (extra, if not empty, goes after pid=PID). */
static void victim_start(int argc, char **argv, int nargs, const char *usage,
			 int oflags, const char *extra)
{
	if (argc != nargs + 1) {
		fprintf(stderr, "usage: %s %s\n", argv[0], usage);
		exit(2);
	}
	log_fd = open(argv[1], oflags, 0644);
	if (log_fd < 0)
		die(argv[1]);
	install(SIGUSR1, on_usr1, SIGUSR2);
	install(SIGUSR2, on_usr2, SIGUSR1);
	sigset_t hup;
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &hup, NULL) < 0)
		die("sigprocmask");
	vlog("start pid=%d%s%s", getpid(), *extra ? " " : "", extra);
}

/* check_handler verifies one sigaction() as installed by install(). */
static int check_handler(int sig, void (*fn)(int), int other, char *why, size_t len)
{
	struct sigaction sa;
	if (sigaction(sig, NULL, &sa) < 0)
		return snprintf(why, len, "sigaction query %d", sig), -1;
	if (sa.sa_handler != fn)
		return snprintf(why, len, "signal %d handler %p", sig, (void *)sa.sa_handler), -1;
	if (!(sa.sa_flags & SA_RESTART))
		return snprintf(why, len, "signal %d flags %#x", sig, (unsigned)sa.sa_flags), -1;
	if (!sigismember(&sa.sa_mask, other) || !sigismember(&sa.sa_mask, SIGTERM) ||
	    sigismember(&sa.sa_mask, SIGINT))
		return snprintf(why, len, "signal %d sa_mask", sig), -1;
	return 0;
}

/* check_signals verifies the signal setup made by victim_start. */
static int check_signals(char *why, size_t len)
{
	sigset_t cur;
	struct sigaction sa;
	if (sigprocmask(SIG_BLOCK, NULL, &cur) < 0)
		return snprintf(why, len, "sigprocmask query"), -1;
	if (!sigismember(&cur, SIGHUP))
		return snprintf(why, len, "SIGHUP not blocked"), -1;
	if (sigismember(&cur, SIGUSR1) || sigismember(&cur, SIGUSR2) || sigismember(&cur, SIGTERM))
		return snprintf(why, len, "SIGUSR1/SIGUSR2/SIGTERM blocked"), -1;
	if (check_handler(SIGUSR1, on_usr1, SIGUSR2, why, len) < 0 ||
	    check_handler(SIGUSR2, on_usr2, SIGUSR1, why, len) < 0)
		return -1;
	if (sigaction(SIGTERM, NULL, &sa) < 0 || sa.sa_handler != SIG_DFL)
		return snprintf(why, len, "SIGTERM not default"), -1;
	return 0;
}

/* victim_poll, called after each tick, answers SIGUSR1 with a check of the
 * signal setup and of check(), and SIGUSR2 with bye and exit(0). */
static void victim_poll(int (*check)(char *why, size_t len))
{
	if (want_check) {
		want_check = 0;
		char why[256] = "";
		if (check_signals(why, sizeof why) == 0 && check(why, sizeof why) == 0)
			vlog("check ok %lu", ticks);
		else
			vlog("check FAIL %s", why);
	}
	if (want_bye) {
		vlog("bye %lu", ticks);
		exit(0);
	}
}

/* victim_sleep sleeps ms milliseconds. EINTR (a signal, or a restore that
 * cut the sleep short) just ends the sleep early. */
static inline void victim_sleep(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	if (nanosleep(&ts, NULL) < 0 && errno != EINTR)
		die("nanosleep");
}

/* ---- regions: patterned memory that changes at every tick ---- */

struct region {
	uint64_t *w; /* words */
	size_t n;    /* number of words */
};

static inline uint64_t mix64(uint64_t x) /* splitmix64's finalizer */
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* regions_fill writes the initial pattern and returns the sum of all words. */
static inline uint64_t regions_fill(struct region *rs, int nr, uint64_t seed)
{
	uint64_t sum = 0;
	for (int r = 0; r < nr; r++)
		for (size_t i = 0; i < rs[r].n; i++)
			sum += rs[r].w[i] = mix64(seed ^ ((uint64_t)r << 48) ^ i);
	return sum;
}

/* regions_mutate changes 8 words, chosen from the tick number, and keeps
 * *sum equal to the sum of all words. */
static inline void regions_mutate(struct region *rs, int nr, unsigned long tick, uint64_t *sum)
{
	for (int j = 0; j < 8; j++) {
		uint64_t h = mix64(tick * 8 + j);
		struct region *r = &rs[h % nr];
		uint64_t *p = &r->w[(h >> 16) % r->n];
		uint64_t v = *p * 6364136223846793005ULL + tick;
		*sum += v - *p;
		*p = v;
	}
}

/* regions_verify checks that the regions hold what filling them and
 * mutating them for ticks 1..tick gives, and that sum is their sum. */
static inline int regions_verify(struct region *rs, int nr, uint64_t seed, unsigned long tick,
				 uint64_t sum, char *why, size_t len)
{
	struct region cp[nr];
	for (int r = 0; r < nr; r++) {
		cp[r].n = rs[r].n;
		if (!(cp[r].w = malloc(cp[r].n * 8)))
			die("malloc");
	}
	uint64_t want = regions_fill(cp, nr, seed), got = 0;
	for (unsigned long t = 1; t <= tick; t++)
		regions_mutate(cp, nr, t, &want);
	int bad = -1;
	for (int r = 0; r < nr; r++) {
		for (size_t i = 0; i < rs[r].n; i++)
			got += rs[r].w[i];
		if (bad < 0 && memcmp(cp[r].w, rs[r].w, rs[r].n * 8) != 0)
			bad = r;
		free(cp[r].w);
	}
	if (bad >= 0)
		return snprintf(why, len, "memory region %d differs", bad), -1;
	if (got != sum || want != sum)
		return snprintf(why, len, "checksum %#lx, memory sums to %#lx, want %#lx",
				(unsigned long)sum, (unsigned long)got, (unsigned long)want), -1;
	return 0;
}
