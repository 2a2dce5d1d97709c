/*
 * tree_zombies: children that have ended and are not waited for yet,
 * each in its own way: exit(0), exit(7), killed by SIGKILL, by SIGTERM,
 * by a real SIGSEGV (a fault), by SIGABRT (abort) and by SIGBUS with
 * SIGBUS blocked and handled first (the zombie's status does not say
 * what the mask or the handler were). No core file is written
 * (RLIMIT_CORE 0). After the restore each is still a zombie and
 * waitid() tells how it ended (si_code CLD_EXITED or CLD_KILLED, and
 * si_status), as before.
 */
#include "fidelity.h"
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

enum { EXIT0, EXIT7, KILL, TERM, SEGV, ABRT, BUS, N };
static const char *names[N] = {"exit(0)", "exit(7)", "SIGKILL", "SIGTERM", "SIGSEGV", "SIGABRT", "SIGBUS"};
static const int code[N] = {CLD_EXITED, CLD_EXITED, CLD_KILLED, CLD_KILLED, CLD_KILLED, CLD_KILLED, CLD_KILLED};
static const int status[N] = {0, 7, SIGKILL, SIGTERM, SIGSEGV, SIGABRT, SIGBUS};
static pid_t kid[N];

static void on_bus(int sig) { (void)sig; }

static void end(int i)
{
	struct rlimit no = {0, 0};
	setrlimit(RLIMIT_CORE, &no);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL); /* fid_init blocked SIGTERM */
	switch (i) {
	case EXIT0:
		_exit(0);
	case EXIT7:
		_exit(7);
	case KILL:
		raise(SIGKILL);
		break;
	case TERM:
		raise(SIGTERM);
		break;
	case SEGV:
		*(volatile int *)8 = 1;
		break;
	case ABRT:
		abort();
	case BUS: {
		signal(SIGBUS, on_bus);
		sigset_t s;
		sigemptyset(&s);
		sigaddset(&s, SIGBUS);
		sigprocmask(SIG_BLOCK, &s, NULL);
		signal(SIGBUS, SIG_DFL);
		sigprocmask(SIG_UNBLOCK, &s, NULL);
		raise(SIGBUS);
		break;
	}
	}
	_exit(99);
}

static int check(int i, const char *when)
{
	siginfo_t si = {0};
	if (waitid(P_PID, kid[i], &si, WEXITED | WNOWAIT) < 0) {
		fid_fail("%s: %s: waitid: %s", when, names[i], strerror(errno));
		return -1;
	}
	if (si.si_pid != kid[i] || si.si_code != code[i] || si.si_status != status[i]) {
		fid_fail("%s: %s: pid %d code %d status %d, want pid %d code %d status %d", when, names[i], si.si_pid, si.si_code,
			 si.si_status, kid[i], code[i], status[i]);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	for (int i = 0; i < N; i++) {
		kid[i] = fork();
		FID_SETUP(kid[i] >= 0, "fork: %s", strerror(errno));
		if (kid[i] == 0)
			end(i);
	}
	for (int i = 0; i < N; i++)
		FID_SETUP(check(i, "before") == 0, "%s", fid_why);
	fid_ready();
	fid_wait();
	for (int i = 0; i < N; i++)
		check(i, "after");
	for (int i = 0; i < N; i++) {
		siginfo_t si = {0};
		FID_EXPECT(waitid(P_PID, kid[i], &si, WEXITED) == 0 && si.si_pid == kid[i], "%s: reaping: %s", names[i],
			   strerror(errno));
	}
	return fid_done();
}
