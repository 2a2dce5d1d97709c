/*
 * fd_fanotify DIR: two fanotify groups. One reports events with an open
 * fd, with inode marks (one only an ignored mask that survives
 * modification), a mount mark and a file system mark (on /dev/shm, for
 * exec, which nothing does there); the other reports file handles and
 * names, with a directory mark. After the restore fdinfo shows the same
 * flags, event flags and marks, nothing is queued, a write to the marked
 * file is reported (with an fd of that file), one to the ignored file is
 * not, and a file made in the directory is reported by name.
 */
#include "fidelity.h"
#include <sys/fanotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

/* marks copies the sorted "fanotify ..." lines of an fd's fdinfo. */
static void marks(int fd, char *out, size_t len)
{
	char path[64], buf[8192], *lines[64];
	int n = 0;
	snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
	out[0] = 0;
	if (fid_read_file(path, buf, sizeof buf) < 0)
		return;
	for (char *l = strtok(buf, "\n"); l && n < 64; l = strtok(NULL, "\n"))
		if (strncmp(l, "fanotify ", 9) == 0)
			lines[n++] = l;
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (strcmp(lines[j], lines[i]) < 0) {
				char *t = lines[i];
				lines[i] = lines[j];
				lines[j] = t;
			}
	for (int i = 0; i < n; i++) {
		size_t k = strlen(out);
		snprintf(out + k, len - k, "%s|", lines[i]);
	}
}

static int queued(int fd)
{
	int n = -1;
	return ioctl(fd, FIONREAD, &n) == 0 ? n : -1;
}

static int append(const char *path)
{
	int f = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (f < 0)
		return -1;
	int r = write(f, "x", 1) == 1 ? 0 : -1;
	close(f);
	return r;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: fd_fanotify LOG DIR");
	char watched[4200], quiet[4200], made[4200];
	snprintf(watched, sizeof watched, "%s/watched", argv[2]);
	snprintf(quiet, sizeof quiet, "%s/quiet", argv[2]);
	snprintf(made, sizeof made, "%s/made", argv[2]);
	close(open(watched, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
	close(open(quiet, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
	struct stat wst;
	FID_SETUP(stat(watched, &wst) == 0, "stat");

	int a = fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK, O_RDONLY | O_CLOEXEC | O_LARGEFILE);
	if (a < 0 && (errno == EPERM || errno == ENOSYS))
		fid_skip("fanotify_init: not permitted");
	FID_SETUP(a >= 0, "fanotify_init");
	FID_SETUP(fanotify_mark(a, FAN_MARK_ADD, FAN_MODIFY | FAN_CLOSE_WRITE, AT_FDCWD, watched) == 0, "mark watched");
	FID_SETUP(fanotify_mark(a, FAN_MARK_ADD | FAN_MARK_IGNORED_MASK | FAN_MARK_IGNORED_SURV_MODIFY, FAN_MODIFY, AT_FDCWD,
				quiet) == 0,
		  "mark quiet");
	FID_SETUP(fanotify_mark(a, FAN_MARK_ADD | FAN_MARK_MOUNT, FAN_OPEN_EXEC, AT_FDCWD, "/dev/shm") == 0, "mount mark");
	FID_SETUP(fanotify_mark(a, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, FAN_OPEN_EXEC, AT_FDCWD, "/dev/shm") == 0,
		  "file system mark");
	int b = fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_DFID_NAME | FAN_NONBLOCK, O_RDONLY);
	FID_SETUP(b >= 0, "fanotify_init FAN_REPORT_DFID_NAME");
	FID_SETUP(fanotify_mark(b, FAN_MARK_ADD, FAN_CREATE | FAN_ONDIR, AT_FDCWD, argv[2]) == 0, "mark the directory");
	char want_a[4096], want_b[4096], got[4096];
	marks(a, want_a, sizeof want_a);
	marks(b, want_b, sizeof want_b);

	fid_ready();
	fid_wait();

	marks(a, got, sizeof got);
	FID_EXPECT(strcmp(got, want_a) == 0, "group 1: '%s', want '%s'", got, want_a);
	marks(b, got, sizeof got);
	FID_EXPECT(strcmp(got, want_b) == 0, "group 2: '%s', want '%s'", got, want_b);
	FID_EXPECT(queued(a) == 0 && queued(b) == 0, "events queued after the restore: %d %d", queued(a), queued(b));
	FID_EXPECT(append(quiet) == 0 && queued(a) == 0, "a write to the ignored file was reported (%d bytes)", queued(a));
	FID_EXPECT(append(watched) == 0, "write");
	char buf[4096] __attribute__((aligned(8)));
	ssize_t n = read(a, buf, sizeof buf);
	struct fanotify_event_metadata *ev = (struct fanotify_event_metadata *)buf;
	FID_EXPECT(n >= (ssize_t)sizeof *ev && (ev->mask & FAN_MODIFY) && ev->pid == getpid(),
		   "group 1 event: %zd bytes, mask %#llx, pid %d", n, n > 0 ? (unsigned long long)ev->mask : 0ULL,
		   n > 0 ? ev->pid : 0);
	if (n >= (ssize_t)sizeof *ev && ev->fd >= 0) {
		struct stat st;
		FID_EXPECT(fstat(ev->fd, &st) == 0 && st.st_ino == wst.st_ino, "the event's fd is not the watched file");
		int fl = fcntl(ev->fd, F_GETFL), fdfl = fcntl(ev->fd, F_GETFD);
		FID_EXPECT((fl & O_ACCMODE) == O_RDONLY && (fdfl & FD_CLOEXEC), "the event's fd: flags %#o, FD_CLOEXEC %d", fl, fdfl);
		close(ev->fd);
	}
	close(open(made, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
	n = read(b, buf, sizeof buf);
	FID_EXPECT(n >= (ssize_t)sizeof *ev && (ev->mask & FAN_CREATE) && memmem(buf, n, "made", 5),
		   "group 2 event: %zd bytes, mask %#llx", n, n > 0 ? (unsigned long long)ev->mask : 0ULL);
	return fid_done();
}
