/*
 * allreduce: a loop of all-reduces, small and large, each checked by
 * every rank.
 *
 *   allreduce LOG ITERS DELAY_MS HOLDFILE WORDS
 *
 * Per iteration every rank contributes a vector of integers derived from
 * its rank, the iteration and the previous result; every fourth iteration
 * the vector has WORDS elements (a large message), the others 16. The sum
 * (MPI_SUM) and maximum (MPI_MAX) are reduced to every rank, which checks
 * them against its own computation of every rank's contribution: a lost,
 * repeated or stale message shows as FAIL. A vector of doubles is summed
 * too; its bits depend on the library's reduction order, so they are only
 * compared with an uninterrupted run. Rank 0 logs
 * "iter K sum S max M dsum D" (D in %a notation) every iteration and
 * "result sum S" at the end.
 */
#include "mpitest.h"

#define SMALL 16
#define NDBL 64

/* contrib is below 2^62: a library comparing the values as signed (MPICH
 * 4.0's MPI_MAX on MPI_UINT64_T does) gets the same maximum. */
static uint64_t contrib(int rank, int it, uint64_t prev, size_t k)
{
	return mix64(prev ^ ((uint64_t)rank << 48) ^ ((uint64_t)it << 24) ^ k) >> 2;
}

int main(int argc, char **argv)
{
	struct job j;
	int a = job_init(&j, &argc, &argv, 1, "WORDS");
	size_t words = strtoul(argv[a], 0, 10);
	if (words < SMALL)
		words = SMALL;
	uint64_t *v = malloc(words * 8), *sum = malloc(words * 8), *max = malloc(words * 8);
	double dv[NDBL], dsum[NDBL];
	if (!v || !sum || !max)
		fail(&j, "malloc");
	uint64_t prev = 0;
	double dprev = 0;
	for (int it = 0; it < j.iters; it++) {
		size_t n = it % 4 == 3 ? words : SMALL;
		for (size_t k = 0; k < n; k++)
			v[k] = contrib(j.rank, it, prev, k);
		MPI_Allreduce(v, sum, n, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
		MPI_Allreduce(v, max, n, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
		uint64_t h = prev;
		for (size_t k = 0; k < n; k++) {
			uint64_t s = 0, m = 0;
			for (int r = 0; r < j.size; r++) {
				uint64_t c = contrib(r, it, prev, k);
				s += c;
				m = c > m ? c : m;
			}
			if (sum[k] != s || max[k] != m)
				fail(&j, "iteration %d element %zu of %zu: sum %016llx max %016llx, want %016llx %016llx",
				     it, k, n, (unsigned long long)sum[k], (unsigned long long)max[k],
				     (unsigned long long)s, (unsigned long long)m);
			h = mix64(h ^ s) + m;
		}
		for (int k = 0; k < NDBL; k++)
			dv[k] = 1.0 / (1.0 + (double)(contrib(j.rank, it, prev, k) >> 40)) + dprev / ((double)NDBL * j.size * (k + 1));
		MPI_Allreduce(dv, dsum, NDBL, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		dprev = 0;
		for (int k = 0; k < NDBL; k++)
			dprev += dsum[k];
		prev = h;
		if (j.rank == 0)
			logline(&j, "iter %d sum %016llx max %016llx dsum %a", it, (unsigned long long)h,
				(unsigned long long)max[0], dprev);
		job_step(&j, it);
	}
	if (j.rank == 0)
		logline(&j, "result sum %016llx dsum %a", (unsigned long long)prev, dprev);
	free(v);
	free(sum);
	free(max);
	return job_end(&j);
}
