/*
 * fd_leases MODE DIR/: file leases (F_SETLEASE), which belong to an open
 * file description.
 *   active    a read lease on one file, a write lease with F_SETSIG
 *             SIGUSR1 on another, a third fd of the first file without
 *             one: after the restore F_GETLEASE gives each its type,
 *             /proc/locks names this process, the flags still show the
 *             O_ASYNC a lease sets, and the write lease still works: an
 *             open of its file by another process is held back
 *             (EWOULDBLOCK) and SIGUSR1 comes, naming the fd;
 *   breaking  a write lease being broken (another open waits on it): the
 *             dump must refuse it by name.
 * Run as root.
 */
#include "fidelity.h"
#include <sys/stat.h>
#include <sys/wait.h>

static int lease_pid(ino_t ino)
{
	FILE *f = fopen("/proc/locks", "r");
	char line[256];
	int pid = -1;
	while (f && fgets(line, sizeof line, f)) {
		char kind[16];
		int p;
		unsigned long i;
		if (sscanf(line, "%*d: %15s %*s %*s %d %*x:%*x:%lu", kind, &p, &i) == 3 && !strcmp(kind, "LEASE") && i == ino)
			pid = p;
	}
	if (f)
		fclose(f);
	return pid;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 4, "usage: fd_leases LOG active|breaking DIR/");
	char a[4096], b[4096];
	snprintf(a, sizeof a, "%sa", argv[3]);
	snprintf(b, sizeof b, "%sb", argv[3]);
	int ra = open(a, O_RDONLY | O_CREAT, 0644), wb = open(b, O_WRONLY | O_CREAT, 0644), plain = open(a, O_RDONLY);
	FID_SETUP(ra >= 0 && wb >= 0 && plain >= 0, "open");
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	FID_SETUP(sigprocmask(SIG_BLOCK, &usr1, NULL) == 0, "block SIGUSR1");
	FID_SETUP(fcntl(ra, F_SETLEASE, F_RDLCK) == 0, "read lease");
	FID_SETUP(fcntl(wb, F_SETSIG, SIGUSR1) == 0 && fcntl(wb, F_SETLEASE, F_WRLCK) == 0, "write lease");
	if (strcmp(argv[2], "breaking") == 0) {
		pid_t c = fork();
		FID_SETUP(c >= 0, "fork");
		if (c == 0) {
			int fd = open(b, O_RDONLY); /* waits for the lease to be given up */
			_exit(fd >= 0 ? 0 : 1);
		}
		siginfo_t si;
		struct timespec ts = {5, 0};
		FID_SETUP(sigtimedwait(&usr1, &si, &ts) == SIGUSR1, "no lease break signal");
		fid_ready();
		fid_wait();
		FID_EXPECT(fcntl(wb, F_SETLEASE, F_UNLCK) == 0, "give the lease up");
		int st;
		FID_EXPECT(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the waiting open");
		return fid_done();
	}
	int fla = fcntl(ra, F_GETFL), flb = fcntl(wb, F_GETFL), flp = fcntl(plain, F_GETFL);
	struct stat sa, sb;
	FID_SETUP(fstat(ra, &sa) == 0 && fstat(wb, &sb) == 0, "fstat");

	fid_ready();
	fid_wait();

	FID_EXPECT(fcntl(ra, F_GETLEASE) == F_RDLCK, "read lease: %d", fcntl(ra, F_GETLEASE));
	FID_EXPECT(fcntl(wb, F_GETLEASE) == F_WRLCK, "write lease: %d", fcntl(wb, F_GETLEASE));
	FID_EXPECT(fcntl(plain, F_GETLEASE) == F_UNLCK, "a lease on the fd that had none: %d", fcntl(plain, F_GETLEASE));
	FID_EXPECT(fcntl(ra, F_GETFL) == fla && fcntl(wb, F_GETFL) == flb && fcntl(plain, F_GETFL) == flp,
		   "flags %#o %#o %#o, want %#o %#o %#o", fcntl(ra, F_GETFL), fcntl(wb, F_GETFL), fcntl(plain, F_GETFL), fla, flb, flp);
	FID_EXPECT(lease_pid(sa.st_ino) == getpid() && lease_pid(sb.st_ino) == getpid(), "/proc/locks names %d and %d, not %d",
		   lease_pid(sa.st_ino), lease_pid(sb.st_ino), getpid());
	FID_EXPECT(fcntl(wb, F_GETOWN) == getpid(), "owner %d", fcntl(wb, F_GETOWN));
	pid_t c = fork();
	FID_SETUP(c >= 0, "fork");
	if (c == 0)
		_exit(open(b, O_RDONLY | O_NONBLOCK) < 0 && errno == EWOULDBLOCK ? 0 : 1);
	int st;
	FID_EXPECT(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0, "an open by another process got through the write lease");
	siginfo_t si;
	struct timespec ts = {5, 0};
	FID_EXPECT(sigtimedwait(&usr1, &si, &ts) == SIGUSR1 && si.si_fd == wb, "no SIGUSR1 for fd %d", wb);
	FID_EXPECT(fcntl(wb, F_SETLEASE, F_UNLCK) == 0, "give the lease up");
	return fid_done();
}
