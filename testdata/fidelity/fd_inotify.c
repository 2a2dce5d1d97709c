/*
 * fd_inotify DIR: an inotify instance watching a directory and a file,
 * with a gap in its watch descriptors (a watch removed). After the
 * restore the watches have the same descriptors and masks, no stray event
 * is queued, and changes are reported under the old descriptors.
 */
#include "fidelity.h"
#include <sys/inotify.h>
#include <sys/ioctl.h>

/* watches copies the "wd: ... mask:" parts of the fdinfo lines. */
static void watches(int fd, char *out, size_t len)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
	out[0] = 0;
	if (fid_read_file(path, buf, sizeof buf) < 0)
		return;
	for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n")) {
		unsigned wd, mask;
		unsigned long ino;
		if (sscanf(l, "inotify wd:%x ino:%lx sdev:%*x mask:%x", &wd, &ino, &mask) == 3) {
			size_t k = strlen(out);
			snprintf(out + k, len - k, "wd %u ino %lx mask %x;", wd, ino, mask);
		}
	}
}

/* next_event reads one event; it returns its wd, or -1. */
static int next_event(int fd, unsigned *mask)
{
	char buf[4096] __attribute__((aligned(8)));
	ssize_t n = read(fd, buf, sizeof buf);
	if (n < (ssize_t)sizeof(struct inotify_event))
		return -1;
	struct inotify_event *e = (struct inotify_event *)buf;
	*mask = e->mask;
	return e->wd;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: fd_inotify LOG DIR");
	char log[4096], other[4096], made[4096];
	snprintf(log, sizeof log, "%s/watched.log", argv[2]);
	snprintf(other, sizeof other, "%s/other", argv[2]);
	snprintf(made, sizeof made, "%s/made", argv[2]);
	int f = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	int o = open(other, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	FID_SETUP(f >= 0 && o >= 0, "files");
	close(o);
	int in = inotify_init1(IN_CLOEXEC);
	FID_SETUP(in >= 0, "inotify_init1");
	int wdir = inotify_add_watch(in, argv[2], IN_CREATE);
	int wgone = inotify_add_watch(in, other, IN_ATTRIB);
	int wlog = inotify_add_watch(in, log, IN_MODIFY);
	FID_SETUP(wdir == 1 && wgone == 2 && wlog == 3, "watch descriptors %d %d %d", wdir, wgone, wlog);
	FID_SETUP(inotify_rm_watch(in, wgone) == 0, "rm watch");
	unsigned mask;
	FID_SETUP(next_event(in, &mask) == wgone && (mask & IN_IGNORED), "IN_IGNORED of the removed watch");
	char want[1024], got[1024];
	watches(in, want, sizeof want);

	fid_ready();
	fid_wait();

	watches(in, got, sizeof got);
	FID_EXPECT(strcmp(got, want) == 0, "watches '%s', want '%s'", got, want);
	int queued = -1;
	FID_EXPECT(ioctl(in, FIONREAD, &queued) == 0 && queued == 0, "%d bytes of events queued after the restore", queued);
	FID_EXPECT(write(f, "line\n", 5) == 5, "write");
	int wd = next_event(in, &mask);
	FID_EXPECT(wd == wlog && (mask & IN_MODIFY), "event wd %d mask %#x, want wd %d IN_MODIFY", wd, mask, wlog);
	int m = open(made, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	FID_EXPECT(m >= 0, "create");
	wd = next_event(in, &mask);
	FID_EXPECT(wd == wdir && (mask & IN_CREATE), "event wd %d mask %#x, want wd %d IN_CREATE", wd, mask, wdir);
	/* the next watch gets the next descriptor, as it would have */
	int w4 = inotify_add_watch(in, made, IN_ATTRIB);
	FID_EXPECT(w4 == 4, "a new watch got descriptor %d, want 4", w4);
	unlink(made);
	unlink(other);
	unlink(log);
	return fid_done();
}
