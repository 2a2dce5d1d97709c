/* nodes_local: a process that checks from the inside that it lives in one
 * namespace node and stays there across a checkpoint and restore.
 *
 * usage: nodes_local LOG STOPFILE
 *
 * It keeps a POSIX shared-memory segment (/dev/shm/ckpt-node-seg, mapped
 * shared) and a file in /tmp (/tmp/ckpt-node-file holding its hostname)
 * open, then every 10 ms logs "tick K host=H" after checking that its
 * hostname is the one it started with, that the segment holds what it
 * last wrote, and that the paths /dev/shm/ckpt-node-seg and
 * /tmp/ckpt-node-file name the very files it holds open (so a restore
 * must have put it back into its node's /dev/shm and /tmp). Any
 * difference is logged as a FAIL line and ends it. When STOPFILE exists
 * it logs "bye K" and exits. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SEG "/ckpt-node-seg"
#define SEGPATH "/dev/shm/ckpt-node-seg"
#define FILEPATH "/tmp/ckpt-node-file"
#define SEGSIZE (1 << 20)

static FILE *logf_;

static void say(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	vfprintf(logf_, fmt, ap);
	va_end(ap);
	fflush(logf_);
}

static void fail(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	fputs("FAIL ", logf_);
	vfprintf(logf_, fmt, ap);
	fputc('\n', logf_);
	va_end(ap);
	fflush(logf_);
	exit(1);
}

/* same reports whether path names the file open at fd. */
static void same(int fd, const char *path) {
	struct stat a, b;
	if (fstat(fd, &a) < 0)
		fail("fstat %s: %s", path, strerror(errno));
	if (stat(path, &b) < 0)
		fail("stat %s: %s (not this node's?)", path, strerror(errno));
	if (a.st_dev != b.st_dev || a.st_ino != b.st_ino)
		fail("%s is dev %lu ino %lu, the open file is dev %lu ino %lu", path, (unsigned long)b.st_dev,
		     (unsigned long)b.st_ino, (unsigned long)a.st_dev, (unsigned long)a.st_ino);
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: nodes_local LOG STOPFILE\n");
		return 2;
	}
	logf_ = fopen(argv[1], "a");
	if (!logf_)
		return 1;
	char host[256] = {0}, now[256];
	if (gethostname(host, sizeof host - 1) < 0)
		fail("gethostname: %s", strerror(errno));
	int seg = shm_open(SEG, O_CREAT | O_EXCL | O_RDWR, 0600);
	if (seg < 0)
		fail("shm_open %s: %s", SEG, strerror(errno));
	if (ftruncate(seg, SEGSIZE) < 0)
		fail("ftruncate: %s", strerror(errno));
	uint64_t *m = mmap(NULL, SEGSIZE, PROT_READ | PROT_WRITE, MAP_SHARED, seg, 0);
	if (m == MAP_FAILED)
		fail("mmap: %s", strerror(errno));
	int f = open(FILEPATH, O_CREAT | O_EXCL | O_RDWR, 0600);
	if (f < 0)
		fail("open %s: %s", FILEPATH, strerror(errno));
	if (write(f, host, strlen(host)) != (ssize_t)strlen(host))
		fail("write %s", FILEPATH);
	size_t words = SEGSIZE / sizeof *m;
	for (size_t i = 0; i < words; i += 511)
		m[i] = i;
	for (uint64_t k = 1;; k++) {
		/* The segment holds the previous tick's pattern. */
		for (size_t i = 0; i < words; i += 511)
			if (m[i] != (k - 1) * 0x9E3779B97F4A7C15ull + i)
				fail("tick %llu: segment word %zu is %llx", (unsigned long long)k, i, (unsigned long long)m[i]);
		memset(now, 0, sizeof now);
		if (gethostname(now, sizeof now - 1) < 0 || strcmp(now, host) != 0)
			fail("hostname is %s, was %s", now, host);
		same(seg, SEGPATH);
		same(f, FILEPATH);
		char got[256] = {0};
		int g = open(FILEPATH, O_RDONLY);
		if (g < 0 || read(g, got, sizeof got - 1) < 0 || strcmp(got, host) != 0)
			fail("%s holds %s, want %s", FILEPATH, got, host);
		close(g);
		for (size_t i = 0; i < words; i += 511)
			m[i] = k * 0x9E3779B97F4A7C15ull + i;
		say("tick %llu host=%s\n", (unsigned long long)k, host);
		if (access(argv[2], F_OK) == 0) {
			say("bye %llu\n", (unsigned long long)k);
			return 0;
		}
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}
