/*
 * fd_fifo DIR: named FIFOs open for reading (non-blocking), writing and
 * reading-writing, one deleted, each with data buffered in it. After the
 * restore every description has its flags, the data is there (and was
 * not consumed by the dump), and data still flows from writer to reader.
 */
#include "fidelity.h"
#include <sys/stat.h>

static void expect_link(int fd, const char *want)
{
	char link[64], target[4096] = {0};
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof target - 1);
	FID_EXPECT(n > 0 && strcmp(target, want) == 0, "fd %d links to %s, want %s", fd, target, want);
}

static void expect_flags(int fd, int want)
{
	int fl = fcntl(fd, F_GETFL) & (O_ACCMODE | O_NONBLOCK | O_APPEND);
	FID_EXPECT(fl == want, "fd %d: F_GETFL %#o, want %#o", fd, fl, want);
}

static void expect_read(int fd, const char *want)
{
	char buf[64] = {0};
	ssize_t n = read(fd, buf, sizeof buf - 1);
	FID_EXPECT(n == (ssize_t)strlen(want) && memcmp(buf, want, n) == 0, "fd %d: read %zd bytes %.*s, want %s", fd, n,
		   (int)(n > 0 ? n : 0), buf, want);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: fd_fifo LOG DIR");
	char rw[4096], rd[4096], del[4096], deleted[4200];
	snprintf(rw, sizeof rw, "%s/rw.fifo", argv[2]);
	snprintf(rd, sizeof rd, "%s/rd.fifo", argv[2]);
	snprintf(del, sizeof del, "%s/del.fifo", argv[2]);
	snprintf(deleted, sizeof deleted, "%s (deleted)", del);
	FID_SETUP(mkfifo(rw, 0600) == 0 && mkfifo(rd, 0640) == 0 && mkfifo(del, 0600) == 0, "mkfifo");

	int frw = open(rw, O_RDWR);
	FID_SETUP(frw >= 0 && write(frw, "rw data", 7) == 7, "read-write FIFO");
	int frd = open(rd, O_RDONLY | O_NONBLOCK);
	int fwr = open(rd, O_WRONLY);
	FID_SETUP(frd >= 0 && fwr >= 0 && write(fwr, "reader's data", 13) == 13, "read and write FIFO");
	int fdel = open(del, O_RDWR | O_NONBLOCK);
	FID_SETUP(fdel >= 0 && write(fdel, "deleted data", 12) == 12 && unlink(del) == 0, "deleted FIFO");

	struct stat dst0;
	FID_SETUP(stat(argv[2], &dst0) == 0, "stat DIR");
	fid_ready();
	fid_wait();
	struct stat dst1;
	FID_EXPECT(stat(argv[2], &dst1) == 0 && dst1.st_mtim.tv_sec == dst0.st_mtim.tv_sec && dst1.st_mtim.tv_nsec == dst0.st_mtim.tv_nsec,
		   "the directory's mtime changed across the restore");

	expect_flags(frw, O_RDWR);
	expect_flags(frd, O_RDONLY | O_NONBLOCK);
	expect_flags(fwr, O_WRONLY);
	expect_flags(fdel, O_RDWR | O_NONBLOCK);
	expect_link(frw, rw);
	expect_link(frd, rd);
	expect_link(fdel, deleted);
	struct stat st;
	FID_EXPECT(fstat(frd, &st) == 0 && S_ISFIFO(st.st_mode) && (st.st_mode & 0777) == 0640, "rd.fifo mode %o", st.st_mode);
	expect_read(frw, "rw data");
	expect_read(frd, "reader's data");
	expect_read(fdel, "deleted data");
	FID_EXPECT(write(fwr, "more", 4) == 4, "write: %s", strerror(errno));
	expect_read(frd, "more");
	char c;
	FID_EXPECT(read(frd, &c, 1) < 0 && errno == EAGAIN, "empty non-blocking FIFO did not say EAGAIN");
	unlink(rw);
	unlink(rd);
	return fid_done();
}
