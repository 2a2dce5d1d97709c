/*
 * tree_seccomp_strict: SECCOMP_MODE_STRICT in a thread of the case and in
 * the only thread of a child. Each strict thread serves a pipe: it reads a
 * byte and writes it back plus one (read and write are all strict mode
 * allows). After the restore both must still be in strict mode (Seccomp: 1
 * in their /proc status), the case's main thread not (0), and both must
 * still answer.
 */
#include "fidelity.h"
#include <linux/seccomp.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

struct server {
	int req[2], rep[2];
	pid_t tid;
};

static struct server th, ch;
static pthread_barrier_t bar;

static void serve(struct server *s)
{
	syscall(SYS_seccomp, SECCOMP_SET_MODE_STRICT, 0, NULL);
	for (;;) {
		unsigned char c;
		if (syscall(SYS_read, s->req[0], &c, 1) != 1)
			syscall(SYS_exit, 1);
		c++;
		syscall(SYS_write, s->rep[1], &c, 1);
	}
}

static void *thread(void *arg)
{
	(void)arg;
	th.tid = syscall(SYS_gettid);
	pthread_barrier_wait(&bar);
	serve(&th);
	return NULL;
}

static int ask(struct server *s, unsigned char c)
{
	unsigned char r = 0;
	if (write(s->req[1], &c, 1) != 1 || read(s->rep[0], &r, 1) != 1)
		return -1;
	return r;
}

static int mode(pid_t tid)
{
	char v[32] = "";
	if (fid_status(tid, "Seccomp", v, sizeof v) < 0)
		return -1;
	return atoi(v);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(pipe(th.req) == 0 && pipe(th.rep) == 0 && pipe(ch.req) == 0 && pipe(ch.rep) == 0, "pipe");
	pthread_barrier_init(&bar, NULL, 2);
	pthread_t t;
	FID_SETUP(pthread_create(&t, NULL, thread, NULL) == 0, "pthread_create");
	pthread_barrier_wait(&bar);
	FID_SETUP((ch.tid = fork()) >= 0, "fork");
	if (ch.tid == 0)
		serve(&ch);
	FID_SETUP(ask(&th, 1) == 2 && ask(&ch, 7) == 8, "strict servers do not answer");
	FID_SETUP(mode(th.tid) == 1, "thread not in strict mode");
	char path[64], v[32] = "";
	snprintf(path, sizeof path, "/proc/%d/status", ch.tid);
	fid_ready();
	fid_wait();
	FID_EXPECT(mode(0) == 0, "main thread seccomp mode %d, want 0", mode(0));
	FID_EXPECT(mode(th.tid) == 1, "thread %d seccomp mode %d, want 1 (strict)", th.tid, mode(th.tid));
	int fd = open(path, O_RDONLY);
	char buf[4096] = "";
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof buf - 1);
		buf[n > 0 ? n : 0] = 0;
		close(fd);
	}
	char *m = strstr(buf, "\nSeccomp:");
	if (m)
		snprintf(v, sizeof v, "%d", atoi(m + 9));
	FID_EXPECT(m && atoi(m + 9) == 1, "child %d seccomp mode %s, want 1 (strict)", ch.tid, v);
	FID_EXPECT(ask(&th, 41) == 42, "the strict thread does not answer");
	FID_EXPECT(ask(&ch, 99) == 100, "the strict child does not answer");
	kill(ch.tid, SIGKILL);
	int st;
	FID_EXPECT(waitpid(ch.tid, &st, 0) == ch.tid && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status %#x", st);
	return fid_done();
}
