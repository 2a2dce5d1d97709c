/*
 * proc_threadctl: per-thread prctl state: the machine-check kill policy
 * (main thread late, thread 1 early, thread 2 the default), TSC access
 * (thread 2: rdtsc raises SIGSEGV) and the speculation controls as the
 * kernel reports them. Each thread reads its own after the restore.
 */
#include "fidelity.h"
#include <pthread.h>
#include <sys/prctl.h>

#define N 3
static pthread_barrier_t bar;
static char got[N][256], before[N][256];
static const int mce[N] = {PR_MCE_KILL_LATE, PR_MCE_KILL_EARLY, -1};

static void state(char *out)
{
	int tsc = -1;
	prctl(PR_GET_TSC, &tsc, 0, 0, 0);
	snprintf(out, 256, "mce=%d tsc=%d spec=%d/%d/%d", prctl(PR_MCE_KILL_GET, 0, 0, 0, 0), tsc,
		 prctl(PR_GET_SPECULATION_CTRL, PR_SPEC_STORE_BYPASS, 0, 0, 0),
		 prctl(PR_GET_SPECULATION_CTRL, PR_SPEC_INDIRECT_BRANCH, 0, 0, 0),
		 prctl(PR_GET_SPECULATION_CTRL, PR_SPEC_L1D_FLUSH, 0, 0, 0));
}

static void setup(int i)
{
	if (mce[i] >= 0 && prctl(PR_MCE_KILL, PR_MCE_KILL_SET, mce[i], 0, 0) < 0)
		snprintf(got[i], sizeof got[i], "PR_MCE_KILL: %s", strerror(errno));
	if (i == 2 && prctl(PR_SET_TSC, PR_TSC_SIGSEGV, 0, 0, 0) < 0)
		snprintf(got[i], sizeof got[i], "PR_SET_TSC: %s", strerror(errno));
}

static void *worker(void *arg)
{
	int i = (int)(long)arg;
	setup(i);
	if (!got[i][0])
		state(before[i]);
	pthread_barrier_wait(&bar);
	pthread_barrier_wait(&bar); /* restored */
	state(got[i]);
	pthread_barrier_wait(&bar);
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	pthread_barrier_init(&bar, NULL, N);
	for (long i = 1; i < N; i++) {
		pthread_t t;
		FID_SETUP(pthread_create(&t, NULL, worker, (void *)i) == 0, "pthread_create");
	}
	setup(0);
	state(before[0]);
	pthread_barrier_wait(&bar);
	for (int i = 0; i < N; i++)
		FID_SETUP(!got[i][0], "thread %d: %s", i, got[i]);
	fid_ready();
	fid_wait();
	pthread_barrier_wait(&bar);
	state(got[0]);
	pthread_barrier_wait(&bar);
	for (int i = 0; i < N; i++)
		FID_EXPECT(strcmp(got[i], before[i]) == 0, "thread %d: %s, want %s", i, got[i], before[i]);
	return fid_done();
}
