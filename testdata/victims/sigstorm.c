/*
 * sigstorm: a process that receives signals whose siginfo matters, while it
 * is dumped (usage: sigstorm LOG).
 *
 * A POSIX timer sends SIGRTMIN every 200 us with si_value 1234; the test
 * sends SIGRTMIN+1 with rt_sigqueueinfo, si_value 1, 2, 3, ... Every
 * delivery is checked in the handler: si_code (SI_TIMER, SI_QUEUE), the
 * value, the timer id, and for the queued ones the order. On SIGUSR1 it
 * writes "report timer=T badtimer=B queued=Q badqueued=C" to LOG; SIGTERM
 * ends it. A dump that takes a signal off its queue and sends it again with
 * kill or tgkill changes si_code and loses si_value: it shows here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t timer_n, timer_bad, queued_n, queued_bad, want_report;
static volatile int last_value;
static timer_t tid;

static void on_timer(int sig, siginfo_t *si, void *uc)
{
	(void)sig, (void)uc;
	timer_n++;
	if (si->si_code != SI_TIMER || si->si_value.sival_int != 1234 || si->si_timerid != (int)(long)tid)
		timer_bad++;
}

static void on_queued(int sig, siginfo_t *si, void *uc)
{
	(void)sig, (void)uc;
	queued_n++;
	if (si->si_code != SI_QUEUE || si->si_value.sival_int != last_value + 1)
		queued_bad++;
	last_value = si->si_value.sival_int;
}

static void on_usr1(int sig) { (void)sig; want_report = 1; }

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s LOG\n", argv[0]);
		return 2;
	}
	int log = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	if (log < 0)
		return 3;
	struct sigaction sa = {0};
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sa.sa_sigaction = on_timer;
	sigaction(SIGRTMIN, &sa, 0);
	sa.sa_sigaction = on_queued;
	sigaction(SIGRTMIN + 1, &sa, 0);
	struct sigaction su = {0};
	su.sa_handler = on_usr1;
	su.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &su, 0);

	struct sigevent sev = {0};
	sev.sigev_notify = SIGEV_SIGNAL;
	sev.sigev_signo = SIGRTMIN;
	sev.sigev_value.sival_int = 1234;
	if (timer_create(CLOCK_MONOTONIC, &sev, &tid) < 0)
		return 4;
	struct itimerspec its = {{0, 200000}, {0, 200000}};
	if (timer_settime(tid, 0, &its, 0) < 0)
		return 5;
	dprintf(log, "ready %d\n", getpid());
	for (;;) {
		pause();
		if (want_report) {
			want_report = 0;
			dprintf(log, "report timer=%d badtimer=%d queued=%d badqueued=%d\n",
				(int)timer_n, (int)timer_bad, (int)queued_n, (int)queued_bad);
		}
	}
}
