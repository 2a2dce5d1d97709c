/*
 * proc_deadleader: the main thread gives itself a name and a signal mask
 * of its own, starts two threads that set state of their own (name, mask,
 * a signal pending in their own queue, a counter in shared memory), and
 * exits: pthread_exit, or with "code" the exit system call with status 5.
 * The leader is then a zombie thread while the process runs on. After the
 * restore the first thread checks from inside: the leader is still a
 * zombie thread (state Z, its name, mask and exit code), the process is
 * (Z, 3 threads) as /proc/self/status said before, the threads are there
 * with their TIDs and their own state, the memory the leader wrote and the
 * counter the second thread keeps increasing.
 *
 * With "child" all that happens in a child, which tells its findings to
 * the parent through a pipe; the parent then reaps it (its exit is seen
 * as after any other child's). With "pdeath" the leader has a parent-death
 * signal (SIGUSR1) when it exits, and the case runs in a grandchild: after
 * the restore its parent dies, and the first thread must get the signal
 * (the kernel sends the dead leader's too). With "seccomp" every thread
 * has a seccomp filter (allow all), which the dump refuses: the filters of
 * the dead leader cannot be read.
 */
#include "fidelity.h"
#include <pthread.h>
#include <stdatomic.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

static pid_t pid;
static pid_t tids[2];
static atomic_long counter;
static volatile long written; /* by the leader before it exits */
static pthread_barrier_t bar;
static int exit_code; /* the leader's exit status (exit system call) */
static int ready_w = -1, verdict_w = -1; /* "child": the pipes to the parent */
static int pdeath;                        /* "pdeath": SIGUSR1 blocked everywhere */

/* field returns field n (1-based) of /proc/self/task/TID/stat, or -1. */
static long long stat_field(pid_t tid, int n, char *state)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
	if (fid_read_file(path, buf, sizeof buf) < 0)
		return -1;
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	p += 2; /* field 3, the state */
	if (state)
		*state = *p;
	for (int f = 3; f < n; f++) {
		p = strchr(p, ' ');
		if (!p)
			return -1;
		p++;
	}
	return strtoll(p, NULL, 10);
}

static char leader_state(void)
{
	char s = '?';
	stat_field(pid, 3, &s);
	return s;
}

static void check_task(pid_t tid, const char *name, const char *sigblk)
{
	char path[64], got[64] = "", v[64] = "";
	snprintf(path, sizeof path, "/proc/self/task/%d/comm", tid);
	FID_EXPECT(fid_read_file(path, got, sizeof got) == 0 && strcmp(got, name) == 0,
		   "task %d comm \"%s\", want %s", tid, got, name);
	FID_EXPECT(fid_status(tid, "SigBlk", v, sizeof v) == 0 && strcmp(v, sigblk) == 0,
		   "task %d SigBlk %s, want %s", tid, v, sigblk);
}

static void *second(void *arg)
{
	(void)arg;
	tids[1] = syscall(SYS_gettid);
	prctl(PR_SET_NAME, "dl-second");
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &s, NULL);
	syscall(SYS_tgkill, pid, tids[1], SIGUSR1); /* stays pending, in its own queue */
	pthread_barrier_wait(&bar);
	for (;;) {
		atomic_fetch_add(&counter, 1);
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void *first(void *arg)
{
	(void)arg;
	tids[0] = syscall(SYS_gettid);
	prctl(PR_SET_NAME, "dl-first");
	pthread_barrier_wait(&bar);
	/* Ready once the leader is a zombie thread. */
	for (int i = 0; leader_state() != 'Z'; i++) {
		FID_SETUP(i < 10000, "the leader did not exit");
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	char before[64] = "", threads[16] = "";
	FID_SETUP(fid_status(0, "State", before, sizeof before) == 0, "status State");
	FID_SETUP(fid_status(0, "Threads", threads, sizeof threads) == 0 && strcmp(threads, "3") == 0,
		  "Threads %s, want 3", threads);
	if (ready_w >= 0)
		FID_SETUP(write(ready_w, "r", 1) == 1, "tell the parent");
	else
		fid_ready();
	if (pdeath) {
		sigset_t u;
		sigemptyset(&u);
		sigaddset(&u, SIGUSR1);
		struct timespec limit = {60, 0};
		int got;
		do
			got = sigtimedwait(&u, NULL, &limit);
		while (got < 0 && errno == EINTR);
		FID_EXPECT(got == SIGUSR1, "no parent-death signal from the dead leader when the parent died (%s)", strerror(errno));
		int own = -1;
		prctl(PR_GET_PDEATHSIG, &own);
		FID_EXPECT(own == 0, "first thread PR_GET_PDEATHSIG %d, want 0", own);
	} else
		fid_wait();

	char st = '?';
	long long code = stat_field(pid, 52, &st);
	FID_EXPECT(st == 'Z', "leader %d state %c, want Z", pid, st);
	FID_EXPECT(code == (long long)exit_code << 8, "leader exit code %lld, want %d", code, exit_code << 8);
	char after[64] = "";
	FID_EXPECT(fid_status(0, "State", after, sizeof after) == 0 && strcmp(after, before) == 0,
		   "process State \"%s\", want \"%s\"", after, before);
	FID_EXPECT(fid_status(0, "Threads", threads, sizeof threads) == 0 && strcmp(threads, "3") == 0,
		   "Threads %s, want 3", threads);
	FID_EXPECT(getpid() == pid, "getpid %d, want %d", getpid(), pid);
	FID_EXPECT(syscall(SYS_gettid) == tids[0], "gettid %ld, want %d", syscall(SYS_gettid), tids[0]);
	/* SIGTERM (fid_init), and the leader's SIGUSR2; SIGUSR1 in the second. */
	unsigned long long usr1 = pdeath ? 1ULL << (SIGUSR1 - 1) : 0;
	char mask[32];
	snprintf(mask, sizeof mask, "%016llx", 0x4800ULL | usr1);
	check_task(pid, "dl-leader", mask);
	snprintf(mask, sizeof mask, "%016llx", 0x4000ULL | usr1);
	check_task(tids[0], "dl-first", mask);
	check_task(tids[1], "dl-second", "0000000000004200");
	char pnd[32] = "";
	FID_EXPECT(fid_status(tids[1], "SigPnd", pnd, sizeof pnd) == 0 && strcmp(pnd, "0000000000000200") == 0,
		   "second thread SigPnd %s, want 0000000000000200", pnd);
	FID_EXPECT(fid_status(pid, "SigPnd", pnd, sizeof pnd) == 0 && strcmp(pnd, "0000000000000000") == 0,
		   "leader SigPnd %s, want 0", pnd);
	FID_EXPECT(written == 0x5eed, "memory the leader wrote: %#lx, want 0x5eed", written);
	/* Exactly the three tasks. */
	char path[64];
	int n = 0;
	for (int i = 0; i < 3; i++) {
		pid_t t = i == 0 ? pid : tids[i - 1];
		snprintf(path, sizeof path, "/proc/self/task/%d", t);
		n += access(path, F_OK) == 0;
	}
	FID_EXPECT(n == 3, "%d of the 3 tasks there", n);
	long c0 = atomic_load(&counter);
	int moved = 0;
	for (int i = 0; i < 5000 && !moved; i++) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
		moved = atomic_load(&counter) != c0;
	}
	FID_EXPECT(moved, "the second thread does not run (counter stays %ld)", c0);
	if (verdict_w >= 0) {
		if (fid_whylen && write(verdict_w, fid_why, fid_whylen) != (ssize_t)fid_whylen)
			_exit(3);
		_exit(fid_failed ? 1 : 0);
	}
	exit(fid_done());
	return NULL;
}

/* parent runs the case in a child, and collects its findings. */
static int parent(void)
{
	int ready[2], verdict[2];
	FID_SETUP(pipe2(ready, O_CLOEXEC) == 0 && pipe2(verdict, O_CLOEXEC) == 0, "pipe");
	pid_t c = fork();
	FID_SETUP(c >= 0, "fork");
	if (c == 0) {
		close(ready[0]);
		close(verdict[0]);
		if (pdeath) {
			pid_t d = fork();
			FID_SETUP(d >= 0, "fork");
			if (d > 0) {
				/* The case's parent: it dies on SIGTERM. */
				close(ready[1]);
				close(verdict[1]);
				fid_wait();
				_exit(0);
			}
		}
		ready_w = ready[1];
		verdict_w = verdict[1];
		return -1; /* go on as the case */
	}
	close(ready[1]);
	close(verdict[1]);
	char b;
	FID_SETUP(read(ready[0], &b, 1) == 1, "the child did not get ready");
	fid_ready();
	fid_wait();
	FID_EXPECT(kill(c, SIGTERM) == 0, "kill the child %d: %s", c, strerror(errno));
	char why[2048];
	size_t n = 0;
	ssize_t r;
	while (n < sizeof why - 1 && ((r = read(verdict[0], why + n, sizeof why - 1 - n)) > 0 || (r < 0 && errno == EINTR)))
		if (r > 0)
			n += r;
	why[n] = 0;
	FID_EXPECT(n == 0, "child: %s", why);
	int ws;
	pid_t w;
	do
		w = waitpid(c, &ws, 0);
	while (w < 0 && errno == EINTR);
	FID_EXPECT(w == c && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "child %d: waitpid %d status %#x", c, w, ws);
	return fid_done();
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	pdeath = argc > 2 && strcmp(argv[2], "pdeath") == 0;
	if (argc > 2 && (strcmp(argv[2], "child") == 0 || pdeath)) {
		int ret = parent();
		if (ret >= 0)
			return ret;
	}
	pid = getpid();
	exit_code = argc > 2 && strcmp(argv[2], "code") == 0 ? 5 : 0;
	if (argc > 2 && strcmp(argv[2], "seccomp") == 0) {
		struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
		struct sock_fprog prog = {.len = 1, .filter = &allow};
		FID_SETUP(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "PR_SET_NO_NEW_PRIVS");
		FID_SETUP(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0, "seccomp");
	}
	FID_SETUP(prctl(PR_SET_NAME, "dl-leader") == 0, "PR_SET_NAME");
	if (pdeath) {
		sigset_t u;
		sigemptyset(&u);
		sigaddset(&u, SIGUSR1);
		pthread_sigmask(SIG_BLOCK, &u, NULL);
	}
	pthread_barrier_init(&bar, NULL, 3);
	pthread_t t;
	FID_SETUP(pthread_create(&t, NULL, first, NULL) == 0, "pthread_create");
	FID_SETUP(pthread_create(&t, NULL, second, NULL) == 0, "pthread_create");
	pthread_barrier_wait(&bar);
	written = 0x5eed;
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &s, NULL);
	if (pdeath)
		FID_SETUP(prctl(PR_SET_PDEATHSIG, SIGUSR1) == 0, "PR_SET_PDEATHSIG");
	if (exit_code)
		syscall(SYS_exit, exit_code);
	pthread_exit(NULL);
}
