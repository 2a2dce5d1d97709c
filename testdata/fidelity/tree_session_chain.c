/*
 * tree_session_chain: a process that keeps a session from two
 * generations up. The case forks A; A forks B; B forks C; then B and A
 * call setsid. C keeps the case's session (its parent and grandparent
 * left it after forking it), B and A lead sessions of their own. After
 * the restore every process has its session, process group and parent as
 * before.
 */
#include "fidelity.h"
#include <sys/wait.h>

struct ids {
	pid_t pid, ppid, sid, pgid;
};

static void ids(pid_t pid, struct ids *out)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	memset(out, 0, sizeof *out);
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	if (fgets(buf, sizeof buf, f)) {
		char *p = strrchr(buf, ')');
		if (p)
			sscanf(p + 2, "%*c %d %d %d", &out->ppid, &out->pgid, &out->sid);
		out->pid = pid;
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	int ready[2];
	FID_SETUP(pipe(ready) == 0, "pipe");
	pid_t a = fork();
	FID_SETUP(a >= 0, "fork");
	if (a == 0) {
		pid_t b = fork();
		if (b == 0) {
			pid_t c = fork();
			if (c == 0) {
				close(ready[0]);
				if (write(ready[1], "c", 1) != 1)
					_exit(1);
				for (;;)
					pause();
			}
			setsid();
			if (write(ready[1], "b", 1) != 1)
				_exit(1);
			for (;;)
				pause();
		}
		setsid();
		if (write(ready[1], "a", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(ready[1]);
	char x;
	for (int i = 0; i < 3; i++)
		FID_SETUP(read(ready[0], &x, 1) == 1, "the children did not start");
	/* the tree: the case, A, B (A's child), C (B's child) */
	pid_t pids[4] = {getpid(), a, 0, 0};
	for (int i = 1; i < 3; i++) {
		char path[64], buf[64] = "";
		snprintf(path, sizeof path, "/proc/%d/task/%d/children", pids[i], pids[i]);
		FILE *f = fopen(path, "r");
		FID_SETUP(f && fgets(buf, sizeof buf, f), "children of %d", pids[i]);
		fclose(f);
		pids[i + 1] = atoi(buf);
	}
	struct ids before[4], now[4];
	for (int i = 0; i < 4; i++)
		ids(pids[i], &before[i]);
	FID_SETUP(before[3].sid == before[0].sid && before[2].sid == pids[2] && before[1].sid == pids[1],
		  "sessions: case %d, A %d, B %d, C %d", before[0].sid, before[1].sid, before[2].sid, before[3].sid);
	fid_ready();
	fid_wait();
	for (int i = 0; i < 4; i++) {
		ids(pids[i], &now[i]);
		FID_EXPECT(memcmp(&now[i], &before[i], sizeof now[i]) == 0,
			   "process %d: pid %d ppid %d sid %d pgid %d, want %d %d %d %d", i, now[i].pid, now[i].ppid, now[i].sid,
			   now[i].pgid, before[i].pid, before[i].ppid, before[i].sid, before[i].pgid);
	}
	for (int i = 3; i > 0; i--)
		kill(pids[i], SIGKILL);
	while (waitpid(-1, NULL, 0) > 0)
		;
	return fid_done();
}
