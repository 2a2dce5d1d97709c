/*
 * filemap: file mappings and a file offset (usage: filemap LOG DATAFILE).
 *
 * DATAFILE is created with a 1 MiB pattern unless it already has 1 MiB.
 * Checks that a checkpoint/restore keeps:
 *  - a read-only MAP_PRIVATE mapping of the whole file: it must match the
 *    pattern;
 *  - a read-write MAP_PRIVATE mapping of 512 KiB of it (file offset
 *    256 KiB) where 16 pages are dirtied (copy-on-write) at start and one
 *    of them gets the tick number at every tick: dirtied pages must hold
 *    what was written, the others must still match the file;
 *  - a read-only descriptor of the file whose offset advances 16 bytes per
 *    tick (wrapping at 1 MiB): the bytes read must match the pattern (else
 *    check FAIL at once), and a check compares lseek(fd, 0, SEEK_CUR);
 *  - the log opened O_APPEND, and the signal setup of victim.h.
 */
#include "victim.h"
#include <sys/mman.h>
#include <sys/stat.h>

#define FILE_SIZE (1 << 20)
#define PAGE 4096
#define RW_OFF (256 << 10) /* file offset of the writable mapping */
#define RW_SIZE (512 << 10)
#define NDIRTY 16

static const uint64_t *ro;    /* whole file, read-only */
static uint64_t *rw;          /* RW_SIZE bytes at RW_OFF, private writable */
static int rfd;               /* read-only fd, read 16 bytes per tick */

static uint64_t pattern(size_t word) { return mix64(0xf11e0000ULL ^ word); }
static size_t dirty_page(int d) { return 8 * d + 3; } /* page index in rw */

/* rw_want returns what word i of the writable mapping must hold. */
static uint64_t rw_want(size_t i)
{
	uint64_t file = pattern(RW_OFF / 8 + i);
	size_t page = i / (PAGE / 8);
	if (page % 8 != 3 || page / 8 >= NDIRTY)
		return file; /* never written: still the file's page */
	if (i % (PAGE / 8) != 0)
		return ~file; /* dirtied at start */
	/* word 0 of dirty page d holds the last tick t with t % NDIRTY == d */
	unsigned long d = page / 8;
	if (ticks < d || ticks - (ticks - d) % NDIRTY == 0)
		return ~file;
	return ticks - (ticks - d) % NDIRTY;
}

static off_t offset_want(unsigned long t) { return t ? 16 * ((t - 1) % (FILE_SIZE / 16) + 1) : 0; }

/* read16 reads the next 16 bytes of rfd, wrapping at the end of the file. */
static int read16(char *why, size_t len)
{
	uint64_t b[2];
	off_t off = lseek(rfd, 0, SEEK_CUR);
	if (off == FILE_SIZE)
		off = lseek(rfd, 0, SEEK_SET);
	if (off < 0 || read(rfd, b, 16) != 16)
		return snprintf(why, len, "read at %ld: %s", (long)off, strerror(errno)), -1;
	if (b[0] != pattern(off / 8) || b[1] != pattern(off / 8 + 1))
		return snprintf(why, len, "file bytes at %ld differ", (long)off), -1;
	return 0;
}

static int check(char *why, size_t len)
{
	for (size_t i = 0; i < FILE_SIZE / 8; i++)
		if (ro[i] != pattern(i))
			return snprintf(why, len, "read-only map word %zu", i), -1;
	for (size_t i = 0; i < RW_SIZE / 8; i++)
		if (rw[i] != rw_want(i))
			return snprintf(why, len, "private map word %zu (page %zu) is %#lx, want %#lx",
					i, i / (PAGE / 8), (unsigned long)rw[i], (unsigned long)rw_want(i)), -1;
	off_t off = lseek(rfd, 0, SEEK_CUR);
	if (off != offset_want(ticks))
		return snprintf(why, len, "file offset %ld, want %ld", (long)off, (long)offset_want(ticks)), -1;
	return 0;
}

/* make_file writes the pattern to path (through a rename) if needed. */
static void make_file(const char *path)
{
	struct stat st;
	if (stat(path, &st) == 0 && st.st_size == FILE_SIZE)
		return;
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp%d", path, getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		die(tmp);
	uint64_t buf[PAGE / 8];
	for (size_t p = 0; p < FILE_SIZE / PAGE; p++) {
		for (size_t i = 0; i < PAGE / 8; i++)
			buf[i] = pattern(p * (PAGE / 8) + i);
		if (write(fd, buf, PAGE) != PAGE)
			die("write data file");
	}
	if (close(fd) < 0 || rename(tmp, path) < 0)
		die("rename data file");
}

int main(int argc, char **argv)
{
	char why[256];

	victim_start(argc, argv, 2, "LOG DATAFILE", O_WRONLY | O_CREAT | O_APPEND, "");
	make_file(argv[2]);
	int fd = open(argv[2], O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die(argv[2]);
	ro = mmap(NULL, FILE_SIZE, PROT_READ, MAP_PRIVATE, fd, 0);
	rw = mmap(NULL, RW_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, RW_OFF);
	if (ro == MAP_FAILED || rw == MAP_FAILED)
		die("mmap");
	close(fd); /* the mappings keep the file */
	for (int d = 0; d < NDIRTY; d++)
		for (size_t i = 0; i < PAGE / 8; i++) {
			size_t w = dirty_page(d) * (PAGE / 8) + i;
			rw[w] = ~pattern(RW_OFF / 8 + w);
		}
	if ((rfd = open(argv[2], O_RDONLY | O_CLOEXEC)) < 0)
		die(argv[2]);

	for (;;) {
		unsigned long t = ticks + 1;
		rw[dirty_page(t % NDIRTY) * (PAGE / 8)] = t;
		ticks = t;
		if (read16(why, sizeof why) < 0)
			vlog("check FAIL %s", why);
		vlog("tick %lu off=%ld", t, (long)lseek(rfd, 0, SEEK_CUR));
		victim_sleep(20);
		victim_poll(check);
	}
}
