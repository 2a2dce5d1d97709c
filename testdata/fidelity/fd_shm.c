/*
 * fd_shm: POSIX shared memory created with shm_open and unlinked at once
 * (as MPICH does): one object still open (1 GiB, sparse: 8 KiB of data,
 * mode 0640, another owner) and mapped, one mapped only (its fd closed).
 * After the restore both are the same deleted /dev/shm files, with their
 * size, holes, mode, owner and content, and the fd and the mapping still
 * share one file.
 */
#include "fidelity.h"
#include <sys/mman.h>
#include <sys/stat.h>

#define BIG (1L << 30)
#define MAPLEN (1 << 20)

static int has_line(const char *path, const char *needle)
{
	static char buf[1 << 16];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	size_t n = 0;
	ssize_t r;
	while ((r = read(fd, buf + n, sizeof buf - 1 - n)) > 0)
		n += r;
	close(fd);
	buf[n] = 0;
	return strstr(buf, needle) != NULL;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	char name[64], name2[64], want[128], want2[128];
	snprintf(name, sizeof name, "/ckpt-fid-shm-%d", getpid());
	snprintf(name2, sizeof name2, "/ckpt-fid-shm2-%d", getpid());
	int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0640);
	FID_SETUP(fd >= 0, "shm_open %s", name);
	FID_SETUP(fchmod(fd, 0640) == 0 && fchown(fd, 4321, 4322) == 0, "chmod/chown");
	FID_SETUP(ftruncate(fd, BIG) == 0, "ftruncate");
	char page[4096];
	memset(page, 'a', sizeof page);
	FID_SETUP(pwrite(fd, page, sizeof page, 0) == sizeof page, "pwrite 0");
	memset(page, 'b', sizeof page);
	FID_SETUP(pwrite(fd, page, sizeof page, BIG / 2) == sizeof page, "pwrite middle");
	char *m = mmap(NULL, MAPLEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	FID_SETUP(m != MAP_FAILED, "mmap");
	m[8192] = 'm'; /* one more page of data, written through the mapping */
	FID_SETUP(shm_unlink(name) == 0, "shm_unlink");

	int fd2 = shm_open(name2, O_RDWR | O_CREAT | O_EXCL, 0600);
	FID_SETUP(fd2 >= 0 && ftruncate(fd2, 3 * 4096) == 0, "shm 2");
	char *m2 = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd2, 0);
	FID_SETUP(m2 != MAP_FAILED, "mmap 2");
	strcpy(m2 + 4096, "mapped only");
	close(fd2);
	FID_SETUP(shm_unlink(name2) == 0, "shm_unlink 2");
	snprintf(want, sizeof want, "/dev/shm%s (deleted)", name);
	snprintf(want2, sizeof want2, "/dev/shm%s (deleted)", name2);

	fid_ready();
	fid_wait();

	struct stat st;
	FID_EXPECT(fstat(fd, &st) == 0, "fstat: %s", strerror(errno));
	FID_EXPECT(st.st_size == BIG, "size %ld, want %ld", (long)st.st_size, BIG);
	FID_EXPECT((st.st_mode & 07777) == 0640, "mode %o, want 640", st.st_mode & 07777);
	FID_EXPECT(st.st_uid == 4321 && st.st_gid == 4322, "owner %d:%d, want 4321:4322", st.st_uid, st.st_gid);
	FID_EXPECT(st.st_nlink == 0, "%ld links, want 0 (deleted)", (long)st.st_nlink);
	FID_EXPECT(st.st_blocks * 512 <= 64 * 1024, "%ld bytes allocated: the holes were filled", (long)st.st_blocks * 512);
	char c = 0;
	FID_EXPECT(pread(fd, &c, 1, 100) == 1 && c == 'a', "byte 100: %c, want a", c);
	FID_EXPECT(pread(fd, &c, 1, BIG / 2 + 4095) == 1 && c == 'b', "byte at 512 MiB: %c, want b", c);
	FID_EXPECT(pread(fd, &c, 1, BIG / 4) == 1 && c == 0, "byte in a hole: %d, want 0", c);
	FID_EXPECT(m[8192] == 'm' && m[0] == 'a', "mapping holds %c%c, want am", m[0], m[8192]);
	FID_EXPECT(pwrite(fd, "Z", 1, 1) == 1 && m[1] == 'Z', "the fd and the mapping no longer share the file");
	char link[64], target[256] = {0};
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof target - 1);
	FID_EXPECT(n > 0 && strcmp(target, want) == 0, "fd %d links to %s, want %s", fd, target, want);
	FID_EXPECT(has_line("/proc/self/maps", want), "/proc/self/maps does not name %s", want);
	FID_EXPECT(has_line("/proc/self/maps", want2), "/proc/self/maps does not name %s", want2);
	FID_EXPECT(strcmp(m2 + 4096, "mapped only") == 0, "second object holds %.12s", m2 + 4096);
	int fl = fcntl(fd, F_GETFL);
	FID_EXPECT((fl & (O_ACCMODE | O_NONBLOCK | O_APPEND)) == O_RDWR, "F_GETFL %#o", fl);
	return fid_done();
}
