/*
 * mem_contents: memory contents that are easy to get wrong (usage:
 * mem_contents LOG DIR).
 *
 *   memfd    a 64-page memfd filled with a pattern, mapped MAP_PRIVATE:
 *            pages 10-19 written through the mapping (copy-on-write),
 *            pages 40-47 rewritten in the file with pwrite afterwards
 *            (the private mapping sees them: it never copied them);
 *            pages 56-63 read through the mapping only.
 *   remap    a 32-page anonymous region: pages 8-15 unmapped and mapped
 *            again fresh (with other data), pages 16-23 moved elsewhere
 *            with mremap, the hole they leave mapped PROT_NONE.
 *   holes    a file of DIR, 64 pages, data only at pages 0, 10 and 63,
 *            mapped MAP_SHARED and unlinked; page 20 then written through
 *            the mapping. Its holes must stay holes (SEEK_HOLE).
 *
 *   prot_none  4 pages written, then made PROT_NONE (process_vm_readv
 *            cannot read them).
 *
 * After the restore, everything is checked.
 */
#include "fidelity.h"

#include <stdint.h>

static unsigned long ticks = 7;

static inline uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}
#define DIE(what) FID_SETUP(0, "%s", what)


#include <sys/mman.h>
#include <sys/stat.h>

#define PG 4096

static unsigned char *mf_map, *rm, *moved, *hmap, *pn;
static int mfd, hfd;
static uint64_t words[2];

static uint64_t pat(int what, size_t page, size_t i) { return mix64(((uint64_t)what << 40) ^ (page << 20) ^ i); }

static void fill(unsigned char *p, int what, size_t page, size_t n)
{
	for (size_t k = 0; k < n; k++)
		for (size_t i = 0; i < PG / 8; i++)
			((uint64_t *)(p + k * PG))[i] = pat(what, page + k, i);
}

static int same(const unsigned char *p, int what, size_t page, size_t n, const char *name, char *why, size_t len)
{
	for (size_t k = 0; k < n; k++)
		for (size_t i = 0; i < PG / 8; i++) {
			uint64_t want = pat(what, page + k, i);
			if (i == 0 && (what == 2 || what == 5) && page + k == 10)
				want = words[what == 2 ? 0 : 1];
			if (((const uint64_t *)(p + k * PG))[i] != want)
				return snprintf(why, len, "%s page %zu word %zu differs", name, page + k, i), -1;
		}
	return 0;
}

static int check(char *why, size_t len)
{
	static unsigned char buf[64 * PG];
	/* memfd: file content, then the private view. */
	if (pread(mfd, buf, sizeof buf, 0) != (ssize_t)sizeof buf)
		return snprintf(why, len, "memfd pread: %s", strerror(errno)), -1;
	if (same(buf, 1, 0, 40, "memfd file", why, len) < 0 || same(buf + 40 * PG, 3, 40, 8, "memfd file", why, len) < 0 ||
	    same(buf + 48 * PG, 1, 48, 16, "memfd file", why, len) < 0)
		return -1;
	if (same(mf_map, 1, 0, 10, "memfd map", why, len) < 0 || same(mf_map + 10 * PG, 2, 10, 10, "memfd map", why, len) < 0 ||
	    same(mf_map + 20 * PG, 1, 20, 20, "memfd map", why, len) < 0 ||
	    same(mf_map + 40 * PG, 3, 40, 8, "memfd map", why, len) < 0 ||
	    same(mf_map + 48 * PG, 1, 48, 16, "memfd map", why, len) < 0)
		return -1;
	char link[64], target[256] = "";
	snprintf(link, sizeof link, "/proc/self/fd/%d", mfd);
	if (readlink(link, target, sizeof target - 1) < 0 || strcmp(target, "/memfd:mem_contents (deleted)") != 0)
		return snprintf(why, len, "memfd fd is %s", target), -1;
	/* The private mapping still follows the file where it never copied. */
	uint64_t probe = mix64(ticks);
	if (pwrite(mfd, &probe, 8, 30 * PG) != 8)
		return snprintf(why, len, "memfd pwrite: %s", strerror(errno)), -1;
	uint64_t seen = *(volatile uint64_t *)(mf_map + 30 * PG);
	uint64_t back = pat(1, 30, 0);
	if (pwrite(mfd, &back, 8, 30 * PG) != 8)
		return snprintf(why, len, "memfd pwrite: %s", strerror(errno)), -1;
	if (seen != probe)
		return snprintf(why, len, "memfd map page 30 does not follow the file"), -1;
	/* remap */
	if (same(rm, 4, 0, 8, "remap", why, len) < 0 || same(rm + 8 * PG, 5, 8, 8, "remap", why, len) < 0 ||
	    same(rm + 24 * PG, 4, 24, 8, "remap", why, len) < 0 || same(moved, 4, 16, 8, "moved", why, len) < 0)
		return -1;
	unsigned char v;
	if (mincore(rm + 16 * PG, PG, &v) < 0)
		return snprintf(why, len, "remap hole: mincore: %s", strerror(errno)), -1;
	/* prot_none: still no access, content kept */
	char line[512], want[32];
	snprintf(want, sizeof want, "%lx-", (unsigned long)pn);
	FILE *m = fopen("/proc/self/maps", "r");
	int found = 0;
	while (m && fgets(line, sizeof line, m))
		if (strncmp(line, want, strlen(want)) == 0)
			found = strstr(line, " ---p ") != NULL ? 1 : -1;
	if (m)
		fclose(m);
	if (found != 1)
		return snprintf(why, len, "prot_none mapping %s", found ? "not PROT_NONE" : "missing"), -1;
	if (mprotect(pn, 4 * PG, PROT_READ) < 0)
		return snprintf(why, len, "mprotect: %s", strerror(errno)), -1;
	int bad = same(pn, 7, 0, 4, "prot_none", why, len);
	if (mprotect(pn, 4 * PG, PROT_NONE) < 0)
		return snprintf(why, len, "mprotect: %s", strerror(errno)), -1;
	if (bad < 0)
		return -1;
	/* holes: layout and content */
	off_t h = lseek(hfd, 0, SEEK_HOLE), d = lseek(hfd, h, SEEK_DATA);
	if (h != PG || d != 10 * PG)
		return snprintf(why, len, "holes file: first hole at %ld, data again at %ld; want %d, %d", (long)h, (long)d, PG, 10 * PG), -1;
	struct stat st;
	if (fstat(hfd, &st) < 0 || st.st_size != 64 * PG || st.st_nlink != 0)
		return snprintf(why, len, "holes file: size %ld links %ld", (long)st.st_size, (long)st.st_nlink), -1;
	for (size_t p = 0; p < 64; p++) {
		int data = p == 0 || p == 10 || p == 20 || p == 63;
		if (data ? same(hmap + p * PG, 6, p, 1, "holes", why, len) < 0 : 0)
			return -1;
		for (size_t i = 0; !data && i < PG; i++)
			if (hmap[p * PG + i])
				return snprintf(why, len, "holes page %zu not zero", p), -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: %s LOG DIR", argv[0]);
	/* memfd */
	mfd = memfd_create("mem_contents", 0);
	if (mfd < 0 || ftruncate(mfd, 64 * PG) < 0)
		DIE("memfd");
	unsigned char *tmp = malloc(64 * PG);
	fill(tmp, 1, 0, 64);
	if (pwrite(mfd, tmp, 64 * PG, 0) != 64 * PG)
		DIE("memfd write");
	mf_map = mmap(NULL, 64 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, mfd, 0);
	if (mf_map == MAP_FAILED)
		DIE("mmap memfd");
	fill(mf_map + 10 * PG, 2, 10, 10);
	words[0] = pat(2, 10, 0);
	fill(tmp, 3, 40, 8);
	if (pwrite(mfd, tmp, 8 * PG, 40 * PG) != 8 * PG)
		DIE("memfd rewrite");
	volatile uint64_t sink = 0;
	for (size_t p = 56; p < 64; p++)
		sink += *(uint64_t *)(mf_map + p * PG);
	/* remap */
	rm = mmap(NULL, 32 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (rm == MAP_FAILED)
		DIE("mmap remap");
	fill(rm, 4, 0, 32);
	words[1] = pat(4, 10, 0);
	if (munmap(rm + 8 * PG, 8 * PG) < 0 ||
	    mmap(rm + 8 * PG, 8 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != rm + 8 * PG)
		DIE("remap hole");
	fill(rm + 8 * PG, 5, 8, 8);
	words[1] = pat(5, 10, 0);
	void *to = mmap(NULL, 8 * PG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (to == MAP_FAILED)
		DIE("mmap target");
	moved = mremap(rm + 16 * PG, 8 * PG, 8 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, to);
	if (moved != to)
		DIE("mremap");
	if (mmap(rm + 16 * PG, 8 * PG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != rm + 16 * PG)
		DIE("mmap PROT_NONE");
	/* holes */
	char path[4096];
	snprintf(path, sizeof path, "%s/holes", argv[2]);
	hfd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (hfd < 0 || ftruncate(hfd, 64 * PG) < 0)
		DIE("holes file");
	size_t pages[] = {0, 10, 63};
	for (size_t k = 0; k < 3; k++) {
		fill(tmp, 6, pages[k], 1);
		if (pwrite(hfd, tmp, PG, pages[k] * PG) != PG)
			DIE("holes write");
	}
	hmap = mmap(NULL, 64 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, hfd, 0);
	if (hmap == MAP_FAILED || unlink(path) < 0)
		DIE("holes map");
	fill(hmap + 20 * PG, 6, 20, 1);
	free(tmp);
	/* prot_none */
	pn = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (pn == MAP_FAILED)
		DIE("mmap prot_none");
	fill(pn, 7, 0, 4);
	if (mprotect(pn, 4 * PG, PROT_NONE) < 0)
		DIE("mprotect");
	words[0] = mix64(ticks ^ 0x1111);
	*(uint64_t *)(mf_map + 10 * PG) = words[0];
	words[1] = mix64(ticks ^ 0x2222);
	*(uint64_t *)(rm + 10 * PG) = words[1];
	fid_ready();
	fid_wait();
	char why[512] = "";
	FID_EXPECT(check(why, sizeof why) == 0, "%s", why);
	return fid_done();
}
