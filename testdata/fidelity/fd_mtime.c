/*
 * fd_mtime DIR: files the process has open keep their modification times
 * through the restore, and it finds their content where it left it: a
 * file read at an offset, a file open read-write, a file mapped
 * privately (a page of it changed in memory, the rest read back from the
 * file), an open directory, a FIFO with buffered data (refilling it must
 * not stamp it), and a deleted file and a deleted FIFO (made again: they
 * get their old times back). Every time was set to a fixed past time.
 */
#include "fidelity.h"
#include <sys/mman.h>
#include <sys/stat.h>

#define NFILES 7
static const char *names[NFILES] = {"read", "rdwr", "mapped", "dir", "fifo", "deleted", "deleted fifo"};

static long long mtime_of(int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -1;
	return (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
}

/* old sets the times of path to a fixed past time (plus i ns). */
static int old(const char *path, int i)
{
	struct timespec ts[2] = {{1000000000, 0}, {1234567890, 123456000 + i}};
	return utimensat(AT_FDCWD, path, ts, 0);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: fd_mtime LOG DIR");
	char p[NFILES][4200];
	for (int i = 0; i < NFILES; i++)
		snprintf(p[i], sizeof p[i], "%s/%s", argv[2], names[i]);
	long page = sysconf(_SC_PAGESIZE);
	char content[3 * 4096];
	for (size_t i = 0; i < sizeof content; i++)
		content[i] = 'a' + i % 26;
	for (int i = 0; i < NFILES; i++) {
		if (i == 3)
			FID_SETUP(mkdir(p[i], 0750) == 0, "mkdir");
		else if (i == 4 || i == 6)
			FID_SETUP(mkfifo(p[i], 0640) == 0, "mkfifo");
		else {
			int w = open(p[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
			FID_SETUP(w >= 0 && write(w, content, sizeof content) == (ssize_t)sizeof content, "write %s", names[i]);
			close(w);
		}
	}
	int fd[NFILES];
	fd[0] = open(p[0], O_RDONLY | O_CLOEXEC);
	fd[1] = open(p[1], O_RDWR | O_CLOEXEC);
	fd[2] = open(p[2], O_RDONLY | O_CLOEXEC);
	fd[3] = open(p[3], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	fd[4] = open(p[4], O_RDWR | O_NONBLOCK | O_CLOEXEC);
	fd[5] = open(p[5], O_RDWR | O_CLOEXEC);
	fd[6] = open(p[6], O_RDWR | O_NONBLOCK | O_CLOEXEC);
	for (int i = 0; i < NFILES; i++)
		FID_SETUP(fd[i] >= 0, "open %s", names[i]);
	FID_SETUP(write(fd[4], "fifo data", 9) == 9 && write(fd[6], "more data", 9) == 9, "fill the FIFOs");
	char *m = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd[2], 0);
	FID_SETUP(m != MAP_FAILED, "mmap");
	m[page + 1] = '!'; /* one page copied on write, the others clean */
	FID_SETUP(lseek(fd[0], 100, SEEK_SET) == 100, "seek");
	for (int i = 0; i < NFILES; i++)
		FID_SETUP(old(p[i], i) == 0, "utimensat %s", names[i]);
	FID_SETUP(unlink(p[5]) == 0 && unlink(p[6]) == 0, "unlink");
	long long want[NFILES];
	for (int i = 0; i < NFILES; i++)
		want[i] = mtime_of(fd[i]);

	fid_ready();
	fid_wait();

	for (int i = 0; i < NFILES; i++) {
		long long got = mtime_of(fd[i]);
		FID_EXPECT(got == want[i], "%s: modification time %lld, want %lld", names[i], got, want[i]);
	}
	char buf[16] = {0};
	FID_EXPECT(read(fd[0], buf, 4) == 4 && memcmp(buf, content + 100, 4) == 0, "read at 100: %.4s", buf);
	FID_EXPECT(m[0] == 'a' && m[page + 1] == '!' && m[2 * page + 5] == content[2 * page + 5] && m[page] == content[page],
		   "mapped pages: %c %c %c", m[0], m[page + 1], m[2 * page + 5]);
	memset(buf, 0, sizeof buf);
	FID_EXPECT(read(fd[4], buf, sizeof buf) == 9 && strcmp(buf, "fifo data") == 0, "FIFO holds '%s'", buf);
	memset(buf, 0, sizeof buf);
	FID_EXPECT(read(fd[6], buf, sizeof buf) == 9 && strcmp(buf, "more data") == 0, "deleted FIFO holds '%s'", buf);
	memset(buf, 0, sizeof buf);
	FID_EXPECT(pread(fd[5], buf, 5, 26) == 5 && strcmp(buf, "abcde") == 0, "deleted file holds '%s'", buf);
	return fid_done();
}
