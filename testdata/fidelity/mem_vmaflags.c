/*
 * mem_vmaflags: attributes of mappings (VmFlags of smaps).
 *
 * Regions of 4 pages, each written, with one attribute: MADV_DONTFORK
 * (dc), MADV_WIPEONFORK (wf), MADV_DONTDUMP (dd), MADV_HUGEPAGE (hg),
 * MADV_NOHUGEPAGE (nh), MADV_RANDOM (rr), MADV_SEQUENTIAL (sr), mlock
 * (lo), mlock2(MLOCK_ONFAULT) with one page touched (lo lf), mseal (sl,
 * where the kernel has it), MAP_NORESERVE private and shared anonymous
 * memory (nr: no swap space reserved, not counted against overcommit).
 * After the restore each region has the same
 * VmFlags as before (all of them, compared as text), its content, and
 * behaves so: a forked child does not have the MADV_DONTFORK region and
 * sees the MADV_WIPEONFORK one zeroed, the locked regions are resident,
 * the sealed one cannot be unmapped. Last, mlockall(MCL_FUTURE|MCL_ONFAULT):
 * a mapping made after the restore is locked on fault.
 */
#include "fidelity.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define PG 4096
#define N 4

enum { DONTFORK, WIPEONFORK, DONTDUMP, HUGE, NOHUGE, RANDOM, SEQ, LOCKED, ONFAULT, SEALED, NORESERVE, SHNORESERVE, NREG };
static const char *names[NREG] = {"dontfork", "wipeonfork", "dontdump", "hugepage", "nohugepage",
				  "random", "sequential", "mlock", "mlock-onfault", "mseal",
				  "noreserve", "shared-noreserve"};
static unsigned char *reg[NREG];
static char flags[NREG][256];
static int present[NREG];

/* vmflags copies the VmFlags of the mapping starting at addr. */
static int vmflags(void *addr, char *out, size_t len)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	if (!f)
		return -1;
	char line[512];
	int in = 0, found = -1;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ' ') == line + strcspn(line, " ") &&
		    line[strcspn(line, "-")] == '-' && strstr(line, ":") && !strstr(line, "kB")) {
			in = lo == (unsigned long)addr;
			continue;
		}
		if (in && strncmp(line, "VmFlags:", 8) == 0) {
			line[strcspn(line, "\n")] = 0;
			snprintf(out, len, "%s", line + 8);
			found = 0;
			break;
		}
	}
	fclose(f);
	return found;
}

static unsigned char pat(int r, size_t i) { return (unsigned char)(r * 31 + i * 7 + (i >> 12)); }

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	/* One reservation, cut into regions with a guard page between each:
	 * neighbours never merge. */
	unsigned char *base = mmap(NULL, NREG * (N + 1) * PG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	FID_SETUP(base != MAP_FAILED, "mmap: %s", strerror(errno));
	for (int r = 0; r < NREG; r++) {
		reg[r] = base + r * (N + 1) * PG;
		int mf = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
		if (r == NORESERVE)
			mf |= MAP_NORESERVE;
		if (r == SHNORESERVE)
			mf = MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE;
		FID_SETUP(mmap(reg[r], N * PG, PROT_READ | PROT_WRITE, mf, -1, 0) == reg[r],
			  "mmap %s: %s", names[r], strerror(errno));
		size_t n = r == ONFAULT ? PG : N * PG;
		for (size_t i = 0; i < n; i++)
			reg[r][i] = pat(r, i);
	}
	static const int adv[] = {[DONTFORK] = MADV_DONTFORK, [WIPEONFORK] = MADV_WIPEONFORK, [DONTDUMP] = MADV_DONTDUMP,
				  [HUGE] = MADV_HUGEPAGE, [NOHUGE] = MADV_NOHUGEPAGE, [RANDOM] = MADV_RANDOM,
				  [SEQ] = MADV_SEQUENTIAL};
	for (int r = 0; r <= SEQ; r++) {
		present[r] = madvise(reg[r], N * PG, adv[r]) == 0;
		FID_SETUP(present[r] || r == HUGE || r == NOHUGE, "madvise %s: %s", names[r], strerror(errno));
	}
	present[LOCKED] = mlock(reg[LOCKED], N * PG) == 0;
	FID_SETUP(present[LOCKED], "mlock: %s", strerror(errno));
	present[ONFAULT] = mlock2(reg[ONFAULT], N * PG, MLOCK_ONFAULT) == 0;
	FID_SETUP(present[ONFAULT], "mlock2: %s", strerror(errno));
	present[SEALED] = syscall(462, reg[SEALED], N * PG, 0) == 0;
	for (int r = 0; r < NREG; r++)
		FID_SETUP(vmflags(reg[r], flags[r], sizeof flags[r]) == 0, "no VmFlags for %s", names[r]);
	/* (under vm.overcommit_memory=2 the kernel ignores MAP_NORESERVE) */
	FID_SETUP(strstr(flags[NORESERVE], " nr") && strstr(flags[SHNORESERVE], " nr"),
		  "MAP_NORESERVE regions show VmFlags '%s' and '%s', without nr", flags[NORESERVE], flags[SHNORESERVE]);
	FID_SETUP(mlockall(MCL_FUTURE | MCL_ONFAULT) == 0, "mlockall: %s", strerror(errno));

	fid_ready();
	fid_wait();

	for (int r = 0; r < NREG; r++) {
		char now[256] = "";
		FID_EXPECT(vmflags(reg[r], now, sizeof now) == 0 && strcmp(now, flags[r]) == 0,
			   "%s: VmFlags '%s', want '%s'", names[r], now, flags[r]);
		size_t n = r == ONFAULT ? PG : N * PG;
		size_t bad = 0;
		for (size_t i = 0; i < n && !bad; i++)
			if (reg[r][i] != pat(r, i))
				bad = i + 1;
		FID_EXPECT(!bad, "%s: byte %zu differs", names[r], bad - 1);
	}
	unsigned char vec[N];
	FID_EXPECT(mincore(reg[LOCKED], N * PG, vec) == 0 && (vec[0] & vec[1] & vec[2] & vec[3] & 1),
		   "mlock region not resident");
	FID_EXPECT(mincore(reg[ONFAULT], N * PG, vec) == 0 && (vec[0] & 1) && !(vec[1] & 1),
		   "mlock-onfault region: residency %d%d%d%d, want 1000", vec[0] & 1, vec[1] & 1, vec[2] & 1, vec[3] & 1);
	if (present[SEALED])
		FID_EXPECT(munmap(reg[SEALED], N * PG) < 0 && errno == EPERM, "sealed region could be unmapped");
	void *later = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char lf[256] = "";
	FID_EXPECT(later != MAP_FAILED && vmflags(later, lf, sizeof lf) == 0 && strstr(lf, " lo ") && strstr(lf, " lf "),
		   "a mapping made after the restore has VmFlags '%s': mlockall(MCL_FUTURE|MCL_ONFAULT) lost", lf);
	pid_t c = fork();
	if (c == 0) {
		int st = 0;
		if (mincore(reg[DONTFORK], PG, vec) == 0 || errno != ENOMEM)
			st |= 1;
		for (size_t i = 0; i < N * PG; i++)
			if (reg[WIPEONFORK][i])
				st |= 2;
		_exit(st);
	}
	int st;
	FID_EXPECT(c > 0 && waitpid(c, &st, 0) == c, "fork/wait: %s", strerror(errno));
	FID_EXPECT(c <= 0 || (WIFEXITED(st) && !(WEXITSTATUS(st) & 1)), "a forked child has the MADV_DONTFORK region");
	FID_EXPECT(c <= 0 || (WIFEXITED(st) && !(WEXITSTATUS(st) & 2)), "a forked child sees the MADV_WIPEONFORK region's data");
	return fid_done();
}
