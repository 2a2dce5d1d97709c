/* memhog: holds MIB mebibytes of touched anonymous memory with a known
 * pattern, for the dump/restore benchmark.
 *   memhog LOG MIB [THREADS [PROCS [cow]]]
 * With PROCS > 1 the process forks PROCS-1 children, each with its own MIB
 * of memory, or, with "cow", after filling its MIB, which the children then
 * share copy-on-write without writing it; with THREADS > 1 each process
 * runs THREADS-1 more threads.
 * Writes "ready" when the memory is filled, then pauses. On SIGUSR1 it
 * verifies every page and writes "check ok" or "check FAIL"; SIGUSR2 exits. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <pthread.h>
#include <unistd.h>

static volatile sig_atomic_t want_check, want_exit;
static void on_usr1(int s) { (void)s; want_check = 1; }
static void on_usr2(int s) { (void)s; want_exit = 1; }

static void *idle(void *a) { (void)a; for (;;) pause(); return NULL; }

/* spawn forks procs-1 children; each returns from it. */
static void spawn(int procs) {
	for (int i = 1; i < procs; i++)
		if (fork() == 0) return;
}
static uint64_t word(size_t i) { return (i * 0x9e3779b97f4a7c15ULL) ^ 0x5555; }

int main(int argc, char **argv) {
	if (argc < 3) { fprintf(stderr, "usage: memhog LOG MIB\n"); return 2; }
	int log = open(argv[1], O_WRONLY | O_CREAT | O_APPEND, 0644);
	size_t size = strtoull(argv[2], 0, 10) << 20;
	int threads = argc > 3 ? atoi(argv[3]) : 1, procs = argc > 4 ? atoi(argv[4]) : 1;
	int cow = argc > 5 && strcmp(argv[5], "cow") == 0;
	if (!cow)
		spawn(procs);
	uint64_t *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) { perror("mmap"); return 1; }
	/* one distinct word per 512 bytes keeps filling fast but makes every page unique */
	for (size_t i = 0; i < size / 8; i++) m[i] = (i % 64) ? 0x0101010101010101ULL : word(i);
	if (cow)
		spawn(procs);
	struct sigaction sa = { 0 };
	sa.sa_handler = on_usr1; sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = on_usr2; sigaction(SIGUSR2, &sa, NULL);
	for (int i = 1; i < threads; i++) {
		pthread_t t;
		pthread_create(&t, NULL, idle, NULL);
	}
	dprintf(log, "ready pid=%d\n", getpid());
	for (;;) {
		pause();
		if (want_check) {
			want_check = 0;
			size_t bad = 0;
			for (size_t i = 0; i < size / 8; i++)
				if (m[i] != ((i % 64) ? 0x0101010101010101ULL : word(i))) bad++;
			dprintf(log, bad ? "check FAIL %zu words\n" : "check ok\n", bad);
		}
		if (want_exit) { dprintf(log, "bye\n"); return 0; }
	}
}
