/*
 * tree_outside_member: a session of the dump with a member outside it.
 * The case forks a child, which forks a grandchild and exits, unreaped:
 * the grandchild is given to the subreaper above the case, outside the
 * dump, and stays in the case's session and process group, whose ID
 * keeps the case's PID in use once the case is gone, so a restore could
 * not take it again. The dump refuses, naming the case, its session and
 * the outside process; the case goes on: the child is still a zombie,
 * the grandchild still in the session.
 */
#include "fidelity.h"
#include <sys/wait.h>

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	int pfd[2];
	FID_SETUP(pipe(pfd) == 0, "pipe");
	pid_t z = fork();
	FID_SETUP(z >= 0, "fork");
	if (z == 0) {
		pid_t g = fork();
		if (g == 0) {
			close(pfd[0]);
			for (;;)
				pause();
		}
		if (write(pfd[1], &g, sizeof g) != sizeof g)
			_exit(2);
		_exit(0);
	}
	close(pfd[1]);
	pid_t g = 0;
	FID_SETUP(read(pfd[0], &g, sizeof g) == sizeof g, "read the grandchild's pid");
	siginfo_t si = {0};
	FID_SETUP(waitid(P_PID, z, &si, WEXITED | WNOWAIT) == 0 && si.si_pid == z, "the child did not exit");
	FID_SETUP(getsid(g) == getsid(0), "the grandchild is in session %d, want %d", getsid(g), getsid(0));
	fid_ready();
	fid_wait();
	memset(&si, 0, sizeof si);
	FID_EXPECT(waitid(P_PID, z, &si, WEXITED | WNOWAIT | WNOHANG) == 0 && si.si_pid == z && si.si_code == CLD_EXITED,
		   "the child %d is no longer a zombie", z);
	FID_EXPECT(kill(g, 0) == 0 && getsid(g) == getsid(0), "the grandchild %d: alive %d, session %d, want %d", g,
		   kill(g, 0) == 0, getsid(g), getsid(0));
	kill(g, SIGKILL);
	return fid_done();
}
