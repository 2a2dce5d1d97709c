/*
 * proc_timer_deadthread: a POSIX timer whose signal goes to one thread
 * (SIGEV_THREAD_ID) that has exited since. Its signals go nowhere, and
 * timer_create cannot name a thread that is gone: the dump refuses,
 * naming the timer and the thread, and the case goes on with its timer
 * (timer_gettime still works, arming it is harmless).
 */
#include "fidelity.h"
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>

static timer_t tid_timer;

static void *worker(void *arg)
{
	(void)arg;
	struct sigevent ev = {0};
	ev.sigev_notify = SIGEV_THREAD_ID;
	ev._sigev_un._tid = syscall(SYS_gettid);
	ev.sigev_signo = SIGRTMIN;
	return timer_create(CLOCK_MONOTONIC, &ev, &tid_timer) == 0 ? NULL : (void *)1;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	pthread_t t;
	void *ret = (void *)1;
	FID_SETUP(pthread_create(&t, NULL, worker, NULL) == 0 && pthread_join(t, &ret) == 0 && ret == NULL,
		  "timer_create in a thread");
	fid_ready();
	fid_wait();
	struct itimerspec its;
	FID_EXPECT(timer_gettime(tid_timer, &its) == 0, "timer_gettime: %s", strerror(errno));
	struct itimerspec arm = {.it_value = {.tv_nsec = 1000000}};
	FID_EXPECT(timer_settime(tid_timer, 0, &arm, NULL) == 0, "timer_settime: %s", strerror(errno));
	struct timespec ms = {0, 5000000};
	nanosleep(&ms, NULL);
	FID_EXPECT(timer_delete(tid_timer) == 0, "timer_delete: %s", strerror(errno));
	return fid_done();
}
