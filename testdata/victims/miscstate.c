/*
 * miscstate: per-process state besides memory and files
 * (usage: miscstate LOG DIR; DIR must be world-readable and writable).
 *
 * After opening its log (O_APPEND) it sets up, in this order:
 *  - an ITIMER_REAL interval timer (7 ms) whose SIGALRM handler (SA_RESTART)
 *    counts alarms;
 *  - a POSIX timer (CLOCK_MONOTONIC, SIGEV_SIGNAL with SIGRTMIN+1 and
 *    sival_int 1234, 11 ms interval) whose handler (SA_SIGINFO|SA_RESTART)
 *    counts and records any signal with the wrong si_code, si_value or
 *    si_timerid;
 *  - umask 027 and DIR as the working directory;
 *  - RLIMIT_NOFILE 512/(hard unchanged), RLIMIT_CORE 0/0;
 *  - personality with ADDR_COMPAT_LAYOUT added;
 *  - an alternate signal stack (malloc'd, 64 KiB);
 *  - no_new_privs and a seccomp filter making getpriority fail with EPERM;
 *  - groups {65534}, resgid and resuid 65534 (nobody);
 *  - the parent-death signal SIGWINCH (default: ignored). It is set after
 *    the credentials because changing them clears it (commit_creds).
 *
 * A check (SIGUSR1, protocol of victim.h) verifies all of it, and that both
 * timers still fire: their counts must grow within 200 ms. /proc/self/timers
 * must list exactly the one POSIX timer, under its old ID.
 * It ticks every 20 ms (absolute clock_nanosleep, restarted after the timer
 * signals).
 */
#include "victim.h"
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>

#define NOBODY 65534
#define ALRM_US 7000
#define RT_NS 11000000L
#define RT_VALUE 1234
#define ALTSTACK_SIZE (64 << 10)

static volatile sig_atomic_t alarms, rtsigs;
static volatile sig_atomic_t rt_bad_code = -1, rt_bad_value = -1, rt_bad_timer = -1;
static timer_t timer;
static int timer_kid; /* the kernel's timer ID */
static char cwd[4096];
static rlim_t nofile_hard;
static int pers;
static void *altstack;

static void on_alrm(int sig) { (void)sig; alarms++; }

static void on_rt(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	rtsigs++;
	if (si->si_code != SI_TIMER)
		rt_bad_code = si->si_code;
	else if (si->si_timerid != timer_kid)
		rt_bad_timer = si->si_timerid;
	if (si->si_value.sival_int != RT_VALUE)
		rt_bad_value = si->si_value.sival_int;
}

/* status_field copies the value of a /proc/self/status field. */
static int status_field(const char *name, char *out, size_t len)
{
	static char buf[8192];
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	size_t nl = strlen(name);
	for (char *l = buf; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		if (strncmp(l, name, nl) == 0 && l[nl] == ':') {
			char *v = l + nl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			size_t k = strcspn(v, "\n");
			if (k >= len)
				k = len - 1;
			memcpy(out, v, k);
			out[k] = 0;
			return 0;
		}
	}
	return -1;
}

/* check_timers_file checks that /proc/self/timers lists our one timer. */
static int check_timers_file(char *why, size_t len)
{
	static char buf[4096];
	int fd = open("/proc/self/timers", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return snprintf(why, len, "open /proc/self/timers: %s", strerror(errno)), -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n < 0)
		return snprintf(why, len, "read /proc/self/timers: %s", strerror(errno)), -1;
	buf[n] = 0;
	int count = 0, id = -1;
	for (char *l = buf; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
		if (sscanf(l, "ID: %d", &id) == 1)
			count++;
	char want[64];
	snprintf(want, sizeof want, "signal: %d/", SIGRTMIN + 1);
	if (count != 1 || id != timer_kid || !strstr(buf, want))
		return snprintf(why, len, "/proc/self/timers lists %d timers (last ID %d), want one, ID %d, %s...: %.100s",
				count, id, timer_kid, want, buf), -1;
	return 0;
}

static int check_action(int sig, void *fn, int flags, char *why, size_t len)
{
	struct sigaction sa;
	if (sigaction(sig, NULL, &sa) < 0)
		return snprintf(why, len, "sigaction query %d", sig), -1;
	void *got = (flags & SA_SIGINFO) ? (void *)sa.sa_sigaction : (void *)sa.sa_handler;
	if (got != fn || (sa.sa_flags & (SA_SIGINFO | SA_RESTART)) != flags)
		return snprintf(why, len, "signal %d: handler %p flags %#x, want %p flags %#x", sig, got,
				(unsigned)sa.sa_flags, fn, (unsigned)flags), -1;
	return 0;
}

static void sleep_until(struct timespec *ts)
{
	int err;
	while ((err = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ts, NULL)) == EINTR)
		;
	if (err) {
		errno = err;
		die("clock_nanosleep");
	}
}

static void add_ms(struct timespec *ts, long ms)
{
	ts->tv_nsec += ms * 1000000L;
	while (ts->tv_nsec >= 1000000000L) {
		ts->tv_nsec -= 1000000000L;
		ts->tv_sec++;
	}
}

static int check(char *why, size_t len)
{
	/* The timers. */
	if (check_action(SIGALRM, (void *)on_alrm, SA_RESTART, why, len) < 0 ||
	    check_action(SIGRTMIN + 1, (void *)on_rt, SA_SIGINFO | SA_RESTART, why, len) < 0)
		return -1;
	struct itimerval itv;
	if (getitimer(ITIMER_REAL, &itv) < 0)
		return snprintf(why, len, "getitimer: %s", strerror(errno)), -1;
	if (itv.it_interval.tv_sec != 0 || itv.it_interval.tv_usec != ALRM_US ||
	    (itv.it_value.tv_sec == 0 && itv.it_value.tv_usec == 0))
		return snprintf(why, len, "ITIMER_REAL interval %ld.%06ld value %ld.%06ld, want interval 0.%06d and armed",
				(long)itv.it_interval.tv_sec, (long)itv.it_interval.tv_usec,
				(long)itv.it_value.tv_sec, (long)itv.it_value.tv_usec, ALRM_US), -1;
	struct itimerspec its;
	if (timer_gettime(timer, &its) < 0)
		return snprintf(why, len, "timer_gettime of timer %d: %s", timer_kid, strerror(errno)), -1;
	if (its.it_interval.tv_sec != 0 || its.it_interval.tv_nsec != RT_NS ||
	    (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0))
		return snprintf(why, len, "POSIX timer interval %ld.%09ld value %ld.%09ld, want interval 0.%09ld and armed",
				(long)its.it_interval.tv_sec, its.it_interval.tv_nsec,
				(long)its.it_value.tv_sec, its.it_value.tv_nsec, RT_NS), -1;
	if (check_timers_file(why, len) < 0)
		return -1;
	int a0 = alarms, r0 = rtsigs;
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	add_ms(&until, 200);
	sleep_until(&until);
	if (alarms <= a0 || rtsigs <= r0)
		return snprintf(why, len, "timers stopped: in 200 ms, %d SIGALRM (%d in all) and %d SIGRTMIN+1 (%d in all)",
				alarms - a0, alarms, rtsigs - r0, rtsigs), -1;
	if (rt_bad_code != -1 || rt_bad_value != -1 || rt_bad_timer != -1)
		return snprintf(why, len, "POSIX timer signal with si_code %d (want %d), si_value %d (want %d), si_timerid %d (want %d)",
				rt_bad_code, SI_TIMER, rt_bad_value, RT_VALUE, rt_bad_timer, timer_kid), -1;

	/* prctl and friends. */
	int pd = -1;
	if (prctl(PR_GET_PDEATHSIG, &pd) < 0 || pd != SIGWINCH)
		return snprintf(why, len, "PR_GET_PDEATHSIG %d, want SIGWINCH (%d)", pd, SIGWINCH), -1;
	char v[256];
	if (status_field("Umask", v, sizeof v) < 0 || strcmp(v, "0027") != 0)
		return snprintf(why, len, "Umask %s, want 0027", v), -1;
	char here[4096];
	if (!getcwd(here, sizeof here))
		return snprintf(why, len, "getcwd: %s", strerror(errno)), -1;
	if (strcmp(here, cwd) != 0)
		return snprintf(why, len, "cwd %s, want %s", here, cwd), -1;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur != 512 || rl.rlim_max != nofile_hard)
		return snprintf(why, len, "RLIMIT_NOFILE %lu/%lu, want 512/%lu", (unsigned long)rl.rlim_cur,
				(unsigned long)rl.rlim_max, (unsigned long)nofile_hard), -1;
	if (getrlimit(RLIMIT_CORE, &rl) < 0 || rl.rlim_cur != 0 || rl.rlim_max != 0)
		return snprintf(why, len, "RLIMIT_CORE %lu/%lu, want 0/0", (unsigned long)rl.rlim_cur,
				(unsigned long)rl.rlim_max), -1;
	int p = personality(0xffffffff);
	if (p != pers)
		return snprintf(why, len, "personality %#x, want %#x", p, pers), -1;
	stack_t ss;
	if (sigaltstack(NULL, &ss) < 0)
		return snprintf(why, len, "sigaltstack query: %s", strerror(errno)), -1;
	if (ss.ss_sp != altstack || ss.ss_size != ALTSTACK_SIZE || ss.ss_flags != 0)
		return snprintf(why, len, "sigaltstack %p size %zu flags %#x, want %p size %d flags 0",
				ss.ss_sp, ss.ss_size, (unsigned)ss.ss_flags, altstack, ALTSTACK_SIZE), -1;

	/* Seccomp. */
	int nnp = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
	if (nnp != 1)
		return snprintf(why, len, "PR_GET_NO_NEW_PRIVS %d, want 1", nnp), -1;
	if (status_field("Seccomp", v, sizeof v) < 0 || strcmp(v, "2") != 0)
		return snprintf(why, len, "Seccomp: %s, want 2", v), -1;
	errno = 0;
	int prio = getpriority(PRIO_PROCESS, 0);
	if (prio != -1 || errno != EPERM)
		return snprintf(why, len, "getpriority gives %d (%s), want -1 EPERM from the seccomp filter",
				prio, strerror(errno)), -1;

	/* Credentials. */
	uid_t ru, eu, su;
	gid_t rg, eg, sg;
	if (getresuid(&ru, &eu, &su) < 0 || ru != NOBODY || eu != NOBODY || su != NOBODY)
		return snprintf(why, len, "resuid %u %u %u, want %d", ru, eu, su, NOBODY), -1;
	if (getresgid(&rg, &eg, &sg) < 0 || rg != NOBODY || eg != NOBODY || sg != NOBODY)
		return snprintf(why, len, "resgid %u %u %u, want %d", rg, eg, sg, NOBODY), -1;
	gid_t groups[16];
	int ng = getgroups(16, groups);
	if (ng != 1 || groups[0] != NOBODY)
		return snprintf(why, len, "%d groups (first %d), want just %d", ng, ng > 0 ? (int)groups[0] : -1, NOBODY), -1;
	return 0;
}

int main(int argc, char **argv)
{
	victim_start(argc, argv, 2, "LOG DIR", O_WRONLY | O_CREAT | O_APPEND, "");

	/* ITIMER_REAL. */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alrm;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGALRM, &sa, NULL) < 0)
		die("sigaction SIGALRM");
	struct itimerval itv = {{0, ALRM_US}, {0, ALRM_US}};
	if (setitimer(ITIMER_REAL, &itv, NULL) < 0)
		die("setitimer");

	/* POSIX timer. */
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_rt;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGRTMIN + 1, &sa, NULL) < 0)
		die("sigaction SIGRTMIN+1");
	struct sigevent sev;
	memset(&sev, 0, sizeof sev);
	sev.sigev_notify = SIGEV_SIGNAL;
	sev.sigev_signo = SIGRTMIN + 1;
	sev.sigev_value.sival_int = RT_VALUE;
	/* Block the signal until timer_kid is known to the handler. */
	sigset_t rt, old;
	sigemptyset(&rt);
	sigaddset(&rt, SIGRTMIN + 1);
	sigprocmask(SIG_BLOCK, &rt, &old);
	if (timer_create(CLOCK_MONOTONIC, &sev, &timer) < 0)
		die("timer_create");
	timer_kid = (int)(intptr_t)timer; /* glibc: SIGEV_SIGNAL timers are the kernel ID */
	struct itimerspec its = {{0, RT_NS}, {0, RT_NS}};
	if (timer_settime(timer, 0, &its, NULL) < 0)
		die("timer_settime");
	sigprocmask(SIG_SETMASK, &old, NULL);

	/* umask, cwd. */
	umask(027);
	if (chdir(argv[2]) < 0)
		die(argv[2]);
	if (!getcwd(cwd, sizeof cwd))
		die("getcwd");

	/* rlimits. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		die("getrlimit");
	nofile_hard = rl.rlim_max;
	rl.rlim_cur = 512;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		die("setrlimit RLIMIT_NOFILE");
	rl.rlim_cur = rl.rlim_max = 0;
	if (setrlimit(RLIMIT_CORE, &rl) < 0)
		die("setrlimit RLIMIT_CORE");

	/* personality. */
	if (personality(personality(0xffffffff) | ADDR_COMPAT_LAYOUT) < 0)
		die("personality");
	pers = personality(0xffffffff);
	if (!(pers & ADDR_COMPAT_LAYOUT))
		die("personality ADDR_COMPAT_LAYOUT");

	/* sigaltstack. */
	if (!(altstack = malloc(ALTSTACK_SIZE)))
		die("malloc");
	stack_t ss = {.ss_sp = altstack, .ss_size = ALTSTACK_SIZE, .ss_flags = 0};
	if (sigaltstack(&ss, NULL) < 0)
		die("sigaltstack");

	/* no_new_privs, seccomp: getpriority fails with EPERM. */
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getpriority, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		die("PR_SET_NO_NEW_PRIVS");
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
		die("seccomp");

	/* Credentials: nobody. */
	gid_t g = NOBODY;
	if (setgroups(1, &g) < 0)
		die("setgroups");
	if (setresgid(NOBODY, NOBODY, NOBODY) < 0)
		die("setresgid");
	if (setresuid(NOBODY, NOBODY, NOBODY) < 0)
		die("setresuid");

	/* The parent-death signal, after the credentials (which clear it). */
	if (prctl(PR_SET_PDEATHSIG, SIGWINCH) < 0)
		die("PR_SET_PDEATHSIG");

	char why[256] = "";
	if (check(why, sizeof why) < 0) {
		vlog("check FAIL at start: %s", why);
		exit(2);
	}

	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (;;) {
		ticks++;
		vlog("tick %lu alrm=%d rt=%d", ticks, (int)alarms, (int)rtsigs);
		add_ms(&next, 20);
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec > next.tv_nsec))
			next = now; /* behind (a freeze): don't race to catch up */
		sleep_until(&next);
		victim_poll(check);
	}
}
