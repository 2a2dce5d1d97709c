/*
 * proc_sched: scheduling state of each thread. The main thread has nice
 * 7 (SCHED_OTHER), CPU affinity {0}, I/O priority best-effort 3 and timer
 * slack 123456 ns; a second thread SCHED_BATCH nice 3 with
 * SCHED_RESET_ON_FORK, affinity {last CPU}, I/O priority idle, slack 777
 * ns; a third SCHED_FIFO priority 5, affinity all, I/O priority
 * best-effort 6, the default slack. Each must be the same after the
 * restore, read with sched_getattr, sched_getaffinity, ioprio_get and
 * PR_GET_TIMERSLACK from the thread itself.
 */
#include "fidelity.h"
#include <linux/ioprio.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#define N 3

/* struct fid_sched_attr of sched_setattr(2) (linux/sched/types.h clashes with
 * glibc's sched.h). */
struct fid_sched_attr {
	uint32_t size, sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime, sched_deadline, sched_period;
	uint32_t sched_util_min, sched_util_max;
};

struct want {
	int policy, nice, prio;
	uint64_t flags;
	int cpu; /* the one allowed CPU, -1 for all */
	int ioprio;
	unsigned long slack; /* 0: leave the default */
};

static struct want want[N];
static pid_t tids[N];
static int ncpu;
static pthread_barrier_t bar;
static char failed[N][256];

static int set(int i)
{
	struct want *w = &want[i];
	struct fid_sched_attr a = {.size = sizeof a, .sched_policy = w->policy, .sched_flags = w->flags,
			       .sched_nice = w->nice, .sched_priority = w->prio};
	if (syscall(SYS_sched_setattr, 0, &a, 0) < 0)
		return snprintf(failed[i], sizeof failed[i], "sched_setattr: %s", strerror(errno)), -1;
	if (w->cpu >= 0) {
		cpu_set_t s;
		CPU_ZERO(&s);
		CPU_SET(w->cpu, &s);
		if (sched_setaffinity(0, sizeof s, &s) < 0)
			return snprintf(failed[i], sizeof failed[i], "sched_setaffinity: %s", strerror(errno)), -1;
	}
	if (syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, w->ioprio) < 0)
		return snprintf(failed[i], sizeof failed[i], "ioprio_set: %s", strerror(errno)), -1;
	if (w->slack && prctl(PR_SET_TIMERSLACK, w->slack) < 0)
		return snprintf(failed[i], sizeof failed[i], "PR_SET_TIMERSLACK: %s", strerror(errno)), -1;
	return 0;
}

/* check compares thread i's state, read by itself, with want[i]. */
static void check(int i)
{
	struct want *w = &want[i];
	char *f = failed[i];
	size_t len = sizeof failed[i];
	struct fid_sched_attr a = {0};
	if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) < 0) {
		snprintf(f, len, "sched_getattr: %s", strerror(errno));
		return;
	}
	uint64_t flags = a.sched_flags & SCHED_FLAG_RESET_ON_FORK;
	if ((int)a.sched_policy != w->policy || flags != w->flags || (int)a.sched_priority != w->prio ||
	    (w->policy != SCHED_FIFO && a.sched_nice != w->nice)) {
		snprintf(f, len, "policy %u flags %#llx nice %d prio %u, want policy %d flags %#llx nice %d prio %d",
			 a.sched_policy, (unsigned long long)a.sched_flags, a.sched_nice, a.sched_priority,
			 w->policy, (unsigned long long)w->flags, w->nice, w->prio);
		return;
	}
	cpu_set_t s;
	if (sched_getaffinity(0, sizeof s, &s) < 0) {
		snprintf(f, len, "sched_getaffinity: %s", strerror(errno));
		return;
	}
	int n = CPU_COUNT(&s);
	if (w->cpu >= 0 ? (n != 1 || !CPU_ISSET(w->cpu, &s)) : n != ncpu) {
		snprintf(f, len, "affinity has %d CPUs (CPU %d %s), want %s", n, w->cpu,
			 w->cpu >= 0 && CPU_ISSET(w->cpu, &s) ? "in" : "not in", w->cpu >= 0 ? "just that one" : "all");
		return;
	}
	int io = syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0);
	if (io != w->ioprio) {
		snprintf(f, len, "ioprio %#x, want %#x", io, w->ioprio);
		return;
	}
	/* Real-time threads have no slack (Linux 6.7+: 0). */
	unsigned long ws = w->slack ? w->slack : w->policy == SCHED_FIFO ? 0 : 50000;
	unsigned long slack = prctl(PR_GET_TIMERSLACK);
	if (slack != ws) {
		snprintf(f, len, "timer slack %lu, want %lu", slack, ws);
		return;
	}
}

static void *worker(void *arg)
{
	int i = (int)(long)arg;
	tids[i] = syscall(SYS_gettid);
	set(i);
	pthread_barrier_wait(&bar);
	pthread_barrier_wait(&bar); /* after the restore: check */
	check(i);
	pthread_barrier_wait(&bar);
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	want[0] = (struct want){SCHED_OTHER, 7, 0, 0, 0, IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 3), 123456};
	want[1] = (struct want){SCHED_BATCH, 3, 0, SCHED_FLAG_RESET_ON_FORK, ncpu - 1, IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0), 777};
	want[2] = (struct want){SCHED_FIFO, 0, 5, 0, -1, IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 6), 0};
	pthread_barrier_init(&bar, NULL, N);
	tids[0] = getpid();
	for (long i = 1; i < N; i++) {
		pthread_t t;
		FID_SETUP(pthread_create(&t, NULL, worker, (void *)i) == 0, "pthread_create");
	}
	set(0);
	pthread_barrier_wait(&bar);
	for (int i = 0; i < N; i++)
		FID_SETUP(!failed[i][0], "thread %d: %s", i, failed[i]);
	check(0);
	FID_SETUP(!failed[0][0], "main before: %s", failed[0]);
	fid_ready();
	fid_wait();
	pthread_barrier_wait(&bar);
	check(0);
	pthread_barrier_wait(&bar);
	for (int i = 0; i < N; i++)
		FID_EXPECT(!failed[i][0], "thread %d (%s): %s", tids[i], i == 0 ? "main" : "worker", failed[i]);
	return fid_done();
}
