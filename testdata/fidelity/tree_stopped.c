/*
 * tree_stopped: children stopped by SIGSTOP, SIGTSTP, SIGTTIN and SIGTTOU
 * (each in a process group of its own: the last three are discarded in an
 * orphaned group). The stops of the first two are collected with
 * waitpid(WUNTRACED) before the dump, those of the other two are not.
 * After the restore: every child is stopped; the uncollected stops are
 * reported with their own signal, the collected ones not again; and each
 * child goes on after SIGCONT.
 */
#include "fidelity.h"
#include <sys/wait.h>

#define N 4
static const int sig[N] = {SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU};

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	int pfd[2];
	FID_SETUP(pipe(pfd) == 0, "pipe");
	pid_t kid[N];
	for (int i = 0; i < N; i++) {
		kid[i] = fork();
		FID_SETUP(kid[i] >= 0, "fork");
		if (kid[i] == 0) {
			setpgid(0, 0);
			raise(sig[i]);
			if (write(pfd[1], "c", 1) != 1)
				_exit(3);
			for (;;)
				pause();
		}
		setpgid(kid[i], kid[i]);
	}
	for (int i = 0; i < N; i++) {
		siginfo_t si;
		FID_SETUP(waitid(P_PID, kid[i], &si, WSTOPPED | (i < 2 ? 0 : WNOWAIT)) == 0 && si.si_status == sig[i],
			  "child %d did not stop by %d", kid[i], sig[i]);
	}
	fid_ready();
	fid_wait();
	for (int i = 0; i < N; i++) {
		siginfo_t si;
		memset(&si, 0, sizeof si);
		FID_EXPECT(waitid(P_PID, kid[i], &si, WSTOPPED | WNOHANG | WNOWAIT) == 0, "waitid %d", kid[i]);
		if (i < 2)
			FID_EXPECT(si.si_pid == 0, "child %d: its collected stop is reported again (%d)", kid[i], si.si_status);
		else
			FID_EXPECT(si.si_pid == kid[i] && si.si_code == CLD_STOPPED && si.si_status == sig[i],
				   "child %d: stop report pid %d code %d signal %d, want signal %d", kid[i], si.si_pid,
				   si.si_code, si.si_status, sig[i]);
	}
	for (int i = 0; i < N; i++) {
		FID_EXPECT(kill(kid[i], SIGCONT) == 0, "SIGCONT %d", kid[i]);
		char c;
		FID_EXPECT(read(pfd[0], &c, 1) == 1, "child %d did not go on", kid[i]);
		kill(kid[i], SIGKILL);
	}
	while (waitpid(-1, NULL, 0) > 0)
		;
	return fid_done();
}
