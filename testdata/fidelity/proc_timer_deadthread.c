/*
 * proc_timer_deadthread: POSIX timers whose signal goes to one thread
 * (SIGEV_THREAD_ID) that has exited since (zdtm dead_thread_posix_timer):
 * two timers on the same gone thread, one of them armed periodic, and a
 * timer of a live thread. The signals of the first two go nowhere. After
 * the restore /proc/self/timers shows the same timers (ids, signals,
 * notify thread/TID, clocks), timer_gettime works on them, and arming
 * them still queues no signal anywhere (SIGRTMIN and SIGRTMIN+1 are
 * blocked: sigpending stays empty; the live thread's timer still
 * signals its thread).
 *
 *   (no argument)  restored exactly;
 *   taken          a child process holds the gone thread's number (made
 *                  with clone3 set_tid): the restore could not make the
 *                  thread again, the dump refuses by name.
 */
#include "fidelity.h"
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

static timer_t gone1, gone2, live_timer;
static pid_t gone_tid;
static volatile pid_t live_tid;

static int make_timer(pid_t tid, int sig, timer_t *t)
{
	struct sigevent ev = {0};
	ev.sigev_notify = SIGEV_THREAD_ID;
	ev._sigev_un._tid = tid;
	ev.sigev_signo = sig;
	return timer_create(CLOCK_MONOTONIC, &ev, t);
}

static void *worker(void *arg)
{
	(void)arg;
	pid_t tid = syscall(SYS_gettid);
	gone_tid = tid;
	if (make_timer(tid, SIGRTMIN, &gone1) || make_timer(tid, SIGRTMIN + 1, &gone2))
		return (void *)1;
	struct itimerspec per = {.it_value = {.tv_sec = 0, .tv_nsec = 2000000}, .it_interval = {.tv_nsec = 3000000}};
	return timer_settime(gone2, 0, &per, NULL) == 0 ? NULL : (void *)1;
}

/* live waits for the signal of its own timer (SIGRTMIN+2, blocked),
 * armed after the restore. */
static void *live(void *arg)
{
	(void)arg;
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGRTMIN + 2);
	live_tid = syscall(SYS_gettid);
	struct timespec to = {120, 0};
	int r;
	do /* a stop (the dump's freeze) ends sigtimedwait with EINTR */
		r = sigtimedwait(&s, NULL, &to);
	while (r < 0 && errno == EINTR);
	return r == SIGRTMIN + 2 ? NULL : (void *)1;
}

/* timers copies the lines of /proc/self/timers. */
static void timers(char *out, size_t len)
{
	if (fid_read_file("/proc/self/timers", out, len) < 0)
		snprintf(out, len, "unreadable: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	int taken = argc > 2 && strcmp(argv[2], "taken") == 0;
	sigset_t rt;
	sigemptyset(&rt);
	sigaddset(&rt, SIGRTMIN);
	sigaddset(&rt, SIGRTMIN + 1);
	sigaddset(&rt, SIGRTMIN + 2);
	FID_SETUP(sigprocmask(SIG_BLOCK, &rt, NULL) == 0, "sigprocmask: %s", strerror(errno));
	pthread_t t, l;
	void *ret = (void *)1;
	FID_SETUP(pthread_create(&t, NULL, worker, NULL) == 0 && pthread_join(t, &ret) == 0 && ret == NULL,
		  "timer_create in a thread");
	FID_SETUP(pthread_create(&l, NULL, live, NULL) == 0, "pthread_create");
	while (!live_tid)
		sched_yield();
	FID_SETUP(make_timer(live_tid, SIGRTMIN + 2, &live_timer) == 0, "timer_create for a live thread: %s", strerror(errno));
	pid_t child = -1;
	if (taken) {
		/* A process with the gone thread's number (its struct pid is
		 * freed once the thread is reaped: the number is free). */
		struct {
			uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
				set_tid_size, cgroup;
		} ca = {0};
		pid_t want = gone_tid;
		ca.exit_signal = SIGCHLD;
		ca.set_tid = (uintptr_t)&want;
		ca.set_tid_size = 1;
		for (int i = 0; i < 200; i++) {
			child = syscall(SYS_clone3, &ca, sizeof ca);
			if (child >= 0 || errno != EEXIST)
				break;
			usleep(5000); /* the thread not reaped yet */
		}
		if (child == 0) {
			pause();
			_exit(0);
		}
		FID_SETUP(child == gone_tid, "clone3 with set_tid %d: %s", gone_tid, strerror(errno));
	}
	static char before[4096], after[4096];
	timers(before, sizeof before);
	fid_ready();
	fid_wait();
	timers(after, sizeof after);
	FID_EXPECT(strcmp(before, after) == 0, "/proc/self/timers was\n%s now\n%s", before, after);
	struct itimerspec its;
	FID_EXPECT(timer_gettime(gone1, &its) == 0, "timer_gettime: %s", strerror(errno));
	FID_EXPECT(timer_gettime(gone2, &its) == 0 && its.it_interval.tv_nsec == 3000000,
		   "periodic timer: %s, interval %ld ns", strerror(errno), its.it_interval.tv_nsec);
	struct itimerspec arm = {.it_value = {.tv_nsec = 1000000}};
	FID_EXPECT(timer_settime(gone1, 0, &arm, NULL) == 0, "timer_settime: %s", strerror(errno));
	FID_EXPECT(timer_settime(live_timer, 0, &arm, NULL) == 0, "timer_settime: %s", strerror(errno));
	FID_EXPECT(pthread_join(l, &ret) == 0 && ret == NULL, "the live thread's timer did not signal it");
	struct timespec ms = {0, 10000000};
	nanosleep(&ms, NULL);
	sigset_t pend;
	sigpending(&pend);
	FID_EXPECT(!sigismember(&pend, SIGRTMIN) && !sigismember(&pend, SIGRTMIN + 1),
		   "a signal of a timer of the gone thread is pending");
	FID_EXPECT(timer_delete(gone1) == 0 && timer_delete(gone2) == 0 && timer_delete(live_timer) == 0,
		   "timer_delete: %s", strerror(errno));
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	return fid_done();
}
