/*
 * tree_sigtrap: a SIGTRAP handler (SA_SIGINFO), SIGTRAP blocked, and a
 * SIGTRAP pending, queued with sigqueue (si_code SI_QUEUE, value 77). The
 * freeze and the injected calls (whose traps are SIGTRAPs too) must not
 * take it, add one, unblock SIGTRAP or reset the handler. After the
 * restore: the handler and mask are as set, SIGTRAP is pending, and once
 * unblocked the handler runs exactly once with the queued siginfo.
 */
#include "fidelity.h"

static volatile sig_atomic_t got, code, value;

static void on_trap(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	got++;
	code = si->si_code;
	value = si->si_value.sival_int;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	FID_SETUP(sigaction(SIGTRAP, &sa, NULL) == 0, "sigaction");
	sigset_t trap;
	sigemptyset(&trap);
	sigaddset(&trap, SIGTRAP);
	FID_SETUP(sigprocmask(SIG_BLOCK, &trap, NULL) == 0, "sigprocmask");
	FID_SETUP(sigqueue(getpid(), SIGTRAP, (union sigval){.sival_int = 77}) == 0, "sigqueue");
	fid_ready();
	fid_wait();
	struct sigaction now;
	FID_EXPECT(sigaction(SIGTRAP, NULL, &now) == 0 && now.sa_sigaction == on_trap &&
			   (now.sa_flags & SA_SIGINFO),
		   "SIGTRAP handler %p flags %#x, want %p with SA_SIGINFO", (void *)now.sa_sigaction,
		   (unsigned)now.sa_flags, (void *)on_trap);
	sigset_t mask, pend;
	sigprocmask(SIG_BLOCK, NULL, &mask);
	sigpending(&pend);
	FID_EXPECT(sigismember(&mask, SIGTRAP), "SIGTRAP not blocked any more");
	FID_EXPECT(sigismember(&pend, SIGTRAP), "SIGTRAP not pending any more");
	FID_EXPECT(got == 0, "the handler ran %d times while SIGTRAP was blocked", (int)got);
	sigprocmask(SIG_UNBLOCK, &trap, NULL);
	FID_EXPECT(got == 1 && code == SI_QUEUE && value == 77,
		   "after unblocking: handler ran %d times, si_code %d value %d; want once, SI_QUEUE (%d), 77",
		   (int)got, (int)code, (int)value, SI_QUEUE);
	return fid_done();
}
