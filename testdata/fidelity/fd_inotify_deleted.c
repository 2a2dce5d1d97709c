/*
 * fd_inotify_deleted MODE DIR/: an inotify watch on a file deleted since.
 *   open    the file is still open (written to): after the restore the
 *           watch keeps its descriptor and sees that file: no event is
 *           queued by the restore itself, writing it gives IN_MODIFY and
 *           closing it IN_CLOSE_WRITE, on the file's watch descriptor; the
 *           directory's watch still sees new files;
 *   mapped  no fd holds the deleted file, only a mapping of it: the dump
 *           must refuse it by name.
 */
#include "fidelity.h"
#include <sys/inotify.h>
#include <sys/mman.h>

static int next_event(int in, struct inotify_event *ev, char *buf, size_t n)
{
	ssize_t r = read(in, buf, n);
	if (r < (ssize_t)sizeof *ev)
		return -1;
	memcpy(ev, buf, sizeof *ev);
	return 0;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 4, "usage: fd_inotify_deleted LOG open|mapped DIR/");
	const char *dir = argv[3];
	char file[4096], other[4096];
	snprintf(file, sizeof file, "%s/watched", dir);
	snprintf(other, sizeof other, "%s/other", dir);
	int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644);
	FID_SETUP(fd >= 0, "open");
	int in = inotify_init1(IN_NONBLOCK);
	FID_SETUP(in >= 0, "inotify_init1");
	int wdir = inotify_add_watch(in, dir, IN_CREATE | IN_DELETE);
	int wfile = inotify_add_watch(in, file, IN_MODIFY | IN_CLOSE_WRITE);
	FID_SETUP(wdir > 0 && wfile > 0, "inotify_add_watch");
	FID_SETUP(unlink(file) == 0, "unlink");
	char *map = NULL;
	if (strcmp(argv[2], "mapped") == 0) {
		FID_SETUP(ftruncate(fd, 4096) == 0, "ftruncate");
		map = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
		FID_SETUP(map != MAP_FAILED, "mmap");
		close(fd); /* the mapping alone holds the deleted file */
	}
	char buf[4096];
	struct inotify_event ev;
	while (read(in, buf, sizeof buf) > 0) /* the IN_DELETE, IN_ATTRIB, ... */
		;

	fid_ready();
	fid_wait();

	if (map) {
		FID_EXPECT(inotify_rm_watch(in, wfile) == 0, "the watch of the deleted file is gone");
		return fid_done();
	}
	FID_EXPECT(read(in, buf, sizeof buf) < 0 && errno == EAGAIN, "events queued by the restore");
	FID_EXPECT(write(fd, "x", 1) == 1, "write");
	FID_EXPECT(next_event(in, &ev, buf, sizeof buf) == 0 && ev.wd == wfile && (ev.mask & IN_MODIFY),
		   "no IN_MODIFY on watch %d", wfile);
	FID_EXPECT(close(fd) == 0, "close");
	FID_EXPECT(next_event(in, &ev, buf, sizeof buf) == 0 && ev.wd == wfile && (ev.mask & IN_CLOSE_WRITE),
		   "no IN_CLOSE_WRITE on watch %d", wfile);
	int o = open(other, O_WRONLY | O_CREAT, 0644);
	memset(&ev, 0, sizeof ev);
	FID_EXPECT(o >= 0 && next_event(in, &ev, buf, sizeof buf) == 0 && ev.wd == wdir && (ev.mask & IN_CREATE),
		   "no IN_CREATE on the directory's watch %d (wd %d mask %#x)", wdir, ev.wd, ev.mask);
	close(o);
	unlink(other);
	return fid_done();
}
