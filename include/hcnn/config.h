/* Run configuration: a YAML file (libyaml) plus `--set key=value`
 * overrides.  Every key is validated: unknown keys, wrong types and
 * out-of-range values are errors that name the key and the file.  The
 * model part is include/hcnn/model_spec.h; the reader and writer are
 * src/config/ (tree, overrides, schema, writer). */
#ifndef HCNN_CONFIG_H
#define HCNN_CONFIG_H

#include <stdint.h>

#include "hcnn/model_spec.h"

#define HCNN_PATH_MAX 1024

/* Upper limits of configuration values (docs/config-reference.md): each far
 * above what a real run uses, each low enough that the sizes derived from
 * it (batch x sample, steps per epoch x epochs, MiB in bytes) cannot
 * overflow before they are checked against the model. */
#define HCNN_MAX_THREADS 1024      /* a 2-socket node of 256-core CPUs, with SMT */
#define HCNN_MAX_BATCH (1 << 24)   /* samples per optimiser step or evaluation pass */
#define HCNN_MAX_SAMPLES (1 << 30) /* synthetic set sizes, train_limit, test_limit */
#define HCNN_MAX_EPOCHS (1 << 20)
#define HCNN_MAX_STEPS (1LL << 50) /* max_steps, and a checkpoint's step */
#define HCNN_MAX_MB (1 << 20)      /* bucket_mb, im2col_mb: 1 TiB */

typedef enum hcnn_schedule { HCNN_SCHED_CONSTANT = 0, HCNN_SCHED_STEP, HCNN_SCHED_COSINE } hcnn_schedule;
typedef enum hcnn_strategy_kind { HCNN_STRATEGY_SERIAL = 0, HCNN_STRATEGY_DATA, HCNN_STRATEGY_PIPELINE } hcnn_strategy_kind;
typedef enum hcnn_pipe_schedule { HCNN_PIPE_GPIPE = 0, HCNN_PIPE_1F1B } hcnn_pipe_schedule;
/* How a non-blocking gradient allreduce is driven while backward runs:
 * MPI_Test from the compute thread between layers and GEMM chunks, or a
 * communication thread doing blocking allreduces. */
typedef enum hcnn_allreduce_progress { HCNN_PROGRESS_TEST = 0, HCNN_PROGRESS_THREAD } hcnn_allreduce_progress;
/* Who applies the optimiser step to a parameter: every rank holding it
 * (none), or one of the ranks that hold it, each a slice, the gradients
 * reduce-scattered and the parameters all-gathered (ranks: ZeRO stage 1,
 * src/parallel/grad_sync.c). */
typedef enum hcnn_optimizer_sharding { HCNN_SHARDING_NONE = 0, HCNN_SHARDING_RANKS } hcnn_optimizer_sharding;

/* Background batch assembly: auto = only when a core is left over by the
 * training threads (see src/data/loader.c). */
typedef enum hcnn_prefetch { HCNN_PREFETCH_AUTO = 0, HCNN_PREFETCH_ON, HCNN_PREFETCH_OFF } hcnn_prefetch;

/* A step whose loss or gradients are not finite on some rank (all ranks
 * agree by one small allreduce before the optimiser step): abort with a
 * checkpoint of the last good state, or skip the step everywhere. */
typedef enum hcnn_nonfinite { HCNN_NONFINITE_ABORT = 0, HCNN_NONFINITE_SKIP } hcnn_nonfinite;
/* A checkpoint write that failed (disk full, directory gone): stop the run
 * (the previous checkpoint is intact) or keep training and retry. */
typedef enum hcnn_on_error { HCNN_ON_ERROR_STOP = 0, HCNN_ON_ERROR_CONTINUE } hcnn_on_error;
/* Where the tensor math runs: the CPU backend, or the CUDA one (a build
 * configured --with-cuda; include/hcnn/backend.h). */
typedef enum hcnn_device { HCNN_DEVICE_CPU = 0, HCNN_DEVICE_CUDA } hcnn_device;
/* How MPI reaches device memory: in place when the MPI library reports
 * support for the device at run time (a CUDA-aware MPI), else through
 * pinned host buffers; or always through those buffers. */
typedef enum hcnn_mpi_device_memory {
    HCNN_MPI_DEVICE_MEMORY_AUTO = 0,
    HCNN_MPI_DEVICE_MEMORY_STAGED
} hcnn_mpi_device_memory;

/* CUDA graphs for the training step: where they apply (a device backend
 * that has them, one rank, no dropout, no per-block profile), or never. */
typedef enum hcnn_cuda_graphs {
    HCNN_CUDA_GRAPHS_AUTO = 0,
    HCNN_CUDA_GRAPHS_OFF
} hcnn_cuda_graphs;

typedef struct hcnn_config {
    char path[HCNN_PATH_MAX];      /* the file it was read from */
    hcnn_model_spec model;

    char dataset[HCNN_NAME_MAX];   /* mnist | fashion_mnist | cifar10 | synthetic */
    char data_dir[HCNN_PATH_MAX];  /* relative paths are relative to the working directory */
    int synthetic_train;           /* synthetic data set sizes */
    int synthetic_test;

    int epochs;
    int batch_size;                /* global batch */
    int eval_batch_size;
    double lr;
    double momentum;
    int nesterov;
    double weight_decay;
    hcnn_schedule schedule;
    double warmup_epochs;          /* linear warm-up from 0 (fractional epochs allowed) */
    int lr_step_epochs;            /* step schedule: multiply by lr_gamma every N epochs */
    double lr_gamma;
    double min_lr;                 /* cosine schedule floor */
    hcnn_init init;

    uint64_t seed;
    int threads;                   /* 0: OMP_NUM_THREADS, else all cores */
    hcnn_strategy_kind strategy;   /* serial | data | pipeline */
    double bucket_mb;              /* data: gradient allreduce bucket size (MiB) */
    hcnn_allreduce_progress allreduce_progress;
    hcnn_optimizer_sharding optimizer_sharding; /* data, pipeline replicas: none | ranks */
    int stages;                    /* pipeline: S stages (world size = replicas x S) */
    int microbatches;              /* pipeline: M micro-batches per replica shard */
    hcnn_pipe_schedule pipeline_schedule;
    int npartition;                /* pipeline: explicit first block of each stage (0: auto) */
    int partition[HCNN_MAX_BLOCKS];
    long max_steps;                /* 0: no limit */
    long train_limit;              /* 0: whole set */
    long test_limit;
    int shuffle;
    int augment;                   /* -1: the data set's default */
    char csv[HCNN_PATH_MAX];       /* per-epoch metrics; empty: none */
    char checkpoint_dir[HCNN_PATH_MAX]; /* checkpoints; empty: none */
    int checkpoint_every;          /* epochs between checkpoints (0: only at the end / on signal) */
    int checkpoint_keep;           /* newest checkpoints kept */
    int progress_every;            /* steps between progress lines when not a terminal; 0: auto */
    double im2col_mb;              /* cap on the im2col columns of one GEMM chunk (MiB) */
    hcnn_conv_algo conv_algo;      /* auto | batched | per_thread */
    hcnn_prefetch data_prefetch;   /* auto | on | off */
    char blas_kernels[32];         /* auto | env | an OpenBLAS core name (src/blas/) */
    hcnn_nonfinite nonfinite;
    int nonfinite_max_skips;       /* skip: most steps skipped in a row before aborting */
    hcnn_on_error checkpoint_on_error;
    double stall_timeout_s;        /* a collective or receive waiting longer aborts; 0: off */
    hcnn_device device;            /* cpu | cuda */
    hcnn_precision precision;      /* fp32 | tf32 (device cuda) | bf16 (cuda; cpu: AVX512-BF16/AMX) */
    hcnn_mpi_device_memory mpi_device_memory; /* auto | staged */
    hcnn_cuda_graphs cuda_graphs;             /* auto | off */
} hcnn_config;

/* Defaults for every key (model empty). */
void hcnn_config_defaults(hcnn_config *cfg);

/* Read `path`, apply the `nset` overrides `sets[i]` ("key=value", dotted
 * keys reach into the model, e.g. "model.blocks.0.out=8"), validate.
 * Prints one message naming the key and the file on error. */
int hcnn_config_load(hcnn_config *cfg, const char *path, const char *const *sets, int nset);

/* Write every key (after overrides) as YAML that hcnn_config_load reads
 * back to the same configuration.  Returns HCNN_OK or HCNN_EIO. */
int hcnn_config_write(const hcnn_config *cfg, const char *path);
/* Print the same YAML to a FILE* (stdout at run start). */
void hcnn_config_print(const hcnn_config *cfg, void *file);

const char *hcnn_schedule_name(hcnn_schedule s);
const char *hcnn_init_name(hcnn_init i);
const char *hcnn_strategy_name(hcnn_strategy_kind s);
const char *hcnn_progress_name(hcnn_allreduce_progress p);
const char *hcnn_sharding_name(hcnn_optimizer_sharding s);
const char *hcnn_conv_algo_name(hcnn_conv_algo a);
const char *hcnn_prefetch_name(hcnn_prefetch p);
const char *hcnn_nonfinite_name(hcnn_nonfinite v);
const char *hcnn_on_error_name(hcnn_on_error v);
const char *hcnn_pipe_schedule_name(hcnn_pipe_schedule s);
const char *hcnn_device_name(hcnn_device d);
const char *hcnn_precision_name(hcnn_precision p);
const char *hcnn_mpi_device_memory_name(hcnn_mpi_device_memory m);
const char *hcnn_cuda_graphs_name(hcnn_cuda_graphs g);

#endif
