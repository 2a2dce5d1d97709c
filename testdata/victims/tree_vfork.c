/*
 * tree_vfork: a parent waiting in vfork() (usage: tree_vfork LOG [exec|rename|mbind]).
 *
 * The root R forks P, which blocks SIGUSR1 and calls vfork(): its child C
 * writes "vfork child c=C p=P" to the log and waits for SIGUSR1 with raw
 * system calls only (it runs on P's memory and stack), then exits 0. P,
 * which could not run meanwhile, then writes "vfork done c=C", reaps C and
 * sleeps. With "exec", C instead sleeps 300 ms and then executes
 * /bin/sleep 1000 (the usual vfork and exec, only slow). With "rename", C
 * first names itself "vforked" (PR_SET_NAME): a vfork() child that
 * differs from its parent, which the dump refuses. With "mbind", P first
 * gives a page of its own a NUMA policy (mbind MPOL_BIND, node 0), which
 * cannot be read while P waits in vfork(): refused; P's check after C
 * exits verifies the policy (get_mempolicy MPOL_F_ADDR). R writes
 * "start pid=R p=P", then "tick N" every 20 ms (victim.h); its check
 * verifies that P is alive.
 */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "victim.h"

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static pid_t p;
static char line[64] = "vfork child c=";

static int check(char *why, size_t len)
{
	if (kill(p, 0) < 0)
		return snprintf(why, len, "P %d gone", p), -1;
	return 0;
}

/* utoa appends n in decimal at s and returns the end. */
static char *utoa(char *s, unsigned long n)
{
	char d[24];
	int k = 0;
	do
		d[k++] = '0' + n % 10;
	while (n /= 10);
	while (k)
		*s++ = d[--k];
	return s;
}

static int do_exec, do_rename, do_mbind;
static char *bound; /* P's page with MPOL_BIND, node 0 ("mbind") */

static void run_p(void)
{
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigprocmask(SIG_BLOCK, &usr1, NULL);
	if (do_mbind) {
		unsigned long node0 = 1;
		bound = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (bound == MAP_FAILED || syscall(SYS_mbind, bound, 4096, 2 /* MPOL_BIND */, &node0, 64 + 1, 0) != 0)
			die("mbind");
		bound[0] = 1;
	}
	pid_t c = vfork();
	if (c == 0) {
		/* raw system calls only: this is P's memory and stack */
		if (do_rename)
			syscall(SYS_prctl, PR_SET_NAME, "vforked", 0, 0, 0);
		char *e = utoa(line + strlen("vfork child c="), syscall(SYS_getpid));
		memcpy(e, " p=", 3);
		e = utoa(e + 3, syscall(SYS_getppid));
		*e++ = '\n';
		syscall(SYS_write, log_fd, line, e - line);
		if (do_exec) {
			struct timespec pause_ms = {0, 300 * 1000 * 1000};
			static char *const av[] = {"sleep", "1000", NULL};
			syscall(SYS_nanosleep, &pause_ms, NULL);
			syscall(SYS_execve, "/bin/sleep", av, environ);
			syscall(SYS_exit, 127);
		}
		struct timespec forever = {3600, 0};
		while (syscall(SYS_rt_sigtimedwait, &usr1, NULL, &forever, 8) != SIGUSR1)
			;
		syscall(SYS_exit, 0);
	}
	if (c < 0)
		die("vfork");
	vlog("vfork done c=%d", c);
	waitpid(c, NULL, 0);
	for (;;) {
		if (bound) {
			/* Told to check (SIGUSR1): the policy is still there. */
			int sig;
			sigwait(&usr1, &sig);
			int mode = -1;
			unsigned long mask[16] = {0};
			long r = syscall(SYS_get_mempolicy, &mode, mask, 1024, bound, 2 /* MPOL_F_ADDR */);
			vlog("policy r=%ld mode=%d nodes=%#lx", r, mode, mask[0]);
			continue;
		}
		pause();
	}
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[2], "exec") == 0) {
		do_exec = 1;
		argc = 2;
	}
	if (argc == 3 && strcmp(argv[2], "rename") == 0) {
		do_rename = 1;
		argc = 2;
	}
	if (argc == 3 && strcmp(argv[2], "mbind") == 0) {
		do_mbind = 1;
		argc = 2;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: %s LOG [exec|rename|mbind]\n", argv[0]);
		return 2;
	}
	log_fd = open(argv[1], O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (log_fd < 0)
		die(argv[1]);
	if ((p = fork()) < 0)
		die("fork");
	if (p == 0)
		run_p();
	close(log_fd);
	char extra[32];
	snprintf(extra, sizeof extra, "p=%d", p);
	victim_start(argc, argv, 1, "LOG", O_WRONLY | O_APPEND, extra);
	for (;;) {
		vlog("tick %lu", ++ticks);
		victim_sleep(20);
		victim_poll(check);
	}
}
