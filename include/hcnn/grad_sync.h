/* Bucketed gradient allreduce overlapped with backward.
 *
 * The gradients of blocks [first, last) are a contiguous range of the
 * network's gradient buffer, laid out in block order.  They are cut into
 * buckets of about bucket_mb MiB of whole blocks, from the last block
 * backwards; backward produces the last block's gradients first, so each
 * bucket's allreduce (MPI_SUM, in place) can start as soon as backward has
 * passed its lowest block, while backward continues on earlier blocks.
 * The loss gradient is already scaled by 1 / global batch, so the sum over
 * ranks is the mean over the global batch, whatever the shard sizes.
 *
 * Progress: OpenMPI does not advance a non-blocking collective in the
 * background, so either the compute thread calls MPI_Test between blocks
 * and GEMM chunks (HCNN_PROGRESS_TEST, through hcnn_grad_sync_poll), or a
 * communication thread runs blocking allreduces (HCNN_PROGRESS_THREAD).
 * Used by the data-parallel strategy on MPI_COMM_WORLD and by pipeline
 * stages on their replica communicator.
 *
 * The per-step agreement: the first bucket (the network's last blocks,
 * whose gradients end the buffer) also carries the HCNN_GRAD_TAIL floats
 * after them (net.h).  When agree_fill is set, it writes them just before
 * that bucket starts, and the allreduce sums them over the ranks with the
 * gradients: the agreement costs no latency of its own (on 32 ranks a
 * 12-byte MPI_Allreduce is OpenMPI's segmented ring, 62 latencies, about
 * 93 us on InfiniBand HDR: the larger part of LeNet-5's step at 64
 * threads, docs/plan.md).  The caller reads the sums after finish.
 *
 * In a step captured in CUDA graphs (cut set, comm.h): each bucket's start
 * and the finish are communication points, the step's graphs end there.
 * Then all the device copies of the buckets happen at those points on the
 * calling thread (a communication thread's copy would fall into a capture
 * under way), the host copies come back to the device in finish, and poll
 * does nothing between the points (no host code runs there in a replay):
 * with progress by MPI_Test, the buckets move at each bucket's start and in
 * finish.
 *
 * Sharded optimiser (optimizer_sharding: ranks, ZeRO stage 1): bucket k is
 * cut into pieces, one a rank (counts, displs; none on the ranks a rank
 * count that is not a power of two folds away: reduce_scatter.h).  The
 * bucket's allreduce becomes hcnn's own reduce-scatter (reduce_scatter.h:
 * the same summation tree as the default allreduce, so the same bits; the
 * same progress, by MPI_Test between blocks or on the communication
 * thread), which leaves this rank's piece summed in place in the
 * gradients; hcnn_grad_sync_step then updates this rank's piece of each
 * bucket (parameters and momentum at their place in the whole buffers),
 * from the network's first blocks to its last, and all-gathers each
 * bucket's parameters (MPI_Iallgatherv, in place) as soon as its piece is
 * updated, the next pieces' update running meanwhile.  With
 * gather_in_forward (data parallelism, MPI_Test progress, a step not cut
 * for graphs) they are left running: the next forward waits for each
 * bucket just before its first block (hcnn_grad_sync_gathers_ready, the
 * context's before_block), polls progress them between, and whoever reads
 * the parameters outside a step settles them first
 * (hcnn_grad_sync_settle).  The same volume as one allreduce; the
 * optimiser's sweep on 1/size of the parameters.  The momentum outside this
 * rank's pieces is stale: hcnn_grad_sync_gather_momentum makes it whole for
 * a checkpoint.  The agreement's tail is not carried (a reduce-scatter would
 * leave it on one rank): the trainer agrees by its own small allreduce and
 * sums the norms' pieces (hcnn_grad_sync_norms). */
#ifndef HCNN_GRAD_SYNC_H
#define HCNN_GRAD_SYNC_H

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

#include "hcnn/comm.h"
#include "hcnn/config.h"
#include "hcnn/net.h"
#include "hcnn/optim.h"

/* Sums of fewer floats stay on one core (grad_sync.c; hcnn plan prices it) */
#define HCNN_TEAM_SUM_MIN 16384

typedef struct hcnn_bucket {
    size_t off, count;     /* range of the gradient buffer */
    int lowest_block;      /* ready once backward has finished this block */
    MPI_Request req;
    float *base;           /* sharded: its floats where MPI reads them, this step */
} hcnn_bucket;

/* Writes the agreement's HCNN_GRAD_TAIL values (host floats) for this step. */
typedef void (*hcnn_agree_fill_fn)(void *arg, float *tail);

typedef struct hcnn_grad_sync {
    MPI_Comm comm;
    int size;
    hcnn_mpi_buf buf;      /* the network's gradients, as MPI reaches them */
    hcnn_bucket *buckets;  /* buckets[0] holds the last blocks */
    int nbuckets;
    hcnn_allreduce_progress mode;
    MPI_Op sum;            /* the buckets' sum: MPI_SUM, or the team's (grad_sync.c) */
    int team_sum;          /* sum is hcnn's MPI_Op (freed with the rest) */
    int started;           /* buckets started this step */
    int completed;         /* buckets known complete this step */
    size_t tail_off;       /* the agreement's floats in the buffer (0: not carried) */
    hcnn_agree_fill_fn agree_fill; /* NULL: the tail is not written */
    void *agree_arg;
    hcnn_comm_cut *cut;    /* the step's graphs, or NULL (above) */

    /* optimizer_sharding: ranks (above); all zero otherwise */
    int sharded;
    int rank;
    int *counts, *displs;  /* [nbuckets * size]: rank r's piece of bucket k */
    size_t shard_n;        /* this rank's pieces' floats */
    struct hcnn_rs *rs;    /* the reduce-scatter (src/parallel/reduce_scatter.h) */
    int rs_begun;          /* the bucket `completed` has begun it */
    hcnn_mpi_buf param_buf; /* the network's parameters, as MPI reaches them */
    MPI_Request *gather_req; /* [nbuckets] */
    int gathers_started, gathers_completed; /* this step's, buckets nbuckets - 1 down */
    int gather_in_forward; /* the caller waits for them in the next forward (below) */
    int gathers_pending;   /* all-gathers left to the next forward */

    /* communication thread (HCNN_PROGRESS_THREAD) */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int thread_started;
    int stop;

    /* statistics since the last hcnn_grad_sync_take_stats */
    double wait_s;         /* time blocked in finish */
    long steps;
} hcnn_grad_sync;

/* hcnn's commutative float sum for the buckets (grad_sync.c): the OpenMP
 * team's when MPI calls it outside a parallel region on at least
 * HCNN_TEAM_SUM_MIN floats.  The caller frees it with MPI_Op_free. */
void hcnn_grad_sum_op(MPI_Op *op);
/* 1 when the environment asks the allreduce to sum with MPI_SUM on one core
 * instead of that operation (HCNN_GRAD_SUM=mpi, a diagnostic:
 * include/hcnn/env.h); the one place it is read. */
int hcnn_grad_sum_mpi(void);

/* The buckets of blocks [first, last) (buckets: room for last - first):
 * about bucket_mb MiB of whole blocks each, from the last block backwards;
 * returns their number.  hcnn plan prices the same buckets. */
int hcnn_grad_buckets(const hcnn_net *net, int first, int last, double bucket_mb,
                      hcnn_bucket *buckets);

int hcnn_grad_sync_init(hcnn_grad_sync *gs, MPI_Comm comm, hcnn_net *net, int first, int last,
                        double bucket_mb, hcnn_allreduce_progress mode,
                        hcnn_optimizer_sharding sharding);
void hcnn_grad_sync_free(hcnn_grad_sync *gs);

/* Per step: begin (before backward), block_done after backward of each
 * block (descending), poll whenever convenient, finish before the
 * optimiser.  An MPI failure ends the job (HCNN_MPI). */
void hcnn_grad_sync_begin(hcnn_grad_sync *gs);
/* block_done and poll take the hcnn_grad_sync as void *: they are the
 * network's block callback and the context's poll as they are */
int hcnn_grad_sync_block_done(void *gs, int block);
void hcnn_grad_sync_poll(void *gs);
int hcnn_grad_sync_finish(hcnn_grad_sync *gs);

/* Sharded (above): SGD on this rank's piece of every bucket, after finish,
 * each bucket's parameters all-gathered as soon as its piece is updated,
 * waited for before it returns, or with gather_in_forward by the next
 * forward.  stats as hcnn_sgd_step's: this rank's pieces' sums of squares. */
int hcnn_grad_sync_step(hcnn_grad_sync *gs, hcnn_sgd *opt, float lr, double *stats);
/* Sharded: stats[HCNN_STAT_SUMSQ] += the sum of squares of this rank's
 * pieces of the summed gradients (stats: backend memory); with params,
 * stats[HCNN_STAT_WSQ] and [VSQ] += those of its pieces of params and
 * momentum. */
void hcnn_grad_sync_piece_sums(const hcnn_grad_sync *gs, const float *params,
                               const float *momentum, double *stats);
/* Sharded: sums[0..n) of each rank's pieces (host doubles) replaced by
 * their sum over the ranks, taken in rank order (the same bits on every
 * rank).  Collective. */
void hcnn_grad_sync_norms(const hcnn_grad_sync *gs, double *sums, int n);
/* Sharded, gather_in_forward: wait for the all-gathers of the buckets that
 * hold blocks <= block (takes the hcnn_grad_sync as void *: the context's
 * before_block as it is); settle: all of them.  No-ops when none is left. */
int hcnn_grad_sync_gathers_ready(void *gs, int block);
void hcnn_grad_sync_settle(hcnn_grad_sync *gs);
/* Sharded: the momentum made whole on every rank (blocking all-gathers;
 * a checkpoint's).  Collective; HCNN_ENOMEM when staging has no room. */
int hcnn_grad_sync_gather_momentum(hcnn_grad_sync *gs, float *momentum);

/* Median time of `reps` blocking allreduces of all buckets (the cost that
 * overlap hides); overwrites the gradients, so call it between steps. */
double hcnn_grad_sync_calibrate(hcnn_grad_sync *gs, int reps);

/* The run header's line: buckets, progress, the calibrated blocking time. */
void hcnn_grad_sync_print(const hcnn_grad_sync *gs, double bucket_mb, double allreduce_s,
                          FILE *out);

#endif
