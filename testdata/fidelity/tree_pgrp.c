/*
 * tree_pgrp: the case leads its session and group; its children are in
 * process groups led by a process that is gone (g1, killed and reaped:
 * k stays in its group), by a live child (l, with m), and by zombies (z
 * in a group of its own, zz in l's). After the restore getsid/getpgid of
 * each are as before, and the zombies are reaped with their status.
 */
#include "fidelity.h"
#include <sys/wait.h>

static pid_t kid(pid_t pgid, int status)
{
	pid_t p = fork();
	if (p == 0) {
		if (setpgid(0, pgid) < 0)
			_exit(99);
		if (status >= 0)
			_exit(status);
		for (;;)
			pause();
	}
	FID_SETUP(p > 0, "fork");
	if (setpgid(p, pgid ? pgid : p) < 0)
		FID_SETUP(errno == EACCES || errno == ESRCH, "setpgid %d", p);
	return p;
}

static void expect(const char *what, pid_t pid, pid_t sid, pid_t pgid)
{
	FID_EXPECT(getsid(pid) == sid, "%s %d: sid %d, want %d", what, pid, getsid(pid), sid);
	FID_EXPECT(getpgid(pid) == pgid, "%s %d: pgid %d, want %d", what, pid, getpgid(pid), pgid);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	pid_t me = getpid();
	FID_SETUP(getsid(0) == me || setsid() == me, "own session");
	pid_t g1 = kid(0, -1);
	pid_t k = kid(g1, -1);
	while (getpgid(k) != g1)
		usleep(1000);
	FID_SETUP(kill(g1, SIGKILL) == 0 && waitpid(g1, NULL, 0) == g1, "kill g1");
	pid_t l = kid(0, -1);
	pid_t m = kid(l, -1);
	pid_t z = kid(0, 5);
	pid_t zz = kid(l, 6);
	siginfo_t si;
	FID_SETUP(waitid(P_PID, z, &si, WEXITED | WNOWAIT) == 0 && waitid(P_PID, zz, &si, WEXITED | WNOWAIT) == 0, "zombies");
	FID_SETUP(getpgid(m) == l && getpgid(z) == z && getpgid(zz) == l, "groups");
	fid_ready();
	fid_wait();
	expect("case", me, me, me);
	expect("k (group of the gone g1)", k, me, g1);
	expect("l", l, me, l);
	expect("m", m, me, l);
	expect("zombie z", z, me, z);
	expect("zombie zz", zz, me, l);
	int st;
	FID_EXPECT(waitpid(z, &st, WNOHANG) == z && WIFEXITED(st) && WEXITSTATUS(st) == 5, "zombie z status %#x", st);
	FID_EXPECT(waitpid(zz, &st, WNOHANG) == zz && WIFEXITED(st) && WEXITSTATUS(st) == 6, "zombie zz status %#x", st);
	kill(k, SIGKILL);
	kill(l, SIGKILL);
	kill(m, SIGKILL);
	while (waitpid(-1, NULL, 0) > 0)
		;
	return fid_done();
}
