/*
 * proc_rlimit: resource limits, soft lowered, hard left as inherited. The
 * fidelity test runs ckpt dump under lower hard limits than the program's:
 * without CAP_SYS_RESOURCE it could not raise them back at restore, so it
 * refuses ("hard limit"); untouched, the limits are as set.
 */
#include "fidelity.h"
#include <sys/resource.h>

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	struct rlimit nofile, core;
	FID_SETUP(getrlimit(RLIMIT_NOFILE, &nofile) == 0, "getrlimit");
	nofile.rlim_cur = 300;
	FID_SETUP(setrlimit(RLIMIT_NOFILE, &nofile) == 0, "setrlimit NOFILE");
	FID_SETUP(getrlimit(RLIMIT_CORE, &core) == 0, "getrlimit");
	core.rlim_cur = 0;
	FID_SETUP(setrlimit(RLIMIT_CORE, &core) == 0, "setrlimit CORE");
	fid_ready();
	fid_wait();
	struct rlimit got;
	FID_EXPECT(getrlimit(RLIMIT_NOFILE, &got) == 0 && got.rlim_cur == 300 && got.rlim_max == nofile.rlim_max,
		   "RLIMIT_NOFILE %lu/%lu, want 300/%lu", (unsigned long)got.rlim_cur, (unsigned long)got.rlim_max,
		   (unsigned long)nofile.rlim_max);
	FID_EXPECT(getrlimit(RLIMIT_CORE, &got) == 0 && got.rlim_cur == 0 && got.rlim_max == core.rlim_max,
		   "RLIMIT_CORE %lu/%lu, want 0/%lu", (unsigned long)got.rlim_cur, (unsigned long)got.rlim_max,
		   (unsigned long)core.rlim_max);
	return fid_done();
}
