/*
 * mem_shared: shared anonymous memory across fork (usage: mem_shared LOG).
 *
 * Region A, 64 pages of MAP_SHARED|MAP_ANONYMOUS: the root fills pages
 * 0-15, a long-lived child ("echo") pages 16-31, a short-lived child pages
 * 32-47 before exiting (reaped before the start line: those pages are in
 * the object and in no process's page tables), pages 48-63 stay untouched.
 * Region B, 16 pages: the root unmaps pages 4-7 of its own mapping after
 * the fork (its two VMAs map offsets 0-3 and 8-15, none covers the object
 * whole), the echo child fills pages 4-7, the root pages 0-3 and 8-15.
 *
 * The root ticks every 20 ms (bumping a counter in A). SIGUSR1: the root
 * checks A's content, that A and B are still "/dev/zero (deleted)" on the
 * same device, with the same inode in root and child (then drops the pages
 * others wrote from its page tables again), then writes a token
 * in A and waits for the child to echo it: the child answers only after
 * verifying B (its pages 4-7 and the root's), so the memory is shared again
 * and right on both sides. SIGUSR2: the root kills the child, says bye.
 */
#include "victim.h"

#include <sys/mman.h>
#include <sys/wait.h>

#define PG 4096
#define A_PAGES 64
#define B_PAGES 16

static unsigned char *A, *B;
static pid_t echo;
static char a_dev[32], b_dev[32];

struct ctl {
	volatile uint64_t ticks;
	volatile uint64_t token;
	volatile uint64_t ack;
	char why[200];
};
#define CTL ((struct ctl *)(A + 15 * PG + 2048))

static uint64_t word(int region, size_t page, size_t i) { return mix64(((uint64_t)region << 40) ^ (page << 20) ^ i); }

static void fill(unsigned char *r, int region, size_t from, size_t to)
{
	for (size_t p = from; p < to; p++)
		for (size_t i = 0; i < PG / 8; i++)
			((uint64_t *)(r + p * PG))[i] = word(region, p, i);
}

/* check_fill checks pages [from, to); page 15 of A only up to CTL. */
static int check_fill(unsigned char *r, int region, size_t from, size_t to, char *why, size_t len)
{
	for (size_t p = from; p < to; p++)
		for (size_t i = 0; i < PG / 8; i++) {
			if (region == 0 && p == 15 && i >= 2048 / 8)
				break;
			if (((uint64_t *)(r + p * PG))[i] != word(region, p, i))
				return snprintf(why, len, "region %c page %zu word %zu differs", 'A' + region, p, i), -1;
		}
	return 0;
}

/* mapline finds the maps line of pid starting at addr: dev and inode/path. */
static int mapline(pid_t pid, void *addr, char *dev, size_t devlen, unsigned long *ino, char *path, size_t plen)
{
	char fn[64], line[512];
	snprintf(fn, sizeof fn, "/proc/%d/maps", pid);
	FILE *f = fopen(fn, "r");
	if (!f)
		return -1;
	int found = -1;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo;
		char d[32], p[256] = "";
		if (sscanf(line, "%lx-%*x %*s %*x %31s %lu %255[^\n]", &lo, d, ino, p) < 3)
			continue;
		if (lo == (unsigned long)addr) {
			snprintf(dev, devlen, "%s", d);
			snprintf(path, plen, "%s", p);
			found = 0;
			break;
		}
	}
	fclose(f);
	return found;
}

static void run_echo(void)
{
	fill(B, 1, 4, 8);
	fill(A, 0, 16, 32);
	uint64_t seen = 0;
	for (;;) {
		uint64_t t = CTL->token;
		if (t != seen) {
			seen = t;
			char why[160] = "";
			if (check_fill(B, 1, 0, B_PAGES, why, sizeof why) < 0) {
				snprintf(CTL->why, sizeof CTL->why, "echo child: %s", why);
				__sync_synchronize();
				CTL->ack = t | 1ULL << 63;
			} else {
				__sync_synchronize();
				CTL->ack = t;
			}
		}
		victim_sleep(2);
	}
}

static int check(char *why, size_t len)
{
	if (CTL->ticks != ticks)
		return snprintf(why, len, "shared tick counter %lu, want %lu", (unsigned long)CTL->ticks, ticks), -1;
	int bad = check_fill(A, 0, 0, 48, why, len);
	for (size_t i = 48 * PG; bad == 0 && i < A_PAGES * PG; i++)
		if (A[i])
			bad = (snprintf(why, len, "region A byte %zu not zero", i), -1);
	/* Reading faulted the other processes' pages into our page tables:
	 * drop them again (they stay in the object) for the next dump. */
	if (madvise(A + 16 * PG, (A_PAGES - 16) * PG, MADV_DONTNEED) < 0)
		return snprintf(why, len, "madvise: %s", strerror(errno)), -1;
	if (bad < 0)
		return -1;
	if (check_fill(B, 1, 0, 4, why, len) < 0 || check_fill(B, 1, 8, B_PAGES, why, len) < 0)
		return -1;
	struct {
		void *addr;
		const char *dev;
	} rs[] = {{A, a_dev}, {B, b_dev}, {B + 8 * PG, b_dev}};
	for (size_t k = 0; k < sizeof rs / sizeof rs[0]; k++) {
		char d[32], p[256], cd[32], cp[256];
		unsigned long ino, cino;
		if (mapline(getpid(), rs[k].addr, d, sizeof d, &ino, p, sizeof p) < 0)
			return snprintf(why, len, "no maps line at %p", rs[k].addr), -1;
		if (strcmp(p, "/dev/zero (deleted)") != 0 || strcmp(d, rs[k].dev) != 0)
			return snprintf(why, len, "mapping %p is %s on %s, want /dev/zero (deleted) on %s", rs[k].addr, p, d, rs[k].dev), -1;
		if (k == 2)
			break; /* the child maps B whole, from its start */
		if (mapline(echo, rs[k].addr, cd, sizeof cd, &cino, cp, sizeof cp) < 0)
			return snprintf(why, len, "child: no maps line at %p", rs[k].addr), -1;
		if (cino != ino)
			return snprintf(why, len, "mapping %p: inode %lu in the root, %lu in the child", rs[k].addr, ino, cino), -1;
	}
	uint64_t tok = (mix64(ticks) ^ (uint64_t)time(NULL)) & ~(1ULL << 63);
	if (tok == 0)
		tok = 1;
	CTL->token = tok;
	for (int i = 0; i < 2000 && (CTL->ack & ~(1ULL << 63)) != tok; i++)
		victim_sleep(1);
	if (CTL->ack == (tok | 1ULL << 63))
		return snprintf(why, len, "%s", CTL->why), -1;
	if (CTL->ack != tok)
		return snprintf(why, len, "the child did not echo token %#lx through shared memory (ack %#lx)",
				(unsigned long)tok, (unsigned long)CTL->ack), -1;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s LOG\n", argv[0]);
		return 2;
	}
	A = mmap(NULL, A_PAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	B = mmap(NULL, B_PAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (A == MAP_FAILED || B == MAP_FAILED)
		die("mmap");
	fill(A, 0, 0, 16);
	fill(B, 1, 0, 4);
	fill(B, 1, 8, B_PAGES);
	char p[256];
	unsigned long ino;
	if (mapline(getpid(), A, a_dev, sizeof a_dev, &ino, p, sizeof p) < 0 ||
	    mapline(getpid(), B, b_dev, sizeof b_dev, &ino, p, sizeof p) < 0)
		die("maps");
	pid_t once = fork();
	if (once < 0)
		die("fork");
	if (once == 0) {
		fill(A, 0, 32, 48);
		_exit(0);
	}
	int st;
	if (waitpid(once, &st, 0) != once || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		die("short-lived child");
	echo = fork();
	if (echo < 0)
		die("fork");
	if (echo == 0)
		run_echo();
	if (munmap(B + 4 * PG, 4 * PG) < 0)
		die("munmap");
	/* The child fills its pages and answers a first token before start. */
	CTL->token = 1;
	for (int i = 0; i < 5000 && CTL->ack != 1; i++)
		victim_sleep(1);
	if (CTL->ack != 1)
		die("echo child did not start");
	char extra[64];
	snprintf(extra, sizeof extra, "echo=%d", echo);
	victim_start(argc, argv, 1, "LOG", O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, extra);
	for (;;) {
		victim_sleep(20);
		CTL->ticks = ++ticks;
		vlog("tick %lu", ticks);
		if (want_bye) {
			kill(echo, SIGKILL);
			waitpid(echo, NULL, 0);
		}
		victim_poll(check);
	}
}
