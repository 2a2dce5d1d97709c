/*
 * proc_uffd: a range registered with the program's own userfaultfd
 * (missing-page mode). ckpt refuses it at dump ("userfaultfd"); untouched,
 * the range is still registered (VmFlags um) and UFFDIO_ZEROPAGE works.
 */
#include "fidelity.h"
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define LEN (4 * 4096)

/* vmflags_has reports whether the smaps VmFlags of the mapping at addr
 * have flag. */
static int vmflags_has(void *addr, const char *flag)
{
	static char buf[1 << 16];
	int fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t n = 0;
	ssize_t r;
	while ((r = read(fd, buf + n, sizeof buf - 1 - n)) > 0)
		n += r;
	close(fd);
	buf[n] = 0;
	char head[32];
	snprintf(head, sizeof head, "%lx-", (unsigned long)addr);
	char *m = strstr(buf, head);
	if (!m)
		return -1;
	char *vf = strstr(m, "VmFlags:");
	if (!vf)
		return -1;
	char *end = strchr(vf, '\n');
	if (end)
		*end = 0;
	char pat[8];
	snprintf(pat, sizeof pat, " %s", flag);
	return strstr(vf, pat) != NULL;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	int uffd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	FID_SETUP(uffd >= 0, "userfaultfd");
	struct uffdio_api api = {.api = UFFD_API};
	FID_SETUP(ioctl(uffd, UFFDIO_API, &api) == 0, "UFFDIO_API");
	char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	FID_SETUP(p != MAP_FAILED, "mmap");
	struct uffdio_register reg = {.range = {(unsigned long)p, LEN}, .mode = UFFDIO_REGISTER_MODE_MISSING};
	FID_SETUP(ioctl(uffd, UFFDIO_REGISTER, &reg) == 0, "UFFDIO_REGISTER");
	FID_SETUP(vmflags_has(p, "um") == 1, "VmFlags um after UFFDIO_REGISTER");
	fid_ready();
	fid_wait();
	FID_EXPECT(vmflags_has(p, "um") == 1, "the range is no longer registered (VmFlags um)");
	struct uffdio_zeropage zp = {.range = {(unsigned long)p, 4096}};
	FID_EXPECT(ioctl(uffd, UFFDIO_ZEROPAGE, &zp) == 0, "UFFDIO_ZEROPAGE: %s", strerror(errno));
	FID_EXPECT(p[0] == 0, "page not zero");
	return fid_done();
}
