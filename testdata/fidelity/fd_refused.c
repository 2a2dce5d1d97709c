/*
 * fd_refused KIND: holds one fd ckpt cannot restore: an io_uring, a bpf
 * map, a perf_event, a fanotify group with an event queued or of a
 * permission class, a userfaultfd, an
 * inotify instance with events queued, or a pipe whose SIGIO goes to a
 * process outside the dump. The dump must refuse it by name; untouched,
 * the fd still works.
 */
#include "fidelity.h"
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/perf_event.h>
#include <sys/fanotify.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static int open_kind(const char *kind)
{
	if (strcmp(kind, "io_uring") == 0) {
		struct io_uring_params p = {0};
		return syscall(SYS_io_uring_setup, 4, &p);
	}
	if (strcmp(kind, "bpf") == 0) {
		union bpf_attr a = {.map_type = BPF_MAP_TYPE_ARRAY, .key_size = 4, .value_size = 4, .max_entries = 1};
		return syscall(SYS_bpf, BPF_MAP_CREATE, &a, sizeof a);
	}
	if (strcmp(kind, "perf_event") == 0) {
		struct perf_event_attr a = {.type = PERF_TYPE_SOFTWARE, .size = sizeof a, .config = PERF_COUNT_SW_TASK_CLOCK};
		return syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
	}
	if (strcmp(kind, "fanotify_perm") == 0)
		return fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC, O_RDONLY);
	if (strcmp(kind, "fanotify_pending") == 0) {
		/* a group with an event queued (unlinking the file drops the mark) */
		char dir[] = "/tmp/fid-fanotify-XXXXXX", f[64];
		int fd = fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC, O_RDONLY);
		if (fd < 0 || !mkdtemp(dir))
			return -1;
		snprintf(f, sizeof f, "%s/x", dir);
		close(open(f, O_CREAT | O_WRONLY, 0600));
		if (fanotify_mark(fd, FAN_MARK_ADD, FAN_CLOSE_WRITE, AT_FDCWD, f) < 0)
			return -1;
		close(open(f, O_WRONLY));
		unlink(f);
		rmdir(dir);
		return fd;
	}
	if (strcmp(kind, "userfaultfd") == 0)
		return syscall(SYS_userfaultfd, O_CLOEXEC);
	if (strcmp(kind, "inotify_pending") == 0) {
		/* an event queued and not read: it cannot be put back */
		char dir[] = "/tmp/fid-inotify-XXXXXX", f[64];
		int fd = inotify_init1(IN_CLOEXEC);
		if (fd < 0 || !mkdtemp(dir) || inotify_add_watch(fd, dir, IN_CREATE) < 0)
			return -1;
		snprintf(f, sizeof f, "%s/x", dir);
		close(open(f, O_CREAT | O_WRONLY, 0600));
		unlink(f);
		rmdir(dir);
		return fd;
	}
	if (strcmp(kind, "sigio_owner") == 0) {
		/* SIGIO for a pipe goes to the parent, outside the dump */
		int p[2];
		if (pipe(p) < 0 || fcntl(p[0], F_SETOWN, getppid()) < 0)
			return -1;
		return p[0];
	}
	errno = EINVAL;
	return -1;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: fd_refused LOG KIND");
	int fd = open_kind(argv[2]);
	if (fd < 0 && (errno == ENOSYS || errno == EPERM || errno == EACCES || errno == EINVAL)) {
		char why[128];
		snprintf(why, sizeof why, "%s: %s", argv[2], strerror(errno));
		fid_skip(why);
	}
	FID_SETUP(fd >= 0, "%s", argv[2]);
	char link[64], target[256];
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof target - 1);
	FID_SETUP(n > 0, "readlink");
	target[n] = 0;
	fid_ready();
	fid_wait();
	n = readlink(link, target, sizeof target - 1);
	FID_EXPECT(n > 0, "fd %d is gone", fd);
	FID_EXPECT(fcntl(fd, F_GETFD) >= 0, "fd %d: %s", fd, strerror(errno));
	return fid_done();
}
