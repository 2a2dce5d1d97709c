/* nodes_job: an MPI job of 3 ranks for namespace nodes, whose every
 * iteration is checked from the inside and logged so that a run can be
 * compared, line by line, with an uninterrupted one.
 *
 * usage: nodes_job LOGPREFIX GATE1 GATE2 MEM_MIB S1 S2
 *
 * Rank R appends its lines to LOGPREFIX.R. Each rank keeps MEM_MIB MiB of
 * heap state; every iteration it mixes what it received into the state and
 * logs "it I phase P sum S" (S: a hash of its whole state).
 *   phase 0: a star — rank 0 exchanges a block with rank 1 and with rank 2;
 *            ranks 1 and 2 never talk to each other (MPI opens connections
 *            lazily: there is none between them yet);
 *   phase 1: also ranks 1 and 2 exchange a block (their first message),
 *            then an MPI_Allreduce of the sums; and rank 2 sends its sum
 *            to rank 1 (which answers with its own) over a TCP connection
 *            of their own that rank 2 opens at the first iteration of
 *            phase 1 to the address rank 1 listens on since the start
 *            (its hostname's address, sent to everyone with
 *            MPI_Allgather): the way libraries open connections lazily,
 *            from addresses exchanged at start-up;
 *   phase 2: like phase 1, for 20 more iterations, then every rank logs
 *            "done it=I sum=S", calls MPI_Finalize, logs "finalized".
 * Rank 0 switches to phase 1 at iteration S1 (or, if S1 is 0, at the
 * first iteration where file GATE1 exists) and to phase 2 at S2 (or when
 * GATE2 exists), logs "switch P at I", and tells the others in its
 * messages. A message from another iteration or rank than expected (lost,
 * repeated or misrouted) is logged as FAIL and aborts the job. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 512 /* words of a message's payload (4 KiB: eager, no rendezvous) */
#define TAIL 20    /* iterations of phase 2 */

struct msg {
	int64_t it, from, phase;
	uint64_t w[BLOCK];
};

static int logfd;

static void say(const char *fmt, ...) {
	char b[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b, sizeof b, fmt, ap);
	va_end(ap);
	if (write(logfd, b, n) != n)
		exit(3);
}

static uint64_t mix(uint64_t x) {
	x ^= x >> 31;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 29;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 32);
}

static uint64_t *state;
static size_t words;

static uint64_t hash_state(void) {
	uint64_t h = 0;
	for (size_t i = 0; i < words; i++)
		h = mix(h ^ state[i]) + i;
	return h;
}

/* fill makes the block this rank sends at it. */
static void fill(struct msg *m, int64_t it, int rank, int64_t phase) {
	m->it = it;
	m->from = rank;
	m->phase = phase;
	size_t off = (size_t)mix(it * 7 + rank) % (words - BLOCK);
	memcpy(m->w, state + off, sizeof m->w);
}

/* take checks a received block and mixes it into the state. */
static void take(const struct msg *m, int64_t it, int from, int rank) {
	if (m->it != it || m->from != from) {
		say("FAIL rank %d it %lld: message from rank %lld of it %lld, want rank %d it %lld\n", rank, (long long)it,
		    (long long)m->from, (long long)m->it, from, (long long)it);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	size_t off = (size_t)mix(it * 13 + from * 101 + rank) % (words - BLOCK);
	for (size_t i = 0; i < BLOCK; i++)
		state[off + i] = mix(state[off + i] ^ m->w[i] ^ (uint64_t)it);
}

static void exchange(int peer, int64_t it, int rank, int64_t phase, struct msg *out, struct msg *in) {
	fill(out, it, rank, phase);
	MPI_Sendrecv(out, sizeof *out, MPI_BYTE, peer, (int)(it % 30000), in, sizeof *in, MPI_BYTE, peer,
		     (int)(it % 30000), MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	take(in, it, peer, rank);
}

/* full does a whole read or write of n bytes, or aborts the job. */
static void full(int rank, const char *what, int fd, void *p, size_t n, int wr) {
	for (size_t done = 0; done < n;) {
		ssize_t k = wr ? write(fd, (char *)p + done, n - done) : read(fd, (char *)p + done, n - done);
		if (k <= 0) {
			say("FAIL rank %d: side channel %s: %s\n", rank, what, k < 0 ? strerror(errno) : "closed");
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		done += k;
	}
}

/* side is the lazily opened TCP connection between ranks 1 and 2. */
struct side {
	int lfd, fd;
	struct sockaddr_in addr[3]; /* where each rank listens */
};

/* side_listen makes rank 1 listen on its hostname's address and shares
 * every rank's listening address (0 for the others). */
static void side_listen(struct side *s, int rank, const char *host) {
	struct sockaddr_in me = {0};
	s->lfd = s->fd = -1;
	if (rank == 1) {
		struct hostent *he = gethostbyname(host);
		if (!he) {
			say("FAIL rank %d: resolve %s\n", rank, host);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		me.sin_family = AF_INET;
		memcpy(&me.sin_addr, he->h_addr_list[0], 4);
		s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		socklen_t len = sizeof me;
		if (bind(s->lfd, (struct sockaddr *)&me, sizeof me) < 0 || listen(s->lfd, 4) < 0 ||
		    getsockname(s->lfd, (struct sockaddr *)&me, &len) < 0) {
			say("FAIL rank %d: listen: %s\n", rank, strerror(errno));
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		say("side listens on %s:%d\n", inet_ntoa(me.sin_addr), ntohs(me.sin_port));
	}
	MPI_Allgather(&me, sizeof me, MPI_BYTE, s->addr, sizeof me, MPI_BYTE, MPI_COMM_WORLD);
}

/* side_swap sends this rank's sum to the other rank of the pair and
 * returns the other's, opening the connection the first time. */
static uint64_t side_swap(struct side *s, int rank, uint64_t sum) {
	uint64_t other = 0;
	if (rank == 2) {
		if (s->fd < 0) {
			s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (connect(s->fd, (struct sockaddr *)&s->addr[1], sizeof s->addr[1]) < 0) {
				say("FAIL rank 2: connect to %s:%d: %s\n", inet_ntoa(s->addr[1].sin_addr), ntohs(s->addr[1].sin_port),
				    strerror(errno));
				MPI_Abort(MPI_COMM_WORLD, 1);
			}
			say("side connected to %s:%d\n", inet_ntoa(s->addr[1].sin_addr), ntohs(s->addr[1].sin_port));
		}
		full(rank, "write", s->fd, &sum, sizeof sum, 1);
		full(rank, "read", s->fd, &other, sizeof other, 0);
	} else {
		if (s->fd < 0) {
			s->fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
			if (s->fd < 0) {
				say("FAIL rank 1: accept: %s\n", strerror(errno));
				MPI_Abort(MPI_COMM_WORLD, 1);
			}
			say("side accepted\n");
		}
		full(rank, "read", s->fd, &other, sizeof other, 0);
		full(rank, "write", s->fd, &sum, sizeof sum, 1);
	}
	return other;
}

int main(int argc, char **argv) {
	if (argc != 7) {
		fprintf(stderr, "usage: nodes_job LOGPREFIX GATE1 GATE2 MEM_MIB S1 S2\n");
		return 2;
	}
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	char path[4096];
	snprintf(path, sizeof path, "%s.%d", argv[1], rank);
	logfd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (logfd < 0)
		MPI_Abort(MPI_COMM_WORLD, 2);
	if (size != 3) {
		say("FAIL %d ranks, want 3\n", size);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	words = (size_t)atoi(argv[4]) << 17;
	int64_t s1 = atoll(argv[5]), s2 = atoll(argv[6]);
	state = malloc(words * sizeof *state);
	for (size_t i = 0; i < words; i++)
		state[i] = mix(i * 3 + rank);
	char host[256] = {0};
	gethostname(host, sizeof host - 1);
	say("start rank %d pid %d host %s\n", rank, getpid(), host);
	struct side side;
	side_listen(&side, rank, host);
	struct msg *out = malloc(sizeof *out), *in = malloc(sizeof *in);
	int64_t phase = 0, end = 0;
	for (int64_t it = 1;; it++) {
		if (rank == 0) {
			if (phase == 0 && (s1 ? it == s1 : access(argv[2], F_OK) == 0)) {
				phase = 1;
				say("switch 1 at %lld\n", (long long)it);
			} else if (phase == 1 && (s2 ? it == s2 : access(argv[3], F_OK) == 0)) {
				phase = 2;
				say("switch 2 at %lld\n", (long long)it);
			}
			for (int r = 1; r < 3; r++)
				exchange(r, it, rank, phase, out, in);
		} else {
			exchange(0, it, rank, 0, out, in);
			phase = in->phase;
		}
		uint64_t sum = hash_state();
		if (phase >= 1) {
			if (rank > 0) {
				exchange(3 - rank, it, rank, phase, out, in);
				sum = hash_state();
				state[(it * 5) % words] ^= side_swap(&side, rank, sum);
			}
			uint64_t all = 0;
			sum = hash_state();
			MPI_Allreduce(&sum, &all, 1, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
			state[it % words] ^= all;
		}
		say("it %lld phase %lld sum %016llx\n", (long long)it, (long long)phase, (unsigned long long)sum);
		if (phase == 2 && end == 0)
			end = it + TAIL;
		if (it == end) {
			say("done it=%lld sum=%016llx\n", (long long)it, (unsigned long long)hash_state());
			break;
		}
		if (rank == 0) {
			struct timespec ts = {0, 5 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Finalize();
	say("finalized\n");
	return 0;
}
