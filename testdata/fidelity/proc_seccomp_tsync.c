/*
 * proc_seccomp_tsync: threads that share their seccomp filters.
 *
 * The main thread sets no_new_privs and installs F1 (getpriority fails
 * with EPERM) and F1b (getpriority fails with EACCES: of two filters
 * returning the same action the newest wins), then starts two threads,
 * which inherit F1 and F1b: the same filters, not copies. Thread 2 adds
 * F2 (getpgid fails with EXDEV) of its own.
 * SECCOMP_FILTER_FLAG_TSYNC gives a new filter to every thread, and is
 * allowed only if each thread's filters are the caller's or an ancestor
 * of them. After the restore:
 *   - a TSYNC of F3 (getppid fails with ENOTTY) fails, naming thread 2;
 *   - once thread 2 has exited, a TSYNC of F3 succeeds (thread 1 still
 *     shares F1 with the main thread), and thread 1 then has F3 too.
 */
#include "fidelity.h"
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

static pthread_barrier_t bar, bar2; /* all three threads; main and thread 1 */
static pid_t tid[3];
static char result[3][256];

static long install(int nr, int err, unsigned flags)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
	return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
}

/* probe says how getpriority, getppid and getpgid fail in this thread. */
static void probe(char *out, size_t len)
{
	char n[32] = "";
	fid_status(syscall(SYS_gettid), "Seccomp_filters", n, sizeof n);
	errno = 0;
	long a = syscall(SYS_getpriority, PRIO_PROCESS, 0);
	int ea = errno;
	errno = 0;
	long b = syscall(SYS_getppid);
	int eb = errno;
	errno = 0;
	long c = syscall(SYS_getpgid, 0);
	int ec = errno;
	snprintf(out, len, "filters=%s getpriority=%s getppid=%s getpgid=%s", n, a < 0 ? strerror(ea) : "ok",
		 b < 0 ? strerror(eb) : "ok", c < 0 ? strerror(ec) : "ok");
}

static void *worker(void *arg)
{
	int i = (int)(long)arg;
	tid[i] = syscall(SYS_gettid);
	if (i == 2 && install(__NR_getpgid, EXDEV, 0) < 0)
		snprintf(result[i], sizeof result[i], "install F2: %s", strerror(errno));
	pthread_barrier_wait(&bar); /* set up */
	pthread_barrier_wait(&bar); /* restored, first TSYNC tried */
	if (i == 2)
		return NULL;
	pthread_barrier_wait(&bar2); /* second TSYNC done */
	probe(result[i], sizeof result[i]);
	pthread_barrier_wait(&bar2);
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "PR_SET_NO_NEW_PRIVS");
	FID_SETUP(install(__NR_getpriority, EPERM, 0) == 0, "install F1: %s", strerror(errno));
	FID_SETUP(install(__NR_getpriority, EACCES, 0) == 0, "install F1b: %s", strerror(errno));
	char before[256];
	probe(before, sizeof before);
	FID_SETUP(strcmp(before, "filters=2 getpriority=Permission denied getppid=ok getpgid=ok") == 0, "before: %s", before);
	pthread_barrier_init(&bar, NULL, 3);
	pthread_barrier_init(&bar2, NULL, 2);
	pthread_t th[3];
	for (long i = 1; i < 3; i++)
		FID_SETUP(pthread_create(&th[i], NULL, worker, (void *)i) == 0, "pthread_create");
	pthread_barrier_wait(&bar);
	FID_SETUP(!result[2][0], "%s", result[2]);
	fid_ready();
	fid_wait();

	long r = install(__NR_getppid, ENOTTY, SECCOMP_FILTER_FLAG_TSYNC);
	FID_EXPECT(r == tid[2], "TSYNC with thread 2 holding a filter of its own returned %ld (errno %d), want %d (thread 2)", r,
		   r < 0 ? errno : 0, tid[2]);
	pthread_barrier_wait(&bar);
	pthread_join(th[2], NULL);
	r = install(__NR_getppid, ENOTTY, SECCOMP_FILTER_FLAG_TSYNC);
	FID_EXPECT(r == 0, "TSYNC over threads that share their filters returned %ld (errno %d), want 0", r, r < 0 ? errno : 0);
	pthread_barrier_wait(&bar2);
	pthread_barrier_wait(&bar2);
	const char *want = r == 0 ? "filters=3 getpriority=Permission denied getppid=Inappropriate ioctl for device getpgid=ok"
				  : "filters=2 getpriority=Permission denied getppid=ok getpgid=ok";
	FID_EXPECT(strcmp(result[1], want) == 0, "thread 1: %s, want %s", result[1], want);
	return fid_done();
}
