/*
 * mem_cow: private memory shared copy-on-write after fork.
 *
 * The main process fills 64 MiB of private anonymous memory (every page
 * different), then forks 3 children; child 0 writes every 64th page of it
 * (256 pages), child 1 drops pages 1000-1099 (MADV_DONTNEED: they read
 * zero), child 2 drops the last 10 pages and zeroes page 2000 (a page of
 * its own that holds zeros). Each child then waits on its own pipe.
 *
 * After the restore, the main process checks its own content, then reads
 * /proc/CHILD/pagemap (root sees the page frames): every page a child did
 * not touch must be the main process's own frame (shared again, not a
 * copy), every page child 0 wrote must be its own, no page a child dropped
 * or zeroed may be the main process's. Then each child checks its content
 * and writes one more page (page 5); the main process checks that its page
 * 5 did not change. A child reports through its exit status and a result
 * pipe.
 */
#include "fidelity.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define PG 4096
#define SIZE (64UL << 20)
#define NPAGES (SIZE / PG)
#define NCHILD 3
#define STRIDE 64 /* child 0 writes every STRIDE-th page */
#define PFN_MASK ((1ULL << 55) - 1)
#define PRESENT (1ULL << 63)

static unsigned char *mem;

static inline uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* word is word i of page p as written by gen (0: the main process,
 * 1: child 0's writes, 2: the write after the restore). */
static uint64_t word(int gen, size_t p, size_t i) { return mix64(((uint64_t)gen << 50) ^ (p << 20) ^ i); }

static void fill(int gen, size_t p)
{
	for (size_t i = 0; i < PG / 8; i++)
		((uint64_t *)(mem + p * PG))[i] = word(gen, p, i);
}

static int holds(int gen, size_t p)
{
	for (size_t i = 0; i < PG / 8; i++)
		if (((uint64_t *)(mem + p * PG))[i] != word(gen, p, i))
			return 0;
	return 1;
}

#define ZERO (-1) /* a page that reads zero */

/* gen_of is the generation page p must hold in child k before its last
 * write (k < 0: the main process), or ZERO. */
static int gen_of(int k, size_t p)
{
	switch (k) {
	case 0:
		return p % STRIDE == 0 ? 1 : 0;
	case 1:
		return p >= 1000 && p < 1100 ? ZERO : 0;
	case 2:
		return p >= NPAGES - 10 || p == 2000 ? ZERO : 0;
	}
	return 0;
}

static int holds_zero(size_t p)
{
	for (size_t i = 0; i < PG / 8; i++)
		if (((uint64_t *)(mem + p * PG))[i] != 0)
			return 0;
	return 1;
}

/* check_content checks every page; it returns the number that differ and
 * names the first in why. */
static int check_content(int k, char *why, size_t len)
{
	int bad = 0;
	for (size_t p = 0; p < NPAGES; p++) {
		int g = gen_of(k, p);
		if (!(g == ZERO ? holds_zero(p) : holds(g, p)) && bad++ == 0)
			snprintf(why, len, "page %zu does not hold what generation %d wrote", p, g);
	}
	return bad;
}

/* frames reads the pagemap entries of mem in process pid. */
static int frames(pid_t pid, uint64_t *out)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/pagemap", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t want = NPAGES * 8, got = 0;
	while (got < want) {
		ssize_t n = pread(fd, (char *)out + got, want - got, (off_t)((uintptr_t)mem / PG * 8 + got));
		if (n <= 0) {
			close(fd);
			return -1;
		}
		got += n;
	}
	close(fd);
	return 0;
}

static void child(int k, int go, int res)
{
	char buf[512] = "";
	if (k == 0)
		for (size_t p = 0; p < NPAGES; p += STRIDE)
			fill(1, p);
	if (k == 1 && madvise(mem + 1000 * PG, 100 * PG, MADV_DONTNEED) != 0)
		_exit(5);
	if (k == 2) {
		if (madvise(mem + (NPAGES - 10) * PG, 10 * PG, MADV_DONTNEED) != 0)
			_exit(5);
		memset(mem + 2000 * PG, 0, PG);
	}
	if (write(res, "s", 1) != 1) /* set up */
		_exit(4);
	char c;
	ssize_t n;
	do
		n = read(go, &c, 1);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		_exit(3);
	int bad = check_content(k, buf, sizeof buf);
	if (bad) {
		char m[600];
		int l = snprintf(m, sizeof m, "child %d: %d pages wrong, %s", k, bad, buf);
		if (write(res, m, l) != l)
			_exit(4);
		_exit(1);
	}
	fill(2, 5);
	if (!holds(2, 5)) {
		char m[] = "page 5 does not keep the child's write";
		if (write(res, m, sizeof m - 1) < 0)
			_exit(4);
		_exit(1);
	}
	_exit(0);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	mem = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	FID_SETUP(mem != MAP_FAILED, "mmap 64 MiB");
	for (size_t p = 0; p < NPAGES; p++)
		fill(0, p);
	static uint64_t mine[NPAGES], theirs[NPAGES];
	FID_SETUP(frames(getpid(), mine) == 0, "read /proc/self/pagemap");
	if ((mine[0] & PFN_MASK) == 0)
		fid_skip("pagemap shows no page frames (not root)");
	pid_t kids[NCHILD];
	int go[NCHILD], res[NCHILD];
	for (int k = 0; k < NCHILD; k++) {
		int g[2], r[2];
		FID_SETUP(pipe(g) == 0 && pipe(r) == 0, "pipe");
		kids[k] = fork();
		FID_SETUP(kids[k] >= 0, "fork");
		if (kids[k] == 0) {
			close(g[1]);
			close(r[0]);
			child(k, g[0], r[1]);
		}
		close(g[0]);
		close(r[1]);
		go[k] = g[1];
		res[k] = r[0];
	}
	for (int k = 0; k < NCHILD; k++) {
		char c;
		ssize_t n;
		do
			n = read(res[k], &c, 1);
		while (n < 0 && errno == EINTR);
		FID_SETUP(n == 1 && c == 's', "child %d did not set up", k);
	}
	fid_ready();
	fid_wait();

	char why[512] = "";
	int bad = check_content(-1, why, sizeof why);
	FID_EXPECT(bad == 0, "main: %d pages wrong, %s", bad, why);
	if (frames(getpid(), mine) != 0)
		fid_fail("read /proc/self/pagemap: %s", strerror(errno));
	for (int k = 0; k < NCHILD; k++) {
		if (frames(kids[k], theirs) != 0) {
			fid_fail("read the pagemap of child %d: %s", k, strerror(errno));
			continue;
		}
		size_t shared = 0, own = 0, want_own = 0, first_bad = NPAGES;
		for (size_t p = 0; p < NPAGES; p++) {
			int same = (mine[p] & PRESENT) && (theirs[p] & PRESENT) && (mine[p] & PFN_MASK) == (theirs[p] & PFN_MASK);
			int g = gen_of(k, p);
			want_own += g != 0;
			if (same && g == 0)
				shared++;
			else if (!same && g != 0 && (g == ZERO || (theirs[p] & PRESENT)))
				own++;
			else if (first_bad == NPAGES)
				first_bad = p;
		}
		FID_EXPECT(shared == NPAGES - want_own && own == want_own,
			   "child %d: %zu of %zu untouched pages shared with the main process, %zu of %zu written or dropped ones not (first wrong: page %zu)",
			   k, shared, NPAGES - want_own, own, want_own, first_bad);
	}
	for (int k = 0; k < NCHILD; k++)
		if (write(go[k], "g", 1) != 1)
			fid_fail("wake child %d: %s", k, strerror(errno));
	for (int k = 0; k < NCHILD; k++) {
		int st;
		pid_t w;
		do
			w = waitpid(kids[k], &st, 0);
		while (w < 0 && errno == EINTR);
		char m[600] = "";
		ssize_t n = read(res[k], m, sizeof m - 1);
		if (n > 0)
			m[n] = 0;
		if (w != kids[k])
			fid_fail("waitpid child %d: %s", k, strerror(errno));
		else
			FID_EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %#x: %s", k, st, m);
	}
	FID_EXPECT(holds(0, 5), "main: page 5 changed after the children wrote theirs");
	return fid_done();
}
