/*
 * fidelity.h: the protocol of the fidelity cases (test/fidelity).
 *
 * A case is a self-checking program run as `case LOG ARGS...`:
 *
 *   fid_init(argc, argv)   opens LOG (O_APPEND) and blocks SIGTERM, so that
 *                          every thread and child created later has it
 *                          blocked too (call it first);
 *   ... set up the state under test; FID_SETUP(cond, fmt, ...) ends the
 *       program with "FAIL: setup: ..." if cond is false ...
 *   fid_ready()            writes "ready": the test dumps and restores now;
 *   fid_wait()             waits for SIGTERM (sigwaitinfo), which the test
 *                          sends only after the restore (or after a refused
 *                          dump, to the untouched original);
 *   ... verify everything from inside with FID_EXPECT(cond, fmt, ...),
 *       which records what differs and goes on ...
 *   return fid_done();     writes "PASS" or "FAIL: what differs; ..." and
 *                          returns 0 (exit code 0 either way).
 *
 * A case that cannot run on this kernel writes "SKIP: why" with
 * fid_skip() instead of "ready" and exits. Every line is one write(2).
 * Only the process that called fid_init writes the verdict: a case with
 * children collects their findings itself (exit status, a pipe).
 */
#ifndef FIDELITY_H
#define FIDELITY_H
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fid_log = -1;
static char fid_why[2048];
static size_t fid_whylen;
static int fid_failed;

/* fid_line writes one line to the log with a single write(2). */
static __attribute__((unused)) void fid_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static __attribute__((unused)) void fid_line(const char *fmt, ...)
{
	char buf[4096];
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
		w = write(fid_log, buf, n);
	while (w < 0 && errno == EINTR);
	if (w != n)
		_exit(3);
}

static __attribute__((unused)) void fid_init(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s LOG [ARGS...]\n", argv[0]);
		exit(2);
	}
	fid_log = open(argv[1], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fid_log < 0) {
		perror(argv[1]);
		exit(2);
	}
	sigset_t term;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	if (sigprocmask(SIG_BLOCK, &term, NULL) < 0) {
		fid_line("FAIL: setup: sigprocmask: %s", strerror(errno));
		exit(2);
	}
}

/* FID_SETUP ends the case at once if cond is false. */
#define FID_SETUP(cond, ...)                                                   \
	do {                                                                   \
		if (!(cond)) {                                                 \
			char m_[2048];                                          \
			int e_ = errno;                                        \
			snprintf(m_, sizeof m_, __VA_ARGS__);                  \
			fid_line("FAIL: setup: %s (errno: %s)", m_, strerror(e_)); \
			exit(2);                                               \
		}                                                              \
	} while (0)

/* fid_fail records one difference. */
static __attribute__((unused)) void fid_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static __attribute__((unused)) void fid_fail(const char *fmt, ...)
{
	fid_failed++;
	if (fid_whylen + 3 >= sizeof fid_why)
		return;
	if (fid_whylen) {
		memcpy(fid_why + fid_whylen, "; ", 2);
		fid_whylen += 2;
	}
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(fid_why + fid_whylen, sizeof fid_why - fid_whylen, fmt, ap);
	va_end(ap);
	if (n > 0)
		fid_whylen = strlen(fid_why);
}

/* FID_EXPECT records a difference if cond is false, and goes on. */
#define FID_EXPECT(cond, ...)                                                  \
	do {                                                                   \
		if (!(cond))                                                   \
			fid_fail(__VA_ARGS__);                                 \
	} while (0)

static __attribute__((unused)) void fid_ready(void) { fid_line("ready"); }

static __attribute__((unused)) void fid_skip(const char *why)
{
	fid_line("SKIP: %s", why);
	exit(0);
}

/* fid_wait waits for SIGTERM, blocked since fid_init. */
static __attribute__((unused)) void fid_wait(void)
{
	sigset_t term;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	for (;;) {
		int s = sigwaitinfo(&term, NULL);
		if (s == SIGTERM)
			return;
		if (s < 0 && errno != EINTR) {
			fid_line("FAIL: sigwaitinfo: %s", strerror(errno));
			exit(2);
		}
	}
}

static __attribute__((unused)) int fid_done(void)
{
	if (fid_failed)
		fid_line("FAIL: %s", fid_why);
	else
		fid_line("PASS");
	return 0;
}

/* fid_status copies the value of field name of /proc/self/status (or of
 * /proc/self/task/TID/status if tid > 0); it returns -1 if absent. */
static __attribute__((unused)) int fid_status(int tid, const char *name, char *out, size_t len)
{
	char path[64], buf[8192];
	if (tid > 0)
		snprintf(path, sizeof path, "/proc/self/task/%d/status", tid);
	else
		snprintf(path, sizeof path, "/proc/self/status");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	size_t nl = strlen(name);
	for (char *l = buf; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		if (strncmp(l, name, nl) == 0 && l[nl] == ':') {
			char *v = l + nl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			size_t k = strcspn(v, "\n");
			if (k >= len)
				k = len - 1;
			memcpy(out, v, k);
			out[k] = 0;
			return 0;
		}
	}
	return -1;
}

/* fid_read_file reads a small file into out (NUL-terminated, trailing
 * newline removed); it returns -1 on error. */
static __attribute__((unused)) int fid_read_file(const char *path, char *out, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, out, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	out[n] = 0;
	if (n > 0 && out[n - 1] == '\n')
		out[n - 1] = 0;
	return 0;
}

/* fid_snapshot copies the values of the given keys (a NULL-terminated
 * list) of /proc/thread-self/status into out as "Key=value; ...", so that
 * a thread can compare its state before and after with strcmp. */
static __attribute__((unused)) void fid_snapshot(const char *const *keys, char *out, size_t len)
{
	size_t n = 0;
	out[0] = 0;
	for (; *keys; keys++) {
		char v[256] = "?";
		char path[64];
		snprintf(path, sizeof path, "/proc/thread-self/status");
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			char buf[8192];
			ssize_t r = read(fd, buf, sizeof buf - 1);
			close(fd);
			if (r > 0) {
				buf[r] = 0;
				size_t kl = strlen(*keys);
				for (char *l = buf; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
					if (strncmp(l, *keys, kl) == 0 && l[kl] == ':') {
						char *x = l + kl + 1;
						while (*x == ' ' || *x == '\t')
							x++;
						size_t k = strcspn(x, "\n");
						if (k >= sizeof v)
							k = sizeof v - 1;
						memcpy(v, x, k);
						v[k] = 0;
					}
			}
		}
		int w = snprintf(out + n, len - n, "%s%s=%s", n ? "; " : "", *keys, v);
		if (w < 0 || (size_t)w >= len - n)
			return;
		n += w;
	}
}
#endif
