/*
 * tree_novdso: a process that unmapped its vDSO (and vvar): ckpt cannot
 * inject calls through the vDSO and must use another syscall instruction.
 * After the restore there must still be no [vdso] nor [vvar], and
 * /proc/self/maps must be exactly as before (no gadget area left behind).
 * The program never calls into the vDSO after unmapping it (raw syscalls
 * only: glibc would jump into the unmapped vDSO).
 */
#include "fidelity.h"
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

static char before[65536], after[65536];

static int read_maps(char *out, size_t len)
{
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t n = 0;
	ssize_t r;
	while (n < len - 1 && (r = read(fd, out + n, len - 1 - n)) > 0)
		n += r;
	close(fd);
	out[n] = 0;
	return 0;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(read_maps(before, sizeof before) == 0, "read maps");
	for (char *l = before; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		unsigned long s, e;
		if (sscanf(l, "%lx-%lx", &s, &e) != 2)
			continue;
		char *nl = strchr(l, '\n');
		size_t k = nl ? (size_t)(nl - l) : strlen(l);
		char line[512];
		snprintf(line, sizeof line, "%.*s", (int)k, l);
		if (strstr(line, "[vdso]") || strstr(line, "[vvar"))
			FID_SETUP(syscall(SYS_munmap, s, e - s) == 0, "munmap %lx-%lx", s, e);
	}
	FID_SETUP(read_maps(before, sizeof before) == 0, "read maps");
	FID_SETUP(!strstr(before, "[vdso]") && !strstr(before, "[vvar"), "vdso still mapped");
	fid_ready();
	fid_wait();
	FID_EXPECT(read_maps(after, sizeof after) == 0, "read maps after");
	FID_EXPECT(!strstr(after, "[vdso]"), "a [vdso] came back");
	FID_EXPECT(strcmp(before, after) == 0, "maps differ: before\n%s\nafter\n%s", before, after);
	struct timespec ts;
	FID_EXPECT(syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts) == 0, "clock_gettime syscall");
	return fid_done();
}
