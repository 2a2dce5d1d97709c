/*
 * tree_stopped_pending: stopped children with a stop signal pending,
 * one that came while they were stopped already (it waits there until
 * a SIGCONT discards it): a second SIGSTOP sent with kill (shared
 * queue), one sent with tgkill (the thread's queue), and a SIGTSTP.
 * After the restore each child is still stopped with the same signals
 * pending (ShdPnd and SigPnd of /proc/PID/status), and goes on after a
 * SIGCONT.
 */
#include "fidelity.h"
#include <sys/syscall.h>
#include <sys/wait.h>

#define N 3
enum { KILL_STOP, TGKILL_STOP, KILL_TSTP };

/* field copies the value of name in /proc/pid/status. */
static int field(pid_t pid, const char *name, char *out, size_t len)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = strlen(name);
	int found = -1;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, name, n) == 0 && line[n] == ':') {
			char *v = line + n + 1;
			v += strspn(v, " \t");
			v[strcspn(v, "\n")] = 0;
			snprintf(out, len, "%s", v);
			found = 0;
			break;
		}
	fclose(f);
	return found;
}

static void state(pid_t pid, char *out, size_t len)
{
	char st[64] = "?", shd[64] = "?", sig[64] = "?";
	field(pid, "State", st, sizeof st);
	field(pid, "ShdPnd", shd, sizeof shd);
	field(pid, "SigPnd", sig, sizeof sig);
	snprintf(out, len, "State %.1s ShdPnd %s SigPnd %s", st, shd, sig);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	int pfd[2];
	FID_SETUP(pipe(pfd) == 0, "pipe");
	pid_t kid[N];
	char before[N][256];
	for (int i = 0; i < N; i++) {
		kid[i] = fork();
		FID_SETUP(kid[i] >= 0, "fork");
		if (kid[i] == 0) {
			raise(SIGSTOP);
			if (write(pfd[1], "c", 1) != 1)
				_exit(3);
			for (;;)
				pause();
		}
		siginfo_t si;
		FID_SETUP(waitid(P_PID, kid[i], &si, WSTOPPED) == 0 && si.si_status == SIGSTOP, "child %d did not stop", kid[i]);
	}
	FID_SETUP(kill(kid[KILL_STOP], SIGSTOP) == 0, "kill");
	FID_SETUP(syscall(SYS_tgkill, kid[TGKILL_STOP], kid[TGKILL_STOP], SIGSTOP) == 0, "tgkill");
	FID_SETUP(kill(kid[KILL_TSTP], SIGTSTP) == 0, "kill SIGTSTP");
	for (int i = 0; i < N; i++) {
		state(kid[i], before[i], sizeof before[i]);
		FID_SETUP(before[i][6] == 'T' && strcmp(strstr(before[i], "ShdPnd"), "ShdPnd 0000000000000000 SigPnd 0000000000000000"),
			  "child %d: %s: no stop signal pending", kid[i], before[i]);
	}
	fid_ready();
	fid_wait();
	for (int i = 0; i < N; i++) {
		char now[256];
		state(kid[i], now, sizeof now);
		FID_EXPECT(strcmp(now, before[i]) == 0, "child %d: %s, want %s", kid[i], now, before[i]);
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
