/*
 * ghost: a deleted file held open and mapped (usage: ghost LOG DIR [shared]).
 *
 * At start it creates DIR/ghost.data, writes SIZE bytes of a known pattern,
 * maps the whole file (MAP_PRIVATE read-only, or MAP_SHARED read-only with
 * "shared"), moves the descriptor's offset to OFFSET and unlinks the file:
 * from then on only the descriptor and the mapping reach it.
 *
 * A check (SIGUSR1, protocol of victim.h) verifies that:
 *  - fstat of the descriptor says a regular file of SIZE bytes with no link
 *    left (still deleted);
 *  - the descriptor's offset is still OFFSET, and pread gives the pattern;
 *  - the mapping gives the pattern;
 *  - with "shared": the descriptor and the mapping are one file, as they
 *    were: a byte written with pwrite is seen through the mapping at once
 *    (then the pattern byte is written back).
 * The log is opened O_APPEND.
 */
#include "victim.h"
#include <sys/mman.h>
#include <sys/stat.h>

#define SIZE (3 * 4096 + 100) /* the last page is partly beyond EOF */
#define OFFSET 1234

static int fd;
static const unsigned char *map;
static int shared;

static unsigned char pattern(size_t i) { return (unsigned char)(mix64(0x6057 ^ i) >> 13); }

static int check(char *why, size_t len)
{
	static unsigned char buf[SIZE];
	struct stat st;
	if (fstat(fd, &st) < 0)
		return snprintf(why, len, "fstat: %s", strerror(errno)), -1;
	if (!S_ISREG(st.st_mode) || st.st_size != SIZE || st.st_nlink != 0)
		return snprintf(why, len, "fstat: mode %#o size %ld nlink %lu, want a deleted file of %d bytes",
				st.st_mode, (long)st.st_size, (unsigned long)st.st_nlink, SIZE), -1;
	off_t off = lseek(fd, 0, SEEK_CUR);
	if (off != OFFSET)
		return snprintf(why, len, "fd offset %ld, want %d", (long)off, OFFSET), -1;
	ssize_t n = pread(fd, buf, SIZE, 0);
	if (n != SIZE)
		return snprintf(why, len, "pread %zd of %d bytes (%s)", n, SIZE, n < 0 ? strerror(errno) : "short"), -1;
	for (size_t i = 0; i < SIZE; i++) {
		if (buf[i] != pattern(i))
			return snprintf(why, len, "fd byte %zu is %#x, want %#x", i, buf[i], pattern(i)), -1;
		if (map[i] != pattern(i))
			return snprintf(why, len, "mapped byte %zu is %#x, want %#x", i, map[i], pattern(i)), -1;
	}
	if (shared) {
		size_t at = 5000;
		unsigned char b = (unsigned char)~pattern(at);
		if (pwrite(fd, &b, 1, at) != 1)
			return snprintf(why, len, "pwrite: %s", strerror(errno)), -1;
		unsigned char seen = map[at];
		b = pattern(at);
		if (pwrite(fd, &b, 1, at) != 1)
			return snprintf(why, len, "pwrite back: %s", strerror(errno)), -1;
		if (seen != (unsigned char)~pattern(at))
			return snprintf(why, len, "shared mapping does not see a pwrite through the fd: "
					"byte %zu is %#x, want %#x (fd and mapping are different files)",
					at, seen, (unsigned char)~pattern(at)), -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	char path[4096];
	static unsigned char buf[SIZE];

	if (argc == 4 && strcmp(argv[3], "shared") == 0) {
		shared = 1;
		argc--;
	}
	victim_start(argc, argv, 2, "LOG DIR [shared]", O_WRONLY | O_CREAT | O_APPEND, shared ? "shared=1" : "shared=0");
	snprintf(path, sizeof path, "%s/ghost.data", argv[2]);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		die(path);
	for (size_t i = 0; i < SIZE; i++)
		buf[i] = pattern(i);
	if (write(fd, buf, SIZE) != SIZE)
		die("write");
	map = mmap(NULL, SIZE, PROT_READ, shared ? MAP_SHARED : MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		die("mmap");
	if (lseek(fd, OFFSET, SEEK_SET) != OFFSET)
		die("lseek");
	if (unlink(path) < 0)
		die("unlink");

	for (;;) {
		ticks++;
		vlog("tick %lu", ticks);
		victim_sleep(20);
		victim_poll(check);
	}
}
