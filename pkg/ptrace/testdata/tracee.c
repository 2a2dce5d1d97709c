/* tracee: the process pkg/ptrace's tests trace. It blocks SIGUSR2 (so
 * that queued ones can be peeked), installs an allow-all seccomp filter,
 * prints the addresses of its counter and its text, and counts forever. */
#define _GNU_SOURCE
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

volatile unsigned long counter;
char text[64] = "hello from the tracee";

int main(void)
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGUSR2);
	sigprocmask(SIG_BLOCK, &s, NULL);
	struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	struct sock_fprog prog = {.len = 1, .filter = &allow};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
		perror("seccomp");
		return 1;
	}
	printf("%p %p\n", (void *)&counter, (void *)text);
	fflush(stdout);
	for (;;) {
		counter++;
		usleep(1000);
	}
}
