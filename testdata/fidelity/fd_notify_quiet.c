/*
 * fd_notify_quiet: an inotify watch and a fanotify mark on a directory
 * that holds files the program deleted but keeps (an open file, a mapped
 * file, a FIFO, a subdirectory). The restore makes those again and opens
 * files: none of that may show as an event to the restored watches; after
 * the restore nothing is queued, and new activity in the directory is
 * still seen. (The watches leave out opens, reads and closes without
 * writing: the dump itself reads the deleted files.) Run as root.
 * Arguments: DIR/.
 */
#include "fidelity.h"
#include <sys/fanotify.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc >= 3, "usage: LOG DIR/");
	char dir[4096], f[4096], m[4096], fifo[4096], sub[4096], other[4096];
	snprintf(dir, sizeof dir, "%s/w", argv[2]); /* not the case's directory, which holds its log */
	FID_SETUP(mkdir(dir, 0755) == 0, "mkdir %s", dir);
	snprintf(f, sizeof f, "%s/open", dir);
	snprintf(m, sizeof m, "%s/mapped", dir);
	snprintf(fifo, sizeof fifo, "%s/fifo", dir);
	snprintf(sub, sizeof sub, "%s/sub", dir);
	snprintf(other, sizeof other, "%s/other", dir);
	int in = inotify_init1(IN_NONBLOCK);
	FID_SETUP(in >= 0 && inotify_add_watch(in, dir, IN_CREATE | IN_DELETE | IN_MODIFY | IN_ATTRIB | IN_MOVE | IN_CLOSE_WRITE) > 0, "inotify");
	int fa = fanotify_init(FAN_CLASS_NOTIF | FAN_NONBLOCK, O_RDONLY);
	if (fa < 0 && (errno == EPERM || errno == ENOSYS))
		fid_skip("no fanotify here");
	FID_SETUP(fa >= 0 && fanotify_mark(fa, FAN_MARK_ADD, FAN_CLOSE_WRITE | FAN_MODIFY | FAN_EVENT_ON_CHILD | FAN_ONDIR,
					   AT_FDCWD, dir) == 0, "fanotify");
	int fd = open(f, O_RDWR | O_CREAT, 0644);
	FID_SETUP(fd >= 0 && write(fd, "abc", 3) == 3 && unlink(f) == 0, "deleted open file");
	int mfd = open(m, O_RDWR | O_CREAT, 0644);
	FID_SETUP(mfd >= 0 && ftruncate(mfd, 4096) == 0, "mapped file");
	char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, mfd, 0);
	FID_SETUP(p != MAP_FAILED && close(mfd) == 0 && unlink(m) == 0, "deleted mapped file");
	FID_SETUP(mkfifo(fifo, 0600) == 0, "mkfifo");
	int ff = open(fifo, O_RDWR);
	FID_SETUP(ff >= 0 && unlink(fifo) == 0, "deleted fifo");
	FID_SETUP(mkdir(sub, 0700) == 0, "mkdir");
	int sd = open(sub, O_RDONLY | O_DIRECTORY);
	FID_SETUP(sd >= 0 && rmdir(sub) == 0, "deleted directory");
	char buf[8192];
	while (read(in, buf, sizeof buf) > 0)
		;
	while (read(fa, buf, sizeof buf) > 0)
		;

	fid_ready();
	fid_wait();

	ssize_t n = read(in, buf, sizeof buf);
	struct inotify_event *first = (struct inotify_event *)buf;
	FID_EXPECT(n < 0 && errno == EAGAIN, "inotify: %zd bytes of events queued by the restore (the first %#x %s)", n,
		   n > 0 ? first->mask : 0, n > 0 && first->len ? first->name : "");
	n = read(fa, buf, sizeof buf);
	FID_EXPECT(n < 0 && errno == EAGAIN, "fanotify: %zd bytes of events queued by the restore", n);
	int o = open(other, O_WRONLY | O_CREAT, 0644);
	n = read(in, buf, sizeof buf);
	struct inotify_event *ev = (struct inotify_event *)buf;
	FID_EXPECT(o >= 0 && n >= (ssize_t)sizeof *ev && (ev->mask & IN_CREATE), "inotify no longer sees a new file");
	close(o);
	n = read(fa, buf, sizeof buf);
	FID_EXPECT(n > 0, "fanotify no longer sees a close after writing");
	unlink(other);
	(void)p;
	(void)sd;
	(void)ff;
	return fid_done();
}
