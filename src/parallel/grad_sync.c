/* Bucketed gradient allreduce overlapped with backward (see grad_sync.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include <limits.h>
#include <omp.h>
#include <stdio.h>

#include "hcnn/common.h"
#include "hcnn/grad_sync.h"

/* b += a on the CPU's widest vectors: hcnn builds without -march, and
 * OpenMPI's own MPI_SUM runs AVX-512 (plain SSE2 here summed 29 GB/s in
 * the cache, MPI_SUM 42: bench/bench_comm sum) */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void sum_range(const float *restrict a, float *restrict b, int lo, int hi)
{
    for (int i = lo; i < hi; i++)
        b[i] += a[i];
}

/* The buckets' MPI_SUM with allreduce_progress: test.  OpenMPI's libnbc
 * runs a bucket's reductions on the thread that calls MPI_Test or MPI_Wait,
 * one core at 8 GB/s or so (the n gamma term of docs/plan.md) while the
 * rank's other threads wait.  hcnn's own commutative sum splits them over
 * the OpenMP team whenever MPI calls it outside a parallel region: in
 * finish (the buckets still running when backward has ended, the part of
 * the allreduce nothing hides) and between blocks; inside a parallel region
 * (a poll between GEMM chunks) it runs on the calling thread, as MPI_SUM
 * does.  Element by element, so the same bits on any thread count.
 * Below HCNN_TEAM_SUM_MIN floats (grad_sync.h) one core is quicker than
 * waking the team (a fork-join of 64 threads costs a few microseconds, the
 * time one core takes to sum 64 KiB).  HCNN_GRAD_SUM=mpi takes MPI_SUM
 * instead (for comparisons). */
static void team_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const float *a = in;
    float *b = inout;
    const int n = *len;
    if (n < HCNN_TEAM_SUM_MIN || omp_in_parallel() || omp_get_max_threads() == 1) {
        sum_range(a, b, 0, n);
        return;
    }
#pragma omp parallel
    {
        /* contiguous slices of whole cache lines, one per thread */
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int per = (n / nt + 15) / 16 * 16;
        const int lo = t * per < n ? t * per : n, hi = lo + per < n ? lo + per : n;
        sum_range(a, b, lo, hi);
    }
}

void hcnn_grad_sum_op(MPI_Op *op) { HCNN_MPI(MPI_Op_create(team_sum, 1, op)); }

/* Bucket b's floats where MPI reads them, nothing copied. */
static float *bucket_ptr(const hcnn_grad_sync *gs, const hcnn_bucket *b)
{
    return (gs->buf.host ? gs->buf.host : gs->buf.dev) + b->off;
}

/* Bucket b's allreduce, blocking (the communication thread, calibration).
 * staged: its floats are already where MPI reads them, and go back to the
 * device in finish (a step cut for graphs: grad_sync.h). */
static void allreduce_bucket(hcnn_grad_sync *gs, const hcnn_bucket *b, int staged)
{
    float *p = staged ? bucket_ptr(gs, b) : hcnn_mpi_send_ptr(&gs->buf, b->off, b->count);
    HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, p, (int)b->count, MPI_FLOAT, MPI_SUM, gs->comm));
    if (!staged)
        hcnn_mpi_recv_done(&gs->buf, b->off, b->count);
}

static void *comm_thread(void *arg)
{
    hcnn_grad_sync *gs = arg;
    pthread_mutex_lock(&gs->mu);
    for (;;) {
        while (!gs->stop && gs->completed >= gs->started)
            pthread_cond_wait(&gs->cv, &gs->mu);
        if (gs->stop)
            break;
        hcnn_bucket *b = &gs->buckets[gs->completed];
        const int staged = gs->cut != NULL;
        pthread_mutex_unlock(&gs->mu);
        allreduce_bucket(gs, b, staged);
        pthread_mutex_lock(&gs->mu);
        gs->completed++;
        pthread_cond_broadcast(&gs->cv);
    }
    pthread_mutex_unlock(&gs->mu);
    return NULL;
}

int hcnn_grad_buckets(const hcnn_net *net, int first, int last, double bucket_mb,
                      hcnn_bucket *buckets)
{
    size_t cap = (size_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float));
    if (cap < 1)
        cap = 1;
    /* whole blocks, from the last one backwards */
    size_t hi = 0, lo = 0;
    int open = 0, n = 0;
    for (int i = last - 1; i >= first; i--) {
        const hcnn_layer *l = &net->layers[i];
        if (l->nparams == 0)
            continue;
        if (!open) {
            hi = l->param_off + l->nparams;
            open = 1;
        }
        lo = l->param_off;
        hcnn_bucket *b = &buckets[n];
        b->off = lo, b->count = hi - lo, b->lowest_block = i;
        if (hi - lo >= cap) {
            n++;
            open = 0;
        }
    }
    return open ? n + 1 : n;
}

int hcnn_grad_sync_init(hcnn_grad_sync *gs, MPI_Comm comm, hcnn_net *net, int first, int last,
                        double bucket_mb, hcnn_allreduce_progress mode)
{
    memset(gs, 0, sizeof *gs);
    gs->comm = comm;
    HCNN_MPI(MPI_Comm_size(comm, &gs->size));
    gs->mode = mode;
    /* buckets reduced by MPI_Iallreduce stay staged on a device (comm.h) */
    const hcnn_mpi_use use =
        mode == HCNN_PROGRESS_TEST ? HCNN_MPI_NONBLOCKING_COLLECTIVE : HCNN_MPI_P2P_OR_BLOCKING;
    if (hcnn_mpi_buf_init(&gs->buf, net->be, net->grads, net->nparams + HCNN_GRAD_TAIL, use,
                          "gradient staging"))
        return HCNN_ENOMEM;
    gs->buckets =
        hcnn_calloc(sizeof *gs->buckets * (size_t)(last - first + 1), "allreduce buckets");
    if (!gs->buckets)
        return HCNN_ENOMEM;
    gs->nbuckets = hcnn_grad_buckets(net, first, last, bucket_mb, gs->buckets);
    /* the first bucket ends the gradients: it carries the agreement's tail */
    if (gs->nbuckets > 0 && gs->buckets[0].off + gs->buckets[0].count == net->nparams) {
        gs->tail_off = net->nparams;
        gs->buckets[0].count += HCNN_GRAD_TAIL;
    }
    for (int k = 0; k < gs->nbuckets; k++)
        if (gs->buckets[k].count > INT_MAX) /* MPI counts are int */
            return hcnn_error("gradient bucket of %zu floats exceeds MPI's count limit: lower "
                              "bucket_mb",
                              gs->buckets[k].count);
    for (int k = 0; k < gs->nbuckets; k++)
        gs->buckets[k].req = MPI_REQUEST_NULL;
    gs->sum = MPI_SUM;
    const char *sum = getenv("HCNN_GRAD_SUM");
    if (mode == HCNN_PROGRESS_TEST && !(sum && !strcmp(sum, "mpi"))) {
        hcnn_grad_sum_op(&gs->sum);
        gs->team_sum = 1;
    }
    if (mode == HCNN_PROGRESS_THREAD) {
        if (pthread_mutex_init(&gs->mu, NULL) || pthread_cond_init(&gs->cv, NULL))
            return hcnn_error_code(HCNN_ENOMEM, "cannot create the communication thread's lock");
        if (pthread_create(&gs->thread, NULL, comm_thread, gs) != 0)
            return hcnn_error_code(HCNN_ENOMEM, "cannot start the communication thread");
        gs->thread_started = 1;
    }
    return HCNN_OK;
}

void hcnn_grad_sync_free(hcnn_grad_sync *gs)
{
    if (gs->thread_started) {
        pthread_mutex_lock(&gs->mu);
        gs->stop = 1;
        pthread_cond_broadcast(&gs->cv);
        pthread_mutex_unlock(&gs->mu);
        pthread_join(gs->thread, NULL);
        pthread_cond_destroy(&gs->cv);
        pthread_mutex_destroy(&gs->mu);
    }
    if (gs->team_sum)
        HCNN_MPI(MPI_Op_free(&gs->sum));
    hcnn_free(gs->buckets);
    hcnn_mpi_buf_free(&gs->buf);
    memset(gs, 0, sizeof *gs);
}

void hcnn_grad_sync_begin(hcnn_grad_sync *gs)
{
    gs->started = 0;
    gs->completed = 0;
}

/* MPI_Test on the oldest running buckets, in order (testing the oldest
 * request drives OpenMPI's progress engine for all); a completed bucket
 * comes back to the device here, or in finish in a step cut for graphs. */
static void test_buckets(hcnn_grad_sync *gs)
{
    while (gs->completed < gs->started) {
        hcnn_bucket *b = &gs->buckets[gs->completed];
        int done = 0;
        HCNN_MPI(MPI_Test(&b->req, &done, MPI_STATUS_IGNORE));
        if (!done)
            return;
        if (!gs->cut)
            hcnn_mpi_recv_done(&gs->buf, b->off, b->count);
        gs->completed++;
    }
}

/* Bucket k's allreduce started: a communication point (hcnn_comm_fn).  In
 * a replayed step nothing else of the step's host code runs, so the first
 * bucket also begins the step's count. */
static int start_bucket(void *arg, int k)
{
    hcnn_grad_sync *gs = arg;
    if (k == 0)
        hcnn_grad_sync_begin(gs);
    if (k != gs->started || k >= gs->nbuckets)
        return hcnn_error_code(HCNN_EINVAL,
                               "gradient allreduce: bucket %d of %d started after %d of them", k,
                               gs->nbuckets, gs->started);
    hcnn_bucket *b = &gs->buckets[k];
    if (k == 0 && gs->tail_off && gs->agree_fill) {
        float tail[HCNN_GRAD_TAIL];
        gs->agree_fill(gs->agree_arg, tail);
        gs->buf.be->upload(gs->buf.be, gs->buf.dev + gs->tail_off, tail, sizeof tail);
    }
    /* staged on this thread in a step cut for graphs (grad_sync.h) */
    float *p = gs->cut ? hcnn_mpi_send_ptr(&gs->buf, b->off, b->count) : NULL;
    if (gs->mode == HCNN_PROGRESS_THREAD) {
        pthread_mutex_lock(&gs->mu);
        gs->started++;
        pthread_cond_broadcast(&gs->cv);
        pthread_mutex_unlock(&gs->mu);
        return HCNN_OK;
    }
    if (!p)
        p = hcnn_mpi_send_ptr(&gs->buf, b->off, b->count);
    HCNN_MPI(MPI_Iallreduce(MPI_IN_PLACE, p, (int)b->count, MPI_FLOAT, gs->sum, gs->comm, &b->req));
    gs->started++;
    if (gs->cut) /* no poll runs until the next point */
        test_buckets(gs);
    return HCNN_OK;
}

void hcnn_grad_sync_poll(void *arg)
{
    hcnn_grad_sync *gs = arg;
    if (gs->mode != HCNN_PROGRESS_TEST || gs->cut)
        return;
    test_buckets(gs);
}

int hcnn_grad_sync_block_done(void *arg, int block)
{
    hcnn_grad_sync *gs = arg;
    while (gs->started < gs->nbuckets && gs->buckets[gs->started].lowest_block >= block) {
        int rc = hcnn_comm_point(gs->cut, start_bucket, gs, gs->started);
        if (rc)
            return rc;
    }
    hcnn_grad_sync_poll(gs);
    return HCNN_OK;
}

/* The buckets not started yet started, then all waited for: a
 * communication point (hcnn_comm_fn). */
static int finish_buckets(void *arg, int unused)
{
    (void)unused;
    hcnn_grad_sync *gs = arg;
    while (gs->started < gs->nbuckets) {
        int rc = start_bucket(gs, gs->started);
        if (rc)
            return rc;
    }
    const double t0 = hcnn_now();
    if (gs->mode == HCNN_PROGRESS_THREAD) {
        pthread_mutex_lock(&gs->mu);
        while (gs->completed < gs->nbuckets)
            pthread_cond_wait(&gs->cv, &gs->mu);
        pthread_mutex_unlock(&gs->mu);
    } else {
        for (; gs->completed < gs->nbuckets; gs->completed++) {
            hcnn_bucket *b = &gs->buckets[gs->completed];
            hcnn_watch_context("gradient allreduce bucket %d of %d", gs->completed + 1,
                               gs->nbuckets);
            HCNN_MPI(MPI_Wait(&b->req, MPI_STATUS_IGNORE));
            if (!gs->cut)
                hcnn_mpi_recv_done(&gs->buf, b->off, b->count);
        }
        hcnn_watch_context(NULL);
    }
    if (gs->cut)
        for (int k = 0; k < gs->nbuckets; k++)
            hcnn_mpi_recv_done(&gs->buf, gs->buckets[k].off, gs->buckets[k].count);
    gs->wait_s += hcnn_now() - t0;
    gs->steps++;
    return HCNN_OK;
}

int hcnn_grad_sync_finish(hcnn_grad_sync *gs)
{
    return hcnn_comm_point(gs->cut, finish_buckets, gs, 0);
}

double hcnn_grad_sync_calibrate(hcnn_grad_sync *gs, int reps)
{
    double t[16];
    if (reps > 16)
        reps = 16;
    if (reps < 1 || gs->nbuckets == 0)
        return 0.0;
    for (int r = 0; r < reps; r++) {
        HCNN_MPI(MPI_Barrier(gs->comm));
        const double t0 = hcnn_now();
        for (int k = 0; k < gs->nbuckets; k++)
            allreduce_bucket(gs, &gs->buckets[k], 0);
        t[r] = hcnn_now() - t0;
    }
    return hcnn_median(t, reps);
}

void hcnn_grad_sync_print(const hcnn_grad_sync *gs, double bucket_mb, double allreduce_s, FILE *out)
{
    const char *alg = getenv(HCNN_IALLREDUCE_ENV); /* as MPI_Init read it */
    fprintf(out,
            "hcnn: gradient allreduce: %d bucket%s of <= %g MiB, progress by %s%s%s%s; "
            "blocking allreduce of all gradients: %.4f s\n",
            gs->nbuckets, gs->nbuckets == 1 ? "" : "s", bucket_mb,
            gs->mode == HCNN_PROGRESS_TEST ? "MPI_Test polling, MPI_Iallreduce"
                                           : "a communication thread, MPI_Allreduce",
            gs->mode == HCNN_PROGRESS_TEST && alg ? " with " HCNN_IALLREDUCE_ENV "=" : "",
            gs->mode == HCNN_PROGRESS_TEST && alg ? alg : "",
            gs->team_sum ? "; sums by the OpenMP team outside parallel regions" : "", allreduce_s);
}
