/*
 * mem_hugetlb: private anonymous hugetlb memory (MAP_HUGETLB) comes back as
 * hugetlb memory of the same page size, at the same address, with its
 * content: some huge pages written, one never touched.
 *
 * mem_hugetlb LOG sysv: the same with a System V segment made with
 * SHM_HUGETLB, attached and marked removed (what UCX's shared memory does
 * when huge pages are free, e.g. under MPICH): it comes back as a
 * SHM_HUGETLB segment of the same size, id and mode.
 *
 * It needs free huge pages: as root it raises vm.nr_hugepages by what it
 * needs when fewer are free (a restore needs as many again while the
 * original still holds its own, with --leave-running).
 */
#include "fidelity.h"

#include <sys/mman.h>
#include <sys/shm.h>

#define HUGE (2UL << 20)
#define NHUGE 3

static long meminfo(const char *key)
{
	char buf[8192];
	int fd = open("/proc/meminfo", O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *p = strstr(buf, key);
	return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static void reserve(long want)
{
	long free = meminfo("HugePages_Free:"), total = meminfo("HugePages_Total:");
	if (free >= want)
		return;
	int fd = open("/proc/sys/vm/nr_hugepages", O_WRONLY);
	FID_SETUP(fd >= 0, "open nr_hugepages");
	char num[32];
	int n = snprintf(num, sizeof num, "%ld", total + want - free);
	FID_SETUP(write(fd, num, n) == n, "raise nr_hugepages to %s", num);
	close(fd);
	FID_SETUP(meminfo("HugePages_Free:") >= want, "only %ld huge pages free", meminfo("HugePages_Free:"));
}

/* kernel_page_size returns the KernelPageSize of the mapping at p, in kB. */
static long kernel_page_size(void *p)
{
	char buf[1 << 16], start[32];
	int fd = open("/proc/self/smaps", O_RDONLY);
	if (fd < 0)
		return -1;
	size_t len = 0;
	ssize_t n;
	while (len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
		len += n;
	close(fd);
	buf[len] = 0;
	snprintf(start, sizeof start, "\n%lx-", (unsigned long)p);
	char *m = strstr(buf, start);
	if (!m)
		return -1;
	char *k = strstr(m, "KernelPageSize:");
	return k ? strtol(k + 15, NULL, 10) : -1;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	/* This one, one restored copy, and a spare: the killed original's
	 * pages are freed asynchronously. */
	reserve(3 * NHUGE);
	int sysv = argc > 2 && strcmp(argv[2], "sysv") == 0, id = -1;
	unsigned char *p;
	if (sysv) {
		id = shmget(IPC_PRIVATE, NHUGE * HUGE, IPC_CREAT | SHM_HUGETLB | 0600);
		FID_SETUP(id >= 0, "shmget SHM_HUGETLB: %s", strerror(errno));
		p = shmat(id, NULL, 0);
		FID_SETUP(p != (void *)-1, "shmat: %s", strerror(errno));
		FID_SETUP(shmctl(id, IPC_RMID, NULL) == 0, "IPC_RMID: %s", strerror(errno));
	} else {
		p = mmap(NULL, NHUGE * HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		FID_SETUP(p != MAP_FAILED, "mmap MAP_HUGETLB");
	}
	/* Pages 0 and 2 written, page 1 never touched. */
	for (size_t i = 0; i < HUGE; i += 4096) {
		p[i] = (unsigned char)(i >> 12);
		p[2 * HUGE + i + 7] = (unsigned char)~(i >> 12);
	}
	FID_SETUP(kernel_page_size(p) == 2048, "KernelPageSize %ld kB", kernel_page_size(p));
	fid_ready();
	fid_wait();
	FID_EXPECT(kernel_page_size(p) == 2048, "KernelPageSize %ld kB, want 2048 (hugetlb)", kernel_page_size(p));
	if (sysv) {
		struct shmid_ds ds;
		FID_EXPECT(shmctl(id, IPC_STAT, &ds) == 0, "IPC_STAT of segment %d: %s", id, strerror(errno));
		FID_EXPECT(ds.shm_segsz == NHUGE * HUGE && (ds.shm_perm.mode & 0777) == 0600 && ds.shm_nattch == 1,
			   "segment %d: size %zu mode %o attached %lu times", id, ds.shm_segsz, ds.shm_perm.mode,
			   (unsigned long)ds.shm_nattch);
	}
	int bad = 0;
	for (size_t i = 0; i < HUGE && bad < 3; i += 4096) {
		if (p[i] != (unsigned char)(i >> 12) || p[2 * HUGE + i + 7] != (unsigned char)~(i >> 12)) {
			fid_fail("content differs at page offset %#zx", i);
			bad++;
		}
		if (p[HUGE + i] != 0) {
			fid_fail("untouched huge page holds data at %#zx", i);
			bad++;
		}
	}
	/* Still hugetlb: a write into the untouched page takes a huge page. */
	p[HUGE] = 1;
	FID_EXPECT(p[HUGE] == 1, "write into the untouched huge page");
	return fid_done();
}
