/* nodes_bench: the MPI job the multi-node benchmark checkpoints and
 * migrates. Every rank fills MEM_MIB MiB of heap, then loops: it sends a
 * 4 KiB block to the next rank of a ring and receives one from the
 * previous, mixes it into a word of every page of a 1 MiB window of its
 * heap (the window moves on), and all ranks all-reduce a checksum. Rank
 * 0 appends "it N" to LOG every 50 iterations; when file STOP exists the
 * job logs "done" and finalizes.
 *
 * usage: nodes_bench LOG STOP MEM_MIB */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 512

int main(int argc, char **argv) {
	if (argc != 4) {
		fprintf(stderr, "usage: nodes_bench LOG STOP MEM_MIB\n");
		return 2;
	}
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	size_t words = (size_t)atoi(argv[3]) << 17, page = 4096 / 8, window = (1 << 20) / 8;
	uint64_t *heap = malloc(words * 8);
	for (size_t i = 0; i < words; i++)
		heap[i] = i * 0x9E3779B97F4A7C15ull + rank;
	FILE *log = rank == 0 ? fopen(argv[1], "a") : NULL;
	uint64_t out[BLOCK], in[BLOCK];
	for (uint64_t it = 1;; it++) {
		size_t base = (it * window) % (words - window);
		memcpy(out, heap + base, sizeof out);
		MPI_Sendrecv(out, BLOCK, MPI_UINT64_T, (rank + 1) % size, 0, in, BLOCK, MPI_UINT64_T, (rank + size - 1) % size, 0,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		uint64_t sum = 0, all = 0;
		for (size_t i = 0; i < window; i += page) {
			heap[base + i] ^= in[(i / page) % BLOCK] + it;
			sum += heap[base + i];
		}
		int stop = rank == 0 && access(argv[2], F_OK) == 0, any = 0;
		MPI_Allreduce(&sum, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
		MPI_Allreduce(&stop, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
		if (log && it % 50 == 0) {
			fprintf(log, "it %llu sum %016llx\n", (unsigned long long)it, (unsigned long long)all);
			fflush(log);
		}
		if (any)
			break;
		usleep(2000);
	}
	if (log) {
		fprintf(log, "done\n");
		fflush(log);
	}
	MPI_Finalize();
	return 0;
}
