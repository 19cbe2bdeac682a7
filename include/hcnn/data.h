/* Data sets and batch assembly.
 *
 * A data set is held in memory as uint8 pixels (NCHW per sample) and uint8
 * labels; batches are decoded to normalised float32 NCHW on the fly, with
 * augmentation, by OpenMP threads.  Randomness (shuffling, augmentation) is
 * a pure function of (seed, epoch, sample index), so every rank and every
 * thread count sees the same data order. */
#ifndef HCNN_DATA_H
#define HCNN_DATA_H

#include <pthread.h>
#include <stdint.h>

#include "hcnn/backend.h"
#include "hcnn/config.h"

typedef struct hcnn_dataset {
    char name[HCNN_NAME_MAX];
    char source[HCNN_PATH_MAX];   /* file or directory it came from (messages) */
    int n;                        /* samples */
    int c, h, w;                  /* per-sample shape */
    int classes;
    uint8_t *images;              /* n * c * h * w */
    uint8_t *labels;              /* n */
    float mean[3], std[3];        /* per-channel normalisation of pixel/255 */
    int augment_default;          /* 1 for CIFAR-10 (crop + flip) */
} hcnn_dataset;

/* IDX files (MNIST, Fashion-MNIST), raw or gzip-compressed (detected by
 * content).  Validates magic numbers (0x801 labels, 0x803 images), sizes,
 * image/label count agreement and labels < classes. */
int hcnn_idx_load(hcnn_dataset *ds, const char *images_path, const char *labels_path, int classes);

/* CIFAR-10 binary batches: records of 1 label byte + 3072 pixel bytes.
 * Validates the file size (a whole number of records) and labels < 10. */
int hcnn_cifar10_load(hcnn_dataset *ds, const char *const *files, int nfiles);

/* Seeded synthetic images of the given shape: each class has a random
 * prototype image; a sample is its class prototype plus noise, so the
 * problem is learnable (used to test that training fits). */
int hcnn_synthetic_make(hcnn_dataset *ds, int n, int c, int h, int w, int classes, uint64_t seed);
/* Same for split `split` (0 train, 1 test): the class prototypes depend on
 * the seed only, labels and noise on (seed, split), so the test set comes
 * from the same distribution.  hcnn_synthetic_make is split 0. */
int hcnn_synthetic_make_split(hcnn_dataset *ds, int n, int c, int h, int w, int classes, uint64_t seed,
                              int split);

/* Open the train and test sets named by cfg->dataset in cfg->data_dir
 * (file names: docs/running.md, "Data sets"), apply train_limit/test_limit, and check the
 * shape and class count against cfg->model. */
int hcnn_dataset_open(const hcnn_config *cfg, hcnn_dataset *train, hcnn_dataset *test);

/* What tells two copies of a data set apart, for the ranks of a job that
 * each read their own (a node's copy of data_dir may be incomplete or
 * damaged): its sizes, a CRC32 of all its labels, and one of
 * HCNN_DATA_ID_BLOCKS blocks of up to HCNN_DATA_ID_SAMPLES samples spread
 * evenly over its images (the first and the last included), so that a
 * damaged copy of the right size differs too without reading it all
 * twice.  Plain data: ranks compare it byte for byte. */
#define HCNN_DATA_ID_BLOCKS 16
#define HCNN_DATA_ID_SAMPLES 64
typedef struct hcnn_data_identity {
    int32_t n, c, h, w, classes;
    uint32_t labels_crc, images_crc;
} hcnn_data_identity;
void hcnn_dataset_identity(const hcnn_dataset *ds, hcnn_data_identity *id);

/* Keep only the first `limit` samples (limit <= 0 or >= n: unchanged). */
void hcnn_dataset_limit(hcnn_dataset *ds, long limit);
void hcnn_dataset_free(hcnn_dataset *ds);

/* perm[i] = i, then (if shuffle) a Fisher-Yates shuffle seeded by
 * (seed, epoch).  Identical on every rank. */
void hcnn_epoch_permutation(uint32_t *perm, int n, uint64_t seed, int epoch, int shuffle);

/* Decode samples idx[0..n) into x (float NCHW, normalised) and y.
 * augment: random crop (4-pixel zero padding) + horizontal flip, drawn from
 * (seed, epoch, sample index).  Uses up to nthreads OpenMP threads. */
void hcnn_batch_assemble(const hcnn_dataset *ds, const uint32_t *idx, int n, int augment,
                         uint64_t seed, int epoch, float *x, int32_t *y, int nthreads);

/* ---- double-buffered loader --------------------------------------------
 * Serves the batches of one epoch; while the caller trains on batch b a
 * background thread assembles batch b+1 into the other buffer.
 * With R ranks, batch b (global size nb) is split into R contiguous shards:
 * rank r gets samples [nb*r/R, nb*(r+1)/R) of it. */
typedef struct hcnn_loader {
    const hcnn_backend *be; /* its batches are the backend's host memory (pinned on a GPU) */
    const hcnn_dataset *ds;
    const uint32_t *perm;
    int nsamples;          /* samples in the epoch */
    int batch;             /* global batch size */
    int nbatches;
    int rank, nranks;
    int augment;
    uint64_t seed;
    int epoch;
    int prefetch_threads;  /* threads of the background assembly (0: no background
                              thread; next() assembles each batch itself) */
    int assemble_threads;  /* threads of next()'s own assembly (0: omp_get_max_threads(),
                              which the run has set to its thread count) */

    float *x[2];
    int32_t *y[2];
    int n[2];              /* local samples in buffer */
    int global_n[2];       /* global batch size of that batch */
    int first[2];          /* position in the epoch of the shard's first sample */
    int next_batch;        /* batch index to hand out next */

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready_to_run;      /* init succeeded */
    int thread_started;    /* the background thread runs */
    int ready[2];          /* buffer filled and not yet handed out */
    int want;              /* batch requested and not yet taken, -1 none */
    int want_buf;
    int filling;           /* the worker is filling a buffer */
    int stop;
} hcnn_loader;

/* max_local: capacity of each buffer in samples (>= largest shard). */
/* be: the backend the batches go to (their buffers from its alloc_host:
 * pinned memory on a GPU, which it copies from fastest); NULL: plain host
 * memory. */
int hcnn_loader_init(hcnn_loader *ld, const hcnn_backend *be, const hcnn_dataset *ds, int batch,
                     int rank, int nranks, int augment, uint64_t seed, int prefetch_threads);
/* Begin an epoch over perm[0..nsamples). */
void hcnn_loader_begin_epoch(hcnn_loader *ld, const uint32_t *perm, int nsamples, int epoch);
/* The same, starting at batch first_batch (resuming inside an epoch). */
void hcnn_loader_begin_epoch_at(hcnn_loader *ld, const uint32_t *perm, int nsamples, int epoch,
                                int first_batch);
/* Hand out the next batch: returns 0 when the epoch is over, 1 otherwise.
 * *wait_s gets the time spent waiting for the background thread.  The
 * buffers stay valid until the next call. */
int hcnn_loader_next(hcnn_loader *ld, float **x, int32_t **y, int *n, int *global_n,
                     int *first, double *wait_s);
void hcnn_loader_free(hcnn_loader *ld);
/* The bytes of each of its image and label buffers. */
void hcnn_loader_buffer_bytes(const hcnn_loader *ld, size_t *x_bytes, size_t *y_bytes);
/* The batch just handed out (its images at x) stays the caller's: the
 * loader goes on with fresh_x and fresh_y in its place (as large as its
 * buffers, from hcnn_alloc, or the backend's alloc_host when it has one),
 * and frees those instead.  No copy: the C API's batches (src/api/). */
int hcnn_loader_keep(hcnn_loader *ld, const float *x, float *fresh_x, int32_t *fresh_y);

/* Local shard [lo, hi) of a global batch of nb samples for rank r of R. */
static inline void hcnn_shard(int nb, int r, int R, int *lo, int *hi)
{
    *lo = (int)((long)nb * r / R);
    *hi = (int)((long)nb * (r + 1) / R);
}

#endif
