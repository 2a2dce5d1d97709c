/*
 * mem_numa WHAT: NUMA memory policies, node 0 (the one node every machine
 * has), checked from inside after the restore with get_mempolicy: the
 * mode with its flags and the nodemask.
 *
 *   mbind      mappings with a policy of their own: MPOL_BIND, and
 *              MPOL_INTERLEAVE|MPOL_F_STATIC_NODES, then MPOL_PREFERRED_MANY
 *              and MPOL_WEIGHTED_INTERLEAVE where the kernel has them; one
 *              mapping left with none (MPOL_F_ADDR says default). The
 *              threads keep the default policy.
 *   mempolicy  the same mappings, and a policy in each thread
 *              (set_mempolicy): the main thread
 *              MPOL_PREFERRED|MPOL_F_RELATIVE_NODES, a second
 *              MPOL_BIND|MPOL_F_NUMA_BALANCING (plain MPOL_BIND where the
 *              kernel has no balancing flag), a third MPOL_LOCAL. numa_maps
 *              then shows the main thread's policy for every mapping
 *              without one of its own.
 */
#include "fidelity.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define MPOL_DEFAULT 0
#define MPOL_PREFERRED 1
#define MPOL_BIND 2
#define MPOL_INTERLEAVE 3
#define MPOL_LOCAL 4
#define MPOL_PREFERRED_MANY 5
#define MPOL_WEIGHTED_INTERLEAVE 6
#define MPOL_F_NUMA_BALANCING (1 << 13)
#define MPOL_F_RELATIVE_NODES (1 << 14)
#define MPOL_F_STATIC_NODES (1 << 15)
#define MPOL_F_ADDR (1 << 1)

#define MASKWORDS 16 /* 1024 nodes */

struct pol {
	int mode;	    /* with flags; -1: not set (the kernel lacks it) */
	unsigned long node; /* the first word of the nodemask */
};

/* check compares the policy get_mempolicy gives (of the thread, or of the
 * mapping at addr) with want, and fails naming what if they differ. */
static void check(const char *what, void *addr, struct pol want)
{
	int mode = -1;
	unsigned long mask[MASKWORDS];
	memset(mask, 0xff, sizeof mask);
	long r = syscall(SYS_get_mempolicy, &mode, mask, MASKWORDS * 64, addr, addr ? MPOL_F_ADDR : 0);
	FID_EXPECT(r == 0, "%s: get_mempolicy: %s", what, strerror(errno));
	if (r != 0)
		return;
	for (int i = 1; i < MASKWORDS; i++)
		FID_EXPECT(mask[i] == 0, "%s: nodemask word %d %#lx", what, i, mask[i]);
	FID_EXPECT(mode == want.mode && mask[0] == want.node, "%s: mode %#x nodes %#lx, want mode %#x nodes %#lx", what, mode,
		   mask[0], want.mode, want.node);
}

static int set_policy(struct pol *p, int mode, int fallback)
{
	unsigned long node0 = 1;
	p->mode = mode;
	p->node = mode == MPOL_LOCAL ? 0 : 1;
	if (syscall(SYS_set_mempolicy, mode, mode == MPOL_LOCAL ? NULL : &node0, 64 + 1) == 0)
		return 0;
	if (fallback < 0 || errno != EINVAL)
		return -1;
	return set_policy(p, fallback, -1);
}

#define THREADS 3
static struct pol thread_pol[THREADS];
static int thread_ok[THREADS];
static pthread_barrier_t set_up, go;
static char thread_why[THREADS][256];
static pthread_mutex_t checking = PTHREAD_MUTEX_INITIALIZER; /* FID_EXPECT, one thread at a time */

static void *worker(void *arg)
{
	int i = (int)(long)arg;
	int r = i == 1 ? set_policy(&thread_pol[i], MPOL_BIND | MPOL_F_NUMA_BALANCING, MPOL_BIND)
		       : set_policy(&thread_pol[i], MPOL_LOCAL, -1);
	thread_ok[i] = r == 0;
	if (r != 0)
		snprintf(thread_why[i], sizeof thread_why[i], "set_mempolicy in thread %d: %s", i, strerror(errno));
	pthread_barrier_wait(&set_up);
	pthread_barrier_wait(&go);
	pthread_mutex_lock(&checking);
	check(i == 1 ? "thread 1 (bind)" : "thread 2 (local)", NULL, thread_pol[i]);
	pthread_mutex_unlock(&checking);
	return NULL;
}

#define MAPS 6
static const char *map_names[MAPS] = {"bind",		"interleave static",   "default",
				      "preferred many", "weighted interleave", "shared bind"};
static const int map_modes[MAPS] = {
	MPOL_BIND, MPOL_INTERLEAVE | MPOL_F_STATIC_NODES, MPOL_DEFAULT, MPOL_PREFERRED_MANY, MPOL_WEIGHTED_INTERLEAVE,
	MPOL_BIND | MPOL_F_RELATIVE_NODES};

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3 && (strcmp(argv[2], "mbind") == 0 || strcmp(argv[2], "mempolicy") == 0),
		  "usage: %s LOG mbind|mempolicy", argv[0]);
	int threads = strcmp(argv[2], "mempolicy") == 0;
	unsigned long node0 = 1;
	char *maps[MAPS];
	struct pol map_pol[MAPS];
	for (int i = 0; i < MAPS; i++) {
		int shared = i == MAPS - 1 ? MAP_SHARED : MAP_PRIVATE;
		maps[i] = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, shared | MAP_ANONYMOUS, -1, 0);
		FID_SETUP(maps[i] != MAP_FAILED, "mmap: %s", strerror(errno));
		map_pol[i].mode = map_modes[i];
		map_pol[i].node = map_modes[i] == MPOL_DEFAULT ? 0 : 1;
		if (map_modes[i] != MPOL_DEFAULT &&
		    syscall(SYS_mbind, maps[i], 4 * 4096, map_modes[i], &node0, 64 + 1, 0) != 0) {
			/* Only the two newest modes may be missing. */
			FID_SETUP((i == 3 || i == 4) && errno == EINVAL, "mbind %s: %s", map_names[i], strerror(errno));
			map_pol[i].mode = -1;
		}
		memset(maps[i], 'a' + i, 4 * 4096);
	}
	struct pol main_pol = {MPOL_DEFAULT, 0};
	pthread_t tids[THREADS];
	if (threads) {
		FID_SETUP(set_policy(&main_pol, MPOL_PREFERRED | MPOL_F_RELATIVE_NODES, -1) == 0, "set_mempolicy: %s",
			  strerror(errno));
		pthread_barrier_init(&set_up, NULL, THREADS);
		pthread_barrier_init(&go, NULL, THREADS);
		for (long i = 1; i < THREADS; i++)
			FID_SETUP(pthread_create(&tids[i], NULL, worker, (void *)i) == 0, "pthread_create");
		pthread_barrier_wait(&set_up);
		for (int i = 1; i < THREADS; i++)
			FID_SETUP(thread_ok[i], "%s", thread_why[i]);
	}
	fid_ready();
	fid_wait();
	check("main thread", NULL, main_pol);
	for (int i = 0; i < MAPS; i++) {
		char what[64];
		snprintf(what, sizeof what, "mapping %s", map_names[i]);
		if (map_pol[i].mode >= 0)
			check(what, maps[i], map_pol[i]);
		for (int k = 0; k < 4 * 4096; k += 4096)
			FID_EXPECT(maps[i][k] == 'a' + i, "mapping %s: content changed", map_names[i]);
	}
	if (threads) {
		pthread_barrier_wait(&go);
		for (int i = 1; i < THREADS; i++)
			pthread_join(tids[i], NULL);
	}
	return fid_done();
}
