/*
 * mthreads: a multi-threaded victim (usage: mthreads LOG), built with
 * -pthread.
 *
 * The main thread ticks every 20 ms as in victim.h (only it writes to the
 * log, and only it takes SIGUSR1/SIGUSR2: every other thread blocks them).
 * Nine more threads, each with its own name (pthread_setname_np), its own
 * signal mask (SIGHUP, SIGUSR1, SIGUSR2 and SIGRTMIN+index) and its TID
 * recorded at start:
 *
 *   mt-work0..3  compute in bursts of ~1 ms (a running thread is caught in
 *                user mode with its sums in registers), then sleep 5 ms;
 *                each mutates its own buffer (worker 0: .bss, 1: an
 *                mmap'd malloc block, 2: its stack, 3: a __thread array)
 *                keeping a sum and an xor of it, and counts iterations in
 *                a __thread counter; worker 0 runs with a sigaltstack;
 *   mt-condw     blocked in pthread_cond_wait; the main thread wakes it for
 *                every check, it verifies itself and waits again;
 *   mt-feed      writes one byte of a known sequence to a pipe every 10 ms;
 *   mt-read      blocked in read(2) on that pipe, checks every byte (no
 *                gap, no repeat); no signal handler runs in it, so read
 *                must never fail with EINTR (a restore restarts it);
 *   mt-sleep     nanosleep(5 ms) in a loop; CLOCK_MONOTONIC must not go
 *                back;
 *   mt-epoll     blocked in epoll_wait(-1) on two eventfds: one the main
 *                thread adds the tick number to at every tick, one it
 *                writes to ask for a check; the sum of what it reads must
 *                be the sum of what was written.
 *
 * A check (SIGUSR1) asks every thread to verify itself (TID, name, signal
 * mask, TLS values and their address, buffer sums, altstack, sequences)
 * and waits for all of them to answer; it then verifies that every thread
 * made progress since the last check, and that /proc/self/task holds
 * exactly the TIDs recorded at start with their names. A thread that finds
 * something wrong outside a check makes the main thread write a check FAIL
 * line at its next tick.
 *
 * On SIGUSR2 the main thread first cancels every thread (pthread_cancel:
 * glibc's SIGCANCEL, unwinding) and joins it (the kernel's clear_child_tid
 * futex wake must come, at the address glibc set), writing a check FAIL
 * line for any that does not end as cancelled within 3 s; then bye.
 */
#include "victim.h"
#include <pthread.h>
#include <dirent.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#define NWORK 4
#define NTHR (NWORK + 5) /* besides the main thread */
#define T_CONDW (NWORK + 0)
#define T_FEED (NWORK + 1)
#define T_READ (NWORK + 2)
#define T_SLEEP (NWORK + 3)
#define T_EPOLL (NWORK + 4)
#define TLS_MAGIC 0x7153c0ffee5eed01ULL
#define BURST 30000

struct thr {
	int idx;
	char name[16];
	pthread_t pt;
	pid_t tid;                  /* gettid() at start */
	unsigned long *tls_addr;    /* &tls_count in that thread */
	unsigned long progress;     /* grows while the thread works (atomic) */
	unsigned long acked;        /* last check generation answered (atomic) */
	unsigned long ack_progress; /* progress when it answered */
	unsigned long last_checked; /* ack_progress at the previous check */
	int failed;                 /* sticky: fail holds what (atomic) */
	int reported;               /* the main thread wrote a FAIL line for it */
	char fail[160];
	/* worker state */
	uint64_t *w;
	size_t n;
	uint64_t sum, xor; /* of w[] */
	unsigned long count_mirror; /* == tls_count after each burst */
};

static struct thr thr[NTHR];
static unsigned long check_gen; /* atomic */
static int ready;               /* threads started (atomic) */

static __thread unsigned long tls_count;
static __thread volatile uint64_t tls_magic = TLS_MAGIC;
static __thread int tls_idx = -1;
static __thread uint64_t tls_words[2048]; /* worker 3's buffer: 16 KiB */
static uint64_t bss_words[8192];          /* worker 0's buffer: 64 KiB */

static pthread_mutex_t cmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ccv = PTHREAD_COND_INITIALIZER;
static unsigned long cond_gen, cond_seen; /* under cmu */

static int pipefd[2];
static unsigned long fed, got; /* bytes written / read (atomic) */

static int ev_data, ev_wake;
static unsigned long ev_written; /* sum of what main added to ev_data (atomic) */
static unsigned long ev_read;    /* the epoll thread's */

static char altstack[64 << 10];

#define LOAD(p) __atomic_load_n(p, __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n(p, v, __ATOMIC_SEQ_CST)

static unsigned char seq_byte(unsigned long i) { return (unsigned char)(i * 13 + 5); }

/* fail records the first thing a thread found wrong; it returns -1. */
static int fail(struct thr *me, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct thr *me, const char *fmt, ...)
{
	if (LOAD(&me->failed))
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(me->fail, sizeof me->fail, fmt, ap);
	va_end(ap);
	STORE(&me->failed, 1);
	return -1;
}

static void thread_sigmask(int idx, sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGUSR1);
	sigaddset(set, SIGUSR2);
	sigaddset(set, SIGRTMIN + idx);
}

static void thread_start(struct thr *me)
{
	sigset_t set;
	thread_sigmask(me->idx, &set);
	if (pthread_sigmask(SIG_SETMASK, &set, NULL) != 0)
		die("pthread_sigmask");
	if (pthread_setname_np(pthread_self(), me->name) != 0)
		die("pthread_setname_np");
	me->tid = gettid();
	tls_idx = me->idx;
	me->tls_addr = &tls_count;
	__atomic_add_fetch(&ready, 1, __ATOMIC_SEQ_CST);
}

static void buf_sums(const uint64_t *w, size_t n, uint64_t *sum, uint64_t *xor)
{
	uint64_t s = 0, x = 0;
	for (size_t i = 0; i < n; i++)
		s += w[i], x ^= w[i];
	*sum = s, *xor = x;
}

/* verify checks what every thread can check about itself. */
static int verify(struct thr *me)
{
	char name[32] = "";
	sigset_t cur, want;
	if (gettid() != me->tid)
		return fail(me, "%s: gettid %d, want %d", me->name, gettid(), me->tid);
	if (prctl(PR_GET_NAME, name) < 0 || strcmp(name, me->name) != 0)
		return fail(me, "%s: PR_GET_NAME %s", me->name, name);
	if (tls_magic != TLS_MAGIC || tls_idx != me->idx || &tls_count != me->tls_addr)
		return fail(me, "%s: TLS magic %#lx idx %d addr %p want %p", me->name,
			    (unsigned long)tls_magic, tls_idx, (void *)&tls_count, (void *)me->tls_addr);
	thread_sigmask(me->idx, &want);
	if (pthread_sigmask(SIG_BLOCK, NULL, &cur) != 0)
		return fail(me, "%s: pthread_sigmask query", me->name);
	for (int s = 1; s <= SIGRTMAX; s++)
		if (sigismember(&cur, s) != sigismember(&want, s))
			return fail(me, "%s: signal %d %sblocked", me->name, s, sigismember(&cur, s) ? "" : "not ");
	if (me->w) {
		uint64_t s, x;
		buf_sums(me->w, me->n, &s, &x);
		if (s != me->sum || x != me->xor)
			return fail(me, "%s: buffer sum %#lx xor %#lx, want %#lx %#lx", me->name,
				    (unsigned long)s, (unsigned long)x, (unsigned long)me->sum, (unsigned long)me->xor);
		if (tls_count != me->count_mirror)
			return fail(me, "%s: TLS count %lu, want %lu", me->name, tls_count, me->count_mirror);
	}
	if (me->idx == 0) {
		stack_t ss;
		if (sigaltstack(NULL, &ss) < 0 || ss.ss_sp != altstack || ss.ss_size != sizeof altstack ||
		    ss.ss_flags != 0)
			return fail(me, "%s: sigaltstack %p size %zu flags %d", me->name, ss.ss_sp, ss.ss_size,
				    ss.ss_flags);
	}
	return 0;
}

/* service answers a pending check request; extra verifies more. */
static void service(struct thr *me, void (*extra)(struct thr *))
{
	unsigned long g = LOAD(&check_gen);
	if (LOAD(&me->acked) == g)
		return;
	verify(me);
	if (extra)
		extra(me);
	me->ack_progress = LOAD(&me->progress);
	STORE(&me->acked, g);
}

static void msleep(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&ts, NULL); /* EINTR just ends it early */
}

static void *worker(void *arg)
{
	struct thr *me = arg;
	uint64_t stack_words[4096]; /* worker 2's buffer: 32 KiB */
	thread_start(me);
	switch (me->idx) {
	case 0:
		me->w = bss_words, me->n = sizeof bss_words / 8;
		stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack};
		if (sigaltstack(&ss, NULL) < 0)
			die("sigaltstack");
		break;
	case 1:
		me->n = (512 << 10) / 8;
		if (!(me->w = malloc(me->n * 8)))
			die("malloc");
		break;
	case 2:
		me->w = stack_words, me->n = sizeof stack_words / 8;
		break;
	case 3:
		me->w = tls_words, me->n = sizeof tls_words / 8;
		break;
	}
	uint64_t seed = mix64(0xabcdef00 + me->idx);
	for (size_t i = 0; i < me->n; i++)
		me->w[i] = mix64(seed ^ i);
	buf_sums(me->w, me->n, &me->sum, &me->xor);
	for (;;) {
		uint64_t s = me->sum, x = me->xor, *w = me->w;
		unsigned long c = tls_count;
		for (int k = 0; k < BURST; k++) {
			uint64_t h = mix64(++c ^ seed);
			uint64_t *p = &w[h % me->n];
			uint64_t v = mix64(*p ^ h);
			s += v - *p;
			x ^= v ^ *p;
			*p = v;
		}
		me->sum = s, me->xor = x;
		tls_count = me->count_mirror = c;
		STORE(&me->progress, c);
		service(me, NULL);
		msleep(5);
	}
	return NULL;
}

static void *condw(void *arg)
{
	struct thr *me = arg;
	thread_start(me);
	for (;;) {
		pthread_mutex_lock(&cmu);
		while (cond_seen == cond_gen)
			pthread_cond_wait(&ccv, &cmu);
		cond_seen = cond_gen;
		pthread_mutex_unlock(&cmu);
		__atomic_add_fetch(&me->progress, 1, __ATOMIC_SEQ_CST);
		service(me, NULL);
	}
	return NULL;
}

static void *feeder(void *arg)
{
	struct thr *me = arg;
	thread_start(me);
	for (;;) {
		unsigned char b = seq_byte(fed);
		ssize_t n = write(pipefd[1], &b, 1);
		if (n != 1 && !(n < 0 && errno == EINTR))
			fail(me, "pipe write %zd: %s", n, strerror(errno));
		if (n == 1) {
			__atomic_add_fetch(&fed, 1, __ATOMIC_SEQ_CST);
			__atomic_add_fetch(&me->progress, 1, __ATOMIC_SEQ_CST);
		}
		service(me, NULL);
		msleep(10);
	}
	return NULL;
}

static void *reader(void *arg)
{
	struct thr *me = arg;
	thread_start(me);
	for (;;) {
		unsigned char b[64];
		ssize_t n = read(pipefd[0], b, sizeof b);
		if (n < 0 && errno == EINTR) {
			/* No handler ever runs in this thread: a read stopped by
			 * a checkpoint must be restarted, as the kernel does. */
			fail(me, "read on the pipe failed with EINTR");
			continue;
		}
		if (n <= 0) {
			fail(me, "pipe read %zd: %s", n, n < 0 ? strerror(errno) : "EOF");
			msleep(10);
			continue;
		}
		for (ssize_t i = 0; i < n; i++) {
			unsigned long at = LOAD(&got);
			if (b[i] != seq_byte(at))
				fail(me, "pipe byte %lu is %#x, want %#x (fed %lu)", at, b[i], seq_byte(at), LOAD(&fed));
			STORE(&got, at + 1);
		}
		__atomic_add_fetch(&me->progress, 1, __ATOMIC_SEQ_CST);
		service(me, NULL);
	}
	return NULL;
}

static void *sleeper(void *arg)
{
	struct thr *me = arg;
	struct timespec last, now;
	thread_start(me);
	clock_gettime(CLOCK_MONOTONIC, &last);
	for (;;) {
		msleep(5);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec < last.tv_sec || (now.tv_sec == last.tv_sec && now.tv_nsec < last.tv_nsec))
			fail(me, "CLOCK_MONOTONIC went back from %ld.%09ld to %ld.%09ld", (long)last.tv_sec,
			     last.tv_nsec, (long)now.tv_sec, now.tv_nsec);
		last = now;
		__atomic_add_fetch(&me->progress, 1, __ATOMIC_SEQ_CST);
		service(me, NULL);
	}
	return NULL;
}

/* ev_drain reads what the main thread added to ev_data. */
static void ev_drain(struct thr *me)
{
	uint64_t v;
	ssize_t n = read(ev_data, &v, 8);
	if (n == 8)
		ev_read += v;
	else if (!(n < 0 && (errno == EAGAIN || errno == EINTR)))
		fail(me, "eventfd read %zd: %s", n, strerror(errno));
}

/* ev_verify runs while the main thread waits for answers, so adds nothing. */
static void ev_verify(struct thr *me)
{
	ev_drain(me);
	if (ev_read != LOAD(&ev_written))
		fail(me, "eventfd: read %lu in all, want %lu", ev_read, LOAD(&ev_written));
}

static void *epoller(void *arg)
{
	struct thr *me = arg;
	thread_start(me);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	struct epoll_event e = {.events = EPOLLIN, .data.u64 = 0xda7a};
	if (epoll_ctl(ep, EPOLL_CTL_ADD, ev_data, &e) < 0)
		die("epoll_ctl");
	e.data.u64 = 0x3a4e;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, ev_wake, &e) < 0)
		die("epoll_ctl");
	for (;;) {
		struct epoll_event evs[4];
		int n = epoll_wait(ep, evs, 4, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fail(me, "epoll_wait %d: %s", n, n < 0 ? strerror(errno) : "nothing");
			msleep(10);
			continue;
		}
		for (int i = 0; i < n; i++) {
			uint64_t v;
			if (evs[i].data.u64 == 0xda7a)
				ev_drain(me);
			else if (evs[i].data.u64 == 0x3a4e)
				(void)!read(ev_wake, &v, 8);
			else
				fail(me, "epoll data %#lx", (unsigned long)evs[i].data.u64);
		}
		__atomic_add_fetch(&me->progress, 1, __ATOMIC_SEQ_CST);
		service(me, ev_verify);
	}
	return NULL;
}

/* check_tasks compares /proc/self/task with the TIDs and names recorded. */
static int check_tasks(char *why, size_t len)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return snprintf(why, len, "opendir /proc/self/task: %s", strerror(errno)), -1;
	int seen = 0, rc = 0;
	struct dirent *de;
	while ((de = readdir(d)) && rc == 0) {
		if (de->d_name[0] == '.')
			continue;
		pid_t tid = atoi(de->d_name);
		const char *want = NULL;
		if (tid == getpid())
			want = program_invocation_short_name;
		for (int i = 0; i < NTHR; i++)
			if (thr[i].tid == tid)
				want = thr[i].name;
		if (!want) {
			rc = -1, snprintf(why, len, "task %d was not there at start", tid);
			break;
		}
		char path[64], comm[32] = "";
		snprintf(path, sizeof path, "/proc/self/task/%d/comm", tid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd < 0 ? -1 : read(fd, comm, sizeof comm - 1);
		if (fd >= 0)
			close(fd);
		if (n > 0 && comm[n - 1] == '\n')
			comm[n - 1] = 0;
		if (strncmp(comm, want, 15) != 0)
			rc = -1, snprintf(why, len, "task %d comm %s, want %.15s", tid, comm, want);
		seen++;
	}
	closedir(d);
	if (rc == 0 && seen != NTHR + 1)
		rc = -1, snprintf(why, len, "%d tasks, want %d", seen, NTHR + 1);
	return rc;
}

static int check(char *why, size_t len)
{
	if (tls_magic != TLS_MAGIC || tls_idx != -1)
		return snprintf(why, len, "main TLS magic %#lx idx %d", (unsigned long)tls_magic, tls_idx), -1;
	if (gettid() != getpid())
		return snprintf(why, len, "main thread gettid %d, pid %d", gettid(), getpid()), -1;
	unsigned long g = __atomic_add_fetch(&check_gen, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&cmu);
	cond_gen++;
	pthread_cond_signal(&ccv);
	pthread_mutex_unlock(&cmu);
	uint64_t one = 1;
	if (write(ev_wake, &one, 8) != 8)
		return snprintf(why, len, "eventfd write: %s", strerror(errno)), -1;
	for (int ms = 0;; ms++) {
		int missing = -1;
		for (int i = 0; i < NTHR && missing < 0; i++)
			if (LOAD(&thr[i].acked) != g)
				missing = i;
		if (missing < 0)
			break;
		if (ms >= 3000)
			return snprintf(why, len, "%s did not answer the check in 3 s (progress %lu)",
					thr[missing].name, LOAD(&thr[missing].progress)), -1;
		msleep(1);
	}
	for (int i = 0; i < NTHR; i++) {
		struct thr *t = &thr[i];
		if (LOAD(&t->failed))
			return snprintf(why, len, "%s", t->fail), -1;
		if (t->ack_progress <= t->last_checked)
			return snprintf(why, len, "%s made no progress since the last check (%lu)", t->name,
					t->ack_progress), -1;
		t->last_checked = t->ack_progress;
	}
	unsigned long f = LOAD(&fed), r = LOAD(&got);
	if (r > f || f - r > 64)
		return snprintf(why, len, "pipe: fed %lu, read %lu", f, r), -1;
	return check_tasks(why, len);
}

/* join_all cancels and joins every thread, before bye. */
static void join_all(void)
{
	for (int i = 0; i < NTHR; i++)
		if ((errno = pthread_cancel(thr[i].pt)) != 0)
			vlog("check FAIL pthread_cancel %s: %s", thr[i].name, strerror(errno));
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 3;
	for (int i = 0; i < NTHR; i++) {
		void *ret = NULL;
		int err = pthread_timedjoin_np(thr[i].pt, &ret, &dl);
		if (err != 0)
			vlog("check FAIL joining %s (tid %d): %s", thr[i].name, thr[i].tid, strerror(err));
		else if (ret != PTHREAD_CANCELED)
			vlog("check FAIL %s ended with %p, not cancelled", thr[i].name, ret);
	}
}

int main(int argc, char **argv)
{
	static void *(*fns[NTHR])(void *) = {worker, worker, worker, worker, condw, feeder, reader, sleeper, epoller};
	static const char *names[NTHR] = {"mt-work0", "mt-work1", "mt-work2", "mt-work3", "mt-condw",
					  "mt-feed", "mt-read", "mt-sleep", "mt-epoll"};
	victim_start(argc, argv, 1, "LOG", O_WRONLY | O_CREAT | O_TRUNC, "threads=10");
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		die("pipe2");
	if ((ev_data = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
	    (ev_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		die("eventfd");

	/* Threads start with SIGUSR1/SIGUSR2 blocked, so that only the main
	 * thread takes them. */
	sigset_t usr, old;
	sigemptyset(&usr);
	sigaddset(&usr, SIGUSR1);
	sigaddset(&usr, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &usr, &old);
	for (int i = 0; i < NTHR; i++) {
		thr[i].idx = i;
		snprintf(thr[i].name, sizeof thr[i].name, "%s", names[i]);
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setstacksize(&a, 256 << 10);
		if ((errno = pthread_create(&thr[i].pt, &a, fns[i], &thr[i])) != 0)
			die("pthread_create");
		pthread_attr_destroy(&a);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	while (LOAD(&ready) < NTHR)
		msleep(1);

	for (;;) {
		unsigned long t = ticks + 1;
		ticks = t;
		__atomic_add_fetch(&ev_written, t, __ATOMIC_SEQ_CST);
		if (write(ev_data, &t, 8) != 8)
			die("eventfd write");
		for (int i = 0; i < NTHR; i++)
			if (LOAD(&thr[i].failed) && !thr[i].reported) {
				thr[i].reported = 1;
				vlog("check FAIL %s", thr[i].fail);
			}
		vlog("tick %lu", t);
		victim_sleep(20);
		if (want_bye)
			join_all();
		victim_poll(check);
	}
}
