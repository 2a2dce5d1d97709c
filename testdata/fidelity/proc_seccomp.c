/*
 * proc_seccomp: seccomp filters that differ per thread, with flags.
 *   - the main thread sets no_new_privs and installs F1 with
 *     SECCOMP_FILTER_FLAG_TSYNC: getpriority fails with EPERM in every
 *     thread (TSYNC also gives every thread no_new_privs);
 *   - thread 1 adds F2 (SECCOMP_FILTER_FLAG_LOG): getppid fails with
 *     ENOTTY, only there;
 *   - the main thread adds F3 without TSYNC: getpgid fails with EXDEV,
 *     only there;
 *   - thread 2 keeps F1 alone.
 * After the restore each thread checks which calls fail and how, and its
 * Seccomp_filters count; the main thread must still take SIGTERM (the
 * filters must not get in the way of sigwaitinfo).
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

#define N 3
static pthread_barrier_t bar;
static char result[N][512];

static int install(int nr, int err, unsigned flags)
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
	snprintf(out, len, "filters=%s nnp=%d getpriority=%s getppid=%s getpgid=%s", n, prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0),
		 a < 0 ? strerror(ea) : "ok", b < 0 ? strerror(eb) : "ok", c < 0 ? strerror(ec) : "ok");
}

static const char *want[N] = {
	"filters=2 nnp=1 getpriority=Operation not permitted getppid=ok getpgid=Invalid cross-device link",
	"filters=2 nnp=1 getpriority=Operation not permitted getppid=Inappropriate ioctl for device getpgid=ok",
	"filters=1 nnp=1 getpriority=Operation not permitted getppid=ok getpgid=ok",
};

static void *worker(void *arg)
{
	int i = (int)(long)arg;
	pthread_barrier_wait(&bar); /* F1 installed */
	if (i == 1 && install(__NR_getppid, ENOTTY, SECCOMP_FILTER_FLAG_LOG) < 0)
		snprintf(result[i], sizeof result[i], "install F2: %s", strerror(errno));
	pthread_barrier_wait(&bar);
	for (int k = 0; k < 2; k++) { /* before the dump, after the restore */
		pthread_barrier_wait(&bar);
		probe(result[i], sizeof result[i]);
		pthread_barrier_wait(&bar);
	}
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
	FID_SETUP(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "PR_SET_NO_NEW_PRIVS");
	FID_SETUP(install(__NR_getpriority, EPERM, SECCOMP_FILTER_FLAG_TSYNC) == 0, "install F1 with TSYNC");
	pthread_barrier_wait(&bar);
	FID_SETUP(install(__NR_getpgid, EXDEV, 0) == 0, "install F3");
	pthread_barrier_wait(&bar);
	FID_SETUP(!result[1][0], "%s", result[1]);
	/* Check the setup the same way as after the restore. */
	pthread_barrier_wait(&bar);
	probe(result[0], sizeof result[0]);
	pthread_barrier_wait(&bar);
	for (int i = 0; i < N; i++)
		FID_SETUP(strcmp(result[i], want[i]) == 0, "thread %d before: %s, want %s", i, result[i], want[i]);
	fid_ready();
	fid_wait();
	pthread_barrier_wait(&bar);
	probe(result[0], sizeof result[0]);
	pthread_barrier_wait(&bar);
	for (int i = 0; i < N; i++)
		FID_EXPECT(strcmp(result[i], want[i]) == 0, "thread %d: %s, want %s", i, result[i], want[i]);
	return fid_done();
}
