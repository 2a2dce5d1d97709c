/*
 * proc_clone_vm: a child sharing its parent's memory other than by
 * vfork(): clone(CLONE_VM) on a stack of its own, which the dump refuses
 * by name.
 *
 * The case T makes B with clone(CLONE_VM); B waits for SIGTERM with raw
 * system calls. After the refused dump T gets SIGTERM, sends B one, and
 * checks that B exits 0.
 */
#include "fidelity.h"

#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static volatile int started;

static int child(void *arg)
{
	(void)arg;
	started = 1;
	uint64_t term = 1ULL << (SIGTERM - 1);
	while (syscall(SYS_rt_sigtimedwait, &term, NULL, NULL, 8) != SIGTERM)
		;
	syscall(SYS_exit, 0);
	return 0;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	static char stack[1 << 16] __attribute__((aligned(16)));
	pid_t b = clone(child, stack + sizeof stack, CLONE_VM | SIGCHLD, NULL);
	FID_SETUP(b > 0, "clone(CLONE_VM)");
	while (!started)
		usleep(1000);
	fid_ready();
	fid_wait();
	FID_EXPECT(kill(b, SIGTERM) == 0, "kill the clone child %d: %s", b, strerror(errno));
	int st;
	FID_EXPECT(waitpid(b, &st, 0) == b && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the clone child's status %#x", st);
	return fid_done();
}
