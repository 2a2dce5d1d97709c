/*
 * static_counter: a statically linked victim (usage: static_counter LOG).
 *
 * Checks that a checkpoint/restore keeps:
 *  - a 2 MiB .bss array, a .data array, a 3 MiB mmap'd malloc block and
 *    sixteen 64 KiB brk-heap blocks, all filled from a seed; 8 words change
 *    per tick and a running checksum is kept in a global; a check replays
 *    every change on a fresh copy and compares everything;
 *  - the tick counter, mirrored in a heap word and in a .data word;
 *  - the log's file offset: the log is opened O_WRONLY|O_TRUNC, without
 *    O_APPEND, so lost or rewound offsets show as overwritten lines;
 *  - the signal setup of victim.h.
 * It sleeps 20 ms between ticks with nanosleep, so a checkpoint usually
 * lands there; EINTR after restore just ends that sleep.
 */
#include "victim.h"

#define SEED 0x5eed0000c0ffee01ULL
#define NSMALL 16
#define NREG (3 + NSMALL)

static uint64_t bss_words[256 * 1024];            /* 2 MiB of .bss */
static uint64_t data_words[512] = {1, 2, 3};      /* 4 KiB of .data */
static volatile uint64_t data_magic = 0xda7a0b1e; /* never changes */
static unsigned long data_ticks = 0;              /* == ticks */
static struct region regs[NREG];
static uint64_t checksum; /* sum of all region words */
static unsigned long *heap_ticks;

static int check(char *why, size_t len)
{
	if (data_magic != 0xda7a0b1e)
		return snprintf(why, len, "data magic %#lx", (unsigned long)data_magic), -1;
	if (*heap_ticks != ticks || data_ticks != ticks)
		return snprintf(why, len, "tick copies %lu %lu, want %lu", *heap_ticks, data_ticks, ticks), -1;
	return regions_verify(regs, NREG, SEED, ticks, checksum, why, len);
}

int main(int argc, char **argv)
{
	victim_start(argc, argv, 1, "LOG", O_WRONLY | O_CREAT | O_TRUNC, "static=1");

	regs[0] = (struct region){bss_words, sizeof bss_words / 8};
	regs[1] = (struct region){data_words, sizeof data_words / 8};
	regs[2] = (struct region){malloc(3 << 20), (3 << 20) / 8}; /* mmap'd */
	for (int i = 0; i < NSMALL; i++)
		regs[3 + i] = (struct region){malloc(64 << 10), (64 << 10) / 8}; /* brk */
	heap_ticks = malloc(sizeof *heap_ticks);
	for (int i = 0; i < NREG; i++)
		if (!regs[i].w)
			die("malloc");
	if (!heap_ticks)
		die("malloc");
	*heap_ticks = 0;
	checksum = regions_fill(regs, NREG, SEED);

	for (;;) {
		unsigned long t = ticks + 1;
		regions_mutate(regs, NREG, t, &checksum);
		*heap_ticks = data_ticks = ticks = t;
		vlog("tick %lu sum=%016lx", t, (unsigned long)checksum);
		victim_sleep(20);
		victim_poll(check);
	}
}
