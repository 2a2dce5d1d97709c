/*
 * tree: a victim made of a process tree (usage: tree LOG [nozombie]).
 *
 * The root opens LOG (O_APPEND) before forking, so that every member
 * shares that one open file description, creates a pipe and a shared
 * anonymous page (MAP_SHARED|MAP_ANONYMOUS, inherited over fork), then forks
 *
 *   producer    writes 8-byte records 1, 2, 3, ... into the pipe every
 *               5 ms and counts them in the shared page;
 *   consumer    reads the records in batches every 25 ms, always leaving
 *               the last 4 records written in the pipe (FIONREAD), so
 *               that the pipe holds data in flight at any time once the
 *               producer is 4 records ahead; it
 *               checks that each one is the previous one + 1 (else it sets
 *               the failure flag of the shared page), and writes "got N"
 *               to the shared log fd every 100th record; it forks
 *   grandchild  which moves to its own process group and ticks a counter
 *               of the shared page every 10 ms;
 *   zombie      which exits with status 42 at once and is not reaped
 *               until the first check;
 *   stopped     which stops itself with SIGSTOP and stays stopped.
 *
 * With "nozombie", there is no zombie child (zombie=0 in the start line).
 *
 * Once all of them are up, the root writes
 *
 *   start pid=ROOT producer=P consumer=C grandchild=G zombie=Z stopped=S
 *
 * then "tick N seq=S" every 20 ms, S the consumer's last record. SIGUSR1:
 * the shared counters of producer, consumer and grandchild moved since the
 * last check (or the start), no failure flag, the zombie is reaped with
 * status 42 (first check only), the stopped child is in state T, and the
 * signal setup of victim.h holds. SIGUSR2: the root SIGKILLs and reaps its
 * children (the grandchild is reaped by whoever inherits it), writes
 * "bye N" and exits 0. A failure flag set by the consumer is reported at
 * once by the root with a "check FAIL" line.
 */
/* victim_start writes the start line at once and victim_poll exits on
 * SIGUSR2 without killing the children: tree has its own. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "victim.h"

#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>

struct shared {
	volatile uint64_t produced; /* last record written by the producer */
	volatile uint64_t consumed; /* last record read by the consumer */
	volatile uint64_t gc_ticks; /* grandchild's counter */
	volatile pid_t gc_pid;      /* set by the consumer once its child is in its own group */
	volatile int fail;
	char why[200];
};

#define LAG 4 /* records the consumer leaves in the pipe */

static struct shared *sh;
static int pfd[2];
static pid_t producer, consumer, zombie, stopped;
static int zombie_reaped;
static uint64_t last_produced, last_consumed, last_gc;

static void set_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_fail(const char *fmt, ...)
{
	if (sh->fail)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(sh->why, sizeof sh->why, fmt, ap);
	va_end(ap);
	__sync_synchronize();
	sh->fail = 1;
}

static void run_producer(void)
{
	close(pfd[0]);
	for (uint64_t seq = sh->produced + 1;; seq++) {
		ssize_t w;
		do
			w = write(pfd[1], &seq, sizeof seq);
		while (w < 0 && errno == EINTR);
		if (w != sizeof seq) {
			set_fail("producer: write %zd: %s", w, w < 0 ? strerror(errno) : "short");
			_exit(1);
		}
		sh->produced = seq;
		victim_sleep(5);
	}
}

static void run_grandchild(void)
{
	if (setpgid(0, 0) < 0)
		set_fail("grandchild: setpgid: %s", strerror(errno));
	for (;;) {
		sh->gc_ticks++;
		victim_sleep(10);
	}
}

static void run_consumer(void)
{
	close(pfd[1]);
	pid_t gc = fork();
	if (gc < 0) {
		set_fail("consumer: fork: %s", strerror(errno));
		_exit(1);
	}
	if (gc == 0)
		run_grandchild();
	/* Both sides call setpgid, as a shell does, so that the group is set
	 * whichever runs first. EACCES cannot happen: no exec. */
	if (setpgid(gc, gc) < 0 && errno != ESRCH)
		set_fail("consumer: setpgid(%d): %s", gc, strerror(errno));
	sh->gc_pid = gc;

	unsigned char buf[128];
	size_t have = 0; /* bytes of a partial record at the start of buf */
	uint64_t last = 0;
	for (;;) {
		int queued;
		if (ioctl(pfd[0], FIONREAD, &queued) < 0) {
			set_fail("consumer: FIONREAD: %s", strerror(errno));
			_exit(1);
		}
		size_t want = queued > LAG * 8 ? (size_t)(queued - LAG * 8) : 0;
		if (want > sizeof buf - have)
			want = sizeof buf - have;
		if (want == 0) {
			victim_sleep(25);
			continue;
		}
		ssize_t n = read(pfd[0], buf + have, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			set_fail("consumer: read %zd: %s", n, n < 0 ? strerror(errno) : "EOF");
			_exit(1);
		}
		have += n;
		size_t off = 0;
		for (; have - off >= 8; off += 8) {
			uint64_t rec;
			memcpy(&rec, buf + off, 8);
			if (rec != last + 1)
				set_fail("consumer: record %lu after %lu", (unsigned long)rec, (unsigned long)last);
			last = rec;
			sh->consumed = rec;
			if (rec % 100 == 0)
				vlog("got %lu", (unsigned long)rec);
		}
		memmove(buf, buf + off, have - off);
		have -= off;
		if ((size_t)n < sizeof buf)
			victim_sleep(25);
	}
}

/* procstate returns the state letter of /proc/PID/stat, 0 if unreadable. */
static char procstate(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 0;
}

static int check(char *why, size_t len)
{
	struct shared s;
	memcpy(&s, (void *)sh, sizeof s);
	if (s.fail)
		return snprintf(why, len, "%s", s.why), -1;
	if (s.produced <= last_produced || s.consumed <= last_consumed || s.gc_ticks <= last_gc)
		return snprintf(why, len, "no progress: produced %lu (was %lu) consumed %lu (was %lu) grandchild %lu (was %lu)",
				(unsigned long)s.produced, (unsigned long)last_produced,
				(unsigned long)s.consumed, (unsigned long)last_consumed,
				(unsigned long)s.gc_ticks, (unsigned long)last_gc), -1;
	if (s.consumed > s.produced)
		return snprintf(why, len, "consumed %lu > produced %lu",
				(unsigned long)s.consumed, (unsigned long)s.produced), -1;
	last_produced = s.produced, last_consumed = s.consumed, last_gc = s.gc_ticks;
	if (zombie && !zombie_reaped) {
		int st;
		pid_t w = waitpid(zombie, &st, WNOHANG);
		if (w != zombie)
			return snprintf(why, len, "waitpid(zombie %d, WNOHANG) = %d: %s", zombie, w,
					w < 0 ? strerror(errno) : "not exited"), -1;
		zombie_reaped = 1;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 42)
			return snprintf(why, len, "zombie %d: wait status %#x, want exit 42", zombie, st), -1;
	}
	char c = procstate(stopped);
	if (c != 'T')
		return snprintf(why, len, "stopped child %d: state %c, want T", stopped, c ? c : '?'), -1;
	return 0;
}

static void bye(void)
{
	pid_t gc = sh->gc_pid;
	kill(producer, SIGKILL);
	kill(gc, SIGKILL);
	kill(consumer, SIGKILL);
	kill(stopped, SIGKILL);
	waitpid(producer, NULL, 0);
	waitpid(consumer, NULL, 0);
	waitpid(stopped, NULL, 0);
	if (zombie && !zombie_reaped)
		waitpid(zombie, NULL, 0);
}

static pid_t xfork(void)
{
	pid_t p = fork();
	if (p < 0)
		die("fork");
	return p;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "nozombie") != 0)) {
		fprintf(stderr, "usage: %s LOG [nozombie]\n", argv[0]);
		exit(2);
	}
	log_fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	if (log_fd < 0)
		die(argv[1]);
	install(SIGUSR1, on_usr1, SIGUSR2);
	install(SIGUSR2, on_usr2, SIGUSR1);
	sigset_t hup;
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &hup, NULL) < 0)
		die("sigprocmask");

	sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		die("mmap");
	if (pipe(pfd) < 0)
		die("pipe");
	if ((producer = xfork()) == 0)
		run_producer();
	if ((consumer = xfork()) == 0)
		run_consumer();
	close(pfd[0]);
	close(pfd[1]);
	if (argc == 2 && (zombie = xfork()) == 0)
		_exit(42);
	if ((stopped = xfork()) == 0) {
		raise(SIGSTOP);
		for (;;)
			pause();
	}

	/* Wait until the zombie has exited (without reaping it), the stopped
	 * child is stopped, and the pipeline runs. */
	siginfo_t si;
	memset(&si, 0, sizeof si);
	while (zombie && waitid(P_PID, zombie, &si, WEXITED | WNOWAIT) < 0)
		if (errno != EINTR)
			die("waitid zombie");
	int st;
	while (waitpid(stopped, &st, WUNTRACED) < 0)
		if (errno != EINTR)
			die("waitpid stopped");
	if (!WIFSTOPPED(st)) {
		vlog("check FAIL stopped child: wait status %#x", st);
		exit(2);
	}
	for (int i = 0; !sh->gc_pid || !sh->gc_ticks || !sh->consumed; i++) {
		if (i > 500) {
			vlog("check FAIL the pipeline does not start: consumed %lu grandchild %d",
			     (unsigned long)sh->consumed, sh->gc_pid);
			exit(2);
		}
		victim_sleep(10);
	}
	vlog("start pid=%d producer=%d consumer=%d grandchild=%d zombie=%d stopped=%d",
	     getpid(), producer, consumer, sh->gc_pid, zombie, stopped);

	int reported = 0;
	for (;;) {
		ticks++;
		vlog("tick %lu seq=%lu", ticks, (unsigned long)sh->consumed);
		if (sh->fail && !reported) {
			reported = 1;
			vlog("check FAIL %s", sh->why);
		}
		victim_sleep(20);
		if (want_check) {
			want_check = 0;
			char why[256] = "";
			if (check_signals(why, sizeof why) == 0 && check(why, sizeof why) == 0)
				vlog("check ok %lu", ticks);
			else
				vlog("check FAIL %s", why);
		}
		if (want_bye) {
			bye();
			vlog("bye %lu", ticks);
			exit(0);
		}
	}
}
