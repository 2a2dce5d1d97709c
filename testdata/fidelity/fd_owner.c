/*
 * fd_owner: SIGIO owners of pipes set under different user IDs. The
 * kernel records the real and effective user IDs of whoever calls
 * F_SETOWN_EX and sends SIGIO only if they allow it: the pipe whose owner
 * was set as root signals the process (with its F_SETSIG signal), the one
 * set as user 1000 (effective 1001) does not. After the restore
 * F_GETOWNER_UIDS, F_GETOWN_EX and F_GETSIG say the same, and a write
 * still signals, or not, the same way. A third pipe signals a thread.
 */
#include "fidelity.h"
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>

#ifndef F_GETOWNER_UIDS
#define F_GETOWNER_UIDS 17
#endif

static pid_t thread_tid;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void *thread_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	thread_tid = syscall(SYS_gettid);
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
	for (;;)
		pause();
	return NULL;
}

struct owned {
	const char *name;
	int p[2];
	struct f_owner_ex ow;
	int sig;
	unsigned uids[2];
};

static int set_owner(struct owned *o, int type, pid_t pid, int sig, uid_t uid, uid_t euid)
{
	if (pipe2(o->p, O_CLOEXEC) < 0)
		return -1;
	o->ow.type = type;
	o->ow.pid = pid;
	o->sig = sig;
	if (syscall(SYS_setresuid, uid, euid, 0) < 0)
		return -1;
	int r = fcntl(o->p[0], F_SETOWN_EX, &o->ow);
	if (syscall(SYS_setresuid, 0, 0, 0) < 0 || r < 0)
		return -1;
	if (fcntl(o->p[0], F_SETSIG, sig) < 0 || fcntl(o->p[0], F_SETFL, O_ASYNC | O_NONBLOCK) < 0)
		return -1;
	return fcntl(o->p[0], F_GETOWNER_UIDS, o->uids);
}

/* signalled writes a byte into the pipe and tells whether sig came. */
static int signalled(struct owned *o)
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, o->sig);
	if (write(o->p[1], "x", 1) != 1)
		return -1;
	char c;
	if (read(o->p[0], &c, 1) != 1)
		return -1;
	struct timespec ts = {0, 200 * 1000 * 1000};
	return sigtimedwait(&s, NULL, &ts) == o->sig;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGUSR1);
	sigaddset(&s, SIGUSR2);
	sigaddset(&s, SIGRTMIN + 1);
	FID_SETUP(sigprocmask(SIG_BLOCK, &s, NULL) == 0, "block");
	pthread_t th;
	FID_SETUP(pthread_create(&th, NULL, thread_main, NULL) == 0, "thread");
	pthread_mutex_lock(&mu);
	while (!thread_tid)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	struct owned o[3] = {{.name = "root-set"}, {.name = "user-set"}, {.name = "thread"}};
	FID_SETUP(set_owner(&o[0], F_OWNER_PID, getpid(), SIGUSR1, 0, 0) == 0, "root-set owner");
	FID_SETUP(set_owner(&o[1], F_OWNER_PID, getpid(), SIGUSR2, 1000, 1001) == 0, "user-set owner");
	FID_SETUP(set_owner(&o[2], F_OWNER_TID, thread_tid, SIGRTMIN + 1, 0, 0) == 0, "thread owner");
	FID_SETUP(o[1].uids[0] == 1000 && o[1].uids[1] == 1001, "F_GETOWNER_UIDS %u %u", o[1].uids[0], o[1].uids[1]);
	FID_SETUP(signalled(&o[0]) == 1 && signalled(&o[1]) == 0, "SIGIO before the dump");

	fid_ready();
	fid_wait();

	for (int i = 0; i < 3; i++) {
		struct f_owner_ex got = {0};
		unsigned uids[2] = {~0u, ~0u};
		FID_EXPECT(fcntl(o[i].p[0], F_GETOWN_EX, &got) == 0 && got.type == o[i].ow.type && got.pid == o[i].ow.pid,
			   "%s: F_GETOWN_EX %d %d, want %d %d", o[i].name, got.type, got.pid, o[i].ow.type, o[i].ow.pid);
		FID_EXPECT(fcntl(o[i].p[0], F_GETSIG) == o[i].sig, "%s: F_GETSIG %d, want %d", o[i].name,
			   fcntl(o[i].p[0], F_GETSIG), o[i].sig);
		FID_EXPECT(fcntl(o[i].p[0], F_GETOWNER_UIDS, uids) == 0 && uids[0] == o[i].uids[0] && uids[1] == o[i].uids[1],
			   "%s: F_GETOWNER_UIDS %u %u, want %u %u", o[i].name, uids[0], uids[1], o[i].uids[0], o[i].uids[1]);
	}
	int r0 = signalled(&o[0]), r1 = signalled(&o[1]);
	FID_EXPECT(r0 == 1, "the root-set owner got no signal (%d)", r0);
	FID_EXPECT(r1 == 0, "the user-set owner got a signal it could not have (%d)", r1);
	return fid_done();
}
