/*
 * fd_linked_elsewhere: a file opened under one name, given a second name
 * (link) in another directory, and then the first name removed: its
 * /proc/self/fd link says "(deleted)", but the file lives on under the
 * second name. After the restore the fd must be that very file (same
 * inode as the second name, one link), with its position, and what is
 * written through either reaches the other: not a copy. The same for a
 * shared mapping of it. Arguments: DIR/.
 */
#include "fidelity.h"
#include <sys/mman.h>
#include <sys/stat.h>

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc >= 3, "usage: LOG DIR/");
	char a[4096], sub[4096], b[4096];
	snprintf(a, sizeof a, "%sfirst", argv[2]);
	snprintf(sub, sizeof sub, "%sother", argv[2]);
	snprintf(b, sizeof b, "%s/second", sub);
	FID_SETUP(mkdir(sub, 0755) == 0, "mkdir");
	int fd = open(a, O_RDWR | O_CREAT | O_TRUNC, 0640);
	FID_SETUP(fd >= 0 && write(fd, "hello", 5) == 5, "open and write");
	char *map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	FID_SETUP(map != MAP_FAILED, "mmap");
	FID_SETUP(link(a, b) == 0 && unlink(a) == 0, "link and unlink");
	struct stat st;
	FID_SETUP(fstat(fd, &st) == 0 && st.st_nlink == 1, "fstat");

	fid_ready();
	fid_wait();

	struct stat now, named;
	FID_EXPECT(fstat(fd, &now) == 0 && stat(b, &named) == 0, "stat: %s", strerror(errno));
	FID_EXPECT(now.st_ino == named.st_ino && now.st_dev == named.st_dev,
		   "the fd is another file than %s (inode %lu, the name's %lu): a copy", b, (unsigned long)now.st_ino,
		   (unsigned long)named.st_ino);
	FID_EXPECT(now.st_nlink == 1, "links %lu, want 1", (unsigned long)now.st_nlink);
	FID_EXPECT(lseek(fd, 0, SEEK_CUR) == 5, "position %ld, want 5", (long)lseek(fd, 0, SEEK_CUR));
	FID_EXPECT(write(fd, " world", 6) == 6, "write");
	char buf[32] = {0};
	int nb = open(b, O_RDWR);
	FID_EXPECT(nb >= 0 && read(nb, buf, sizeof buf) == 11 && memcmp(buf, "hello world", 11) == 0,
		   "written through the fd, read through %s: %.11s", b, buf);
	FID_EXPECT(nb >= 0 && pwrite(nb, "J", 1, 0) == 1, "pwrite");
	FID_EXPECT(pread(fd, buf, 1, 0) == 1 && buf[0] == 'J', "written through the name, read through the fd: %c", buf[0]);
	FID_EXPECT(map[0] == 'J', "the shared mapping does not see what was written through the name: %c", map[0]);
	map[1] = 'E';
	FID_EXPECT(pread(nb, buf, 2, 0) == 2 && buf[1] == 'E', "written through the mapping, read through the name: %c", buf[1]);
	FID_EXPECT(access(a, F_OK) != 0, "%s exists again", a);
	close(nb);
	return fid_done();
}
