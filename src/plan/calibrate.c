/* hcnn plan --calibrate-network (under mpirun, 2+ ranks): latency and
 * bandwidth between ranks 0 and 1, the reduction rate of one core and, with
 * a configuration, the host contention, written as a --network file
 * (include/hcnn/plan.h, docs/plan.md). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hcnn/comm.h"
#include "hcnn/common.h"
#include "hcnn/files.h"
#include "hcnn/plan.h"
#include "hcnn/train.h"

/* ---- --calibrate-network (under mpirun, 2+ ranks) ---------------------------- */

static double pingpong(MPI_Comm world, int rank, char *buf, int bytes, int reps)
{
    double t[64];
    if (reps > 64)
        reps = 64;
    for (int k = 0; k < reps; k++) {
        MPI_Barrier(world);
        const double t0 = MPI_Wtime();
        for (int i = 0; i < 10; i++) {
            if (rank == 0) {
                MPI_Send(buf, bytes, MPI_BYTE, 1, 7, world);
                MPI_Recv(buf, bytes, MPI_BYTE, 1, 7, world, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(buf, bytes, MPI_BYTE, 0, 7, world, MPI_STATUS_IGNORE);
                MPI_Send(buf, bytes, MPI_BYTE, 0, 7, world);
            }
        }
        t[k] = (MPI_Wtime() - t0) / 20.0; /* one way */
    }
    return hcnn_median(t, reps);
}

/* Rank 0 alone (the others sleep, not spin, in a barrier), then every rank
 * at once: the slowdown of a pass when all of the host's ranks compute. */
static void sleep_barrier(MPI_Comm world)
{
    MPI_Request req;
    int done = 0;
    MPI_Ibarrier(world, &req);
    while (!done) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) {
            const struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
}

static double pass_seconds(const hcnn_config *cfg)
{
    double fwd[HCNN_MAX_BLOCKS], bwd[HCNN_MAX_BLOCKS], opt = 0.0, t = 0.0;
    if (hcnn_block_times(cfg, cfg->batch_size, 30, fwd, bwd, NULL, NULL, &opt))
        return -1.0;
    for (int i = 0; i < cfg->model.nblocks; i++)
        t += fwd[i] + bwd[i];
    return t + opt;
}

/* The machine is shared and noisy: 7 alternations of alone and together,
 * the median of their ratios (2 alternations, the last one taken, gave 1.00
 * to 1.11 on one 2-core VM within minutes, and the 2-rank validation
 * point 18% off when it read 1.00). */
static double contention(const hcnn_config *cfg, MPI_Comm world, int rank)
{
    enum { PAIRS = 7 };
    double ratio[PAIRS];
    for (int k = 0; k < PAIRS; k++) {
        double alone = 0.0;
        if (rank == 0)
            alone = pass_seconds(cfg);
        sleep_barrier(world);
        const double together = pass_seconds(cfg);
        sleep_barrier(world);
        ratio[k] = alone > 0 && together > 0 ? together / alone : 1.0;
    }
    double r = hcnn_median(ratio, PAIRS);
    MPI_Bcast(&r, 1, MPI_DOUBLE, 0, world);
    return r < 1.0 ? 1.0 : r;
}

int hcnn_plan_calibrate(const char *path, const hcnn_config *cfg)
{
    hcnn_comm comm;
    int argc = 0;
    char **argv = NULL;
    if (hcnn_comm_init(&comm, &argc, &argv))
        return 1;
    if (comm.size < 2) {
        hcnn_comm_finalize(&comm);
        return hcnn_error_code(HCNN_EINVAL, "--calibrate-network measures between ranks 0 and 1: "
                                            "run it under mpirun with 2 ranks (one per node), "
                                            "e.g. mpirun -np 2 --map-by node hcnn plan "
                                            "--calibrate-network FILE");
    }
    /* the output tried first (its temporary file made and removed): a path
     * that cannot be written is said before the measurement, not after it,
     * and a FIFO there refused (rank 0 blocked in its open while the others
     * waited in MPI).  Written at the end through a temporary file renamed
     * over it: a failed calibration keeps the old one, and leaves nothing */
    hcnn_afile out = {.fd = -1};
    int rc = comm.rank == 0 ? hcnn_afile_open(&out, path) : HCNN_OK;
    if (comm.rank == 0 && !rc)
        hcnn_afile_abort(&out);
    MPI_Bcast(&rc, 1, MPI_INT, 0, comm.world);
    if (rc) {
        hcnn_comm_finalize(&comm);
        return rc;
    }
    const int big = 8 << 20;
    char *buf = hcnn_calloc((size_t)big, "calibration buffer");
    float *a = hcnn_calloc((size_t)big, "calibration buffer"), *b = hcnn_calloc((size_t)big, "calibration buffer");
    if (!buf || !a || !b)
        HCNN_FATAL(HCNN_ENOMEM, "cannot allocate the calibration buffers");
    const double lat = pingpong(comm.world, comm.rank, buf, 8, 40);
    const double t_big = pingpong(comm.world, comm.rank, buf, big, 9);
    /* one core summing floats, as OpenMPI's reduction does */
    double tr[9];
    const int nf = big / (int)sizeof(float);
    for (int k = 0; k < 9; k++) {
        const double t0 = MPI_Wtime();
        for (int i = 0; i < nf; i++)
            a[i] += b[i];
        tr[k] = MPI_Wtime() - t0;
    }
    const double t_red = hcnn_median(tr, 9) + (a[nf / 2] == 12345.f ? 1e-12 : 0.0);
    const double cont = cfg ? contention(cfg, comm.world, comm.rank) : 1.0;
    /* the allreduce itself, on all ranks: its bandwidth term, solved from
     * the model's formula for the algorithm OpenMPI picks, is what gradient
     * buckets see (on one host's shared memory it is several times below
     * the ping-pong's: two copies through the sm transport) */
    double ta[9];
    for (int k = 0; k < 9; k++) {
        MPI_Barrier(comm.world);
        const double t0 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, a, nf, MPI_FLOAT, MPI_SUM, comm.world);
        ta[k] = MPI_Wtime() - t0;
    }
    double t_ar = hcnn_median(ta, 9);
    MPI_Bcast(&t_ar, 1, MPI_DOUBLE, 0, comm.world);
    const hcnn_network probe = {"probe", lat, 1.0 / 1e12, 1.0 / (big / fmax(t_red, 1e-9)), lat,
                                1.0, -1}; /* the blocking MPI_Allreduce timed above */
    const double fixed = hcnn_allreduce_seconds(&probe, big, comm.size); /* beta ~ 0 */
    const double per_beta = hcnn_allreduce_seconds(&(hcnn_network){"probe", lat, 1.0 / 1e9,
                                                                   probe.gamma_s, lat, 1.0, -1},
                                                   big, comm.size) - fixed; /* at 1 GB/s */
    const double ar_gbs = per_beta > 0 && t_ar > fixed ? per_beta / (t_ar - fixed) : 1.0;
    if (comm.rank == 0) {
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        char text[2048];
        const int n = snprintf(
            text, sizeof text,
            "# hcnn plan --calibrate-network: ping-pong between ranks 0 and 1 (%s and its "
            "peer), %d ranks launched\n"
            "# one-way: 8 B %.3f us, %d B %.3f ms; summing %d floats on one core %.3f ms\n"
            "# MPI_Allreduce of %d B on %d ranks: %.3f ms (%s): bandwidth_gbs solved from it\n"
            "# (the ping-pong's: %.4f GB/s)\n"
            "name = measured-%s\nalpha_us = %.4f\nbandwidth_gbs = %.4f\n"
            "reduce_gbs = %.4f\np2p_alpha_us = %.4f\n"
            "# a pass of %s with every rank computing at once / with rank 0 alone\n"
            "host_contention = %.4f\n",
            host, comm.size, lat * 1e6, big, t_big * 1e3, nf, t_red * 1e3, big, comm.size,
            t_ar * 1e3, hcnn_allreduce_algo_name(hcnn_allreduce_choice(big, comm.size)),
            big / fmax(t_big - lat, 1e-9) / 1e9, host, lat * 1e6, ar_gbs,
            big / fmax(t_red, 1e-9) / 1e9, lat * 1e6,
            cfg ? cfg->model.name : "(no --config: not measured)", cont);
        rc = hcnn_write_file(path, text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
        if (!rc)
            printf("hcnn plan: network calibrated into %s: latency %.2f us, %.2f GB/s, "
                   "reduction %.2f GB/s, host contention %.3f\n",
                   path, lat * 1e6, ar_gbs,
                   big / fmax(t_red, 1e-9) / 1e9, cont);
    }
    free(buf), free(a), free(b);
    MPI_Bcast(&rc, 1, MPI_INT, 0, comm.world);
    hcnn_comm_finalize(&comm);
    return rc;
}

