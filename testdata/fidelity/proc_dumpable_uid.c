/*
 * proc_dumpable_uid: a process that changed its user ID (setresuid to a
 * non-root user, which makes it non-dumpable) and then made itself
 * dumpable again with PR_SET_DUMPABLE 1, as daemons do so that their
 * parent or their own user can read their /proc files. After the restore
 * it must still be dumpable: its /proc/PID files belong to its user, and
 * its child, of the same user, can read its /proc/PID/fd.
 * Run as root.
 */
#include "fidelity.h"
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(setresgid(4321, 4321, 4321) == 0 && setresuid(4321, 4321, 4321) == 0, "setresuid");
	FID_SETUP(prctl(PR_GET_DUMPABLE) == 0, "setresuid left the process dumpable");
	FID_SETUP(prctl(PR_SET_DUMPABLE, 1) == 0, "PR_SET_DUMPABLE");
	int p[2];
	FID_SETUP(pipe(p) == 0, "pipe");
	pid_t parent = getpid();
	pid_t c = fork();
	FID_SETUP(c >= 0, "fork");
	if (c == 0) {
		char ch;
		if (read(p[0], &ch, 1) != 1)
			_exit(2);
		char path[64];
		snprintf(path, sizeof path, "/proc/%d/fd", parent);
		DIR *d = opendir(path);
		_exit(d ? 0 : 1);
	}

	fid_ready();
	fid_wait();

	FID_EXPECT(prctl(PR_GET_DUMPABLE) == 1, "PR_GET_DUMPABLE %d, want 1", prctl(PR_GET_DUMPABLE));
	struct stat st;
	FID_EXPECT(stat("/proc/self/fd", &st) == 0 && st.st_uid == 4321, "/proc/self/fd belongs to uid %d, want 4321", st.st_uid);
	FID_EXPECT(write(p[1], "x", 1) == 1, "write");
	int s;
	FID_EXPECT(waitpid(c, &s, 0) == c && WIFEXITED(s) && WEXITSTATUS(s) == 0, "the child cannot read /proc/%d/fd (status %#x)", parent, s);
	return fid_done();
}
