/*
 * mem_shared: shared anonymous memory across fork.
 *
 * Region A, 64 pages of MAP_SHARED|MAP_ANONYMOUS: the main process fills
 * pages 0-15, a long-lived child ("echo") pages 16-31, a short-lived child
 * pages 32-47 before exiting (those pages are in the object and in no
 * process's page tables), pages 48-63 stay untouched. Region B, 16 pages:
 * the main process unmaps pages 4-7 of its own mapping after the fork (no
 * VMA of it covers the object whole), the echo child fills them.
 *
 * Region C: a 1-page object whose mapping mremap grew to 2 pages: its
 * second page raises SIGBUS (past the object's size).
 *
 * After the restore: A's and B's content, both still "/dev/zero (deleted)"
 * on the same device with the same inode in both processes, and the child
 * echoes a token through A after verifying B, so the memory is shared
 * again and right on both sides.
 */
#include "fidelity.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

static inline uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static void nap(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}
#define PG 4096
#define A_PAGES 64
#define B_PAGES 16

static unsigned char *A, *B;
static pid_t echo;
static char a_dev[32], b_dev[32];

struct ctl {
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
		nap(2);
	}
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	A = mmap(NULL, A_PAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	B = mmap(NULL, B_PAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	FID_SETUP(A != MAP_FAILED && B != MAP_FAILED, "mmap");
	fill(A, 0, 0, 16);
	fill(B, 1, 0, 4);
	fill(B, 1, 8, B_PAGES);
	char p[256];
	unsigned long ino;
	FID_SETUP(mapline(getpid(), A, a_dev, sizeof a_dev, &ino, p, sizeof p) == 0 &&
		  mapline(getpid(), B, b_dev, sizeof b_dev, &ino, p, sizeof p) == 0, "maps");
	pid_t once = fork();
	FID_SETUP(once >= 0, "fork");
	if (once == 0) {
		fill(A, 0, 32, 48);
		_exit(0);
	}
	int st;
	FID_SETUP(waitpid(once, &st, 0) == once && WIFEXITED(st) && WEXITSTATUS(st) == 0, "short-lived child");
	echo = fork();
	FID_SETUP(echo >= 0, "fork");
	if (echo == 0)
		run_echo();
	FID_SETUP(munmap(B + 4 * PG, 4 * PG) == 0, "munmap");
	unsigned char *C = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	FID_SETUP(C != MAP_FAILED, "mmap C");
	C[7] = 0x42;
	C = mremap(C, PG, 2 * PG, MREMAP_MAYMOVE);
	FID_SETUP(C != MAP_FAILED, "mremap C");
	CTL->token = 1;
	for (int i = 0; i < 5000 && CTL->ack != 1; i++)
		nap(1);
	FID_SETUP(CTL->ack == 1, "echo child did not start");
	fid_ready();
	fid_wait();

	char wa[200] = "";
	FID_EXPECT(check_fill(A, 0, 0, 48, wa, sizeof wa) == 0, "%s", wa);
	for (size_t i = 48 * PG; i < A_PAGES * PG; i++)
		if (A[i]) {
			FID_EXPECT(0, "region A byte %zu not zero", i);
			break;
		}
	char why[200] = "";
	FID_EXPECT(check_fill(B, 1, 0, 4, why, sizeof why) == 0 && check_fill(B, 1, 8, B_PAGES, why, sizeof why) == 0, "%s", why);
	void *addrs[] = {A, B, B + 8 * PG};
	const char *devs[] = {a_dev, b_dev, b_dev};
	for (int k = 0; k < 3; k++) {
		char d[32] = "", path[256] = "", cd[32], cp[256];
		unsigned long i1 = 0, i2 = 0;
		FID_EXPECT(mapline(getpid(), addrs[k], d, sizeof d, &i1, path, sizeof path) == 0 &&
			   strcmp(path, "/dev/zero (deleted)") == 0 && strcmp(d, devs[k]) == 0,
			   "mapping %p is '%s' on %s, want /dev/zero (deleted) on %s", addrs[k], path, d, devs[k]);
		if (k < 2)
			FID_EXPECT(mapline(echo, addrs[k], cd, sizeof cd, &i2, cp, sizeof cp) == 0 && i1 == i2,
				   "mapping %p: inode %lu here, %lu in the child", addrs[k], i1, i2);
	}
	uint64_t tok = (mix64((uint64_t)time(NULL)) | 2) & ~(1ULL << 63);
	CTL->token = tok;
	for (int i = 0; i < 2000 && (CTL->ack & ~(1ULL << 63)) != tok; i++)
		nap(1);
	FID_EXPECT(CTL->ack != (tok | 1ULL << 63), "%s", CTL->why);
	FID_EXPECT((CTL->ack & ~(1ULL << 63)) == tok, "the child did not echo a token through shared memory");
	FID_EXPECT(C[7] == 0x42, "region C byte 7 is %#x", C[7]);
	pid_t probe = fork();
	if (probe == 0) {
		C[PG] = 1;
		_exit(0);
	}
	FID_EXPECT(probe > 0 && waitpid(probe, &st, 0) == probe && WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS,
		   "region C past the object's size does not raise SIGBUS (status %#x)", st);
	kill(echo, SIGKILL);
	waitpid(echo, NULL, 0);
	return fid_done();
}
