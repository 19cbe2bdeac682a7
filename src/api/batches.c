/* The data loader of a configuration for one rank of N, batch by batch
 * (include/hcnn/hcnn.h): the loader `hcnn train` uses (src/data/loader.c,
 * its OpenMP assembly and background prefetch), with the permutation and
 * augmentation of the epoch asked for.  A batch handed out is the caller's
 * until released: the loader goes on with other buffers (no copy), taken
 * from the batches the caller gave back. */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/data.h"
#include "hcnn/threads.h"
#include "api.h"

/* a batch and its buffers; on the free list when given back */
typedef struct kept_batch {
    hcnn_batch pub; /* first: hcnn_batch_release gets its address */
    float *x;
    int32_t *y;
    struct hcnn_batches *owner;
    struct kept_batch *next_free;
} kept_batch;

struct hcnn_batches {
    const hcnn_config *cfg; /* the session's, which outlives its loaders */
    int train_split;
    hcnn_dataset train, test;
    const hcnn_dataset *ds;
    uint32_t *perm;
    hcnn_loader loader;
    size_t x_bytes, y_bytes;
    int index;             /* of the next batch */
    pthread_mutex_t mu;    /* the fields below: a batch may be released on any thread */
    kept_batch *free_list;
    int out;               /* batches handed out and not released */
    int closed;
};

static void batches_destroy(hcnn_batches *b)
{
    for (kept_batch *k = b->free_list, *next; k; k = next) {
        next = k->next_free;
        hcnn_free(k->x), hcnn_free(k->y), free(k);
    }
    pthread_mutex_destroy(&b->mu);
    free(b);
}

static int batches_open_call(const hcnn_session *s, int split, int rank, int world, int epoch,
                             hcnn_batches **out)
{
    if (!out)
        return hcnn_error("hcnn_batches_open: out is NULL");
    *out = NULL;
    if (!s)
        return hcnn_error("hcnn_batches_open: the session is NULL");
    if (split != HCNN_SPLIT_TRAIN && split != HCNN_SPLIT_TEST)
        return hcnn_error("split %d (expected %d, train, or %d, test)", split,
                                  HCNN_SPLIT_TRAIN, HCNN_SPLIT_TEST);
    if (world < 1)
        return hcnn_error("world %d (expected >= 1 ranks)", world);
    if (rank < 0 || rank >= world)
        return hcnn_error("rank %d (expected 0 <= rank < world = %d)", rank, world);
    const hcnn_config *cfg = s->cfg;
    if (epoch < 0 || epoch >= cfg->epochs)
        return hcnn_error("epoch %d (expected 0 <= epoch < %d, the epochs of %s)", epoch,
                                  cfg->epochs, cfg->path);
    if (world > cfg->batch_size)
        return hcnn_error("world %d is larger than batch_size %d of %s (each rank needs "
                                  "a sample of every batch)",
                                  world, cfg->batch_size, cfg->path);
    hcnn_batches *b = calloc(1, sizeof *b);
    if (!b)
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate a loader");
    pthread_mutex_init(&b->mu, NULL);
    int rc = hcnn_dataset_open(cfg, &b->train, &b->test);
    if (rc) {
        batches_destroy(b);
        return rc;
    }
    const int train = split == HCNN_SPLIT_TRAIN;
    b->ds = train ? &b->train : &b->test;
    b->cfg = cfg, b->train_split = train;
    /* as hcnn_train_prepare sets up its loader (src/train/train.c), with
     * the run's thread count (threads, OMP_NUM_THREADS, the cores), not the
     * calling thread's OpenMP setting: importing torch sets that to 1 */
    int threads = 1;
    const int augment = !train ? 0 : cfg->augment >= 0 ? cfg->augment : b->train.augment_default;
    rc = hcnn_threads_resolve(cfg, &threads, NULL, 0);
    const int prefetch =
        cfg->data_prefetch == HCNN_PREFETCH_ON ||
        (cfg->data_prefetch == HCNN_PREFETCH_AUTO && threads < omp_get_num_procs());
    if (!rc && !(b->perm = hcnn_alloc(sizeof *b->perm * (size_t)(b->ds->n ? b->ds->n : 1),
                                      "epoch permutation")))
        rc = HCNN_ENOMEM;
    if (!rc)
        rc = hcnn_loader_init(&b->loader, NULL, b->ds, cfg->batch_size, rank, world, augment,
                              cfg->seed, prefetch ? 1 : 0);
    if (rc) {
        hcnn_free(b->perm);
        hcnn_dataset_free(&b->train), hcnn_dataset_free(&b->test);
        batches_destroy(b);
        return rc;
    }
    b->loader.assemble_threads = threads;
    hcnn_batches_restart(b, epoch);
    hcnn_loader_buffer_bytes(&b->loader, &b->x_bytes, &b->y_bytes);
    *out = b;
    return HCNN_OK;
}

int hcnn_batches_open(const hcnn_session *s, int split, int rank, int world, int epoch,
                      hcnn_batches **out)
{
    API_BEGIN((void)0);
    return API_END(batches_open_call(s, split, rank, world, epoch, out));
}

static int batches_restart_call(hcnn_batches *b, int epoch)
{
    if (!b)
        return hcnn_error("hcnn_batches_restart: the loader is NULL");
    if (epoch < 0 || epoch >= b->cfg->epochs)
        return hcnn_error("epoch %d (expected 0 <= epoch < %d, the epochs of %s)", epoch,
                                  b->cfg->epochs, b->cfg->path);
    hcnn_epoch_permutation(b->perm, b->ds->n, b->cfg->seed, epoch,
                           b->train_split && b->cfg->shuffle);
    hcnn_loader_begin_epoch(&b->loader, b->perm, b->ds->n, epoch);
    b->index = 0;
    return HCNN_OK;
}

int hcnn_batches_restart(hcnn_batches *b, int epoch)
{
    API_BEGIN((void)0);
    return API_END(batches_restart_call(b, epoch));
}

int hcnn_batches_count(const hcnn_batches *b) { return b ? b->loader.nbatches : 0; }

void hcnn_batches_shape(const hcnn_batches *b, int *c, int *h, int *w)
{
    *c = b ? b->ds->c : 0, *h = b ? b->ds->h : 0, *w = b ? b->ds->w : 0;
}

/* a free batch to give the loader in place of the one handed out */
static kept_batch *spare(hcnn_batches *b)
{
    pthread_mutex_lock(&b->mu);
    kept_batch *k = b->free_list;
    if (k)
        b->free_list = k->next_free;
    pthread_mutex_unlock(&b->mu);
    if (k)
        return k;
    k = calloc(1, sizeof *k);
    if (k && (!(k->x = hcnn_alloc(b->x_bytes, "a batch")) ||
              !(k->y = hcnn_alloc(b->y_bytes, "a batch's labels")))) {
        hcnn_free(k->x), free(k);
        return NULL;
    }
    if (!k)
        hcnn_error_code(HCNN_ENOMEM, "cannot allocate a batch");
    return k;
}

static int batches_next_call(hcnn_batches *b, hcnn_batch **out)
{
    if (!b || !out)
        return hcnn_error("hcnn_batches_next: %s is NULL", b ? "out" : "the loader");
    *out = NULL;
    kept_batch *k = spare(b);
    if (!k)
        return HCNN_ENOMEM;
    float *x;
    int32_t *y;
    int n, gn, first;
    if (!hcnn_loader_next(&b->loader, &x, &y, &n, &gn, &first, NULL)) {
        pthread_mutex_lock(&b->mu); /* the epoch is over: back to the free list */
        k->next_free = b->free_list, b->free_list = k;
        pthread_mutex_unlock(&b->mu);
        return HCNN_OK;
    }
    int rc = hcnn_loader_keep(&b->loader, x, k->x, k->y);
    if (rc)
        return rc;
    /* k now holds the batch handed out; the loader the spare buffers */
    k->x = x, k->y = y, k->owner = b, k->next_free = NULL;
    k->pub = (hcnn_batch){.images = x, .labels = y, .n = n, .c = b->ds->c, .h = b->ds->h,
                          .w = b->ds->w, .index = b->index++, .global_n = gn, .first = first};
    pthread_mutex_lock(&b->mu);
    b->out++;
    pthread_mutex_unlock(&b->mu);
    *out = &k->pub;
    return HCNN_OK;
}

int hcnn_batches_next(hcnn_batches *b, hcnn_batch **out)
{
    API_BEGIN((void)0);
    return API_END(batches_next_call(b, out));
}

void hcnn_batch_release(hcnn_batch *batch)
{
    if (!batch)
        return;
    kept_batch *k = (kept_batch *)batch;
    hcnn_batches *b = k->owner;
    pthread_mutex_lock(&b->mu);
    k->next_free = b->free_list, b->free_list = k;
    const int last = --b->out == 0 && b->closed;
    pthread_mutex_unlock(&b->mu);
    if (last)
        batches_destroy(b);
}

void hcnn_batches_close(hcnn_batches *b)
{
    if (!b)
        return;
    hcnn_loader_free(&b->loader);
    hcnn_free(b->perm);
    hcnn_dataset_free(&b->train), hcnn_dataset_free(&b->test);
    pthread_mutex_lock(&b->mu);
    b->closed = 1;
    const int last = b->out == 0;
    pthread_mutex_unlock(&b->mu);
    if (last)
        batches_destroy(b);
}
