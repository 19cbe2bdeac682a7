/* hcnn plan: measure this machine's per-block compute at the per-thread
 * share each layout implies, price it on the node (--node) and every layout
 * at every node count (src/plan/model.c), and hand the rows to the output
 * (src/plan/report.c) and --calibrate-network to src/plan/calibrate.c; its
 * options come parsed from src/cli/plan.c. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/backend.h"
#include "hcnn/blas.h"
#include "hcnn/comm.h"
#include "hcnn/common.h"
#include "hcnn/files.h"
#include "hcnn/grad_sync.h"
#include "hcnn/node.h"
#include "hcnn/plan.h"
#include "hcnn/threads.h"
#include "hcnn/train.h"
#include "plan_report.h"

/* measurements here, by samples measured, and the priced passes */
typedef struct cost_cache {
    hcnn_pass_measured m[MAX_MEASURED];
    int nm;
    hcnn_pass_cost c[MAX_MEASURED];
    int nc;
} cost_cache;

/* ---- compute: the pass measured here, its pieces, the node ------------------- */

/* The pass of n samples at the target's T threads, priced from the same
 * pass measured here on T_here threads: the pieces the backend cuts it
 * into (pass_pieces) are fixed by the shapes and n, so each block's work
 * is what the measurement here did, and the threads there share it as
 * those pieces allow (fewer samples than threads included: images are
 * cut into row, channel and tile pieces).  What a core of the node does
 * differently is the node model's (hcnn_price_pass). */
static int pass_cost(const hcnn_config *cfg, const plan_opts *o, const hcnn_net *net,
                     cost_cache *cc, int n, const hcnn_pass_cost **out)
{
    for (int i = 0; i < cc->nc; i++)
        if (cc->c[i].n == n) {
            *out = &cc->c[i];
            return HCNN_OK;
        }
    const hcnn_pass_measured *m = NULL;
    for (int i = 0; i < cc->nm; i++)
        if (cc->m[i].n == n)
            m = &cc->m[i];
    if (!m) {
        if (cc->nm == MAX_MEASURED || cc->nc == MAX_MEASURED)
            return hcnn_error("plan: more than %d different pass sizes", MAX_MEASURED);
        /* before the measurement's data set is made (a pass of 2 million
         * samples of a small model filled 3.5 GB first) */
        if (!hcnn_net_capacity_ok(net, 0, net->nlayers, n))
            return hcnn_error_code(HCNN_EINVAL,
                                   "plan: a pass of %d samples of %s makes an activation tensor "
                                   "larger than %d values (sizes are int in the kernels): lower "
                                   "--batch (weak scaling) or batch_size (strong)",
                                   n, cfg->model.name, HCNN_MAX_SAMPLE_FLOATS);
        hcnn_pass_measured *w = &cc->m[cc->nm];
        memset(w, 0, sizeof *w);
        hcnn_config *mc = malloc(sizeof *mc);
        if (!mc)
            return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the configuration");
        *mc = *cfg;
        mc->threads = o->measure_threads;
        /* threads on every core of the node leave none for a prefetch
         * thread (data_prefetch: auto): its training threads assemble the
         * batches, and so do the measurement's (LeNet-5 batch 256 on 2
         * threads here was priced 21% fast from 1 thread with a prefetch
         * thread on the other core) */
        if (mc->data_prefetch == HCNN_PREFETCH_AUTO && o->threads >= o->node.cores)
            mc->data_prefetch = HCNN_PREFETCH_OFF;
        printf("hcnn plan: measuring passes of %d samples on %d thread%s (priced on %d threads "
               "of %s)\n",
               n, o->measure_threads, o->measure_threads > 1 ? "s" : "", o->threads,
               o->node.name);
        fflush(stdout);
        const int rc = hcnn_block_times(mc, n, o->steps, w->fwd, w->bwd, w->fwd_mem, w->bwd_mem,
                                        &w->opt_s);
        free(mc);
        if (rc)
            return rc;
        w->n = n;
        w->threads = o->measure_threads;
        w->core_gflops = o->core_gflops;
        w->barrier_s = o->barrier_here_s;
        m = w;
        cc->nm++;
    }
    hcnn_plan_cuts *here = malloc(sizeof *here);
    if (!here)
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the plan's cuts");
    hcnn_pass_cost *c = &cc->c[cc->nc];
    memset(c, 0, sizeof *c);
    int rc = hcnn_plan_cuts_make(net, n, o->measure_threads, here);
    if (!rc)
        rc = hcnn_plan_cuts_make(net, n, o->threads, &c->cuts);
    if (!rc)
        rc = hcnn_price_pass(net, &o->node, o->threads, m, here, &c->cuts, o->barrier_s, c);
    free(here);
    if (rc)
        return rc;
    cc->nc++;
    *out = c;
    return HCNN_OK;
}

/* ---- layouts -------------------------------------------------------------- */

/* The global batch and micro-batches of a layout.  Weak: each rank keeps
 * the per-rank batch b (a pipeline replica carries S b, in micro-batches of
 * b / M0: M = S M0).  Strong: the global batch G as the user asked for it,
 * whatever the ranks' share (hcnn has no gradient accumulation to make it
 * larger): a pass carries ceil(G / (R M)) samples, the largest shard
 * (hcnn_strategy's data parallelism gives the first ranks one more).
 * Returns 0 when the layout cannot run G: fewer samples than ranks (data)
 * or than micro-batches on a replica (pipeline), as hcnn train refuses. */
static int layout_for(const plan_opts *o, int G, int b, int weak, int N, int S, hcnn_layout *l)
{
    l->nodes = N, l->stages = S, l->replicas = N / S;
    if (weak) {
        l->microbatches = S > 1 ? S * o->microbatches : 1;
        l->global_batch = (long long)N * b;
        l->pass_samples = S > 1 ? b / o->microbatches : b;
        return 1;
    }
    const int R = N / S, M = S > 1 ? o->microbatches : 1;
    l->microbatches = M;
    l->global_batch = G;
    if (S == 1 ? G < N : G / R < M)
        return 0;
    const int shard = (G + R - 1) / R;
    l->pass_samples = (shard + M - 1) / M;
    return 1;
}

/* The row's note on a pass of fewer samples than threads: the pieces its
 * GEMM layers' passes offer and the threads' time it uses (no commas: a
 * column of plan.csv, which quotes nothing) */
static void pieces_note(const hcnn_pass_cost *c, int threads, char *note, size_t cap)
{
    note[0] = '\0';
    if (!c->below_threads)
        return;
    const hcnn_plan_cuts *k = &c->cuts;
    snprintf(note, cap, "%d samples on %d threads: GEMM layers' passes offer %ld-%ld pieces "
             "(slowest: %s %ld pieces on %.1f threads); %.0f%% of the threads' time used",
             c->n, threads, k->fewest_pieces, k->most_pieces, k->narrowest, k->narrowest_pieces,
             k->narrowest_threads, 100.0 * c->thread_use);
}

/* say: print the layouts that cannot run the global batch (once: the
 * rows are filled again for the comparisons) */
static int fill_rows(const hcnn_config *cfg, const plan_opts *o, const hcnn_net *net,
                     const hcnn_network *nw, const hcnn_comm_setup *cs, cost_cache *cc,
                     plan_row *rows, int *nrows, int say)
{
    const int b = o->batch > 0 ? o->batch : cfg->batch_size, G0 = cfg->batch_size;
    int n = 0;
    for (int weak = 1; weak >= 0; weak--) {
        if ((weak && !o->weak) || (!weak && !o->strong))
            continue;
        double base = 0.0; /* 1 node, data layout */
        for (int k = 0; k < o->nnodes; k++) {
            const int N = o->nodes[k];
            int cand[MAX_STAGE_CHOICES + 1], nc = 0;
            cand[nc++] = 1;
            for (int j = 0; j < o->nstages; j++) {
                const int S = o->stages[j];
                if (S >= 2 && S <= N && N % S == 0 && S <= net->nlayers)
                    cand[nc++] = S;
            }
            int first = n;
            for (int j = 0; j < nc; j++) {
                plan_row *r = &rows[n];
                memset(r, 0, sizeof *r);
                r->weak = weak;
                if (!layout_for(o, G0, b, weak, N, cand[j], &r->lay)) {
                    char name[32];
                    hcnn_plan_layout_name(&r->lay, name, sizeof name);
                    if (say)
                        printf("hcnn plan: strong scaling at %d nodes, %s: the global batch %d "
                               "gives a %s fewer than one sample a pass: not a layout for it\n",
                               N, name, G0, cand[j] == 1 ? "rank" : "micro-batch");
                    continue;
                }
                const hcnn_pass_cost *c = NULL;
                int rc = pass_cost(cfg, o, net, cc, r->lay.pass_samples, &c);
                if (!rc)
                    rc = hcnn_plan_step(net, &r->lay, c, nw, cs, cfg->bucket_mb, o->threads,
                                        o->host_cores, &r->m);
                if (rc)
                    return rc;
                r->below_threads = c->below_threads;
                r->fewest_pieces = c->cuts.fewest_pieces;
                r->thread_use = c->thread_use;
                pieces_note(c, o->threads, r->note, sizeof r->note);
                if (N == 1 && cand[j] == 1)
                    base = r->m.images_per_s;
                n++;
            }
            int best = first;
            for (int i = first; i < n; i++) {
                rows[i].efficiency = base > 0 ? rows[i].m.images_per_s / (N * base) : 0.0;
                if (rows[i].m.images_per_s > rows[best].m.images_per_s)
                    best = i;
            }
            if (n > first)
                rows[best].best = 1;
        }
    }
    *nrows = n;
    return HCNN_OK;
}

/* ---- the command -------------------------------------------------------------- */

static const char *iallreduce_text(const hcnn_network *nw)
{
    switch (nw->iallreduce) {
    case -1: return "a blocking MPI_Allreduce on the communication thread";
    case 1: return "MPI_Iallreduce, libnbc ring (" HCNN_IALLREDUCE_ENV "=1)";
    case 3: return "MPI_Iallreduce, libnbc rabenseifner (" HCNN_IALLREDUCE_ENV "=3)";
    case 4: return "MPI_Iallreduce, libnbc recursive doubling (" HCNN_IALLREDUCE_ENV "=4)";
    default: return "MPI_Iallreduce, libnbc binomial tree (" HCNN_IALLREDUCE_ENV " 0 or 2)";
    }
}

static int plan_run(const hcnn_config *cfg, const plan_opts *o)
{
    hcnn_network nw;
    int rc = hcnn_network_load(o->network, &nw);
    if (rc)
        return rc;
    const int iallreduce_env = nw.iallreduce;
    if (cfg->allreduce_progress == HCNN_PROGRESS_THREAD)
        nw.iallreduce = -1; /* the communication thread's blocking MPI_Allreduce */
    const int b = o->batch > 0 ? o->batch : cfg->batch_size;
    if (o->weak && b % o->microbatches != 0)
        return hcnn_error_code(HCNN_EINVAL, "plan: the per-rank batch %d is not divisible by "
                                            "--microbatches %d (the weak pipeline's micro-batch "
                                            "is b / M0)",
                               b, o->microbatches);
    hcnn_net net;
    if ((rc = hcnn_net_create(&net, &cfg->model, hcnn_backend_cpu(), cfg->path)))
        return rc;
    /* its convolutions as a run of this configuration makes them (run.c) */
    net.chunk_floats = (size_t)(cfg->im2col_mb * 1048576.0 / sizeof(float));
    net.conv_algo = cfg->conv_algo;
    cost_cache *cc = calloc(1, sizeof *cc);
    plan_row *rows = calloc((size_t)2 * MAX_NODES * (MAX_STAGE_CHOICES + 1), sizeof *rows);
    int nrows = 0;
    if (!cc || !rows)
        rc = hcnn_error_code(HCNN_ENOMEM, "cannot allocate the plan");
    plan_row *before = calloc((size_t)2 * MAX_NODES * (MAX_STAGE_CHOICES + 1), sizeof *before);
    plan_row *other = calloc((size_t)2 * MAX_NODES * (MAX_STAGE_CHOICES + 1), sizeof *other);
    plan_row *flipped = calloc((size_t)2 * MAX_NODES * (MAX_STAGE_CHOICES + 1), sizeof *flipped);
    if (!before || !other || !flipped)
        rc = hcnn_error_code(HCNN_ENOMEM, "cannot allocate the plan");
    char cpu[256] = "unknown", node[512];
    hcnn_cpu_model(cpu, sizeof cpu);
    hcnn_node_describe(&o->node, node, sizeof node);
    printf("hcnn plan: model %s (%.2f M parameters, %d blocks), per-rank batch %d (weak), global "
           "batch %d (strong), network %s (latency %.2f us, %.1f GB/s, reduction %.1f GB/s; "
           "gradient buckets by %s), "
           "%d threads per rank; compute measured here (%s) with %d thread%s%s\n",
           cfg->model.name, net.nparams / 1e6, net.nlayers, b, cfg->batch_size, nw.name,
           nw.alpha_s * 1e6, 1e-9 / nw.beta_s, 1e-9 / nw.gamma_s, iallreduce_text(&nw),
           o->threads, cpu,
           o->measure_threads, o->measure_threads > 1 ? "s" : "",
           o->host_cores > 0 ? ", all ranks on this one host" : "");
    printf("hcnn plan: node %s; this machine's FMA rate %.1f GFLOP/s per core on %d thread%s; "
           "a phase's barrier %.2f us there on %d threads, %.2f us here; gradient sums %s%s%s\n",
           node, o->core_gflops, o->measure_threads, o->measure_threads > 1 ? "s" : "",
           o->barrier_s * 1e6, o->threads, o->barrier_here_s * 1e6,
           o->comm.reserved_core ? "on a core reserved for the allreduce (allreduce_progress: "
                                   "thread), "
                                 : "",
           o->comm.team_threads > 1 ? "by the OpenMP team after backward, " : "on one core, ",
           "the agreement on the first bucket");
    fflush(stdout);
    if (!rc)
        rc = fill_rows(cfg, o, &net, &nw, &o->comm, cc, rows, &nrows, 1);
    /* the same step as it was before hcnn's communication changes (the
     * agreement's own allreduce, one-core sums, MPI_Test progress), and with
     * the other allreduce_progress */
    const hcnn_comm_setup was = {0};
    int nbefore = 0, nother = 0;
    hcnn_network nw_test = nw, nw_other = nw;
    nw_test.iallreduce = iallreduce_env;
    nw_other.iallreduce = o->other.reserved_core ? -1 : iallreduce_env;
    if (!rc)
        rc = fill_rows(cfg, o, &net, &nw_test, &was, cc, before, &nbefore, 0);
    if (!rc)
        rc = fill_rows(cfg, o, &net, &nw_other, &o->other, cc, other, &nother, 0);
    /* and with the other optimizer_sharding */
    hcnn_comm_setup flip = o->comm;
    flip.sharded = !flip.sharded;
    int nflipped = 0;
    if (!rc)
        rc = fill_rows(cfg, o, &net, &nw, &flip, cc, flipped, &nflipped, 0);
    if (!rc) {
        const hcnn_pass_cost *weak_pass = NULL;
        if (o->weak)
            rc = pass_cost(cfg, o, &net, cc, b, &weak_pass);
        hcnn_plan_print_rows(rows, nrows, &nw, o, stdout, 0);
        if (weak_pass)
            hcnn_plan_print_passes(&net, weak_pass, o, stdout, 0);
        for (int weak = 1; weak >= 0; weak--)
            if (weak ? o->weak : o->strong) {
                hcnn_plan_print_verdict(rows, nrows, weak, 0.90, stdout);
                if (nbefore == nrows && nother == nrows)
                    hcnn_plan_print_comm_changes(rows, before, other, nrows, weak,
                                                 o->comm.reserved_core, stdout);
                if (nflipped == nrows)
                    hcnn_plan_print_sharding(rows, flipped, nrows, weak, o->comm.sharded, stdout);
            }
        if (!rc && weak_pass && o->out[0]) {
            char path[HCNN_FILE_PATH_MAX + 32];
            rc = hcnn_mkdir_p_for(o->out, "hcnn plan's --out");
            snprintf(path, sizeof path, "%s/plan_passes.csv", o->out);
            FILE *f = NULL;
            if (!rc)
                rc = hcnn_fopen_write(path, "hcnn plan's table of passes", HCNN_EIO, &f);
            if (f) {
                hcnn_plan_print_passes(&net, weak_pass, o, f, 1);
                if (fclose(f) != 0)
                    rc = hcnn_error_code(HCNN_EIO, "cannot write %s", path);
            }
        }
    }
    if (!rc && o->out[0]) {
        rc = hcnn_mkdir_p_for(o->out, "hcnn plan's --out");
        char path[HCNN_FILE_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/plan.csv", o->out);
        FILE *f = NULL;
        if (!rc)
            rc = hcnn_fopen_write(path, "hcnn plan's table", HCNN_EIO, &f);
        if (f) {
            hcnn_plan_print_rows(rows, nrows, &nw, o, f, 1);
            if (fclose(f) != 0)
                rc = hcnn_error_code(HCNN_EIO, "cannot write %s", path);
        }
        if (!rc) {
            char title[512];
            snprintf(title, sizeof title, "hcnn plan: %s on %s, compute from %s x %d threads",
                     cfg->model.name, nw.name, cpu, o->measure_threads);
            int plots = 0;
            rc = hcnn_plan_write_plots(o, o->out, title, &plots);
            printf("hcnn plan: table in %s%s\n", path,
                   plots ? ", plots plan_*.png beside it" : " (no plots: gnuplot failed)");
        }
    }
    free(rows);
    free(before);
    free(other);
    free(flipped);
    free(cc);
    hcnn_net_free(&net);
    return rc;
}

/* A failure before MPI: the exit status, told to the command line first */
static int failed_before_mpi(const hcnn_plan_args *a, hcnn_config *cfg, int status)
{
    free(cfg);
    if (a->before_mpi)
        a->before_mpi(a->before_mpi_ctx, status);
    return status;
}

int hcnn_plan_main(const hcnn_plan_args *a, char **argv)
{
    if (!a->config) /* --calibrate-network alone */
        return hcnn_plan_calibrate(a->calibrate, NULL) == HCNN_OK ? 0 : 1;
    plan_opts o = {.network = a->network, .threads = a->threads,
                   .measure_threads = a->measure_threads, .host_cores = a->host_cores,
                   .microbatches = a->microbatches, .batch = a->batch, .steps = a->steps,
                   .weak = a->weak, .strong = a->strong, .out = a->out,
                   .calibrate = a->calibrate, .gnuplot = "gnuplot", .node_spec = a->node_spec,
                   .nnodes = a->nnodes, .nstages = a->nstages};
    memcpy(o.nodes, a->nodes, sizeof o.nodes);
    memcpy(o.stages, a->stages, sizeof o.stages);
    char outbuf[HCNN_FILE_PATH_MAX];
    const char *env = getenv("GNUPLOT");
    if (env && *env)
        o.gnuplot = env;
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return failed_before_mpi(a, NULL, 1);
    int rc = hcnn_config_load(cfg, a->config, a->sets, a->nset);
    if (rc)
        return failed_before_mpi(a, cfg, 2);
    const int cores = hcnn_physical_cores(NULL); /* SMT siblings share a core: never measured as two */
    if (!o.calibrate) {
        /* both named on the command line: refused as it is (exit 2), before
         * any measurement (--network was read after them, exit 1) */
        hcnn_network nw;
        if (hcnn_node_load(o.node_spec, &o.node) || hcnn_network_load(o.network, &nw))
            return failed_before_mpi(a, cfg, 2);
        if (!o.threads)
            o.threads = o.node.cores; /* one thread per core of the node */
    }
    if (!o.threads)
        o.threads = 64;
    if (!o.measure_threads)
        o.measure_threads = o.threads < cores ? o.threads : cores;
    if (o.measure_threads > cores) {
        fprintf(stderr, "hcnn: --measure-threads %d exceeds this machine's %d cores (hcnn never "
                        "oversubscribes)\n", o.measure_threads, cores);
        return failed_before_mpi(a, cfg, 2);
    }
    if (!o.microbatches)
        o.microbatches = cfg->microbatches > 1 ? cfg->microbatches : 4;
    if (!o.out[0]) {
        snprintf(outbuf, sizeof outbuf, "plan-%s", cfg->model.name);
        o.out = outbuf;
    }
    if (a->no_plots)
        o.gnuplot = "cat >/dev/null";
    if (o.calibrate) /* a pass with one thread per rank: the host's cores shared by its ranks */
        o.measure_threads = 1;
    /* the BLAS kernels a run of this config would use (blas_kernels), at
     * the measurement's thread count: measured or cached, then re-executed
     * with them, as hcnn train does */
    const int cfg_threads = cfg->threads;
    cfg->threads = o.measure_threads;
    int reexec = 0;
    rc = hcnn_blas_choose(cfg, 1, &reexec);
    cfg->threads = cfg_threads;
    if (rc)
        return failed_before_mpi(a, cfg, 1);
    if (a->before_mpi)
        a->before_mpi(a->before_mpi_ctx, 0);
    if (reexec)
        hcnn_blas_reexec(argv);
    if (o.calibrate) {
        cfg->threads = 1;
        rc = hcnn_plan_calibrate(o.calibrate, cfg);
        free(cfg);
        return rc == HCNN_OK ? 0 : 1;
    }
    /* the measurement is one process: MPI for the library's collectives */
    hcnn_comm comm;
    int argc0 = 0;
    char **argv0 = NULL;
    if ((rc = hcnn_comm_init(&comm, &argc0, &argv0))) { /* (or another rank failed) */
        free(cfg);
        return rc == HCNN_EINVAL ? 2 : 1;
    }
    if (comm.size > 1) {
        hcnn_comm_finalize(&comm);
        free(cfg);
        fprintf(stderr, "hcnn: plan runs as one process (only --calibrate-network runs under "
                        "mpirun)\n");
        return 2;
    }
    /* this machine's FMA rate per core with the measurement's threads: the
     * GEMMs' share of peak here, carried to the node's per-core peak (the
     * same machine: the same rate, not measured twice) */
    if (!strcmp(o.node.name, "here"))
        o.core_gflops = o.node.peak_gflops / o.node.cores;
    else if (!(rc = hcnn_measure_fma_gflops(o.measure_threads, &o.core_gflops)))
        o.core_gflops /= o.measure_threads;
    /* a phase's barrier there, and here on the measurement's threads (the
     * measured passes' time less theirs is their work) */
    o.barrier_s = hcnn_node_barrier_s(&o.node, o.threads);
    if (!strcmp(o.node.name, "here") || o.measure_threads < 2) {
        o.barrier_here_s = !strcmp(o.node.name, "here")
                               ? hcnn_node_barrier_s(&o.node, o.measure_threads)
                               : 0.0;
    } else if (!rc) {
        double us = 0.0;
        rc = hcnn_measure_barrier_us(o.measure_threads, &us);
        o.barrier_here_s = us * 1e-6;
    }
    /* the communication a run of this configuration does (grad_sync.c,
     * train.c, run.c), and the other allreduce_progress's */
    hcnn_comm_setup test = {.fold_agreement = 1}, thread = {.fold_agreement = 1, .reserved_core = 1};
    if (!hcnn_grad_sum_mpi()) {
        test.team_threads = o.threads;
        test.team_min_bytes = HCNN_TEAM_SUM_MIN * sizeof(float);
        /* read two floats, write one */
        test.team_mem_gamma_s = 3.0 / (hcnn_node_bandwidth_gbs(&o.node, o.threads) * 1e9);
        test.llc_bytes = o.node.llc_mib * 1048576.0;
    }
    const int threaded = cfg->allreduce_progress == HCNN_PROGRESS_THREAD;
    o.comm = threaded ? thread : test;
    o.other = threaded ? test : thread;
    o.comm.sharded = o.other.sharded = cfg->optimizer_sharding == HCNN_SHARDING_RANKS;
    if (!rc)
        rc = plan_run(cfg, &o);
    hcnn_comm_finalize(&comm);
    free(cfg);
    return rc == HCNN_OK ? 0 : rc == HCNN_EINVAL ? 2 : 1;
}
