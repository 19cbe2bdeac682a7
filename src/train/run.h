/* Inside the trainer (src/train/): what a run owns, one struct passed down,
 * and the functions its files share.
 *   run.c      set-up and release, evaluation, the replicas' agreement, the
 *              per-block profile (train.c: what a training run adds)
 *   train.c    the epoch loop: batches, steps, the optimiser, signals
 *   report.c   the run header, progress, epoch lines and CSV metrics
 *   resume.c   checkpoints written and resumed
 *   check.c    the checks before a run (train --check, before MPI, the layout)
 *   bench.c    hcnn bench and hcnn plan's block times
 * How the ranks share a step is the strategy's (include/hcnn/strategy.h). */
#ifndef HCNN_TRAIN_RUN_H
#define HCNN_TRAIN_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "hcnn/ckpt_dir.h"
#include "hcnn/ckpt_lock.h"
#include "hcnn/ckpt_writer.h"
#include "hcnn/data.h"
#include "hcnn/net.h"
#include "hcnn/optim.h"
#include "hcnn/profile.h"
#include "hcnn/strategy.h"
#include "hcnn/train.h"

/* CUDA graphs of the training step (graphs.c): the work of the step up to
 * its results' read-back (segment 0) and the optimiser's (segment 1), each
 * recorded the second time its key is seen and replayed after: one key per
 * loader buffer and batch shape, and for the optimiser one (a backend with
 * sgd_replay_lr) or one per learning rate.  Over several ranks segment 0
 * is cut at its communication points (comm.h): its program is the graphs
 * between them and the host functions run at each. */
#define HCNN_GRAPH_PROGRAMS 8
#define HCNN_GRAPH_PIECES 128 /* graphs of one program at most */

typedef struct step_graph {
    int segment;              /* 0: forward and backward, 1: optimiser */
    const void *x, *y;        /* segment 0: the loader's buffers it uploads from */
    int n, gn;
    float lr;                 /* segment 1, when the backend has no sgd_replay_lr */
    int state;                /* 0: free, 1: seen (run directly), 2: captured,
                                 3: run directly always (too many pieces) */
    long last_use;
    int npieces;              /* graphs: communication points + 1 */
    int slot[HCNN_GRAPH_PIECES];           /* piece k's backend graph slot */
    hcnn_comm_fn fn[HCNN_GRAPH_PIECES];    /* run after piece k (NULL: none) */
    void *fn_arg[HCNN_GRAPH_PIECES];
    int fn_i[HCNN_GRAPH_PIECES];
} step_graph;

typedef struct step_graphs {
    hcnn_comm_cut cut;        /* first: the strategy's communication points */
    const hcnn_backend *be;
    int on;                   /* 1: used where the step allows (graphs_why) */
    int step_on;              /* 1: segment 0 too (else the optimiser only) */
    char why[224];            /* why on or off, for the run header */
    step_graph prog[HCNN_GRAPH_PROGRAMS];
    signed char slot_owner[HCNN_GRAPH_SLOTS]; /* program holding a slot, -1: free */
    step_graph *recording;    /* the program being counted or captured */
    int capturing;            /* recording: 1 capture, 0 count its points */
    int open;                 /* a capture is under way */
    int failed_unrun;         /* the capture failed at its first point: nothing ran */
    int pieces;               /* pieces captured so far */
    long uses, captures, replays; /* programs */
    long graphs;              /* graphs captured (pieces of the programs) */
} step_graphs;

/* The state before the last update, kept when that update could change
 * the parameters by more than half their norm (train.c, keep_decide): a
 * non-finite step then stops the run with the last state whose loss was
 * finite, not the one the exploding update left. */
typedef struct kept_state {
    float *params, *velocity, *state; /* backend memory: this rank's blocks, all statistics */
    int valid;                  /* the last update applied was kept */
    long step;                  /* the step whose update it precedes */
    int epoch, batch;           /* that step's position */
    double loss_sum, correct, seen, trained; /* the epoch's sums before it */
    int have_norms;             /* stats[WSQ], [VSQ] hold the parameters' and momentum's */
} kept_state;

typedef struct hcnn_run {
    const hcnn_config *cfg;
    const hcnn_comm *comm;
    const hcnn_backend *be;
    hcnn_backend *own_be;     /* the instance this run made (be) */
    double *stats;            /* the step's statistics, backend memory (HCNN_STAT_*) */
    int threads;
    char threads_how[96];     /* where the count came from (hcnn_threads_resolve) */
    int reserved_core;        /* one of the threads asked for runs the allreduce (run.c) */
    hcnn_dataset train, test;
    hcnn_net net;
    hcnn_strategy strat;
    int strat_ready;
    hcnn_sgd opt;
    hcnn_loader loader;
    int loader_ready;
    uint32_t *perm;
    FILE *csv;
    int csv_failed;          /* a metrics row could not be written: the run stops (report.c) */
    int grads_zero;          /* the last optimiser step left the gradients zero (train.c) */
    kept_state kept;         /* training only (train.c) */
    int tty;
    const hcnn_run_opts *opts; /* train: the caller's (quiet, progress, stop request); NULL: none */
    int quiet;                 /* train: nothing on stdout (report.c) */
    FILE *trace_batches;       /* HCNN_TRACE_BATCHES (include/hcnn/env.h), NULL: off */
    long step;               /* optimiser steps taken */
    int bn_state_agreed;     /* every replica holds the same batch-norm statistics (loaded, or
                              * averaged since the last step): averaging again would change
                              * them (x+x+x)/3 != x */
    long fail_rank, fail_step; /* HCNN_FAIL_AT test hook, -1: none */
    int fail_collective;       /* ... a stray barrier instead of a non-finite loss */
    hcnn_ckpt_lock lock;      /* rank 0: checkpoint_dir is this run's (include/hcnn/ckpt_lock.h) */
    hcnn_ckpt_writer writer;  /* rank 0, when checkpoint_dir is set (from before the first step) */
    int writer_ready;
    char run_id[HCNN_RUN_ID_MAX];     /* this run's line of checkpoints (also the CSV's run_id) */
    char parent_run[HCNN_RUN_ID_MAX]; /* the line it branched from, "" if none */
    long parent_step;
    int tagged;               /* its checkpoint names carry its tag */
    char ckpt_note[2 * HCNN_FILE_PATH_MAX + 1024]; /* the run header's line on checkpoints */
    char mpi_note[512];       /* device memory: how MPI reaches it, and why (the run header) */
    int stop_signal;          /* SIGTERM/SIGUSR1 received (agreed by all ranks) */
    int stop_error;           /* all ranks agreed to stop on this error (HCNN_ENUMERIC:
                                 non-finite step, HCNN_EIO: checkpoint write failed) */
    float *state_before;      /* batch-norm statistics before the step (backend memory):
                                 restored when the step is dropped */
    int skips_in_row;         /* non-finite steps skipped in a row */
    hcnn_profile prof;        /* --profile and bench */
    int profiling;
    step_graphs graphs;       /* CUDA graphs of the step (graphs.c) */
} hcnn_run;

typedef struct epoch_stats {
    double loss_sum, correct, seen;  /* summed over ranks at the end of the epoch */
    double trained;                  /* samples trained by this process run (throughput) */
    double train_s, data_wait_s, comm_wait_s, compute_s, bubble_s, eval_s;
    /* min / mean / max over ranks of compute, comm wait, data wait, bubble */
    double lo[4], mean[4], hi[4];
    double peak_rss_mb;
    double test_loss, test_acc;
    double lr;
    long steps;
} epoch_stats;

static inline int run_is_root(const hcnn_run *r) { return r->comm->rank == 0; }

/* graphs.c */
/* Whether the step's work can be captured (cuda_graphs, the backend, the
 * strategy's communication points, no dropout): r->graphs.on, .step_on
 * and .why; over ranks, gives the strategy its cut (r->strat.cut). */
void hcnn_graphs_setup(hcnn_run *r);
/* Runs seg(r, arg) as segment `segment` of key (x, y, n, gn, lr): directly
 * the first time the key is seen or when graphs are off or a profile is
 * taken, captured and launched the second time, replayed after.  seg only
 * queues work (nothing in it waits for the device) and must give the same
 * work for the same key.  Returns seg's result (captured: its result
 * during the capture). */
int hcnn_graphs_run(hcnn_run *r, int segment, const void *x, const void *y, int n, int gn, float lr,
                    int (*seg)(hcnn_run *r, void *arg), void *arg);

/* run.c */
/* Backend, data sets, model, strategy (for training when need_train); on
 * error hcnn_run_free releases what was set up.  A run that trains then calls
 * hcnn_train_prepare (train.c). */
int hcnn_run_setup(hcnn_run *r, const hcnn_config *cfg, const hcnn_comm *comm, int need_train);
void hcnn_run_free(hcnn_run *r);
/* Batch-norm running statistics averaged over the replicas (each saw its
 * own shard); collective. */
int hcnn_run_average_bn_state(hcnn_run *r);
/* Loss and accuracy on the test set, in inference mode, sharded over the
 * replicas; collective. */
int hcnn_run_evaluate(hcnn_run *r, double *loss, double *acc);
/* Every replica holds the same parameters and statistics; collective. */
int hcnn_run_check_replicas(hcnn_run *r);

/* report.c */
void hcnn_report_header(const hcnn_run *r);
void hcnn_report_compute_setup(const hcnn_run *r);
void hcnn_report_progress(const hcnn_run *r, int epoch, int batch, int nbatches,
                          const epoch_stats *st, double t0, double *last_print);
int hcnn_report_csv_open(hcnn_run *r, int append);
/* The csv, if it exists, is a regular file or a link to one (also train --check). */
int hcnn_report_csv_check(const hcnn_config *cfg);
/* Sums over ranks of the epoch's counts, min / mean / max of its times */
int hcnn_report_reduce_epoch(hcnn_run *r, epoch_stats *st);
/* The epoch's line and csv row (rank 0), then whether the row was written
 * agreed by every rank (collective): a failed write (a full disk) sets
 * r->csv_failed on every rank after one message, and the run stops with a
 * checkpoint and exit status 1. */
int hcnn_report_epoch(hcnn_run *r, int epoch, const epoch_stats *st);
/* The caller's progress callback (hcnn_run_opts), on every rank: after a
 * step (the running figures of this rank's shard), after an epoch's line
 * (its figures, global); a non-zero return is a stop request. */
void hcnn_report_step_to_caller(hcnn_run *r, int epoch, int batch, int nbatches,
                                const epoch_stats *st, double t0);
void hcnn_report_epoch_to_caller(hcnn_run *r, int epoch, int nbatches, const epoch_stats *st);

/* resume.c */
/* A checkpoint of the current state (collective; rank 0 writes it in the
 * background; wait: until it is on disk). */
int hcnn_run_save_checkpoint(hcnn_run *r, long epochs_done, long batch, const epoch_stats *st,
                             int final, int wait);
/* Appends rank to a message's list of ranks ("1, 2, 5"): the first 16,
 * then ", ..."; *listed counts the ranks given so far. */
void hcnn_run_list_rank(char *list, size_t cap, int *listed, int rank);
/* Before the first step (collective): rank 0 takes checkpoint_dir
 * (created, writable, locked), the checkpoint `resume` names (a file,
 * "latest" or "auto"; NULL: none) is found and loaded on every rank
 * (*resumed = 0 when "auto" found none: a new run), and rank 0 opens the
 * line the run writes and the checkpoint writer. */
int hcnn_run_open_checkpoints(hcnn_run *r, const char *resume, hcnn_ckpt_meta *meta, int *resumed);
/* Rank 0, before training: checkpoint_dir created and writable. */
int hcnn_run_check_checkpoint_dir(const hcnn_config *cfg);
/* train --check (check.c): the checkpoint `resume` names (a file, "latest"
 * or "auto") for this configuration's model and train_samples, found as
 * hcnn_run_open_checkpoints finds it, read whole and checked to be this run's:
 * its path in path ("" when "auto" found none) and its META in meta. */
int hcnn_check_resume(const hcnn_config *cfg, const char *resume, long train_samples,
                      char *path, size_t cap, hcnn_ckpt_meta *meta);

/* run.c: the per-block profile */
int hcnn_run_profile_enable(hcnn_run *r);
void hcnn_run_profile_pause(hcnn_run *r);
void hcnn_run_profile_resume(hcnn_run *r);
/* One sample of rank 0's raw-GEMM reference (between timed repeats). */
void hcnn_run_profile_sample_reference(hcnn_run *r);
/* Rank 0's table; returns the GEMM share of the step. */
double hcnn_run_profile_print(hcnn_run *r);

/* train.c */
/* After hcnn_run_setup(need_train 1): the optimiser, the step's agreement (data
 * parallel on several ranks: on the first gradient bucket, grad_sync.h,
 * instead of an allreduce of its own), CUDA graphs (hcnn_graphs_setup), the
 * epoch permutation and the loader; on error hcnn_run_free releases them. */
int hcnn_train_prepare(hcnn_run *r);
/* Take the next batch of the epoch and train on it: 1 after a step, 0 at
 * the end of the epoch, -code on error. */
int hcnn_train_next_step(hcnn_run *r, int epoch, long steps_per_epoch, epoch_stats *st);

#endif
