/*
 * cg: an inverse power iteration whose inner solver is conjugate gradient,
 * the shape of NPB CG, on a 2D grid split into slabs of rows.
 *
 *   cg LOG ITERS DELAY_MS HOLDFILE N
 *
 * The matrix is the 5-point Laplacian of an N x N grid plus a diagonal
 * that varies from point to point (symmetric, positive definite). Every
 * outer iteration solves A z = x with 25 CG iterations from z = 0, then
 * sets zeta = 10 + 1/(x.z) and x = z/|z|. Each matrix-vector product
 * exchanges halo rows with the neighbouring ranks (MPI_Sendrecv), each
 * dot product is an MPI_Allreduce. Rank 0 logs, every outer iteration,
 * "iter K zeta Z res R1 ... R25": the residual norm after each CG
 * iteration, in %a notation (every bit): a restored job must log exactly
 * what an uninterrupted one logs. "result zeta Z" ends the run.
 */
#include <math.h>

#include "mpitest.h"

#define INNER 25

struct grid {
	int n;      /* points per row and number of rows */
	int y0, ny; /* this rank's first row and number of rows */
	int up, down;
	double *diag; /* ny*n */
	double *halo; /* (ny+2)*n: a vector with a halo row above and below */
};

static double dot(const double *a, const double *b, int len)
{
	double s = 0, g;
	for (int i = 0; i < len; i++)
		s += a[i] * b[i];
	MPI_Allreduce(&s, &g, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	return g;
}

/* matvec sets q = A p. */
static void matvec(struct grid *g, const double *p, double *q)
{
	int n = g->n;
	double *h = g->halo;
	memcpy(h + n, p, sizeof(double) * n * g->ny);
	MPI_Sendrecv(p, n, MPI_DOUBLE, g->up, 3, h + (size_t)(g->ny + 1) * n, n, MPI_DOUBLE, g->down, 3,
		     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	MPI_Sendrecv(p + (size_t)(g->ny - 1) * n, n, MPI_DOUBLE, g->down, 4, h, n, MPI_DOUBLE, g->up, 4,
		     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	if (g->up == MPI_PROC_NULL)
		memset(h, 0, sizeof(double) * n);
	if (g->down == MPI_PROC_NULL)
		memset(h + (size_t)(g->ny + 1) * n, 0, sizeof(double) * n);
	for (int y = 0; y < g->ny; y++) {
		const double *row = h + (size_t)(y + 1) * n;
		for (int x = 0; x < n; x++) {
			double s = g->diag[(size_t)y * n + x] * row[x] - row[x - n] - row[x + n];
			if (x > 0)
				s -= row[x - 1];
			if (x < n - 1)
				s -= row[x + 1];
			q[(size_t)y * n + x] = s;
		}
	}
}

int main(int argc, char **argv)
{
	struct job j;
	int a = job_init(&j, &argc, &argv, 1, "N");
	struct grid g = {.n = atoi(argv[a])};
	if (g.n < j.size)
		fail(&j, "grid of %d rows for %d ranks", g.n, j.size);
	g.y0 = (int)((long)g.n * j.rank / j.size);
	g.ny = (int)((long)g.n * (j.rank + 1) / j.size) - g.y0;
	g.up = j.rank > 0 ? j.rank - 1 : MPI_PROC_NULL;
	g.down = j.rank < j.size - 1 ? j.rank + 1 : MPI_PROC_NULL;
	int len = g.ny * g.n;
	g.diag = malloc(sizeof(double) * len);
	g.halo = malloc(sizeof(double) * (len + 2 * g.n));
	double *x = malloc(sizeof(double) * len), *z = malloc(sizeof(double) * len),
	       *r = malloc(sizeof(double) * len), *p = malloc(sizeof(double) * len),
	       *q = malloc(sizeof(double) * len);
	if (!g.diag || !g.halo || !x || !z || !r || !p || !q)
		fail(&j, "malloc");
	for (int y = 0; y < g.ny; y++)
		for (int i = 0; i < g.n; i++) {
			uint64_t h = mix64(((uint64_t)(g.y0 + y) << 32) | (uint64_t)i);
			g.diag[(size_t)y * g.n + i] = 4.0 + (double)(h % 1000) / 250.0;
		}
	for (int i = 0; i < len; i++)
		x[i] = 1.0;

	double zeta = 0;
	for (int it = 0; it < j.iters; it++) {
		char line[1000];
		int o = 0;
		double res[INNER];
		memset(z, 0, sizeof(double) * len);
		memcpy(r, x, sizeof(double) * len);
		memcpy(p, r, sizeof(double) * len);
		double rho = dot(r, r, len);
		for (int k = 0; k < INNER; k++) {
			matvec(&g, p, q);
			double alpha = rho / dot(p, q, len);
			for (int i = 0; i < len; i++) {
				z[i] += alpha * p[i];
				r[i] -= alpha * q[i];
			}
			double rho1 = dot(r, r, len);
			double beta = rho1 / rho;
			rho = rho1;
			for (int i = 0; i < len; i++)
				p[i] = r[i] + beta * p[i];
			res[k] = sqrt(rho);
		}
		zeta = 10.0 + 1.0 / dot(x, z, len);
		double norm = 1.0 / sqrt(dot(z, z, len));
		for (int i = 0; i < len; i++)
			x[i] = norm * z[i];
		if (j.rank == 0) {
			o += snprintf(line + o, sizeof line - o, "iter %d zeta %a res", it, zeta);
			for (int k = 0; k < INNER && o < (int)sizeof line; k++)
				o += snprintf(line + o, sizeof line - o, " %a", res[k]);
			logline(&j, "%s", line);
		}
		job_step(&j, it);
	}
	if (j.rank == 0)
		logline(&j, "result zeta %a", zeta);
	return job_end(&j);
}
