/*
 * proc_rseq: restartable sequences. Two threads (the main one and a
 * worker) run a long rseq critical section over and over, using the
 * registration glibc made for them. A section that reaches its commit
 * must still see its descriptor in rseq_cs: the kernel clears it only when
 * it aborts the section (preemption, signal, migration), and then the
 * thread runs the abort handler instead. A checkpoint that leaves a thread
 * inside a section whose rseq_cs was cleared would let it commit
 * unprotected: that is counted and reported.
 */
#include "fidelity.h"
#include <pthread.h>
#include <stdint.h>
#include <sys/rseq.h>

#define ITERS 200000L

struct counts {
	long commits, aborts, bad;
	uint64_t badseen, desc;
};

static volatile int stop;
static volatile int worker_running;
static struct counts counts[2];

/* rseq_cs_field is this thread's rseq_cs word in glibc's registration. */
static volatile uint64_t *rseq_cs_field(void)
{
	char *tp = __builtin_thread_pointer();
	return (volatile uint64_t *)(tp + __rseq_offset + 8);
}

/* section runs one critical section: it publishes its descriptor, spins,
 * then copies what rseq_cs holds to *seen as its commit. It returns 1 if
 * the kernel sent it to the abort handler. */
static __attribute__((noinline)) int section(volatile uint64_t *csf, uint64_t *desc, uint64_t *seen)
{
	__asm__ __volatile__ goto(
		".pushsection __rseq_cs, \"aw\"\n\t"
		".balign 32\n\t"
		"3:\n\t"
		".long 0, 0\n\t"
		".quad 1f, (2f - 1f), 4f\n\t"
		".popsection\n\t"
		"leaq 3b(%%rip), %%rax\n\t"
		"movq %%rax, (%[desc])\n\t"
		"movq %%rax, (%[csf])\n\t"
		"1:\n\t"
		"movq %[iters], %%rcx\n\t"
		"5:\n\t"
		"decq %%rcx\n\t"
		"jnz 5b\n\t"
		"movq (%[csf]), %%rax\n\t"
		"movq %%rax, (%[seen])\n\t"
		"2:\n\t"
		".pushsection __rseq_failure, \"ax\"\n\t"
		".byte 0x0f, 0xb9, 0x3d\n\t"
		".long %c[sig]\n\t"
		"4:\n\t"
		"jmp %l[aborted]\n\t"
		".popsection\n\t"
		:
		: [csf] "r"(csf), [desc] "r"(desc), [seen] "r"(seen), [iters] "i"(ITERS), [sig] "i"(RSEQ_SIG)
		: "memory", "cc", "rax", "rcx"
		: aborted);
	return 0;
aborted:
	return 1;
}

static void run_once(struct counts *c, volatile uint64_t *csf)
{
	uint64_t seen = 1;
	if (section(csf, &c->desc, &seen)) {
		c->aborts++;
		return;
	}
	c->commits++;
	if (seen != c->desc) {
		c->bad++;
		c->badseen = seen;
	}
}

static void *worker(void *arg)
{
	(void)arg;
	volatile uint64_t *csf = rseq_cs_field();
	worker_running = 1;
	while (!stop)
		run_once(&counts[1], csf);
	return NULL;
}

/* term_pending says whether SIGTERM (blocked since fid_init) came. */
static int term_pending(void)
{
	sigset_t term;
	struct timespec zero = {0, 0};
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	return sigtimedwait(&term, NULL, &zero) == SIGTERM;
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	if (__rseq_size == 0)
		fid_skip("glibc did not register rseq for its threads");
	pthread_t t;
	FID_SETUP(pthread_create(&t, NULL, worker, NULL) == 0, "pthread_create");
	/* Both threads have committed a section before the dump: on a busy
	 * machine a thread can be preempted inside every section it starts
	 * for a while, and the check below would fail for that alone. */
	while (!worker_running || *(volatile long *)&counts[1].commits == 0)
		sched_yield();
	volatile uint64_t *csf = rseq_cs_field();
	while (counts[0].commits == 0)
		run_once(&counts[0], csf);
	fid_ready();
	while (!term_pending())
		run_once(&counts[0], csf);
	stop = 1;
	FID_SETUP(pthread_join(t, NULL) == 0, "pthread_join");
	for (int i = 0; i < 2; i++) {
		FID_EXPECT(counts[i].bad == 0,
			   "%s thread: %ld of %ld sections committed with rseq_cs %#llx instead of their descriptor %#llx (left inside a section the kernel no longer protected)",
			   i ? "worker" : "main", counts[i].bad, counts[i].commits,
			   (unsigned long long)counts[i].badseen, (unsigned long long)counts[i].desc);
		FID_EXPECT(counts[i].commits > 0, "%s thread: no section committed", i ? "worker" : "main");
	}
	return fid_done();
}
