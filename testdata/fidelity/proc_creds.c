/*
 * proc_creds: credentials that differ per thread. The main thread (root)
 * drops CAP_SYS_BOOT and CAP_MKNOD from its bounding set, keeps a smaller
 * permitted and effective set, sets an inheritable set, raises an ambient
 * capability and sets securebits (keep-caps, no ambient raise, locked);
 * the other threads keep root's full sets. Then, with raw system calls
 * that change only the calling thread:
 *   thread 1: resuid 1000/1001/1002, resgid 2000/2001/2002, groups
 *             {3000, 3001, 3002} (keep-caps keeps its permitted set);
 *   thread 2: fsuid 555, fsgid 666, no_new_privs;
 *   thread 3: stays as the main thread.
 * Each thread snapshots its own ids, groups, capability sets,
 * no_new_privs and securebits; after the restore each must find the same.
 */
#include "fidelity.h"
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#define N 4
static const char *const keys[] = {"Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", NULL};
static char before[N][1024], after[N][1024], err[N][256];
static pthread_barrier_t bar;

static void snap(char *out)
{
	char s[900];
	fid_snapshot(keys, s, sizeof s);
	snprintf(out, 1024, "%s; securebits=%#x", s, prctl(PR_GET_SECUREBITS));
}

static void setup(int i)
{
	if (i == 1) {
		gid_t g[3] = {3000, 3001, 3002};
		if (syscall(SYS_setgroups, 3, g) < 0 || syscall(SYS_setresgid, 2000, 2001, 2002) < 0 ||
		    syscall(SYS_setresuid, 1000, 1001, 1002) < 0)
			snprintf(err[i], sizeof err[i], "thread 1 ids: %s", strerror(errno));
	} else if (i == 2) {
		syscall(SYS_setfsuid, 555);
		syscall(SYS_setfsgid, 666);
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
			snprintf(err[i], sizeof err[i], "thread 2 no_new_privs: %s", strerror(errno));
	}
}

static void *worker(void *arg)
{
	int i = (int)(long)arg;
	pthread_barrier_wait(&bar); /* process-wide setup done */
	setup(i);
	snap(before[i]);
	pthread_barrier_wait(&bar);
	pthread_barrier_wait(&bar); /* restored: look again */
	snap(after[i]);
	pthread_barrier_wait(&bar);
	for (;;)
		pause();
	return NULL;
}

static int capset3(uint64_t eff, uint64_t prm, uint64_t inh)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2] = {{(uint32_t)eff, (uint32_t)prm, (uint32_t)inh},
					      {(uint32_t)(eff >> 32), (uint32_t)(prm >> 32), (uint32_t)(inh >> 32)}};
	return syscall(SYS_capset, &h, d);
}

#define C(x) (1ULL << (x))

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	pthread_barrier_init(&bar, NULL, N);
	for (long i = 1; i < N; i++) {
		pthread_t t;
		FID_SETUP(pthread_create(&t, NULL, worker, (void *)i) == 0, "pthread_create");
	}
	/* Capabilities and securebits are per thread too: the main thread
	 * sets them after the workers started, which keep the full sets. */
	uint64_t prm = C(CAP_CHOWN) | C(CAP_DAC_OVERRIDE) | C(CAP_SETUID) | C(CAP_SETGID) | C(CAP_SETPCAP) |
		       C(CAP_NET_BIND_SERVICE) | C(CAP_SYS_ADMIN) | C(CAP_SYS_PTRACE);
	uint64_t eff = prm & ~C(CAP_DAC_OVERRIDE);
	uint64_t inh = C(CAP_NET_BIND_SERVICE) | C(CAP_CHOWN);
	FID_SETUP(prctl(PR_CAPBSET_DROP, CAP_SYS_BOOT) == 0 && prctl(PR_CAPBSET_DROP, CAP_MKNOD) == 0, "PR_CAPBSET_DROP");
	FID_SETUP(capset3(eff, prm, inh) == 0, "capset");
	FID_SETUP(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_BIND_SERVICE, 0, 0) == 0, "PR_CAP_AMBIENT_RAISE");
	FID_SETUP(prctl(PR_SET_SECUREBITS, SECBIT_KEEP_CAPS | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) == 0,
		  "PR_SET_SECUREBITS");
	pthread_barrier_wait(&bar);
	snap(before[0]);
	pthread_barrier_wait(&bar);
	for (int i = 0; i < N; i++)
		FID_SETUP(!err[i][0], "%s", err[i]);
	fid_ready();
	fid_wait();
	pthread_barrier_wait(&bar);
	snap(after[0]);
	pthread_barrier_wait(&bar);
	for (int i = 0; i < N; i++)
		FID_EXPECT(strcmp(before[i], after[i]) == 0, "thread %d: %s, want %s", i, after[i], before[i]);
	return fid_done();
}
