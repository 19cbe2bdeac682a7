/* Strategies: how the ranks of a job share a training step.
 *
 * The trainer (src/train/) keeps the epoch loop: batches, the optimiser,
 * evaluation, checkpoints, metrics.  Through this table it asks the
 * strategy for each step's gradients, for inference on evaluation batches,
 * for the whole model on rank 0 before a checkpoint, and for the lines it
 * adds to the run's output; it never branches on which strategy runs.
 *   serial, data   src/parallel/data.c: every rank a full replica and a
 *                  shard of each global batch, gradients summed by the
 *                  bucketed, overlapped allreduce (grad_sync.c); one rank
 *                  is the serial case of the same code
 *   pipeline       src/parallel/pipeline*.c: the blocks split over stages,
 *                  micro-batches through them (GPipe or 1F1B), replicas of
 *                  a stage summed by the same allreduce
 * Either way a step is a serial step on the global batch: the loss
 * gradient is scaled by 1 / global batch and summed over the replicas.
 *
 * Adding a strategy: a file with an hcnn_strategy_ops, a value of the
 * config key `strategy` (src/config/schema.c) and its line in
 * hcnn_strategy_ops_for (src/parallel/strategy.c). */
#ifndef HCNN_STRATEGY_H
#define HCNN_STRATEGY_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "hcnn/comm.h"
#include "hcnn/config.h"
#include "hcnn/grad_sync.h"
#include "hcnn/net.h"

typedef struct hcnn_strategy hcnn_strategy;

typedef struct hcnn_strategy_ops {
    const char *name;
    /* Layout checks that need only the configuration and the world size:
     * identical on every rank, only rank 0 prints; HCNN_OK or HCNN_EINVAL. */
    int (*check)(const hcnn_config *cfg, const hcnn_comm *comm);
    /* This rank's blocks, shard, buffers and communicators (the common
     * fields below); need_train: also what training needs (gradient
     * buffers, the allreduce and its calibration). */
    int (*init)(hcnn_strategy *s, int need_train);
    /* One step's gradients on this rank's shard x, y (backend memory; n of
     * a global batch of gn samples), summed over the replicas into
     * net->grads of this rank's blocks.  The loss and correct predictions
     * of the samples whose loss this rank computed (counts_loss) are added
     * to stats[HCNN_STAT_LOSS], stats[HCNN_STAT_CORRECT] (backend memory:
     * the trainer reads them back once per step). */
    int (*step)(hcnn_strategy *s, const float *x, const int32_t *y, int n, int gn,
                double *stats);
    /* The same sums for n samples in inference mode. */
    int (*infer)(hcnn_strategy *s, const float *x, const int32_t *y, int n, double *stats);
    /* The whole model (parameters, statistics, momentum) on world rank 0;
     * collective. */
    int (*gather)(hcnn_strategy *s, float *momentum);
    /* Rank 0's lines in the run header. */
    void (*report_header)(const hcnn_strategy *s, FILE *out);
    /* After an epoch that took this rank epoch_s seconds (collective; rank 0 prints). */
    int (*report_epoch)(hcnn_strategy *s, double epoch_s, FILE *out);
    void (*free)(hcnn_strategy *s);
} hcnn_strategy_ops;

struct hcnn_strategy {
    const hcnn_strategy_ops *ops;
    const hcnn_config *cfg;
    const hcnn_comm *comm;
    hcnn_net *net;
    hcnn_scratch scratch;        /* the passes' workspace; its ctx is the step's context */
    int first, last;             /* blocks this rank computes and updates */
    int group, ngroups;          /* the data shard: replica index and count */
    MPI_Comm replicas;           /* ranks holding the same blocks */
    int eval_batch;              /* samples per evaluation batch */
    int pass_samples, passes;    /* the profile: samples per pass, passes per step */
    int counts_loss;             /* this rank computes the loss of its samples */
    hcnn_grad_sync *sync;        /* the gradient allreduce (NULL: none) */
    /* 1: the step's every MPI call goes through hcnn_comm_point on cut
     * (comm.h), so the trainer may capture the step in CUDA graphs on
     * several ranks; 0: only on one rank */
    int cuts_at_comm;
    hcnn_comm_cut *cut;          /* set by the trainer (NULL: none), read at each step */
    double allreduce_s;          /* its calibrated blocking time */
    double bubble_s;             /* waiting for neighbour stages, since the last report */
    /* the batch in backend memory (NULL when that is host memory) */
    float *x_dev;
    int32_t *y_dev;
    void *impl;
};

/* The strategy the configuration names (serial and data share one). */
const hcnn_strategy_ops *hcnn_strategy_ops_for(hcnn_strategy_kind kind);

/* Every layout check (identical on every rank, rank 0 prints). */
int hcnn_strategy_check(const hcnn_config *cfg, const hcnn_comm *comm);

/* The MPI thread level a run of this configuration on `world` ranks needs:
 * FUNNELED on several ranks (the main thread calls MPI while OpenMP threads
 * exist); SERIALIZED for a communication thread (allreduce_progress:
 * thread) whose allreduces the training thread makes no MPI call beside;
 * MULTIPLE where it does (a pipeline's replicas: the stage's transfers);
 * SINGLE on one rank.  hcnn_strategy_check refuses a library that provides
 * less.  (The stall watchdog's MPI_Abort from its own thread needs
 * MULTIPLE too; below it the watchdog ends its rank without MPI.) */
int hcnn_strategy_thread_level(const hcnn_config *cfg, int world);

/* Samples a rank carries through one forward and backward pass, for a job
 * of `world` ranks (before MPI starts: the BLAS kernels' measurement). */
int hcnn_strategy_pass_samples(const hcnn_config *cfg, int world);

/* init through the table, after the common fields; on failure free still
 * releases what was set up. */
int hcnn_strategy_init(hcnn_strategy *s, const hcnn_config *cfg, const hcnn_comm *comm,
                       hcnn_net *net, int need_train);
void hcnn_strategy_free(hcnn_strategy *s);

/* The pipeline's partition: a contiguous split of n block costs into S
 * non-empty stages minimising the largest (dynamic programming, O(S n^2)),
 * no stage starting at a block no_cut marks (NULL: any; with more stages
 * than unmarked places to cut, marks from the network's start are dropped
 * until there are S - 1 places, and the stages start at all of them,
 * whatever the costs); bounds[0..S], stage s = blocks [bounds[s], bounds[s+1]).
 * HCNN_EINVAL when there is none (S > n, a cost not finite).  hcnn plan
 * partitions with it too. */
int hcnn_pipe_balance(const double *cost, int n, int S, const unsigned char *no_cut, int *bounds);

/* The blocks no measured partition starts a stage at (no_cut[0..nlayers)):
 * a batch-norm right after a convolution.  Together, the convolution
 * gathers the batch-norm's statistics as it writes its output (chain.c);
 * apart, the batch-norm sums them itself, in another order: a partition
 * that cut there moved a ResNet's update by 2.4e-7, and the measured
 * partition, which timing decides, made two runs of one config differ. */
void hcnn_pipe_no_cut(const hcnn_net *net, unsigned char *no_cut);

/* The batch for a step or inference in backend memory: x and y themselves
 * when the backend's memory is the host's, else uploaded into x_dev, y_dev
 * (one host-to-device copy of each).  n samples of in_sz floats.  queued:
 * the copy is queued with the step's work and the host goes on (the
 * loader's pinned buffer must then stay as it is until the step's results
 * are read back, which the loader's two buffers guarantee); else it waits. */
void hcnn_strategy_stage(hcnn_strategy *s, const float **x, const int32_t **y, int n,
                         int queued);

#endif
