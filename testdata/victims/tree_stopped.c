/*
 * tree_stopped: children stopped by each stop signal (usage: tree_stopped LOG).
 *
 * The root forks four children, each in a process group of its own (a
 * stop by SIGTSTP, SIGTTIN or SIGTTOU is discarded in an orphaned group),
 * each stopping itself: s1 by SIGSTOP, s2 by SIGTSTP, s3 by SIGTTIN, s4
 * (two threads) by SIGTTOU. The root collects the stops of s1 and s2 with
 * waitpid(WUNTRACED), and only waits for s3 and s4 to stop without
 * collecting (WNOWAIT): their stops are still to be reported. It counts the
 * SIGCHLDs it gets (handler, SA_RESTART).
 *
 * It writes "start pid=ROOT s1=.. s2=.. s3=.. s4=.." then "tick N" every
 * 20 ms. SIGUSR1: "check ok N" if every child is stopped (state T), the
 * stops of s3 and s4 are still to be collected with their signals
 * (waitid WNOWAIT), those of s1 and s2 are not reported again, and no
 * SIGCHLD came since the start. SIGUSR2: SIGCONT to every child, each must
 * be reported continued and write to a pipe; then "bye N", exit 0 (or
 * "check FAIL ..." and exit 1).
 */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "victim.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/wait.h>

#define N 4
static const int stopsig[N] = {SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU};
static pid_t kid[N];
static int pfd[2];
static volatile sig_atomic_t chld;

static void on_chld(int sig) { (void)sig; chld++; }

static void *spin(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static void child(int i)
{
	close(pfd[0]);
	if (setpgid(0, 0) < 0)
		_exit(3);
	if (i == 3) {
		pthread_t t;
		if (pthread_create(&t, NULL, spin, NULL) != 0)
			_exit(3);
	}
	raise(stopsig[i]);
	/* continued */
	if (write(pfd[1], "c", 1) != 1)
		_exit(3);
	for (;;)
		pause();
}

/*
 * settled reports whether every thread of pid is off the run queue (its
 * wchan reads other than "0"). The last thread of a group stop sets the
 * stopped state, then sends the parent its SIGCHLD, then schedules away:
 * waitid() can see the stop before that SIGCHLD is sent, so it may come
 * after the handler is installed. Once every thread has scheduled away, it
 * has been sent.
 */
static int settled(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int ok = 1;
	struct dirent *e;
	while (ok && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char wpath[320], buf[64];
		snprintf(wpath, sizeof wpath, "/proc/%d/task/%s/wchan", pid, e->d_name);
		int fd = open(wpath, O_RDONLY);
		if (fd < 0) {
			ok = 0;
			break;
		}
		ssize_t n = read(fd, buf, sizeof buf - 1);
		close(fd);
		ok = n > 0 && !(n == 1 && buf[0] == '0');
	}
	closedir(d);
	return ok;
}

static int state_of(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return '?';
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return '?';
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	return p && p[1] ? p[2] : '?';
}

static int check(char *why, size_t len)
{
	for (int i = 0; i < N; i++) {
		int st = state_of(kid[i]);
		if (st != 'T')
			return snprintf(why, len, "s%d %d state %c, want T", i + 1, kid[i], st), -1;
		siginfo_t si;
		memset(&si, 0, sizeof si);
		if (waitid(P_PID, kid[i], &si, WSTOPPED | WNOHANG | WNOWAIT) < 0)
			return snprintf(why, len, "waitid s%d: %s", i + 1, strerror(errno)), -1;
		if (i < 2 && si.si_pid != 0)
			return snprintf(why, len, "s%d: its collected stop is reported again (signal %d)", i + 1, si.si_status), -1;
		if (i >= 2 && (si.si_pid != kid[i] || si.si_code != CLD_STOPPED || si.si_status != stopsig[i]))
			return snprintf(why, len, "s%d: stop report pid %d code %d signal %d, want signal %d", i + 1,
					si.si_pid, si.si_code, si.si_status, stopsig[i]), -1;
	}
	if (chld != 0)
		return snprintf(why, len, "%d SIGCHLD since the start", (int)chld), -1;
	return 0;
}

static int resume(char *why, size_t len)
{
	for (int i = 0; i < N; i++) {
		if (kill(kid[i], SIGCONT) < 0)
			return snprintf(why, len, "kill s%d: %s", i + 1, strerror(errno)), -1;
		siginfo_t si;
		memset(&si, 0, sizeof si);
		if (waitid(P_PID, kid[i], &si, WCONTINUED) < 0 || si.si_code != CLD_CONTINUED)
			return snprintf(why, len, "s%d not reported continued (code %d)", i + 1, si.si_code), -1;
		char c;
		if (read(pfd[0], &c, 1) != 1)
			return snprintf(why, len, "s%d did not go on", i + 1), -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s LOG\n", argv[0]);
		return 2;
	}
	if (pipe(pfd) < 0)
		die("pipe");
	for (int i = 0; i < N; i++) {
		if ((kid[i] = fork()) < 0)
			die("fork");
		if (kid[i] == 0)
			child(i);
		setpgid(kid[i], kid[i]);
	}
	for (int i = 0; i < N; i++) {
		siginfo_t si;
		int opts = WSTOPPED | (i < 2 ? 0 : WNOWAIT);
		if (waitid(P_PID, kid[i], &si, opts) < 0 || si.si_code != CLD_STOPPED || si.si_status != stopsig[i])
			die("child did not stop");
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_chld;
	sa.sa_flags = SA_RESTART;
	if (sigaction(SIGCHLD, &sa, NULL) < 0)
		die("sigaction");
	for (int i = 0; i < N; i++)
		for (int tries = 0; !settled(kid[i]); tries++) {
			if (tries > 10000)
				die("child did not settle");
			usleep(1000);
		}
	getpid(); /* a SIGCHLD sent before now is delivered on this return */
	chld = 0;
	char extra[128];
	snprintf(extra, sizeof extra, "s1=%d s2=%d s3=%d s4=%d", kid[0], kid[1], kid[2], kid[3]);
	victim_start(2, argv, 1, "LOG", O_WRONLY | O_CREAT | O_APPEND, extra);
	for (;;) {
		vlog("tick %lu", ++ticks);
		victim_sleep(20);
		char why[256] = "";
		if (want_check) {
			want_check = 0;
			if (check_signals(why, sizeof why) == 0 && check(why, sizeof why) == 0)
				vlog("check ok %lu", ticks);
			else
				vlog("check FAIL %s", why);
		}
		if (want_bye) {
			int bad = resume(why, sizeof why);
			for (int i = 0; i < N; i++) {
				kill(kid[i], SIGKILL);
				waitpid(kid[i], NULL, 0);
			}
			if (bad) {
				vlog("check FAIL %s", why);
				return 1;
			}
			vlog("bye %lu", ticks);
			return 0;
		}
	}
}
