/*
 * fd_misc DIR: O_PATH fds (of a file, and O_PATH|O_NOFOLLOW of a symbolic
 * link itself), a directory removed while open, a memfd with seals and a
 * mapping of it, a sealed memfd holding a program (run with execveat
 * after the restore), and pidfds: of a thread (PIDFD_THREAD), of
 * the process itself, of a live child in the tree, and of a child that
 * has exited and been reaped.
 */
#include "fidelity.h"
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static int pidfd_open(pid_t pid, unsigned flags) { return syscall(SYS_pidfd_open, pid, flags); }

#define PIDFD_THREAD_FLAG O_EXCL /* PIDFD_THREAD */

static volatile pid_t thread_tid;

static void *sleeper(void *arg)
{
	thread_tid = gettid();
	for (;;)
		pause();
	return arg;
}

static void expect_link(int fd, const char *want)
{
	char link[64], target[4096] = {0};
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof target - 1);
	FID_EXPECT(n > 0 && strcmp(target, want) == 0, "fd %d links to %s, want %s", fd, target, want);
}

/* fdinfo_pid is the Pid: of a pidfd's fdinfo. */
static int fdinfo_pid(int fd)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
	if (fid_read_file(path, buf, sizeof buf) < 0)
		return -100;
	char *p = strstr(buf, "Pid:");
	return p ? atoi(p + 4) : -100;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: fd_misc LOG DIR");
	char file[4096], link[4096];
	snprintf(file, sizeof file, "%s/file", argv[2]);
	snprintf(link, sizeof link, "%s/link", argv[2]);
	int f = open(file, O_WRONLY | O_CREAT, 0600);
	FID_SETUP(f >= 0 && write(f, "x", 1) == 1, "file");
	close(f);
	FID_SETUP(symlink("file", link) == 0, "symlink");
	int opath = open(file, O_PATH | O_CLOEXEC);
	int olink = open(link, O_PATH | O_NOFOLLOW);
	FID_SETUP(opath >= 0 && olink >= 0, "O_PATH");

	char gone[4096], gone_link[4200];
	snprintf(gone, sizeof gone, "%s/gone", argv[2]);
	snprintf(gone_link, sizeof gone_link, "%s (deleted)", gone);
	FID_SETUP(mkdir(gone, 0751) == 0, "mkdir");
	int dfd = open(gone, O_RDONLY | O_DIRECTORY);
	FID_SETUP(dfd >= 0 && rmdir(gone) == 0, "deleted directory");

	int mfd = memfd_create("fid-mem", MFD_ALLOW_SEALING);
	FID_SETUP(mfd >= 0 && ftruncate(mfd, 8192) == 0 && pwrite(mfd, "sealed", 6, 4096) == 6, "memfd");
	char *m = mmap(NULL, 8192, PROT_READ, MAP_SHARED, mfd, 0);
	FID_SETUP(m != MAP_FAILED, "mmap memfd");
	FID_SETUP(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0, "seals");

	int exe = memfd_create("fid-exe", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	int bin = open("/bin/true", O_RDONLY | O_CLOEXEC);
	FID_SETUP(exe >= 0 && bin >= 0, "memfd for a program");
	char buf[65536];
	ssize_t n;
	while ((n = read(bin, buf, sizeof buf)) > 0)
		FID_SETUP(write(exe, buf, n) == n, "copy /bin/true");
	close(bin);
	FID_SETUP(fcntl(exe, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW) == 0, "seal the program");

	pthread_t th;
	FID_SETUP(pthread_create(&th, NULL, sleeper, NULL) == 0, "thread");
	while (!thread_tid)
		usleep(1000);
	int thfd = pidfd_open(thread_tid, PIDFD_THREAD_FLAG);
	if (thfd < 0 && errno == EINVAL)
		thfd = -2; /* no PIDFD_THREAD on this kernel */
	FID_SETUP(thfd != -1, "pidfd of a thread");

	int self = pidfd_open(getpid(), 0);
	pid_t dead = fork();
	if (dead == 0)
		_exit(7);
	int deadfd = pidfd_open(dead, 0);
	FID_SETUP(deadfd >= 0 && waitpid(dead, NULL, 0) == dead, "pidfd of a child that exits");
	int p[2];
	FID_SETUP(pipe(p) == 0, "pipe");
	pid_t live = fork();
	if (live == 0) {
		char c;
		close(p[1]);
		_exit(read(p[0], &c, 1) == 0 ? 0 : 1); /* until the parent closes the pipe */
	}
	close(p[0]);
	int livefd = pidfd_open(live, O_NONBLOCK);
	FID_SETUP(self >= 0 && livefd >= 0, "pidfds");

	struct stat dst0;
	FID_SETUP(stat(argv[2], &dst0) == 0, "stat DIR");
	fid_ready();
	fid_wait();
	struct stat dst1;
	FID_EXPECT(stat(argv[2], &dst1) == 0 && dst1.st_mtim.tv_sec == dst0.st_mtim.tv_sec && dst1.st_mtim.tv_nsec == dst0.st_mtim.tv_nsec,
		   "the directory's mtime changed across the restore");

	expect_link(opath, file);
	expect_link(olink, link);
	FID_EXPECT((fcntl(opath, F_GETFL) & O_PATH) && (fcntl(olink, F_GETFL) & (O_PATH | O_NOFOLLOW)) == (O_PATH | O_NOFOLLOW),
		   "O_PATH flags %#o %#o", fcntl(opath, F_GETFL), fcntl(olink, F_GETFL));
	FID_EXPECT(fcntl(opath, F_GETFD) == FD_CLOEXEC && fcntl(olink, F_GETFD) == 0, "FD_CLOEXEC of O_PATH fds");
	struct stat st;
	FID_EXPECT(fstat(olink, &st) == 0 && S_ISLNK(st.st_mode), "O_PATH|O_NOFOLLOW fd is no longer the link itself");
	FID_EXPECT(fstat(opath, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 1, "O_PATH fd of the file");

	expect_link(dfd, gone_link);
	FID_EXPECT(fstat(dfd, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0751 && st.st_nlink == 0,
		   "deleted directory: mode %o, %ld links", st.st_mode, (long)st.st_nlink);
	FID_EXPECT(fcntl(dfd, F_GETFD) == 0, "FD_CLOEXEC of the deleted directory");

	expect_link(mfd, "/memfd:fid-mem (deleted)");
	int seals = fcntl(mfd, F_GET_SEALS);
	FID_EXPECT(seals == (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), "seals %#x", seals);
	FID_EXPECT(ftruncate(mfd, 100) < 0 && errno == EPERM, "a sealed memfd shrank");
	FID_EXPECT(memcmp(m + 4096, "sealed", 6) == 0, "memfd mapping holds %.6s", m + 4096);
	FID_EXPECT(pwrite(mfd, "S", 1, 4096) == 1 && m[4096] == 'S', "the memfd and its mapping no longer share");

	expect_link(exe, "/memfd:fid-exe (deleted)");
	FID_EXPECT(fcntl(exe, F_GET_SEALS) == (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW), "program memfd seals %#x",
		   fcntl(exe, F_GET_SEALS));
	pid_t runner = fork();
	if (runner == 0) {
		char *av[] = {"true", NULL}, *ev[] = {NULL};
		syscall(SYS_execveat, exe, "", av, ev, AT_EMPTY_PATH);
		_exit(100 + errno);
	}
	int rst = -1;
	FID_EXPECT(runner > 0 && waitpid(runner, &rst, 0) == runner && WIFEXITED(rst) && WEXITSTATUS(rst) == 0,
		   "execveat of the memfd program: status %#x (100+errno)", rst);

	if (thfd >= 0) {
		FID_EXPECT(fdinfo_pid(thfd) == thread_tid, "pidfd of the thread: Pid %d, want %d", fdinfo_pid(thfd), thread_tid);
		FID_EXPECT(fcntl(thfd, F_GETFL) & PIDFD_THREAD_FLAG, "pidfd of the thread lost PIDFD_THREAD");
	}
	FID_EXPECT(fdinfo_pid(self) == getpid(), "pidfd of itself: Pid %d, want %d", fdinfo_pid(self), getpid());
	FID_EXPECT(fdinfo_pid(livefd) == live, "pidfd of the child: Pid %d, want %d", fdinfo_pid(livefd), live);
	FID_EXPECT(fdinfo_pid(deadfd) == -1, "pidfd of the exited child: Pid %d, want -1", fdinfo_pid(deadfd));
	struct pollfd pf = {.fd = deadfd, .events = POLLIN};
	FID_EXPECT(poll(&pf, 1, 0) == 1, "pidfd of the exited child is not readable");
	pf.fd = livefd;
	FID_EXPECT(poll(&pf, 1, 0) == 0, "pidfd of the live child says it exited");
	FID_EXPECT(fcntl(livefd, F_GETFL) & O_NONBLOCK, "O_NONBLOCK of the pidfd lost");
	close(p[1]);
	FID_EXPECT(poll(&pf, 1, 5000) == 1, "pidfd of the child did not tell its exit");
	siginfo_t si = {0};
	FID_EXPECT(waitid(P_PIDFD, livefd, &si, WEXITED) == 0 && si.si_pid == live && si.si_status == 0,
		   "waitid(P_PIDFD) on the child: %s", strerror(errno));
	unlink(link);
	unlink(file);
	return fid_done();
}
