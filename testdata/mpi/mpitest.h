/*
 * mpitest.h: what the MPI test programs of this directory share.
 *
 *   PROG LOG ITERS DELAY_MS HOLDFILE [PROGRAM ARGS...]
 *
 * Rank 0 writes the log LOG (opened once, O_APPEND), one write(2) a line:
 *
 *   start ranks=N              after MPI_Init
 *   iter K ...                 once per iteration, K = 0 .. ITERS-1; what
 *                              follows K is the program's result so far,
 *                              the same in every run with the same
 *                              arguments and number of ranks
 *   result ...                 after the last iteration
 *   done                       after MPI_Finalize has returned
 *   FAIL WHAT                  a rank found its own state wrong (any rank
 *                              writes it, then the job aborts)
 *
 * Every rank sleeps DELAY_MS after each iteration, so that a test can
 * checkpoint the job several times while it runs. If HOLDFILE is not "-",
 * the job waits before its last iteration until HOLDFILE exists (rank 0
 * polls for it, the others wait in MPI_Bcast): a test then never sees the
 * job end before it is done with it, whatever the machine's load.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* job is what every program knows about its run. */
struct job {
	int rank, size;
	int iters;
	int delay_ms;
	const char *hold;
	int log_fd; /* rank 0 only */
	const char *log;
};

/* logline writes one line to the log (any rank may call it: ranks other
 * than 0 open the log for the one line). */
static void logline(struct job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logline(struct job *j, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		_exit(3);
	if (n > (int)sizeof buf - 2)
		n = sizeof buf - 2;
	buf[n++] = '\n';
	int fd = j->log_fd;
	if (fd < 0)
		fd = open(j->log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		_exit(3);
	ssize_t w;
	do
		w = write(fd, buf, n);
	while (w < 0 && errno == EINTR);
	if (w != n)
		_exit(3);
	if (fd != j->log_fd)
		close(fd);
}

/* fail logs "FAIL WHAT" from any rank and aborts the job. */
static void fail(struct job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct job *j, const char *fmt, ...)
{
	char buf[900];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	logline(j, "FAIL rank %d: %s", j->rank, buf);
	MPI_Abort(MPI_COMM_WORLD, 1);
	_exit(1);
}

/* job_init starts MPI and parses the common arguments; it returns the
 * index of the first program argument in argv. */
static int job_init(struct job *j, int *argc, char ***argv, int nextra, const char *usage)
{
	MPI_Init(argc, argv);
	memset(j, 0, sizeof *j);
	j->log_fd = -1;
	MPI_Comm_rank(MPI_COMM_WORLD, &j->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &j->size);
	if (*argc != 5 + nextra) {
		if (j->rank == 0)
			fprintf(stderr, "usage: %s LOG ITERS DELAY_MS HOLDFILE %s\n", (*argv)[0], usage);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	j->log = (*argv)[1];
	j->iters = atoi((*argv)[2]);
	j->delay_ms = atoi((*argv)[3]);
	j->hold = (*argv)[4];
	if (j->rank == 0) {
		j->log_fd = open(j->log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (j->log_fd < 0) {
			perror(j->log);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		logline(j, "start ranks=%d", j->size);
	}
	return 5;
}

/* job_step ends iteration it: the delay, and the hold before the last one. */
static void job_step(struct job *j, int it)
{
	if (j->delay_ms > 0) {
		struct timespec ts = {j->delay_ms / 1000, (long)(j->delay_ms % 1000) * 1000000L};
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	if (it != j->iters - 2 || strcmp(j->hold, "-") == 0)
		return;
	int go = 0;
	if (j->rank == 0) {
		while (access(j->hold, F_OK) != 0) {
			struct timespec ts = {0, 5000000};
			nanosleep(&ts, 0);
		}
		go = 1;
	}
	MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (go != 1)
		fail(j, "hold: broadcast gave %d", go);
}

/* job_end finalizes MPI and logs "done"; it returns the exit code. */
static int job_end(struct job *j)
{
	MPI_Finalize();
	if (j->rank == 0)
		logline(j, "done");
	return 0;
}

/* mix64 is splitmix64's finalizer: the programs' hash. */
static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}
