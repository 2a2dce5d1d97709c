/*
 * proc_threadcomm: a different name (PR_SET_NAME) in each of three
 * threads; after the restore each thread's /proc comm and PR_GET_NAME
 * must be its own again.
 */
#include "fidelity.h"
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#define N 3
static const char *names[N] = {"fid-main", "worker-alpha", "w2"};
static pid_t tids[N];
static pthread_barrier_t bar;

static void *worker(void *arg)
{
	int i = (int)(long)arg;
	tids[i] = syscall(SYS_gettid);
	if (prctl(PR_SET_NAME, names[i]) < 0)
		tids[i] = -1;
	pthread_barrier_wait(&bar);
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	pthread_barrier_init(&bar, NULL, N);
	tids[0] = getpid();
	FID_SETUP(prctl(PR_SET_NAME, names[0]) == 0, "PR_SET_NAME");
	for (long i = 1; i < N; i++) {
		pthread_t t;
		FID_SETUP(pthread_create(&t, NULL, worker, (void *)i) == 0, "pthread_create");
	}
	pthread_barrier_wait(&bar);
	for (int i = 1; i < N; i++)
		FID_SETUP(tids[i] > 0, "thread %d PR_SET_NAME", i);
	fid_ready();
	fid_wait();
	for (int i = 0; i < N; i++) {
		char path[64], got[64] = "";
		snprintf(path, sizeof path, "/proc/self/task/%d/comm", tids[i]);
		FID_EXPECT(fid_read_file(path, got, sizeof got) == 0 && strcmp(got, names[i]) == 0,
			   "thread %d comm \"%s\", want %s", tids[i], got, names[i]);
	}
	char mine[32] = "";
	prctl(PR_GET_NAME, mine);
	FID_EXPECT(strcmp(mine, names[0]) == 0, "PR_GET_NAME %s, want %s", mine, names[0]);
	return fid_done();
}
