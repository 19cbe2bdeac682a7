/* Double-buffered loader: while the caller trains on batch b (buffer b%2),
 * one background thread assembles batch b+1 into the other buffer.
 *
 * Protocol (all under ld->mu, one condition variable, broadcast):
 *   - the main thread posts a request by setting want = batch, want_buf;
 *   - the worker takes it (want = -1, filling = 1), fills without the lock,
 *     then sets filling = 0 and ready[buf] = 1;
 *   - if next() finds its batch requested but not yet taken (the worker
 *     has not been scheduled: every core is busy training), it takes the
 *     request back and assembles the batch itself with all threads, rather
 *     than wait for a time slice;
 *   - at most one request is outstanding: next() for batch b waits for
 *     ready[b%2] before posting b+1 into the buffer the caller has just
 *     given back (that of b-1).
 * So "want < 0 && !filling" means "worker idle", which begin_epoch waits for.
 *
 * Synchronous mode (prefetch_threads = 0, no background thread): next()
 * assembles each batch itself with all threads.  When the training threads
 * already occupy every core, a prefetch thread only runs by preempting
 * them (spinning OpenMP threads included), and the step waits for it
 * whenever it was preempted mid-batch: on LeNet-5 at 2 threads on 2 cores
 * that wait was 1.7-1.8% of the step, against 0.9-1.0% for assembling in
 * place. */
#define _POSIX_C_SOURCE 200809L
#include "hcnn/data.h"

#include <limits.h>
#include <omp.h>
#include <string.h>

#include "hcnn/common.h"

/* Fill buffer `buf` with this rank's shard of batch b.  Runs without the
 * lock: the main thread does not touch this buffer or the epoch fields
 * while a request is outstanding. */
static void fill(hcnn_loader *ld, int b, int buf, int nthreads)
{
    int start = b * ld->batch;
    int global_n = ld->nsamples - start < ld->batch ? ld->nsamples - start : ld->batch;
    int lo, hi;
    hcnn_shard(global_n, ld->rank, ld->nranks, &lo, &hi);
    hcnn_batch_assemble(ld->ds, ld->perm + start + lo, hi - lo, ld->augment, ld->seed, ld->epoch, ld->x[buf],
                        ld->y[buf], nthreads);
    ld->n[buf] = hi - lo;
    ld->global_n[buf] = global_n;
    ld->first[buf] = start + lo;
}

/* next()'s own assembly: the run's threads */
static int assemble_threads(const hcnn_loader *ld)
{
    return ld->assemble_threads > 0 ? ld->assemble_threads : omp_get_max_threads();
}

static void *worker(void *arg)
{
    hcnn_loader *ld = arg;
    pthread_mutex_lock(&ld->mu);
    for (;;) {
        while (!ld->stop && ld->want < 0)
            pthread_cond_wait(&ld->cv, &ld->mu);
        if (ld->stop)
            break;
        int b = ld->want, buf = ld->want_buf;
        ld->want = -1;
        ld->filling = 1;
        pthread_mutex_unlock(&ld->mu);
        fill(ld, b, buf, ld->prefetch_threads);
        pthread_mutex_lock(&ld->mu);
        ld->ready[buf] = 1;
        ld->filling = 0;
        pthread_cond_broadcast(&ld->cv);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

/* the batches' memory: the backend's host memory, or plain */
static void *batch_alloc(const hcnn_loader *ld, size_t bytes, const char *what)
{
    return ld->be ? ld->be->alloc_host(ld->be, bytes, what) : hcnn_alloc(bytes, what);
}

static void batch_free(const hcnn_loader *ld, void *p)
{
    if (ld->be)
        ld->be->free_host(ld->be, p);
    else
        hcnn_free(p);
}

static size_t buffer_samples(const hcnn_loader *ld)
{
    /* every shard of a batch of <= batch samples has <= ceil(batch/R) */
    size_t cap = (size_t)(ld->batch / ld->nranks + (ld->batch % ld->nranks != 0));
    return cap ? cap : 1;
}

int hcnn_loader_init(hcnn_loader *ld, const hcnn_backend *be, const hcnn_dataset *ds, int batch,
                     int rank, int nranks, int augment, uint64_t seed, int prefetch_threads)
{
    memset(ld, 0, sizeof *ld);
    ld->be = be;
    if (batch < 1 || nranks < 1 || rank < 0 || rank >= nranks)
        return hcnn_error_code(HCNN_EINVAL, "loader: batch %d, rank %d of %d (expected batch >= 1, 0 <= rank < ranks)",
                               batch, rank, nranks);
    ld->ds = ds;
    ld->batch = batch;
    ld->rank = rank;
    ld->nranks = nranks;
    ld->augment = augment;
    ld->seed = seed;
    ld->prefetch_threads = prefetch_threads > 0 ? prefetch_threads : 0;
    ld->want = -1;

    size_t cap = buffer_samples(ld);
    size_t chw = (size_t)ds->c * ds->h * ds->w;
    if (chw != 0 && cap > SIZE_MAX / sizeof(float) / chw)
        return hcnn_error_code(HCNN_EINVAL, "loader: batch %d of %zu values per sample is too large", batch, chw);
    int code = HCNN_ENOMEM; /* hcnn_alloc has printed the message */
    for (int i = 0; i < 2; i++) {
        ld->x[i] = batch_alloc(ld, cap * chw * sizeof(float), "loader batch");
        ld->y[i] = batch_alloc(ld, cap * sizeof(int32_t), "loader labels");
        if (!ld->x[i] || !ld->y[i])
            goto fail;
    }
    code = HCNN_EINVAL;
    if (pthread_mutex_init(&ld->mu, NULL) != 0) {
        hcnn_error("loader: cannot create a mutex");
        goto fail;
    }
    if (pthread_cond_init(&ld->cv, NULL) != 0) {
        hcnn_error("loader: cannot create a condition variable");
        goto fail_mutex;
    }
    if (ld->prefetch_threads > 0) {
        if (pthread_create(&ld->thread, NULL, worker, ld) != 0) {
            hcnn_error("loader: cannot start the background thread");
            pthread_cond_destroy(&ld->cv);
            goto fail_mutex;
        }
        ld->thread_started = 1;
    }
    ld->ready_to_run = 1;
    return HCNN_OK;

fail_mutex:
    pthread_mutex_destroy(&ld->mu);
fail:
    for (int i = 0; i < 2; i++) {
        batch_free(ld, ld->x[i]);
        batch_free(ld, ld->y[i]);
    }
    memset(ld, 0, sizeof *ld);
    return code;
}

void hcnn_loader_begin_epoch(hcnn_loader *ld, const uint32_t *perm, int nsamples, int epoch)
{
    hcnn_loader_begin_epoch_at(ld, perm, nsamples, epoch, 0);
}

void hcnn_loader_begin_epoch_at(hcnn_loader *ld, const uint32_t *perm, int nsamples, int epoch,
                                int first_batch)
{
    if (!ld->ready_to_run) /* init failed: next() will report no batches */
        return;
    pthread_mutex_lock(&ld->mu);
    /* a request of an abandoned epoch may still be running or pending */
    ld->want = -1;
    while (ld->filling)
        pthread_cond_wait(&ld->cv, &ld->mu);
    ld->perm = perm;
    ld->nsamples = nsamples > 0 ? nsamples : 0;
    ld->epoch = epoch;
    ld->nbatches = (int)(((long)ld->nsamples + ld->batch - 1) / ld->batch);
    ld->next_batch = first_batch > 0 ? first_batch : 0;
    ld->ready[0] = ld->ready[1] = 0;
    if (ld->thread_started && ld->next_batch < ld->nbatches) {
        ld->want = ld->next_batch;
        ld->want_buf = ld->next_batch & 1;
        pthread_cond_broadcast(&ld->cv);
    }
    pthread_mutex_unlock(&ld->mu);
}

int hcnn_loader_next(hcnn_loader *ld, float **x, int32_t **y, int *n, int *global_n, int *first, double *wait_s)
{
    if (wait_s)
        *wait_s = 0.0;
    if (!ld->ready_to_run || ld->next_batch >= ld->nbatches)
        return 0;
    int b = ld->next_batch++, buf = b & 1;
    double t0 = hcnn_now();
    if (!ld->thread_started) {
        fill(ld, b, buf, assemble_threads(ld));
    } else {
        pthread_mutex_lock(&ld->mu);
        if (!ld->ready[buf] && ld->want == b) { /* not taken yet: assemble it here */
            ld->want = -1;
            pthread_mutex_unlock(&ld->mu);
            fill(ld, b, buf, assemble_threads(ld));
            pthread_mutex_lock(&ld->mu);
            ld->ready[buf] = 1;
        }
        while (!ld->ready[buf])
            pthread_cond_wait(&ld->cv, &ld->mu);
        ld->ready[buf] = 0;
        if (b + 1 < ld->nbatches) { /* prefetch into the buffer handed out last time */
            ld->want = b + 1;
            ld->want_buf = buf ^ 1;
            pthread_cond_broadcast(&ld->cv);
        }
        pthread_mutex_unlock(&ld->mu);
    }
    /* buffer buf is the caller's now: the worker fills only the other one */
    *x = ld->x[buf];
    *y = ld->y[buf];
    *n = ld->n[buf];
    *global_n = ld->global_n[buf];
    *first = ld->first[buf];
    if (wait_s)
        *wait_s = hcnn_now() - t0;
    return 1;
}


void hcnn_loader_buffer_bytes(const hcnn_loader *ld, size_t *x_bytes, size_t *y_bytes)
{
    *x_bytes = buffer_samples(ld) * ld->ds->c * ld->ds->h * ld->ds->w * sizeof(float);
    *y_bytes = buffer_samples(ld) * sizeof(int32_t);
}

int hcnn_loader_keep(hcnn_loader *ld, const float *x, float *fresh_x, int32_t *fresh_y)
{
    pthread_mutex_lock(&ld->mu);
    int buf = ld->x[0] == x ? 0 : ld->x[1] == x ? 1 : -1;
    if (buf >= 0) { /* the worker fills only the other buffer (hcnn_loader_next) */
        ld->x[buf] = fresh_x;
        ld->y[buf] = fresh_y;
    }
    pthread_mutex_unlock(&ld->mu);
    return buf >= 0 ? HCNN_OK : hcnn_error("loader: %p is not the batch handed out last", (const void *)x);
}

void hcnn_loader_free(hcnn_loader *ld)
{
    if (ld->thread_started) {
        pthread_mutex_lock(&ld->mu);
        ld->stop = 1;
        pthread_cond_broadcast(&ld->cv);
        pthread_mutex_unlock(&ld->mu);
        pthread_join(ld->thread, NULL);
    }
    if (ld->ready_to_run) {
        pthread_cond_destroy(&ld->cv);
        pthread_mutex_destroy(&ld->mu);
    }
    for (int i = 0; i < 2; i++) {
        batch_free(ld, ld->x[i]);
        batch_free(ld, ld->y[i]);
    }
    memset(ld, 0, sizeof *ld);
}
