/*
 * fd_ghost_attrs: deleted files whose content the image holds, with what a
 * program can see of them besides the content.
 *  - a file given set-user-ID and set-group-ID bits (mode 06604), another
 *    owner and an old mtime, then deleted: fstat shows them all after the
 *    restore (a chown after the chmod would clear the set-ID bits);
 *  - an O_TMPFILE file (never named): F_GETFL of its description shows
 *    O_TMPFILE, a second description reopened through /proc/self/fd does
 *    not; both see one content, and the file can still be given a name
 *    with linkat.
 * Run as root. Arguments: DIR/ (a directory of the case).
 */
#include "fidelity.h"
#include <sys/stat.h>
#include <utime.h>

#define TMPBITS (O_TMPFILE & ~O_DIRECTORY)

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc >= 3, "usage: LOG DIR/");
	const char *dir = argv[2];
	char path[4096], named[4096];

	snprintf(path, sizeof path, "%sghost", dir);
	int g = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	FID_SETUP(g >= 0 && write(g, "content", 7) == 7, "ghost file");
	FID_SETUP(fchown(g, 4321, 8765) == 0, "fchown");
	FID_SETUP(fchmod(g, 06604) == 0, "fchmod");
	struct utimbuf ut = {.actime = 1000, .modtime = 123456};
	FID_SETUP(utime(path, &ut) == 0, "utime");
	FID_SETUP(unlink(path) == 0, "unlink");
	struct stat before;
	FID_SETUP(fstat(g, &before) == 0, "fstat");

	int t = open(dir, O_TMPFILE | O_RDWR, 0640);
	if (t < 0 && (errno == EOPNOTSUPP || errno == EISDIR))
		fid_skip("O_TMPFILE not supported here");
	FID_SETUP(t >= 0 && write(t, "tmpfile", 7) == 7, "O_TMPFILE file");
	char self[64];
	snprintf(self, sizeof self, "/proc/self/fd/%d", t);
	int t2 = open(self, O_RDONLY);
	FID_SETUP(t2 >= 0, "reopen the O_TMPFILE file");
	int tfl = fcntl(t, F_GETFL), t2fl = fcntl(t2, F_GETFL);
	FID_SETUP((tfl & TMPBITS) && !(t2fl & TMPBITS), "O_TMPFILE shows in F_GETFL of the first only (%#o, %#o)", tfl, t2fl);

	fid_ready();
	fid_wait();

	struct stat now;
	FID_EXPECT(fstat(g, &now) == 0, "fstat: %s", strerror(errno));
	FID_EXPECT((now.st_mode & 07777) == 06604, "deleted file mode %#o, want 06604", now.st_mode & 07777);
	FID_EXPECT(now.st_uid == 4321 && now.st_gid == 8765, "deleted file owner %d:%d, want 4321:8765", now.st_uid, now.st_gid);
	FID_EXPECT(now.st_mtime == 123456, "deleted file mtime %ld, want 123456", (long)now.st_mtime);
	FID_EXPECT(now.st_nlink == 0 && now.st_size == 7, "deleted file nlink %ld size %ld", (long)now.st_nlink, (long)now.st_size);
	char buf[16] = {0};
	FID_EXPECT(pread(g, buf, sizeof buf, 0) == 7 && memcmp(buf, "content", 7) == 0, "deleted file content %.7s", buf);

	FID_EXPECT(fcntl(t, F_GETFL) == tfl, "O_TMPFILE description flags %#o, want %#o", fcntl(t, F_GETFL), tfl);
	FID_EXPECT(fcntl(t2, F_GETFL) == t2fl, "reopened description flags %#o, want %#o", fcntl(t2, F_GETFL), t2fl);
	FID_EXPECT(lseek(t2, 0, SEEK_CUR) == 0 && lseek(t, 0, SEEK_CUR) == 7, "positions %ld %ld", (long)lseek(t, 0, SEEK_CUR),
		   (long)lseek(t2, 0, SEEK_CUR));
	memset(buf, 0, sizeof buf);
	FID_EXPECT(write(t, "!", 1) == 1 && read(t2, buf, sizeof buf) == 8 && memcmp(buf, "tmpfile!", 8) == 0,
		   "one content through both descriptions: %.8s", buf);
	struct stat ts;
	FID_EXPECT(fstat(t, &ts) == 0 && (ts.st_mode & 07777) == 0640 && ts.st_nlink == 0, "O_TMPFILE file mode %#o nlink %ld",
		   ts.st_mode & 07777, (long)ts.st_nlink);
	snprintf(named, sizeof named, "%snamed", dir);
	snprintf(self, sizeof self, "/proc/self/fd/%d", t);
	FID_EXPECT(linkat(AT_FDCWD, self, AT_FDCWD, named, AT_SYMLINK_FOLLOW) == 0, "linkat the O_TMPFILE file: %s",
		   strerror(errno));
	unlink(named);
	return fid_done();
}
