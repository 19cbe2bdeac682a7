/* Training and evaluation drivers. */
#ifndef HCNN_TRAIN_H
#define HCNN_TRAIN_H

#include "hcnn/comm.h"
#include "hcnn/config.h"

/* Checks that depend on the number of ranks (strategy, batch >= ranks,
 * ...).  Identical on every rank; only rank 0 prints.  Returns HCNN_OK or
 * HCNN_EINVAL (then every rank should exit, no abort needed). */
int hcnn_check_layout(const hcnn_config *cfg, const hcnn_comm *comm);

/* Train as configured; rank 0 prints one line per epoch, writes the CSV and
 * the final checkpoint.  Returns HCNN_OK or an error code; an error on
 * one rank must end the job through the abort path (the other ranks may be
 * waiting in a collective). */
typedef struct hcnn_run_opts {
    const char *resume;  /* train: checkpoint file, "latest", "auto" or NULL */
    int profile;         /* print the per-block profile table */
    int warmup, repeats, steps; /* bench: untimed steps, timed repeats of `steps` steps */
    /* the C API's (include/hcnn/hcnn.h, hcnn_train_options): */
    int quiet;           /* train, evaluate, bench: nothing on stdout */
    hcnn_progress_fn progress; /* train: after each step and each epoch (NULL: none) */
    void *progress_arg;
    /* train: set (any thread, a signal handler) to stop as SIGTERM would;
     * a progress callback's non-zero return sets it too (NULL: none) */
    volatile int *stop_request;
    double images_per_s; /* bench: out, the median global rate */
    double test_loss, test_acc; /* evaluate: out */
} hcnn_run_opts;

/* Returns HCNN_STOPPED after SIGTERM/SIGUSR1 (checkpoint written). */
int hcnn_train(const hcnn_config *cfg, const hcnn_comm *comm, const hcnn_run_opts *opts);

/* hcnn train --check: the data sets read and checked against the model,
 * checkpoint_dir and the CSV's directory writable, the checkpoint that
 * `resume` (file, "latest", "auto" or NULL) names found and intact; one
 * "hcnn: check: ok (...)" line, nothing trained.  Serial. */
int hcnn_train_check(const hcnn_config *cfg, const char *resume);

/* Before MPI starts (and in train --check): the file-size limit (ulimit -f)
 * leaves room for MPI's start-up and, when writes_checkpoints and
 * checkpoint_dir is set, for a checkpoint of the model; HCNN_EIO after one
 * message naming the limit, what needs more and how much otherwise. */
int hcnn_check_file_size_limit(const hcnn_config *cfg, int writes_checkpoints);

/* Before MPI starts, on every rank (and in train --check): this machine
 * runs the configured precision on the configured device.  device: cpu,
 * precision: bf16 needs bf16 instructions oneDNN dispatches here
 * (include/hcnn/onednn.h; never emulated) and the CPU backend's bf16 path;
 * HCNN_EINVAL after one line "<config>: precision: bf16: <why>" otherwise.
 * The nodes of a job may differ: each rank checks its own CPU and says so. */
int hcnn_check_precision(const hcnn_config *cfg);

/* hcnn plan's compute input: per-block forward/backward seconds (medians
 * over `steps` timed steps after 2 warm-up steps) of serial training passes
 * of n samples on synthetic data of cfg's model, with cfg->threads threads,
 * in this process; opt_s: the optimiser step.  fwd/bwd have net.nlayers
 * entries; fwd_mem/bwd_mem (NULL: not wanted) the part of each spent
 * outside GEMM layers (hcnn_layer_is_gemm: batch-norm, activations,
 * pooling, a residual block's addition), which the plan prices by bytes. */
int hcnn_block_times(const hcnn_config *cfg, int n, int steps, double *fwd, double *bwd,
                     double *fwd_mem, double *bwd_mem, double *opt_s);

/* Training throughput on synthetic data of the model's input shape: warm-up
 * steps, then timed repeats; rank 0 prints each repeat, the profile and the
 * GEMM share, and last "images_per_s=<median>" (global rate). */
int hcnn_bench(const hcnn_config *cfg, const hcnn_comm *comm, hcnn_run_opts *opts);

/* Evaluate a checkpoint on the configured test set (sharded over ranks);
 * rank 0 prints "test_loss=... test_acc=..." */
int hcnn_evaluate(const hcnn_config *cfg, const hcnn_comm *comm, const char *checkpoint,
                  hcnn_run_opts *opts);

#endif
