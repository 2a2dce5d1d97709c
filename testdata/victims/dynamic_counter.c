/*
 * dynamic_counter: a dynamically linked victim (usage: dynamic_counter LOG).
 *
 * Checks that a checkpoint/restore keeps:
 *  - malloc'd blocks of 24 B, 4 KiB, 100 KiB (brk heap), 256 KiB and 1 MiB
 *    (mmap'd by glibc) and a .bss array, filled from a seed; 8 words change
 *    per tick; a check replays every change on a fresh copy;
 *  - thread-local variables (fs base): one counting ticks, one with a
 *    non-zero initializer that never changes;
 *  - CLOCK_MONOTONIC through the vDSO: read every tick, it must never go
 *    backwards (a tick line with a smaller time writes check FAIL at once);
 *  - a pipe to itself (pipe2): each tick writes 3 bytes of a known
 *    sequence and reads back the 3 written the tick before, so 3 bytes
 *    always sit in the pipe between ticks; a wrong byte writes check FAIL
 *    at once, and a check also asks FIONREAD for exactly 3;
 *  - the log opened O_APPEND, and the signal setup of victim.h.
 */
#include "victim.h"
#include <sys/ioctl.h>

#define SEED 0xd1a0000012345678ULL
#define NREG 6

static uint64_t bss_words[8192]; /* 64 KiB of .bss */
static struct region regs[NREG];
static uint64_t checksum;
static __thread unsigned long tls_ticks;               /* == ticks */
static __thread volatile uint64_t tls_magic = 0x7153deadbeef01; /* never changes */
static struct timespec last_mono;
static int pipefd[2];
static unsigned long pipe_out, pipe_in; /* bytes written to/read from the pipe */

static unsigned char pipe_byte(unsigned long i) { return (unsigned char)(i * 7 + 1); }

static int pipe_write3(void)
{
	unsigned char b[3];
	for (int i = 0; i < 3; i++)
		b[i] = pipe_byte(pipe_out + i);
	if (write(pipefd[1], b, 3) != 3)
		return -1;
	pipe_out += 3;
	return 0;
}

/* pipe_read3 reads 3 bytes and checks them; the read end is non-blocking,
 * so lost pipe data gives a FAIL, not a hang. */
static int pipe_read3(char *why, size_t len)
{
	unsigned char b[3];
	ssize_t n = read(pipefd[0], b, 3);
	if (n != 3)
		return snprintf(why, len, "pipe read %zd (%s)", n, n < 0 ? strerror(errno) : "short"), -1;
	for (int i = 0; i < 3; i++)
		if (b[i] != pipe_byte(pipe_in + i))
			return snprintf(why, len, "pipe byte %lu is %#x, want %#x",
					pipe_in + i, b[i], pipe_byte(pipe_in + i)), -1;
	pipe_in += 3;
	return 0;
}

/* monotonic reads CLOCK_MONOTONIC and checks it did not go backwards. */
static int monotonic(char *why, size_t len)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec < last_mono.tv_sec ||
	    (now.tv_sec == last_mono.tv_sec && now.tv_nsec < last_mono.tv_nsec))
		return snprintf(why, len, "CLOCK_MONOTONIC went back from %ld.%09ld to %ld.%09ld",
				(long)last_mono.tv_sec, last_mono.tv_nsec, (long)now.tv_sec, now.tv_nsec), -1;
	last_mono = now;
	return 0;
}

static int check(char *why, size_t len)
{
	int queued = -1;
	if (tls_magic != 0x7153deadbeef01 || tls_ticks != ticks)
		return snprintf(why, len, "TLS magic %#lx ticks %lu", (unsigned long)tls_magic, tls_ticks), -1;
	if (monotonic(why, len) < 0)
		return -1;
	if (ioctl(pipefd[0], FIONREAD, &queued) < 0 || queued != 3 || pipe_out - pipe_in != 3)
		return snprintf(why, len, "pipe holds %d bytes, want 3", queued), -1;
	return regions_verify(regs, NREG, SEED, ticks, checksum, why, len);
}

int main(int argc, char **argv)
{
	static const size_t sizes[NREG - 1] = {24, 4 << 10, 100 << 10, 256 << 10, 1 << 20};
	char why[256];

	victim_start(argc, argv, 1, "LOG", O_WRONLY | O_CREAT | O_APPEND, "static=0");
	regs[0] = (struct region){bss_words, sizeof bss_words / 8};
	for (int i = 1; i < NREG; i++)
		if (!(regs[i] = (struct region){malloc(sizes[i - 1]), sizes[i - 1] / 8}).w)
			die("malloc");
	checksum = regions_fill(regs, NREG, SEED);
	if (pipe2(pipefd, O_CLOEXEC) < 0 || fcntl(pipefd[0], F_SETFL, O_NONBLOCK) < 0)
		die("pipe2");
	if (pipe_write3() < 0)
		die("pipe write");
	clock_gettime(CLOCK_MONOTONIC, &last_mono);

	for (;;) {
		unsigned long t = ticks + 1;
		regions_mutate(regs, NREG, t, &checksum);
		tls_ticks = ticks = t;
		if (pipe_write3() < 0)
			die("pipe write");
		if (pipe_read3(why, sizeof why) < 0 || monotonic(why, sizeof why) < 0)
			vlog("check FAIL %s", why);
		vlog("tick %lu sum=%016lx mono=%ld.%09ld", t, (unsigned long)checksum,
		     (long)last_mono.tv_sec, last_mono.tv_nsec);
		victim_sleep(20);
		victim_poll(check);
	}
}
