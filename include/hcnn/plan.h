/* hcnn plan: a projection of training throughput to N nodes, before
 * paying for them (docs/plan.md has the model, its assumptions and its
 * validation).
 *
 * A step is priced from three measured or stated inputs:
 *   compute   per-block forward and backward seconds of one pass, measured
 *             on this node at the per-thread share of samples each layout
 *             implies (hcnn_block_times), and the optimiser's seconds;
 *   network   an alpha-beta-gamma model (latency, seconds per byte moved,
 *             seconds per byte reduced) of the algorithm OpenMPI 4.1's
 *             tuned component picks for an allreduce of that size on that
 *             many ranks, and of a point-to-point message;
 *   layout    data parallel (S = 1) or S pipeline stages x R replicas with
 *             M micro-batches, hcnn's own bucketing (hcnn_grad_buckets) and
 *             stage partition (hcnn_pipe_balance).
 * Everything here is arithmetic: plan.c measures and prints. */
#ifndef HCNN_PLAN_H
#define HCNN_PLAN_H

#include <stddef.h>

#include "hcnn/config.h"
#include "hcnn/net.h"
#include "hcnn/node.h"

/* ---- the network ----------------------------------------------------------- */

typedef struct hcnn_network {
    char name[64];
    double alpha_s;      /* latency of one message (MPI, inter-node) */
    double beta_s;       /* seconds per byte on the wire (1 / bandwidth) */
    double gamma_s;      /* seconds per byte of MPI_SUM reduction on one core */
    double p2p_alpha_s;  /* latency of one point-to-point message */
    double contention;   /* ranks sharing one host (--host-cores): a pass takes this
                            many times longer when every core computes (1: none) */
    int iallreduce;      /* how the gradient buckets are reduced: libnbc's
                            coll_libnbc_iallreduce_algorithm (0..4, hcnn's
                            default HCNN_IALLREDUCE_DEFAULT, the environment's
                            when set), or -1: blocking MPI_Allreduce (tuned's
                            table; allreduce_progress: thread) */
} hcnn_network;

/* Presets "ib-hdr" and "eth-25g" (their sources: docs/plan.md), or a file
 * of "key = value" lines: alpha_us, bandwidth_gbs (GB/s per direction),
 * reduce_gbs (GB/s of float summation), optional p2p_alpha_us,
 * host_contention (a pass's slowdown when all of one host's cores compute
 * at once: only --host-cores uses it), name.  The
 * file hcnn plan --calibrate-network writes is of this form.  iallreduce
 * is taken from the environment as MPI_Init will see it (HCNN_IALLREDUCE_ENV,
 * include/hcnn/comm.h). */
int hcnn_network_load(const char *spec, hcnn_network *net);

/* OpenMPI 4.1's choice for a commutative MPI_Allreduce of `bytes` on p
 * ranks (coll_tuned_decision_fixed.c, ompi_coll_tuned_allreduce_intra_
 * dec_fixed): 3 recursive doubling, 4 ring, 5 segmented ring, 6
 * Rabenseifner (reduce-scatter + allgather). */
typedef enum {
    HCNN_AR_NONE = 0,
    HCNN_AR_RECURSIVE_DOUBLING = 3,
    HCNN_AR_RING = 4,
    HCNN_AR_SEGMENTED_RING = 5,
    HCNN_AR_RABENSEIFNER = 6,
    HCNN_AR_BINOMIAL = 7 /* libnbc's (reduce up a binomial tree, broadcast down);
                            not one of tuned's */
} hcnn_allreduce_algo;
hcnn_allreduce_algo hcnn_allreduce_choice(double bytes, int p);
const char *hcnn_allreduce_algo_name(hcnn_allreduce_algo a);
/* Seconds for that algorithm (p = 1: 0). */
double hcnn_allreduce_seconds(const hcnn_network *nw, double bytes, int p);
/* A gradient bucket: MPI_Iallreduce(MPI_IN_PLACE) through OpenMPI 4.1's
 * libnbc with nw->iallreduce (nbc_iallreduce.c's selection), or the
 * blocking choice above when nw->iallreduce < 0. */
hcnn_allreduce_algo hcnn_iallreduce_choice(double bytes, int p, int setting);
double hcnn_iallreduce_seconds(const hcnn_network *nw, double bytes, int p);
/* Seconds for one point-to-point message of `bytes`. */
double hcnn_p2p_seconds(const hcnn_network *nw, double bytes);

/* ---- compute ----------------------------------------------------------------- */

/* How each block's passes divide among `threads` threads (hcnn_plan_cuts),
 * from the backend's pass_pieces (include/hcnn/backend.h) of the
 * operations its layers run, or the units of whole-network execution: for
 * its GEMM layers and its other layers, forward and backward
 * (HCNN_CUT_*), the share of their one-thread time the busiest thread
 * spends (1 on one thread, 1/threads at best), and the phases (each ended
 * by a barrier) they run. */
enum { HCNN_CUT_GEMM_FWD, HCNN_CUT_GEMM_BWD, HCNN_CUT_OTHER_FWD, HCNN_CUT_OTHER_BWD, HCNN_CUTS };

typedef struct hcnn_plan_cuts {
    int n, threads;
    int units;                 /* whole-network execution: units of the pass (0: block by block) */
    double share[HCNN_MAX_BLOCKS][HCNN_CUTS];
    int phases[HCNN_MAX_BLOCKS][HCNN_CUTS];
    /* the GEMM layers' passes (convolutions, fully connected): the pieces
     * of each one's costliest phase on `threads` threads, fewest and most
     * (of the passes taking >= 1% of their time), and the slowest pass
     * there, its costliest phase's pieces and the threads it keeps busy
     * (its one-thread time over its time on `threads`) */
    long fewest_pieces, most_pieces;
    char narrowest[2 * HCNN_NAME_MAX + 16]; /* "layer4.0.conv2 backward" */
    long narrowest_pieces;
    double narrowest_threads;
} hcnn_plan_cuts;

/* The cuts of a pass of n samples on `threads` threads of net's backend,
 * its convolutions run as net->conv_algo and net->chunk_floats say. */
int hcnn_plan_cuts_make(const hcnn_net *net, int n, int threads, hcnn_plan_cuts *out);

/* Per-block seconds of one training pass on n samples at the target thread
 * count, and the optimiser's seconds for all parameters. */
typedef struct hcnn_pass_cost {
    int n;                        /* samples of the pass */
    double fwd[HCNN_MAX_BLOCKS], bwd[HCNN_MAX_BLOCKS];
    double opt_s;
    int below_threads;            /* fewer samples than threads (priced from the pieces) */
    /* how each pass was priced (hcnn_price_pass) */
    double flops_fwd[HCNN_MAX_BLOCKS], flops_bwd[HCNN_MAX_BLOCKS]; /* GEMM layers' */
    double bytes_fwd[HCNN_MAX_BLOCKS], bytes_bwd[HCNN_MAX_BLOCKS]; /* the other layers' */
    double gemm_fwd[HCNN_MAX_BLOCKS], gemm_bwd[HCNN_MAX_BLOCKS]; /* of fwd, bwd: the GEMMs' */
    /* the GEMM layers' direct-convolution FLOPs over their time here and
     * this machine's measured FMA peak (Winograd's fewer products: > 1) */
    double gemm_peak_share[HCNN_MAX_BLOCKS];
    unsigned char bw_fwd[HCNN_MAX_BLOCKS], bw_bwd[HCNN_MAX_BLOCKS]; /* streams bandwidth-bound */
    int opt_bw;                   /* the optimiser bandwidth-bound */
    double footprint_bytes;       /* the step's activations: beyond the LLC, streams go to memory */
    /* the passes' work (one thread's seconds on the node's core) over the
     * threads' time in them: 1 when every thread works throughout */
    double thread_use;
    double barrier_s;             /* of the passes' time: their barriers at the target */
    int phases;                   /* the passes' phases there (a barrier each) */
    hcnn_plan_cuts cuts;          /* on the target's threads */
} hcnn_pass_cost;

/* Bytes the non-GEMM layers of block l stream per sample (reads and
 * writes of their tensors: batch-norm 3 tensors forward and 5 backward,
 * activations 2 and 3, pooling in + out (+ its argmax), a residual
 * addition 3 and 2; a ReLU fused into the convolution before it: none),
 * and the bytes of the outputs the block keeps for backward (per sample). */
void hcnn_block_stream_bytes(const hcnn_layer *l, double *fwd, double *bwd, double *kept);

/* A measurement here: per-block seconds of a pass of n samples on
 * `threads` threads (hcnn_block_times), the part outside GEMM layers, this
 * machine's FMA rate per core on those threads (GFLOP/s), and what one
 * barrier of those threads costs here (seconds). */
typedef struct hcnn_pass_measured {
    int n, threads;
    double fwd[HCNN_MAX_BLOCKS], bwd[HCNN_MAX_BLOCKS];
    double fwd_mem[HCNN_MAX_BLOCKS], bwd_mem[HCNN_MAX_BLOCKS];
    double opt_s;
    double core_gflops;
    double barrier_s;
} hcnn_pass_measured;

/* The pass of m->n samples on `threads` threads of `node`, from m and the
 * cuts of the same pass here (m->threads) and there (`threads`).  Each
 * block's pass is two terms, its GEMM layers and its other layers: the
 * time measured here less its barriers is the work, spread as the cuts
 * here say (work = (time - phases x m->barrier_s) / share here); there it
 * takes share there x work, plus phases x barrier_s:
 *   the GEMM layers' work at the FLOP rate they reached here
 *   (gemm_peak_share of this machine's measured peak), scaled by the
 *   ratio of the two machines' per-core FMA peaks;
 *   the other layers' work as measured, or their bytes at the node's
 *   bandwidth on `threads` threads when the step's activations exceed the
 *   node's last-level cache and that takes longer (bandwidth-bound).
 * The optimiser streams 5 floats per parameter (read parameter, gradient,
 * velocity; write two): at least that at the node's bandwidth, its time
 * here otherwise spread over all threads. */
int hcnn_price_pass(const hcnn_net *net, const hcnn_node *node, int threads,
                    const hcnn_pass_measured *m, const hcnn_plan_cuts *here,
                    const hcnn_plan_cuts *there, double barrier_s, hcnn_pass_cost *out);

/* How the gradients cross the ranks (what the step model prices beyond the
 * network): hcnn's three communication changes can each be left out, to
 * price a step as it was before them. */
typedef struct hcnn_comm_setup {
    int fold_agreement;    /* data parallel: the agreement rides on the first bucket */
    int team_threads;      /* threads of the OpenMP team that sums (0: one core does):
                              each at one core's rate (gamma) */
    double team_min_bytes; /* smaller sums stay on one core (HCNN_TEAM_SUM_MIN) */
    double team_mem_gamma_s; /* seconds per byte summed from memory: 3 bytes moved at the
                                node's bandwidth; binds sums beyond the last-level cache */
    double llc_bytes;
    int reserved_core;     /* allreduce_progress: thread: the allreduce on a core of its
                              own, threads - 1 computing, nothing stalled */
    int sharded;           /* optimizer_sharding: ranks: each bucket reduce-scattered, the
                              optimiser on 1/P of the parameters, the parameters
                              all-gathered after it, the norms' pieces gathered, the
                              agreement its own allreduce (grad_sync.h) */
} hcnn_comm_setup;

/* ---- a layout and its step ------------------------------------------------- */

typedef struct hcnn_layout {
    int nodes;          /* = ranks: one rank per node */
    int stages;         /* S; 1 = data parallel */
    int replicas;       /* R = nodes / S */
    int microbatches;   /* M (pipeline) */
    long long global_batch; /* G (weak: nodes x --batch, past 2^31 at 65536 nodes) */
    int pass_samples;   /* samples of one pass: G / N (data), G / (R M) (pipeline) */
} hcnn_layout;

typedef struct hcnn_step_model {
    double step_s;         /* one optimiser step */
    double compute_s;      /* this rank's forward + backward + optimiser (the busiest stage) */
    double allreduce_s;    /* what the gradient allreduce adds to the step: its part
                              after backward ended, and the reductions run during
                              backward by the polling main thread */
    double allreduce_total_s; /* all buckets' allreduce time, hidden or not */
    double bubble_s;       /* pipeline fill and drain, and waiting on slower stages */
    double p2p_s;          /* activations and their gradients between stages */
    double sync_s;         /* the per-step agreement allreduce (3 ints); sharded: and the
                              gathered sums of squares (3 doubles a rank) */
    double gather_s;       /* sharded: what the parameters' all-gathers add to the step
                              (in allreduce_s; all of them in allreduce_total_s): data
                              parallelism with MPI_Test progress, the next forward's
                              waits; else all of them, after the update */
    double opt_s;          /* the optimiser step of this rank (the busiest stage's) */
    double images_per_s;
    int bounds[HCNN_MAX_BLOCKS + 1]; /* stage partition */
    int nbuckets;
} hcnn_step_model;

/* Price one step.  cost: the pass cost at lay->pass_samples; host_cores > 0:
 * all ranks share one host of that many cores (a validation on one machine),
 * threads: per rank; compute is then stretched when ranks x threads exceed
 * the cores. */
int hcnn_plan_step(const hcnn_net *net, const hcnn_layout *lay, const hcnn_pass_cost *cost,
                   const hcnn_network *nw, const hcnn_comm_setup *cs, double bucket_mb,
                   int threads, int host_cores, hcnn_step_model *out);

/* --calibrate-network FILE (src/plan/calibrate.c): under mpirun; cfg NULL:
 * no host contention measured.  Returns HCNN_OK or an error code. */
int hcnn_plan_calibrate(const char *path, const hcnn_config *cfg);

#define HCNN_PLAN_MAX_NODES 16        /* node counts in one plan (--nodes) */
#define HCNN_PLAN_MAX_STAGE_CHOICES 8 /* pipeline stage counts (--stages) */

/* hcnn plan's command line, parsed (src/cli/plan.c; what each option does:
 * hcnn plan --help).  0 or NULL: the option's default, which plan.c
 * derives from the configuration or the node where --help says so. */
typedef struct hcnn_plan_args {
    const char *config;            /* --config; NULL: only --calibrate-network */
    const char *const *sets;       /* --set KEY=VALUE, in order */
    int nset;
    int nodes[HCNN_PLAN_MAX_NODES], nnodes;                /* --nodes */
    int stages[HCNN_PLAN_MAX_STAGE_CHOICES], nstages;      /* --stages */
    const char *network;           /* --network NAME|FILE */
    const char *node_spec;         /* --node NAME|FILE */
    int threads, measure_threads;  /* --threads, --measure-threads */
    int microbatches, batch;       /* --microbatches, --batch */
    int host_cores, steps;         /* --host-cores, --steps */
    int weak, strong;              /* --scaling */
    const char *out;               /* --out DIR; "": plan-<model> */
    int no_plots;                  /* --no-plots */
    const char *calibrate;         /* --calibrate-network FILE */
    /* Called once with a --config, before MPI starts or the process is
     * re-executed (status 0), or instead, when the set-up fails before
     * (status: the exit status hcnn_plan_main returns): the command
     * line's, which makes a failure on some ranks of a job end all of
     * them (src/cli/before_mpi.c).  NULL: none. */
    void (*before_mpi)(void *ctx, int status);
    void *before_mpi_ctx;
} hcnn_plan_args;

/* hcnn plan with its parsed options (src/plan/plan.c); argv is the
 * process's, re-executed when the BLAS kernels the configuration wants are
 * not the loaded ones (include/hcnn/blas.h).  Returns the exit status. */
int hcnn_plan_main(const hcnn_plan_args *args, char **argv);

#endif
