/*
 * tree_session: a tree whose session and process groups have leaders that
 * are gone, in the tree, or a zombie (usage: tree_session LOG).
 *
 * Started as a session leader P (setsid), it forks the root C and exits:
 * C's session and process group P have no leader left. C forks
 *
 *   g1   which makes its own process group G1, then is killed and reaped:
 *        group G1 has no leader left;
 *   k    which joins group G1;
 *   l    which leads its own process group L, alive;
 *   z    which makes its own process group Z and exits 7: a zombie
 *        (reaped by the first check) whose group lives on in it;
 *   s    which forks e, then leads a new session of its own: e stays in
 *        C's session and group, with s as its parent.
 *
 * SIGHUP is not blocked anywhere, and left default: a process put into a
 * session of a terminal that hangs up dies of it.
 *
 * C writes "start pid=C sid=P k=K l=L z=Z g1=G1 s=S e=E" then "tick N"
 * every 20 ms. SIGUSR1: "check ok N" if the sessions and groups of C, k,
 * l, z, s, e are as at the start (getsid, getpgid, from C), k, l, s, e are
 * alive, nothing pending; on the first check z is reaped with status 7.
 * SIGUSR2: C kills and reaps k, l and s (e with it), writes "bye N" and
 * exits 0.
 */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "victim.h"

#include <sys/mman.h>
#include <sys/wait.h>

static pid_t sid, k, l, z, g1, s;
static volatile pid_t *e;
static int z_reaped;

static void idle(void)
{
	for (;;)
		pause();
}

static int want(const char *what, pid_t pid, pid_t got, pid_t exp, char *why, size_t len)
{
	if (got == exp)
		return 0;
	snprintf(why, len, "%s of %d is %d, want %d", what, pid, got, exp);
	return -1;
}

static int check(char *why, size_t len)
{
	if (want("sid", getpid(), getsid(0), sid, why, len) || want("pgid", getpid(), getpgrp(), sid, why, len) ||
	    want("sid", k, getsid(k), sid, why, len) || want("pgid", k, getpgid(k), g1, why, len) ||
	    want("sid", l, getsid(l), sid, why, len) || want("pgid", l, getpgid(l), l, why, len) ||
	    want("sid", s, getsid(s), s, why, len) || want("pgid", s, getpgid(s), s, why, len) ||
	    want("sid", *e, getsid(*e), sid, why, len) || want("pgid", *e, getpgid(*e), sid, why, len))
		return -1;
	if (!z_reaped) {
		if (want("sid", z, getsid(z), sid, why, len) || want("pgid", z, getpgid(z), z, why, len))
			return -1;
		int st;
		if (waitpid(z, &st, WNOHANG) != z || !WIFEXITED(st) || WEXITSTATUS(st) != 7)
			return snprintf(why, len, "zombie %d not reaped with status 7", z), -1;
		z_reaped = 1;
	}
	if (kill(k, 0) < 0 || kill(l, 0) < 0 || kill(s, 0) < 0 || kill(*e, 0) < 0)
		return snprintf(why, len, "k %d, l %d, s %d or e %d gone", k, l, s, *e), -1;
	int st;
	pid_t w = waitpid(-1, &st, WNOHANG | WUNTRACED);
	if (w != 0)
		return snprintf(why, len, "waitpid: child %d changed state %#x", w, st), -1;
	sigset_t pend;
	sigpending(&pend);
	if (sigismember(&pend, SIGHUP))
		return snprintf(why, len, "SIGHUP pending"), -1;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s LOG\n", argv[0]);
		return 2;
	}
	pid_t c = fork();
	if (c < 0)
		die("fork");
	if (c > 0)
		_exit(0); /* the session and group leader goes */
	while (getppid() == getsid(0))
		usleep(1000);
	sid = getsid(0);
	if (sid < 0 || getpgrp() != sid)
		die("not in the starter's session and group");

	int p[2];
	if (pipe(p) < 0)
		die("pipe");
	char b;
	if ((g1 = fork()) == 0) {
		setpgid(0, 0);
		idle();
	}
	if (g1 < 0 || (setpgid(g1, g1) < 0 && errno != EACCES))
		die("g1");
	if ((k = fork()) == 0) {
		if (setpgid(0, g1) < 0)
			die("k setpgid");
		close(p[0]);
		if (write(p[1], "k", 1) != 1)
			die("k write");
		idle();
	}
	if (k < 0 || read(p[0], &b, 1) != 1)
		die("k");
	if (kill(g1, SIGKILL) < 0 || waitpid(g1, NULL, 0) != g1)
		die("kill g1");
	if ((l = fork()) == 0) {
		setpgid(0, 0);
		idle();
	}
	if (l < 0 || (setpgid(l, l) < 0 && errno != EACCES))
		die("l");
	if ((z = fork()) == 0) {
		setpgid(0, 0);
		_exit(7);
	}
	if (z < 0 || (setpgid(z, z) < 0 && errno != EACCES && errno != ESRCH))
		die("z");
	siginfo_t si;
	if (waitid(P_PID, z, &si, WEXITED | WNOWAIT) < 0)
		die("waitid z");
	e = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (e == MAP_FAILED)
		die("mmap");
	if ((s = fork()) == 0) {
		pid_t ee = fork();
		if (ee == 0)
			idle();
		*e = ee;
		if (ee < 0 || setsid() != getpid())
			_exit(3);
		idle();
	}
	if (s < 0)
		die("fork s");
	while (!*e || getsid(s) != s)
		usleep(1000);

	log_fd = open(argv[1], O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (log_fd < 0)
		die(argv[1]);
	install(SIGUSR1, on_usr1, SIGUSR2);
	install(SIGUSR2, on_usr2, SIGUSR1);
	vlog("start pid=%d sid=%d k=%d l=%d z=%d g1=%d s=%d e=%d", getpid(), sid, k, l, z, g1, s, *e);
	for (;;) {
		vlog("tick %lu", ++ticks);
		victim_sleep(20);
		if (want_check) {
			want_check = 0;
			char why[256] = "";
			if (check(why, sizeof why) == 0)
				vlog("check ok %lu", ticks);
			else
				vlog("check FAIL %s", why);
		}
		if (want_bye) {
			kill(k, SIGKILL);
			kill(l, SIGKILL);
			kill(*e, SIGKILL);
			kill(s, SIGKILL);
			waitpid(k, NULL, 0);
			waitpid(l, NULL, 0);
			waitpid(s, NULL, 0);
			vlog("bye %lu", ticks);
			return 0;
		}
	}
}
