/*
 * proc_sigtrap: SIGTRAP pending while blocked, once directed at the main
 * thread (rt_tgsigqueueinfo, value 77) and once at the process
 * (rt_sigqueueinfo, value 88), with a SIGTRAP handler installed; ptrace,
 * which the dump and the restore use, has its own meaning for SIGTRAP.
 * After the restore both must still be pending, with their siginfo, the
 * mask and the handler as they were.
 */
#include "fidelity.h"
#include <sys/syscall.h>

static void on_trap(int sig, siginfo_t *si, void *uc) { (void)sig, (void)si, (void)uc; }

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	struct sigaction sa = {0};
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO;
	FID_SETUP(sigaction(SIGTRAP, &sa, NULL) == 0, "sigaction");
	sigset_t trap;
	sigemptyset(&trap);
	sigaddset(&trap, SIGTRAP);
	FID_SETUP(sigprocmask(SIG_BLOCK, &trap, NULL) == 0, "sigprocmask");
	siginfo_t si = {0};
	si.si_signo = SIGTRAP;
	si.si_code = SI_QUEUE;
	si.si_pid = getpid();
	si.si_uid = getuid();
	si.si_value.sival_int = 77;
	FID_SETUP(syscall(SYS_rt_tgsigqueueinfo, getpid(), syscall(SYS_gettid), SIGTRAP, &si) == 0, "rt_tgsigqueueinfo");
	si.si_value.sival_int = 88;
	FID_SETUP(syscall(SYS_rt_sigqueueinfo, getpid(), SIGTRAP, &si) == 0, "rt_sigqueueinfo");
	fid_ready();
	fid_wait();
	sigset_t pend;
	sigpending(&pend);
	FID_EXPECT(sigismember(&pend, SIGTRAP), "SIGTRAP is not pending");
	struct sigaction cur;
	sigaction(SIGTRAP, NULL, &cur);
	FID_EXPECT(cur.sa_sigaction == on_trap && (cur.sa_flags & SA_SIGINFO), "SIGTRAP handler %p flags %#x",
		   (void *)cur.sa_sigaction, (unsigned)cur.sa_flags);
	FID_EXPECT(sigismember(&cur.sa_mask, SIGTRAP) == 0, "SIGTRAP handler mask changed");
	sigset_t mask;
	sigprocmask(SIG_BLOCK, NULL, &mask);
	FID_EXPECT(sigismember(&mask, SIGTRAP), "SIGTRAP is no longer blocked");
	/* Thread-directed signals are taken first. */
	int values[3] = {77, 88, 0};
	for (int k = 0; k < 3; k++) {
		siginfo_t got;
		struct timespec ts = {0, 0};
		int s = sigtimedwait(&trap, &got, &ts);
		if (values[k] == 0)
			FID_EXPECT(s < 0, "a third SIGTRAP (code %d)", got.si_code);
		else
			FID_EXPECT(s == SIGTRAP && got.si_code == SI_QUEUE && got.si_value.sival_int == values[k] && got.si_pid == getpid(),
				   "SIGTRAP %d: got signal %d code %d value %d pid %d, want code %d value %d pid %d", k + 1, s,
				   s > 0 ? got.si_code : 0, s > 0 ? got.si_value.sival_int : 0, s > 0 ? got.si_pid : 0, SI_QUEUE,
				   values[k], getpid());
	}
	return fid_done();
}
