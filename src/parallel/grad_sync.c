/* Bucketed gradient allreduce overlapped with backward (see grad_sync.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include <limits.h>
#include <omp.h>
#include <stdio.h>

#include "hcnn/common.h"
#include "hcnn/env.h"
#include "hcnn/grad_sync.h"
#include "reduce_scatter.h"
#include "../core/trace.h"

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
int hcnn_grad_sum_mpi(void)
{
    const char *sum = getenv(HCNN_ENV_GRAD_SUM);
    return sum && !strcmp(sum, "mpi");
}

static void sum_into(const float *a, float *b, int n)
{
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

/* the communication thread's: one core (a team started there would
 * oversubscribe the cores the compute team is on) */
static void sum_one_core(const float *a, float *b, int n) { sum_range(a, b, 0, n); }

static void team_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    sum_into(in, inout, *len);
}

void hcnn_grad_sum_op(MPI_Op *op) { HCNN_MPI(MPI_Op_create(team_sum, 1, op)); }

/* Bucket b's floats where MPI reads them, nothing copied. */
static float *bucket_ptr(const hcnn_grad_sync *gs, const hcnn_bucket *b)
{
    return (gs->buf.host ? gs->buf.host : gs->buf.dev) + b->off;
}

/* Rank r's piece of bucket k, in floats from the bucket's start */
static int piece_count(const hcnn_grad_sync *gs, int k, int r) { return gs->counts[k * gs->size + r]; }
static int *piece_counts(const hcnn_grad_sync *gs, int k) { return gs->counts + k * gs->size; }
static int *piece_displs(const hcnn_grad_sync *gs, int k) { return gs->displs + k * gs->size; }

/* Where this rank's piece of bucket k starts in the gradients */
static size_t piece_off(const hcnn_grad_sync *gs, int k)
{
    return gs->buckets[k].off + (size_t)piece_displs(gs, k)[gs->rank];
}

/* After bucket k's sum completed: what came back to the host goes to the
 * device (its whole range, or this rank's piece when sharded). */
static void bucket_done(hcnn_grad_sync *gs, int k)
{
    const hcnn_bucket *b = &gs->buckets[k];
    if (gs->sharded)
        hcnn_mpi_recv_done(&gs->buf, piece_off(gs, k), (size_t)piece_count(gs, k, gs->rank));
    else
        hcnn_mpi_recv_done(&gs->buf, b->off, b->count);
}

/* Bucket k's sum started (req != NULL) or run to completion (blocking),
 * from p, where MPI reads its floats: an allreduce in place, or, sharded,
 * the reduce-scatter (started by test_sharded, one bucket after another). */
static void sum_bucket(hcnn_grad_sync *gs, int k, float *p, MPI_Request *req)
{
    const hcnn_bucket *b = &gs->buckets[k];
    if (gs->sharded) {
        gs->buckets[k].base = p;
        if (!req) {
            hcnn_rs_begin(gs->rs, p, b->count);
            hcnn_rs_advance(gs->rs, 1);
        }
    } else if (req) {
        HCNN_MPI(MPI_Iallreduce(MPI_IN_PLACE, p, (int)b->count, MPI_FLOAT, gs->sum, gs->comm, req));
    } else {
        HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, p, (int)b->count, MPI_FLOAT, MPI_SUM, gs->comm));
    }
}

/* Bucket k's sum, blocking (the communication thread, calibration).
 * staged: its floats are already where MPI reads them, and go back to the
 * device in finish (a step cut for graphs: grad_sync.h). */
static void allreduce_bucket(hcnn_grad_sync *gs, int k, int staged)
{
    const hcnn_bucket *b = &gs->buckets[k];
    float *p = staged ? bucket_ptr(gs, b) : hcnn_mpi_send_ptr(&gs->buf, b->off, b->count);
    sum_bucket(gs, k, p, NULL);
    if (!staged)
        bucket_done(gs, k);
}

static void gather_bucket(hcnn_grad_sync *gs, hcnn_mpi_buf *m, int k, MPI_Request *req);

static void *comm_thread(void *arg)
{
    hcnn_grad_sync *gs = arg;
    pthread_mutex_lock(&gs->mu);
    for (;;) {
        while (!gs->stop && gs->completed >= gs->started)
            pthread_cond_wait(&gs->cv, &gs->mu);
        if (gs->stop)
            break;
        const int k = gs->completed;
        const int staged = gs->cut != NULL;
        pthread_mutex_unlock(&gs->mu);
        hcnn_trace_push(gs->sharded ? "reduce-scatter bucket" : "allreduce bucket");
        allreduce_bucket(gs, k, staged);
        hcnn_trace_pop();
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

/* Sharded: the reduce-scatter, each rank's piece of every bucket */
static int shard_init(hcnn_grad_sync *gs, hcnn_net *net, hcnn_mpi_use use)
{
    const int R = gs->size, K = gs->nbuckets;
    gs->counts = hcnn_calloc(sizeof *gs->counts * (size_t)K * (size_t)R, "sharded buckets");
    gs->displs = hcnn_calloc(sizeof *gs->displs * (size_t)K * (size_t)R, "sharded buckets");
    gs->gather_req = hcnn_calloc(sizeof *gs->gather_req * (size_t)K, "parameter all-gathers");
    gs->rs = hcnn_calloc(sizeof *gs->rs, "the reduce-scatter");
    if (!gs->counts || !gs->displs || !gs->gather_req || !gs->rs)
        return HCNN_ENOMEM;
    size_t largest = 0;
    for (int k = 0; k < K; k++)
        largest = gs->buckets[k].count > largest ? gs->buckets[k].count : largest;
    if (hcnn_rs_init(gs->rs, gs->comm, largest,
                     gs->mode == HCNN_PROGRESS_THREAD ? sum_one_core : sum_into))
        return HCNN_ENOMEM;
    gs->shard_n = 0;
    for (int k = 0; k < K; k++) {
        hcnn_rs_pieces(gs->rs, gs->buckets[k].count, gs->counts + k * R, gs->displs + k * R);
        gs->shard_n += (size_t)gs->counts[k * R + gs->rank];
        gs->gather_req[k] = MPI_REQUEST_NULL;
    }
    if (hcnn_mpi_buf_init(&gs->param_buf, net->be, net->params, net->nparams, use,
                          "parameter staging for the all-gathers"))
        return HCNN_ENOMEM;
    return HCNN_OK;
}

int hcnn_grad_sync_init(hcnn_grad_sync *gs, MPI_Comm comm, hcnn_net *net, int first, int last,
                        double bucket_mb, hcnn_allreduce_progress mode,
                        hcnn_optimizer_sharding sharding)
{
    memset(gs, 0, sizeof *gs);
    gs->comm = comm;
    HCNN_MPI(MPI_Comm_size(comm, &gs->size));
    HCNN_MPI(MPI_Comm_rank(comm, &gs->rank));
    gs->mode = mode;
    gs->sharded = sharding == HCNN_SHARDING_RANKS && gs->size > 1;
    /* buckets reduced by MPI_Iallreduce stay staged on a device (comm.h) */
    /* sharded: the reduce-scatter adds on the host (reduce_scatter.h) */
    const hcnn_mpi_use use = mode == HCNN_PROGRESS_TEST || gs->sharded
                                 ? HCNN_MPI_NONBLOCKING_COLLECTIVE
                                 : HCNN_MPI_P2P_OR_BLOCKING;
    if (hcnn_mpi_buf_init(&gs->buf, net->be, net->grads, net->nparams + HCNN_GRAD_TAIL, use,
                          "gradient staging"))
        return HCNN_ENOMEM;
    gs->buckets =
        hcnn_calloc(sizeof *gs->buckets * (size_t)(last - first + 1), "allreduce buckets");
    if (!gs->buckets)
        return HCNN_ENOMEM;
    gs->nbuckets = hcnn_grad_buckets(net, first, last, bucket_mb, gs->buckets);
    /* the first bucket ends the gradients: it carries the agreement's tail
     * (not when sharded: grad_sync.h) */
    if (!gs->sharded && gs->nbuckets > 0 && gs->buckets[0].off + gs->buckets[0].count == net->nparams) {
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
    if (gs->sharded && shard_init(gs, net, use))
        return HCNN_ENOMEM;
    gs->sum = MPI_SUM;
    if (mode == HCNN_PROGRESS_TEST && !hcnn_grad_sum_mpi()) {
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
    if (gs->gathers_pending) /* the last update's (a benchmark's last step) */
        hcnn_grad_sync_settle(gs);
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
    hcnn_free(gs->counts);
    hcnn_free(gs->displs);
    hcnn_free(gs->gather_req);
    if (gs->rs)
        hcnn_rs_free(gs->rs);
    hcnn_free(gs->rs);
    hcnn_mpi_buf_free(&gs->param_buf);
    memset(gs, 0, sizeof *gs);
}

void hcnn_grad_sync_begin(hcnn_grad_sync *gs)
{
    gs->started = 0;
    gs->completed = 0;
    gs->rs_begun = 0;
}

/* Sharded: the started buckets' reduce-scatters, one after another (each
 * begun when the one before has ended), advanced or, blocking, run to
 * their end; a completed bucket's piece comes back to the device here, or
 * in finish in a step cut for graphs. */
static void test_sharded(hcnn_grad_sync *gs, int blocking)
{
    while (gs->completed < gs->started) {
        hcnn_bucket *b = &gs->buckets[gs->completed];
        if (!gs->rs_begun) {
            hcnn_rs_begin(gs->rs, b->base, b->count);
            gs->rs_begun = 1;
        }
        if (blocking)
            hcnn_watch_context("gradient reduce-scatter bucket %d of %d", gs->completed + 1,
                               gs->nbuckets);
        if (!hcnn_rs_advance(gs->rs, blocking))
            return;
        gs->rs_begun = 0;
        if (!gs->cut)
            bucket_done(gs, gs->completed);
        gs->completed++;
    }
}

/* MPI_Test on the oldest running buckets, in order (testing the oldest
 * request drives OpenMPI's progress engine for all); a completed bucket
 * comes back to the device here, or in finish in a step cut for graphs. */
static void test_buckets(hcnn_grad_sync *gs)
{
    if (gs->sharded) {
        test_sharded(gs, 0);
        return;
    }
    while (gs->completed < gs->started) {
        hcnn_bucket *b = &gs->buckets[gs->completed];
        int done = 0;
        HCNN_MPI(MPI_Test(&b->req, &done, MPI_STATUS_IGNORE));
        if (!done)
            return;
        if (!gs->cut)
            bucket_done(gs, gs->completed);
        gs->completed++;
    }
}

/* Bucket k's allreduce started: a communication point (hcnn_comm_fn).  In
 * a replayed step nothing else of the step's host code runs, so the first
 * bucket also begins the step's count. */
static int bucket_start(hcnn_grad_sync *gs, int k)
{
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
    sum_bucket(gs, k, p, &b->req);
    gs->started++;
    if (gs->cut) /* no poll runs until the next point */
        test_buckets(gs);
    return HCNN_OK;
}

/* The same inside its NVTX range (src/core/trace.h). */
static int start_bucket(void *arg, int k)
{
    hcnn_grad_sync *gs = arg;
    hcnn_trace_push(gs->sharded ? "reduce-scatter start" : "allreduce start");
    const int rc = bucket_start(gs, k);
    hcnn_trace_pop();
    return rc;
}

static void test_gathers(hcnn_grad_sync *gs);

void hcnn_grad_sync_poll(void *arg)
{
    hcnn_grad_sync *gs = arg;
    if (gs->mode != HCNN_PROGRESS_TEST || gs->cut)
        return;
    if (gs->gathers_pending) { /* the last update's, during forward */
        test_gathers(gs);
        if (gs->gathers_completed == gs->nbuckets)
            gs->gathers_pending = 0;
    }
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
    hcnn_trace_push(gs->sharded ? "reduce-scatter wait" : "allreduce wait");
    if (gs->mode == HCNN_PROGRESS_THREAD) {
        pthread_mutex_lock(&gs->mu);
        while (gs->completed < gs->nbuckets)
            pthread_cond_wait(&gs->cv, &gs->mu);
        pthread_mutex_unlock(&gs->mu);
    } else if (gs->sharded) {
        test_sharded(gs, 1);
        hcnn_watch_context(NULL);
    } else {
        for (; gs->completed < gs->nbuckets; gs->completed++) {
            hcnn_bucket *b = &gs->buckets[gs->completed];
            hcnn_watch_context("gradient allreduce bucket %d of %d", gs->completed + 1,
                               gs->nbuckets);
            HCNN_MPI(MPI_Wait(&b->req, MPI_STATUS_IGNORE));
            if (!gs->cut)
                bucket_done(gs, gs->completed);
        }
        hcnn_watch_context(NULL);
    }
    if (gs->cut)
        for (int k = 0; k < gs->nbuckets; k++)
            bucket_done(gs, k);
    hcnn_trace_pop();
    gs->wait_s += hcnn_now() - t0;
    gs->steps++;
    return HCNN_OK;
}

int hcnn_grad_sync_finish(hcnn_grad_sync *gs)
{
    return hcnn_comm_point(gs->cut, finish_buckets, gs, 0);
}

/* ---- sharded: the update of this rank's pieces, the all-gathers ---------------------------- */

/* Bucket k of m all-gathered in place: started (req), or blocking. */
static void gather_bucket(hcnn_grad_sync *gs, hcnn_mpi_buf *m, int k, MPI_Request *req)
{
    const hcnn_bucket *b = &gs->buckets[k];
    float *p = hcnn_mpi_send_ptr(m, b->off, b->count);
    if (req)
        HCNN_MPI(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p, piece_counts(gs, k),
                                 piece_displs(gs, k), MPI_FLOAT, gs->comm, req));
    else {
        HCNN_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p, piece_counts(gs, k),
                                piece_displs(gs, k), MPI_FLOAT, gs->comm));
        hcnn_mpi_recv_done(m, b->off, b->count);
    }
}

/* Bucket k's all-gather, the i-th of the step: a communication point.
 * The first layers' bucket first (the next forward needs it first). */
static int start_gather(void *arg, int i)
{
    hcnn_grad_sync *gs = arg;
    const int k = gs->nbuckets - 1 - i;
    if (i == 0) /* a replayed step runs only the points (graphs.c) */
        gs->gathers_started = gs->gathers_completed = 0;
    if (gs->mode == HCNN_PROGRESS_THREAD) /* blocking, in finish_gathers */
        return HCNN_OK;
    hcnn_trace_push("all-gather start");
    gather_bucket(gs, &gs->param_buf, k, &gs->gather_req[k]);
    hcnn_trace_pop();
    gs->gathers_started++;
    return HCNN_OK;
}

static void test_gathers(hcnn_grad_sync *gs)
{
    while (gs->gathers_completed < gs->gathers_started) {
        const int k = gs->nbuckets - 1 - gs->gathers_completed;
        int done = 0;
        HCNN_MPI(MPI_Test(&gs->gather_req[k], &done, MPI_STATUS_IGNORE));
        if (!done)
            return;
        if (!gs->cut)
            hcnn_mpi_recv_done(&gs->param_buf, gs->buckets[k].off, gs->buckets[k].count);
        gs->gathers_completed++;
    }
}

/* All the all-gathers waited for: a communication point. */
static int finish_gathers(void *arg, int unused)
{
    (void)unused;
    hcnn_grad_sync *gs = arg;
    const double t0 = hcnn_now();
    hcnn_trace_push("all-gather wait");
    for (int i = 0; i < gs->nbuckets; i++) {
        const int k = gs->nbuckets - 1 - i;
        const hcnn_bucket *b = &gs->buckets[k];
        hcnn_watch_context("parameter all-gather of bucket %d of %d", i + 1, gs->nbuckets);
        if (gs->mode == HCNN_PROGRESS_THREAD) {
            gather_bucket(gs, &gs->param_buf, k, NULL);
            continue;
        }
        if (i >= gs->gathers_completed) {
            HCNN_MPI(MPI_Wait(&gs->gather_req[k], MPI_STATUS_IGNORE));
            if (!gs->cut)
                hcnn_mpi_recv_done(&gs->param_buf, b->off, b->count);
        }
        if (gs->cut) /* in a cut step, everything comes back here */
            hcnn_mpi_recv_done(&gs->param_buf, b->off, b->count);
    }
    hcnn_watch_context(NULL);
    hcnn_trace_pop();
    gs->gathers_completed = gs->nbuckets;
    gs->wait_s += hcnn_now() - t0;
    return HCNN_OK;
}

int hcnn_grad_sync_step(hcnn_grad_sync *gs, hcnn_sgd *opt, float lr, double *stats)
{
    const hcnn_backend *be = gs->buf.be;
    float *params = gs->param_buf.dev;
    if (stats)
        be->zero(be, stats + HCNN_STAT_WSQ, sizeof(double) * 2);
    for (int i = 0; i < gs->nbuckets; i++) {
        const int k = gs->nbuckets - 1 - i;
        const size_t off = piece_off(gs, k), n = (size_t)piece_count(gs, k, gs->rank);
        if (n)
            be->sgd_step(be, params + off, gs->buf.dev + off, opt->velocity + off, n, lr,
                         opt->momentum, opt->weight_decay, opt->nesterov, stats);
        int rc = hcnn_comm_point(gs->cut, start_gather, gs, i);
        if (rc)
            return rc;
        if (gs->mode == HCNN_PROGRESS_TEST && !gs->cut)
            test_gathers(gs);
    }
    if (gs->gather_in_forward && !gs->cut && gs->mode == HCNN_PROGRESS_TEST) {
        gs->gathers_pending = 1; /* the next forward waits for each (grad_sync.h) */
        return HCNN_OK;
    }
    return hcnn_comm_point(gs->cut, finish_gathers, gs, 0);
}

int hcnn_grad_sync_gathers_ready(void *arg, int block)
{
    hcnn_grad_sync *gs = arg;
    if (!gs->gathers_pending)
        return HCNN_OK;
    const double t0 = hcnn_now();
    hcnn_trace_push("all-gather wait");
    while (gs->gathers_completed < gs->nbuckets) {
        const int k = gs->nbuckets - 1 - gs->gathers_completed;
        const hcnn_bucket *b = &gs->buckets[k];
        if (b->lowest_block > block)
            break;
        hcnn_watch_context("parameter all-gather of bucket %d of %d", gs->gathers_completed + 1,
                           gs->nbuckets);
        HCNN_MPI(MPI_Wait(&gs->gather_req[k], MPI_STATUS_IGNORE));
        hcnn_watch_context(NULL);
        hcnn_mpi_recv_done(&gs->param_buf, b->off, b->count);
        gs->gathers_completed++;
    }
    if (gs->gathers_completed == gs->nbuckets)
        gs->gathers_pending = 0;
    hcnn_trace_pop();
    gs->wait_s += hcnn_now() - t0;
    return HCNN_OK;
}

void hcnn_grad_sync_settle(hcnn_grad_sync *gs)
{
    if (gs)
        hcnn_grad_sync_gathers_ready(gs, INT_MAX);
}

void hcnn_grad_sync_piece_sums(const hcnn_grad_sync *gs, const float *params,
                               const float *momentum, double *stats)
{
    const hcnn_backend *be = gs->buf.be;
    for (int i = 0; i < gs->nbuckets; i++) {
        const int k = gs->nbuckets - 1 - i;
        const size_t off = piece_off(gs, k), n = (size_t)piece_count(gs, k, gs->rank);
        be->sum_sq(be, gs->buf.dev + off, n, stats);
        if (!params)
            continue;
        be->sum_sq(be, params + off, n, stats + (HCNN_STAT_WSQ - HCNN_STAT_SUMSQ));
        be->sum_sq(be, momentum + off, n, stats + (HCNN_STAT_VSQ - HCNN_STAT_SUMSQ));
    }
}

void hcnn_grad_sync_norms(const hcnn_grad_sync *gs, double *sums, int n)
{
    double all[512]; /* 64 ranks of 8 sums without an allocation */
    double *each = n * gs->size <= (int)(sizeof all / sizeof *all)
                       ? all
                       : hcnn_calloc(sizeof(double) * (size_t)n * (size_t)gs->size, "norms");
    if (!each)
        hcnn_fatal_at(__FILE__, __LINE__, "no memory for the ranks' sums of squares");
    hcnn_watch_context("the sums of squares of the sharded optimiser's pieces");
    hcnn_trace_push("sums-of-squares all-gather");
    HCNN_MPI(MPI_Allgather(sums, n, MPI_DOUBLE, each, n, MPI_DOUBLE, gs->comm));
    hcnn_trace_pop();
    hcnn_watch_context(NULL);
    for (int i = 0; i < n; i++) {
        double t = 0.0;
        for (int r = 0; r < gs->size; r++)
            t += each[r * n + i];
        sums[i] = t;
    }
    if (each != all)
        hcnn_free(each);
}

int hcnn_grad_sync_gather_momentum(hcnn_grad_sync *gs, float *momentum)
{
    hcnn_mpi_buf m;
    if (hcnn_mpi_buf_init(&m, gs->buf.be, momentum, gs->param_buf.n, HCNN_MPI_P2P_OR_BLOCKING,
                          "momentum staging for a checkpoint"))
        return HCNN_ENOMEM;
    hcnn_watch_context("the sharded momentum gathered for a checkpoint");
    for (int k = 0; k < gs->nbuckets; k++)
        gather_bucket(gs, &m, k, NULL);
    hcnn_watch_context(NULL);
    hcnn_mpi_buf_free(&m);
    return HCNN_OK;
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
        for (int k = 0; k < gs->nbuckets; k++) {
            allreduce_bucket(gs, k, 0);
            if (gs->sharded) /* the all-gather, into the gradients (not the parameters) */
                gather_bucket(gs, &gs->buf, k, NULL);
        }
        t[r] = hcnn_now() - t0;
    }
    return hcnn_median(t, reps);
}

void hcnn_grad_sync_print(const hcnn_grad_sync *gs, double bucket_mb, double allreduce_s, FILE *out)
{
    const char *alg = getenv(HCNN_IALLREDUCE_ENV); /* as MPI_Init read it */
    const int test = gs->mode == HCNN_PROGRESS_TEST;
    fprintf(out,
            "hcnn: gradient %s: %d bucket%s of <= %g MiB, progress by %s%s%s%s; "
            "blocking %s of all gradients: %.4f s\n",
            gs->sharded ? "reduce-scatter" : "allreduce", gs->nbuckets,
            gs->nbuckets == 1 ? "" : "s", bucket_mb,
            test ? (gs->sharded ? "MPI_Test polling, hcnn's recursive halving"
                                : "MPI_Test polling, MPI_Iallreduce")
                 : (gs->sharded ? "a communication thread, hcnn's recursive halving"
                                : "a communication thread, MPI_Allreduce"),
            test && alg && !gs->sharded ? " with " HCNN_IALLREDUCE_ENV "=" : "",
            test && alg && !gs->sharded ? alg : "",
            gs->team_sum ? "; sums by the OpenMP team outside parallel regions" : "",
            gs->sharded ? "reduce-scatter and all-gather" : "allreduce", allreduce_s);
    if (!gs->sharded)
        return;
    const int holders = gs->rs->pof2, folded = gs->size - holders;
    fprintf(out,
            "hcnn: optimizer_sharding: ranks: %d of the %d ranks each update a piece of every "
            "bucket (%zu parameters on this rank), the parameters all-gathered after (%s)",
            holders, gs->size, gs->shard_n,
            test ? "MPI_Iallgatherv, the first blocks' bucket first"
                 : "MPI_Allgatherv on the compute thread");
    if (folded)
        fprintf(out, "; %d rank%s (odd, below rank %d) add%s %s gradients into the even one "
                     "before and hold%s no piece: %d is not a power of two",
                folded, folded > 1 ? "s" : "", 2 * folded, folded > 1 ? "" : "s",
                folded > 1 ? "their" : "its", folded > 1 ? "" : "s", gs->size);
    fputc('\n', out);
}
