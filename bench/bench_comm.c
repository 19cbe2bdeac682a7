/* The two communication changes of the data-parallel step, measured here
 * (docs/plan.md, "Hiding what the plan showed exposed"): hcnn plan prices
 * them at 32 nodes from these terms.
 *
 *   bench/bench_comm sum [--rounds N]            (OMP_NUM_THREADS threads)
 *   mpirun -np 2 bench/bench_comm agree [--rounds N]
 *
 * sum: the gradient buckets' reduction, MPI_SUM through MPI_Reduce_local
 * (what OpenMPI's libnbc runs on the polling thread) against hcnn's team
 * sum (hcnn_grad_sum_op) on 64 KiB .. 16 MiB, alternated round by round,
 * medians.  hcnn plan gives a team of T threads T times one core's rate
 * (while the sums stay in the last-level cache): team_over_mpi against T.
 * One line per size:
 *   comm sum bytes=4194304 threads=2 mpi_gbs=14.0 team_gbs=31.6 team_over_mpi=2.26
 * agree: on every rank, the per-step agreement as an allreduce of its own
 * (3 ints, MPI_MAX) and a 1 MiB gradient bucket's MPI_Iallreduce + Wait
 * with hcnn's sum, with the agreement's 4 floats riding on it, and with
 * MPI_SUM, alternated, medians:
 *   comm agree ranks=2 threads=1 agreement_us=0.8 bucket_us=313.8 bucket_with_agreement_us=312.2
 *   bucket_mpi_sum_us=314.0 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/grad_sync.h"

#define MAX_ROUNDS 201

static int bench_sum(int rounds)
{
    const int threads = omp_get_max_threads();
    const size_t most = (size_t)4 << 20; /* floats: 16 MiB */
    float *a = hcnn_alloc(sizeof(float) * most, "summand"), *b = hcnn_alloc(sizeof(float) * most, "sum");
    if (!a || !b)
        return HCNN_ENOMEM;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < most; i++)
        a[i] = 1e-3f, b[i] = 0.0f;
    MPI_Op team;
    hcnn_grad_sum_op(&team);
    for (size_t n = 16384; n <= most; n *= 4) {
        double tm[MAX_ROUNDS], tt[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) {
            double t0 = MPI_Wtime();
            MPI_Reduce_local(a, b, (int)n, MPI_FLOAT, MPI_SUM);
            tm[r] = MPI_Wtime() - t0;
            t0 = MPI_Wtime();
            MPI_Reduce_local(a, b, (int)n, MPI_FLOAT, team);
            tt[r] = MPI_Wtime() - t0;
        }
        const double bytes = (double)n * sizeof(float), mpi = bytes / hcnn_median(tm, rounds) / 1e9,
                     tgbs = bytes / hcnn_median(tt, rounds) / 1e9;
        printf("comm sum bytes=%.0f threads=%d mpi_gbs=%.2f team_gbs=%.2f team_over_mpi=%.2f\n",
               bytes, threads, mpi, tgbs, tgbs / mpi);
    }
    MPI_Op_free(&team);
    hcnn_free(a), hcnn_free(b);
    return HCNN_OK;
}

static int bench_agree(int rounds)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int n = (1 << 20) / (int)sizeof(float);
    float *g = hcnn_alloc(sizeof(float) * (size_t)(n + 4), "bucket");
    if (!g)
        return HCNN_ENOMEM;
    for (int i = 0; i < n + 4; i++)
        g[i] = 0.0f;
    MPI_Op team;
    hcnn_grad_sum_op(&team);
    double ta[MAX_ROUNDS], tb[MAX_ROUNDS], tc[MAX_ROUNDS], td[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        int agreed[3] = {0, 0, 0};
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int k = 0; k < 10; k++)
            MPI_Allreduce(MPI_IN_PLACE, agreed, 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        ta[r] = (MPI_Wtime() - t0) / 10;
        /* the bucket with hcnn's sum, with the agreement's floats, and with
         * MPI_SUM */
        for (int k = 0; k < 3; k++) {
            MPI_Request req;
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
            MPI_Iallreduce(MPI_IN_PLACE, g, n + (k == 1 ? 4 : 0), MPI_FLOAT, k == 2 ? MPI_SUM : team,
                           MPI_COMM_WORLD, &req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            (k == 0 ? tb : k == 1 ? tc : td)[r] = MPI_Wtime() - t0;
        }
    }
    double m[4] = {hcnn_median(ta, rounds), hcnn_median(tb, rounds), hcnn_median(tc, rounds),
                   hcnn_median(td, rounds)};
    MPI_Allreduce(MPI_IN_PLACE, m, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("comm agree ranks=%d threads=%d agreement_us=%.2f bucket_us=%.2f "
               "bucket_with_agreement_us=%.2f bucket_mpi_sum_us=%.2f\n",
               size, omp_get_max_threads(), m[0] * 1e6, m[1] * 1e6, m[2] * 1e6, m[3] * 1e6);
    MPI_Op_free(&team);
    hcnn_free(g);
    return HCNN_OK;
}

int main(int argc, char **argv)
{
    int provided;
    hcnn_set_fatal_hook(hcnn_mpi_fatal_hook, NULL); /* as hcnn's program does */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    int rounds = 15, rc = 2;
    const char *what = argc > 1 ? argv[1] : "";
    for (int i = 2; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
    if (rounds < 1 || rounds > MAX_ROUNDS)
        rounds = 15;
    if (!strcmp(what, "sum"))
        rc = bench_sum(rounds);
    else if (!strcmp(what, "agree"))
        rc = bench_agree(rounds);
    else
        fprintf(stderr, "usage: bench/bench_comm sum|agree [--rounds N]\n");
    MPI_Finalize();
    return rc ? 1 : 0;
}
