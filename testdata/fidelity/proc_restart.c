/*
 * proc_restart: threads blocked, with no signal handler, in the calls the
 * kernel resumes through restart_syscall after a stop: poll with a
 * timeout, clock_nanosleep (glibc's nanosleep), the raw nanosleep call,
 * and a futex wait with a timeout. Each must end as it would have without
 * the checkpoint (poll 0, the sleeps 0, the futex ETIMEDOUT), never with
 * EINTR, which the kernel gives only after a signal handler ran.
 */
#include "fidelity.h"
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>

#define N 4
#define WAIT_MS 2500
static long ret[N];
static int err[N];
static int pipefd[2];
static int futex_word;
static pthread_barrier_t bar;

static void *waiter(void *arg)
{
	int i = (int)(long)arg;
	struct timespec ts = {WAIT_MS / 1000, (WAIT_MS % 1000) * 1000000L};
	pthread_barrier_wait(&bar);
	errno = 0;
	switch (i) {
	case 0: {
		struct pollfd p = {pipefd[0], POLLIN, 0};
		ret[i] = poll(&p, 1, WAIT_MS);
		break;
	}
	case 1:
		ret[i] = nanosleep(&ts, NULL); /* clock_nanosleep in glibc */
		break;
	case 2:
		ret[i] = syscall(SYS_nanosleep, &ts, NULL);
		break;
	case 3:
		ret[i] = syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
		break;
	}
	err[i] = errno;
	return NULL;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(pipe(pipefd) == 0, "pipe");
	pthread_barrier_init(&bar, NULL, N + 1);
	pthread_t t[N];
	for (long i = 0; i < N; i++)
		FID_SETUP(pthread_create(&t[i], NULL, waiter, (void *)i) == 0, "pthread_create");
	pthread_barrier_wait(&bar);
	/* Let every waiter enter its call before the checkpoint. */
	struct timespec settle = {0, 50000000};
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &settle, &settle) == EINTR)
		;
	fid_ready();
	fid_wait();
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	static const char *what[N] = {"poll", "nanosleep (clock_nanosleep)", "raw nanosleep", "futex wait"};
	for (int i = 0; i < 3; i++)
		FID_EXPECT(ret[i] == 0, "%s returned %ld (%s), want 0 (timed out)", what[i], ret[i], strerror(err[i]));
	FID_EXPECT(ret[3] == -1 && err[3] == ETIMEDOUT, "futex wait returned %ld (%s), want ETIMEDOUT",
		   ret[3], strerror(err[3]));
	return fid_done();
}
