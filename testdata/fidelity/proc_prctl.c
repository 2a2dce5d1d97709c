/*
 * proc_prctl: process-wide attributes set with prctl and /proc/self:
 * personality (ADDR_NO_RANDOMIZE added), not dumpable, child subreaper,
 * THP disabled, memory-deny-write-execute, oom_score_adj 500,
 * coredump_filter 0x7f, the audit loginuid and session id as they were
 * (with the argument "loginuid" it sets loginuid 4321, which starts a new
 * audit session: the dump must refuse that), and membarrier registrations
 * (private expedited, and its sync-core and rseq flavours). Each must be
 * the same after the restore, and membarrier(PRIVATE_EXPEDITED) must work.
 */
#include "fidelity.h"
#include <linux/membarrier.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#define PR_GET_MDWE 66
#define PR_MDWE_REFUSE_EXEC_GAIN 1
#endif
#define MB_GET_REGISTRATIONS (1 << 9)

static int membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

static int write_file(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int n = write(fd, v, strlen(v));
	close(fd);
	return n == (int)strlen(v) ? 0 : -1;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	int pers = personality(0xffffffff) | ADDR_NO_RANDOMIZE;
	FID_SETUP(personality(pers) >= 0, "personality");
	FID_SETUP(prctl(PR_SET_DUMPABLE, 0) == 0, "PR_SET_DUMPABLE");
	FID_SETUP(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0, "PR_SET_CHILD_SUBREAPER");
	FID_SETUP(prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0, "PR_SET_THP_DISABLE");
	FID_SETUP(prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) == 0, "PR_SET_MDWE");
	FID_SETUP(write_file("/proc/self/oom_score_adj", "500") == 0, "oom_score_adj");
	FID_SETUP(write_file("/proc/self/coredump_filter", "0x7f") == 0, "coredump_filter");
	if (argc > 2 && strcmp(argv[2], "loginuid") == 0)
		FID_SETUP(write_file("/proc/self/loginuid", "4321") == 0, "loginuid");
	char loginuid[64] = "", sessionid[64] = "";
	fid_read_file("/proc/self/loginuid", loginuid, sizeof loginuid);
	fid_read_file("/proc/self/sessionid", sessionid, sizeof sessionid);
	int regs = MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED | MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE |
		   MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ;
	for (int bit = 1; bit <= regs; bit <<= 1)
		if (regs & bit)
			FID_SETUP(membarrier(bit) == 0, "membarrier register %#x", bit);
	int got_regs = membarrier(MB_GET_REGISTRATIONS);
	fid_ready();
	fid_wait();
	char v[64];
	FID_EXPECT(personality(0xffffffff) == pers, "personality %#x, want %#x", personality(0xffffffff), pers);
	FID_EXPECT(prctl(PR_GET_DUMPABLE) == 0, "dumpable %d, want 0", prctl(PR_GET_DUMPABLE));
	int sub = -1;
	prctl(PR_GET_CHILD_SUBREAPER, &sub);
	FID_EXPECT(sub == 1, "child subreaper %d, want 1", sub);
	FID_EXPECT(prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1, "THP disable %d, want 1", prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0));
	FID_EXPECT(fid_status(0, "THP_enabled", v, sizeof v) == 0 && strcmp(v, "0") == 0, "status THP_enabled %s, want 0", v);
	FID_EXPECT(prctl(PR_GET_MDWE, 0, 0, 0, 0) == PR_MDWE_REFUSE_EXEC_GAIN, "MDWE %d, want %d", prctl(PR_GET_MDWE, 0, 0, 0, 0),
		   PR_MDWE_REFUSE_EXEC_GAIN);
	FID_EXPECT(fid_read_file("/proc/self/oom_score_adj", v, sizeof v) == 0 && strcmp(v, "500") == 0, "oom_score_adj %s, want 500", v);
	FID_EXPECT(fid_read_file("/proc/self/coredump_filter", v, sizeof v) == 0 && strcmp(v, "0000007f") == 0,
		   "coredump_filter %s, want 0000007f", v);
	FID_EXPECT(fid_read_file("/proc/self/loginuid", v, sizeof v) == 0 && strcmp(v, loginuid) == 0, "loginuid %s, want %s", v, loginuid);
	FID_EXPECT(fid_read_file("/proc/self/sessionid", v, sizeof v) == 0 && strcmp(v, sessionid) == 0, "audit session %s, want %s", v, sessionid);
	FID_EXPECT(membarrier(MB_GET_REGISTRATIONS) == got_regs, "membarrier registrations %#x, want %#x",
		   membarrier(MB_GET_REGISTRATIONS), got_regs);
	FID_EXPECT(membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0, "membarrier(PRIVATE_EXPEDITED): %s", strerror(errno));
	FID_EXPECT(membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE) == 0, "membarrier(PRIVATE_EXPEDITED_SYNC_CORE): %s", strerror(errno));
	return fid_done();
}
