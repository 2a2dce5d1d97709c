/*
 * ring: a token goes around the ranks once per iteration, and every rank
 * folds a block of its left neighbour's heap into its own.
 *
 *   ring LOG ITERS DELAY_MS HOLDFILE HEAP_MB
 *
 * Every rank holds HEAP_MB of heap. Per iteration:
 *  - every rank sends a 256 KiB block of its heap to its right neighbour
 *    and xors the block it gets from its left one into its heap (a large
 *    message: the library's rendezvous path);
 *  - a token {it, sum} leaves rank 0 and visits 1, 2, ..., back to 0; each
 *    rank, on receiving it, changes one word in every page of its heap
 *    (from the token), checksums the whole heap and mixes the checksum
 *    into the token's sum.
 * Each rank keeps its checksum up to date as it changes words, and checks
 * it against a full recomputation every iteration: a page lost, mixed up
 * or zeroed by a restore shows as FAIL. Rank 0 logs "iter K sum S" when the
 * token comes back, and "result sum S" after the last iteration; S is the
 * same in every run with the same arguments and number of ranks.
 */
#include "mpitest.h"

#define BLOCK (256 * 1024 / 8) /* words in the block sent each iteration */
#define PAGE 512               /* words in a page */

struct heap {
	uint64_t *w;
	size_t n;
	uint64_t sum; /* sum of w[i]*(2i+1), kept up to date */
};

static uint64_t weight(size_t i) { return 2 * (uint64_t)i + 1; }

static void set(struct heap *h, size_t i, uint64_t v)
{
	h->sum += (v - h->w[i]) * weight(i);
	h->w[i] = v;
}

static uint64_t full_sum(const struct heap *h)
{
	uint64_t s = 0;
	for (size_t i = 0; i < h->n; i++)
		s += h->w[i] * weight(i);
	return s;
}

int main(int argc, char **argv)
{
	struct job j;
	int a = job_init(&j, &argc, &argv, 1, "HEAP_MB");
	size_t mb = strtoul(argv[a], 0, 10);
	struct heap h = {.n = mb * 1024 * 1024 / 8};
	if (h.n < 2 * BLOCK)
		fail(&j, "heap of %zu MiB is smaller than two blocks", mb);
	h.w = malloc(h.n * 8);
	if (!h.w)
		fail(&j, "malloc %zu MiB", mb);
	for (size_t i = 0; i < h.n; i++)
		h.w[i] = mix64(((uint64_t)j.rank << 40) ^ i);
	h.sum = full_sum(&h);

	uint64_t *in = malloc(BLOCK * 8);
	int right = (j.rank + 1) % j.size, left = (j.rank + j.size - 1) % j.size;
	uint64_t tok[2] = {0, 0};
	for (int it = 0; it < j.iters; it++) {
		size_t from = ((size_t)it * 7919 * PAGE) % (h.n - BLOCK);
		MPI_Sendrecv(h.w + from, BLOCK, MPI_UINT64_T, right, 1, in, BLOCK, MPI_UINT64_T, left, 1,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		size_t to = ((size_t)it * 104729 * PAGE + 3) % (h.n - BLOCK);
		for (size_t k = 0; k < BLOCK; k++)
			set(&h, to + k, h.w[to + k] ^ in[k]);

		if (j.rank != 0) {
			MPI_Recv(tok, 2, MPI_UINT64_T, left, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			if (tok[0] != (uint64_t)it)
				fail(&j, "iteration %d: token of iteration %llu", it, (unsigned long long)tok[0]);
		} else {
			tok[0] = it;
		}
		for (size_t p = (size_t)it % PAGE; p < h.n; p += PAGE)
			set(&h, p, mix64(h.w[p] ^ tok[1] ^ p));
		uint64_t s = full_sum(&h);
		if (s != h.sum)
			fail(&j, "iteration %d: heap checksum %016llx, kept %016llx", it, (unsigned long long)s,
			     (unsigned long long)h.sum);
		tok[1] = mix64(tok[1] ^ s ^ (uint64_t)j.rank);
		if (j.size > 1) {
			MPI_Send(tok, 2, MPI_UINT64_T, right, 2, MPI_COMM_WORLD);
			if (j.rank == 0) {
				MPI_Recv(tok, 2, MPI_UINT64_T, left, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				if (tok[0] != (uint64_t)it)
					fail(&j, "iteration %d: token came back from iteration %llu", it,
					     (unsigned long long)tok[0]);
			}
		}
		if (j.rank == 0)
			logline(&j, "iter %d sum %016llx", it, (unsigned long long)tok[1]);
		job_step(&j, it);
	}
	if (j.rank == 0)
		logline(&j, "result sum %016llx", (unsigned long long)tok[1]);
	free(in);
	free(h.w);
	return job_end(&j);
}
