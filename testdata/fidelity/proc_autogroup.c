/*
 * proc_autogroup: a process leading a session of its own (so an autogroup
 * of its own) sets its autogroup's nice value to 5 through
 * /proc/self/autogroup. The dump must refuse it by name; the program checks
 * that the nice value is still 5 after the refused dump.
 */
#include "fidelity.h"

static int autogroup_nice(void)
{
	char buf[128];
	int fd = open("/proc/self/autogroup", O_RDONLY);
	if (fd < 0)
		return -100;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -100;
	buf[n] = 0;
	char *p = strstr(buf, " nice ");
	return p ? atoi(p + 6) : -100;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	if (access("/proc/self/autogroup", F_OK) != 0)
		fid_skip("no scheduler autogroups in this kernel");
	if (getsid(0) != getpid())
		FID_SETUP(setsid() == getpid(), "setsid");
	int fd = open("/proc/self/autogroup", O_WRONLY);
	FID_SETUP(fd >= 0 && write(fd, "5", 1) == 1, "set autogroup nice 5");
	close(fd);
	FID_SETUP(autogroup_nice() == 5, "autogroup nice %d after setting 5", autogroup_nice());
	fid_ready();
	fid_wait();
	FID_EXPECT(autogroup_nice() == 5, "autogroup nice %d, want 5", autogroup_nice());
	return fid_done();
}
