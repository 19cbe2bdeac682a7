/* Inside the pipeline strategy (src/parallel/pipeline*.c; its interface to
 * the trainer is include/hcnn/strategy.h).
 *
 * Pipeline model parallelism (strategy: pipeline), optionally with several
 * pipeline replicas combined by data parallelism.
 *
 * World rank w is stage (w % S) of replica (w / S).  Stage s owns blocks
 * [bounds[s], bounds[s+1]).  Each replica takes its shard of the global
 * batch (as in the data-parallel strategy) and cuts it into M micro-batches;
 * activations go forward to stage s+1 and activation gradients back to s-1
 * with MPI_Isend/MPI_Irecv posted ahead of use; parameter gradients
 * accumulate over the micro-batches and, after the flush, are summed over
 * the R replicas of the stage (bucketed and overlapped with the last
 * micro-batch's backward, by grad_sync.c).  The loss gradient is scaled by
 * 1 / global batch, so the result is a serial step on the global batch.
 *
 * Schedules: GPipe (all forwards, then all backwards: M micro-batches of
 * activations stored per stage) and 1F1B / PipeDream-Flush (after S-s-1
 * warm-up forwards, one forward then one backward: at most S-s stored). */
#ifndef HCNN_PIPELINE_H
#define HCNN_PIPELINE_H

#include <mpi.h>
#include <stdio.h>

#include "hcnn/comm.h"
#include "hcnn/config.h"
#include "hcnn/grad_sync.h"
#include "hcnn/net.h"

typedef struct hcnn_pipe_slot {
    hcnn_acts acts;        /* activations of this stage's blocks for one micro-batch */
    float *x;              /* its input, received from the previous stage */
    hcnn_mpi_buf xbuf;     /* x as MPI receives it */
    hcnn_mpi_buf obuf;     /* the stage's output as MPI sends it */
    MPI_Request recv;      /* input receive */
    MPI_Request send;      /* output send */
} hcnn_pipe_slot;

typedef struct hcnn_pipe_stats {
    double compute_s;      /* forward + backward + loss, as the host times their calls (a
                              step replayed as CUDA graphs adds nothing: its graphs run
                              between the transfers' waits) */
    double bubble_s;       /* waiting for neighbours */
    int peak_micro;        /* micro-batches of activations stored at once */
} hcnn_pipe_stats;

/* One entry of a step's plan (pipeline_step.c): device work of
 * micro-batch m, or a host action around it (a transfer posted, waited
 * for, uploaded), with the activation slot it uses. */
typedef struct hcnn_pipe_op {
    int kind, m, slot;
    int last;              /* the step's last backward: the replicas' allreduce rides on it */
} hcnn_pipe_op;

typedef struct hcnn_pipe {
    const hcnn_backend *be;
    int S, R, M;
    int stage, replica;
    hcnn_pipe_schedule schedule;
    int bounds[HCNN_MAX_BLOCKS + 1];
    int first, last;       /* this stage's blocks */
    double est_s[HCNN_MAX_BLOCKS]; /* estimated seconds per step of each stage */
    MPI_Comm pipe_comm;    /* the replica's stages, rank = stage */
    MPI_Comm stage_comm;   /* this stage in every replica, rank = replica */
    int prev, next;        /* neighbour stages, MPI_PROC_NULL at the ends */
    int micro_cap;         /* samples per micro-batch, at most */
    int classes;
    size_t in_sz, out_sz;  /* per-sample floats entering / leaving the stage */

    hcnn_pipe_slot *slots;
    int nslots;
    size_t slot_bytes;     /* activation bytes of one slot */
    float *dy[2];          /* incoming output gradients (ping-pong) */
    hcnn_mpi_buf dybuf[2];
    MPI_Request dy_req[2];
    float *dx[2];          /* outgoing input gradients (ping-pong) */
    hcnn_mpi_buf dxbuf[2];
    MPI_Request dx_req[2];
    float *dlogits;        /* last stage: loss gradient of a micro-batch */
    hcnn_grad_sync sync;   /* across replicas of this stage */
    int sync_ready;
    hcnn_pipe_stats st;
    double *bubble_total;  /* also adds the waits here (the strategy's bubble_s) */

    /* the step's plan for plan_n samples: micro-batch m is samples
     * [lo[m], lo[m+1]) of the shard, M of them */
    hcnn_pipe_op *plan;
    int nplan, plan_cap, plan_n, plan_M, plan_peak;
    int lo[HCNN_MAX_BLOCKS + 1];
    int *slot_micro;       /* while planning: micro-batch each slot holds, -1: free */
    hcnn_comm_cut *cut;    /* the trainer's CUDA graphs (comm.h), or NULL */
} hcnn_pipe;

/* Layout checks that need only the config and the world size; identical on
 * every rank, only rank 0 prints. */
int hcnn_pipe_check(const hcnn_config *cfg, const hcnn_comm *comm);

/* Partition (explicit or balanced from a measured warm-up on rank 0),
 * communicators, buffers.  net must be built on every rank. */
int hcnn_pipe_init(hcnn_pipe *p, const hcnn_config *cfg, const hcnn_comm *comm, hcnn_net *net,
                   hcnn_scratch *scratch);
void hcnn_pipe_free(hcnn_pipe *p);

/* Drive this stage's outstanding transfers (the context's poll). */
void hcnn_pipe_poll(void *arg);

/* One training step of this replica's shard x (stage 0 reads it), labels y
 * (the last stage reads them), n samples of a global batch of gn, both in
 * backend memory; accumulates gradients of this stage's blocks and sums
 * them over the replicas.  Every MPI call of the step is at a
 * communication point on p->cut (comm.h).  On the last stage the shard's loss and correct
 * predictions are added to stats (backend memory, HCNN_STAT_*). */
int hcnn_pipe_step(hcnn_pipe *p, hcnn_net *net, hcnn_scratch *s, const float *x,
                   const int32_t *y, int n, int gn, double *stats);

/* Forward-only pass over n samples in micro_cap chunks (evaluation); the
 * last stage adds loss and correct predictions to stats. */
int hcnn_pipe_infer(hcnn_pipe *p, hcnn_net *net, hcnn_scratch *s, const float *x,
                    const int32_t *y, int n, double *stats);

/* Copy the parameters, statistics and momentum of every stage of replica 0
 * to world rank 0 (for checkpoints: the file holds the whole model). */
int hcnn_pipe_gather(hcnn_pipe *p, hcnn_net *net, float *momentum);

/* The partition and the stages' estimated times (rank 0, run header). */
void hcnn_pipe_print_layout(const hcnn_pipe *p, const hcnn_net *net, int explicit, FILE *out);
/* Per-stage metrics of the epoch (compute, bubble, stored activations),
 * averaged over replicas, printed by rank 0; collective; resets them. */
int hcnn_pipe_report(hcnn_pipe *p, MPI_Comm world, int rank, double epoch_s, FILE *out);

#endif
