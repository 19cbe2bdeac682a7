/* hcnn plan: measure this node's per-block compute at the per-thread share
 * each layout implies, price every layout at every node count
 * (src/plan/model.c), print the table, write plan.csv and the plots, and
 * recommend the fastest layout per node count.  Also --calibrate-network:
 * the alpha-beta-gamma file of the network the ranks run on (under mpirun). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hcnn/backend.h"
#include "hcnn/blas.h"
#include "hcnn/comm.h"
#include "hcnn/common.h"
#include "hcnn/files.h"
#include "hcnn/plan.h"
#include "hcnn/train.h"

#define MAX_NODES 16
#define MAX_STAGE_CHOICES 8
#define MAX_MEASURED 64

typedef struct plan_opts {
    int nodes[MAX_NODES], nnodes;
    int stages[MAX_STAGE_CHOICES], nstages;
    const char *network;
    int threads;          /* target threads per rank */
    int measure_threads;  /* threads here */
    int host_cores;       /* > 0: every rank on one host of that many cores */
    int microbatches;     /* M0 */
    int batch;            /* per-rank batch of weak scaling (0: the config's) */
    int steps;            /* timed steps per measurement */
    int weak, strong;
    const char *out;
    const char *calibrate;
    const char *gnuplot;
} plan_opts;

/* measurements here, by samples measured, and the priced passes */
typedef struct measured {
    int n;
    double fwd[HCNN_MAX_BLOCKS], bwd[HCNN_MAX_BLOCKS], opt_s;
} measured;

typedef struct cost_cache {
    measured m[MAX_MEASURED];
    int nm;
    hcnn_pass_cost c[MAX_MEASURED];
    int nc;
} cost_cache;

static int parse_list(const char *opt, const char *v, int *out, int *count, int cap, int lo,
                      int hi)
{
    int n = 0;
    const char *p = v;
    while (*p) {
        char *end;
        const long k = strtol(p, &end, 10);
        if (end == p || k < lo || k > hi || (*end && *end != ','))
            return hcnn_error_code(HCNN_EINVAL, "%s '%s': expected a comma-separated list of "
                                                "integers in %d..%d",
                                   opt, v, lo, hi);
        if (n == cap)
            return hcnn_error_code(HCNN_EINVAL, "%s '%s': at most %d values", opt, v, cap);
        out[n++] = (int)k;
        p = *end ? end + 1 : end;
    }
    if (!n)
        return hcnn_error_code(HCNN_EINVAL, "%s: empty list", opt);
    *count = n;
    return HCNN_OK;
}

/* ---- compute: the thread model -------------------------------------------- */

/* The pass of n samples at the target's T threads, priced from a
 * measurement here with T_here threads.  hcnn gives each thread whole
 * images (src/layers/conv_plan.c) with a single-threaded BLAS, so a thread
 * of the target with q = n / T images does the work of a thread here with
 * q images: measure q * T_here samples with T_here threads.  The stated
 * assumption: a core of the target computes like a core here, its share of
 * memory bandwidth and cache included (run hcnn plan on the target node
 * itself, --measure-threads = --threads, to take none).  q < 1 (fewer
 * images than threads): hcnn then cuts images into row items; priced as
 * one image per thread here scaled by q, which is optimistic, and flagged. */
static int pass_cost(const hcnn_config *cfg, const plan_opts *o, int nblocks, cost_cache *cc,
                     int n, const hcnn_pass_cost **out)
{
    for (int i = 0; i < cc->nc; i++)
        if (cc->c[i].n == n) {
            *out = &cc->c[i];
            return HCNN_OK;
        }
    const int direct = o->threads == o->measure_threads;
    const double q = (double)n / o->threads;
    const int nm = direct ? n : (int)lround(fmax(q, 1.0) * o->measure_threads);
    const double scale = direct || q >= 1.0 ? 1.0 : q;
    /* the optimiser streams the parameters once, spread over all threads:
     * memory-bound, its time scales with T_here / T */
    const double opt_scale = (double)o->measure_threads / o->threads;
    const measured *m = NULL;
    for (int i = 0; i < cc->nm; i++)
        if (cc->m[i].n == nm)
            m = &cc->m[i];
    if (!m) {
        if (cc->nm == MAX_MEASURED || cc->nc == MAX_MEASURED)
            return hcnn_error("plan: more than %d different pass sizes", MAX_MEASURED);
        measured *w = &cc->m[cc->nm];
        hcnn_config *mc = malloc(sizeof *mc);
        if (!mc)
            return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the configuration");
        *mc = *cfg;
        mc->threads = o->measure_threads;
        printf("hcnn plan: measuring passes of %d samples on %d thread%s (priced as %d samples "
               "on %d threads)\n",
               nm, o->measure_threads, o->measure_threads > 1 ? "s" : "", n, o->threads);
        fflush(stdout);
        const int rc = hcnn_block_times(mc, nm, o->steps, w->fwd, w->bwd, &w->opt_s);
        free(mc);
        if (rc)
            return rc;
        w->n = nm;
        m = w;
        cc->nm++;
    }
    hcnn_pass_cost *c = &cc->c[cc->nc++];
    memset(c, 0, sizeof *c);
    c->n = n;
    c->below_threads = !direct && q < 1.0;
    for (int i = 0; i < nblocks; i++)
        c->fwd[i] = m->fwd[i] * scale, c->bwd[i] = m->bwd[i] * scale;
    c->opt_s = m->opt_s * opt_scale;
    *out = c;
    return HCNN_OK;
}

/* ---- layouts -------------------------------------------------------------- */

typedef struct plan_row {
    int weak;               /* 1 weak, 0 strong scaling */
    hcnn_layout lay;
    hcnn_step_model m;
    int below_threads;
    char note[128];         /* why the global batch differs from the asked one */
    double efficiency;
    int best;
} plan_row;

static int round_up(int v, int k) { return (v + k - 1) / k * k; }

/* The global batch and micro-batches of a layout.  Weak: each rank keeps
 * the per-rank batch b (a pipeline replica carries S b, in micro-batches of
 * b / M0: M = S M0).  Strong: the global batch G0, grown where a rank's
 * pass would have fewer samples than threads, to the smallest multiple of
 * the ranks (data) or of R M (pipeline) that gives each thread one. */
static void layout_for(const plan_opts *o, int G0, int b, int weak, int N, int S, hcnn_layout *l,
                       char *note, size_t cap)
{
    l->nodes = N, l->stages = S, l->replicas = N / S;
    note[0] = '\0';
    if (weak) {
        l->microbatches = S > 1 ? S * o->microbatches : 1;
        l->global_batch = N * b;
        l->pass_samples = S > 1 ? b / o->microbatches : b;
        return;
    }
    const int R = N / S, M = S > 1 ? o->microbatches : 1, parts = R * M;
    int G = round_up(G0, parts);
    if (G / parts < o->threads)
        G = parts * o->threads;
    if (G != G0)
        snprintf(note, cap, "grown from %d to %d: %d passes of >= %d threads' samples", G0, G,
                 parts, o->threads);
    l->microbatches = M;
    l->global_batch = G;
    l->pass_samples = G / parts;
}

static int fill_rows(const hcnn_config *cfg, const plan_opts *o, const hcnn_net *net,
                     const hcnn_network *nw, cost_cache *cc, plan_row *rows, int *nrows)
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
                layout_for(o, G0, b, weak, N, cand[j], &r->lay, r->note, sizeof r->note);
                if (r->lay.pass_samples < 1)
                    continue;
                const hcnn_pass_cost *c = NULL;
                int rc = pass_cost(cfg, o, net->nlayers, cc, r->lay.pass_samples, &c);
                if (!rc)
                    rc = hcnn_plan_step(net, &r->lay, c, nw, cfg->bucket_mb, o->threads,
                                        o->host_cores, &r->m);
                if (rc)
                    return rc;
                r->below_threads = c->below_threads;
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

static void layout_name(const hcnn_layout *l, char *buf, size_t cap)
{
    if (l->stages == 1)
        snprintf(buf, cap, "data");
    else
        snprintf(buf, cap, "pipeline_%dx%d", l->stages, l->replicas);
}

/* ---- output ----------------------------------------------------------------- */

#define CSV_HEADER                                                                                \
    "scaling,nodes,layout,stages,replicas,microbatches,global_batch,pass_samples,images_per_s,"   \
    "step_ms,compute_ms,allreduce_ms,allreduce_total_ms,bubble_ms,p2p_ms,sync_ms,efficiency,"    \
    "best,threads,network,below_threads,note"

static void print_rows(const plan_row *rows, int n, const hcnn_network *nw, const plan_opts *o,
                       FILE *f, int csv)
{
    if (csv)
        fprintf(f, "%s\n", CSV_HEADER);
    else
        fprintf(f, "%-6s %5s %-15s %7s %6s %12s %9s %10s %12s %9s %8s %6s %s\n", "scale",
                "nodes", "layout", "batch", "pass", "images_per_s", "step_ms", "compute_ms",
                "allreduce_ms", "bubble_ms", "p2p_ms", "eff", "best");
    for (int i = 0; i < n; i++) {
        const plan_row *r = &rows[i];
        char name[32];
        layout_name(&r->lay, name, sizeof name);
        const hcnn_step_model *m = &r->m;
        if (csv)
            fprintf(f, "%s,%d,%s,%d,%d,%d,%d,%d,%.2f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%d,%d,"
                       "%s,%d,%s\n",
                    r->weak ? "weak" : "strong", r->lay.nodes, name, r->lay.stages,
                    r->lay.replicas, r->lay.microbatches, r->lay.global_batch,
                    r->lay.pass_samples, m->images_per_s, m->step_s * 1e3, m->compute_s * 1e3,
                    m->allreduce_s * 1e3, m->allreduce_total_s * 1e3, m->bubble_s * 1e3,
                    m->p2p_s * 1e3, m->sync_s * 1e3, r->efficiency, r->best, o->threads,
                    nw->name, r->below_threads, r->note);
        else
            fprintf(f, "%-6s %5d %-15s %7d %6d %12.1f %9.3f %10.3f %12.3f %9.3f %8.3f %6.3f %s%s%s%s\n",
                    r->weak ? "weak" : "strong", r->lay.nodes, name, r->lay.global_batch,
                    r->lay.pass_samples, m->images_per_s, m->step_s * 1e3, m->compute_s * 1e3,
                    m->allreduce_s * 1e3, m->bubble_s * 1e3, m->p2p_s * 1e3, r->efficiency,
                    r->best ? "*" : "", r->below_threads ? " (fewer samples than threads)" : "",
                    r->note[0] ? " batch " : "", r->note);
    }
}

/* What keeps the recommended layout at the largest node count from ideal
 * scaling: the largest of the step's terms beyond the 1-node compute. */
static void print_verdict(const plan_row *rows, int n, int weak, double goal, FILE *f)
{
    const plan_row *best = NULL, *base = NULL;
    for (int i = 0; i < n; i++) {
        if (rows[i].weak != weak)
            continue;
        if (rows[i].lay.nodes == 1 && rows[i].lay.stages == 1)
            base = &rows[i];
        if (rows[i].best && (!best || rows[i].lay.nodes > best->lay.nodes))
            best = &rows[i];
    }
    if (!best || !base)
        return;
    char name[32];
    layout_name(&best->lay, name, sizeof name);
    const hcnn_step_model *m = &best->m;
    /* the ideal step: 1-node time per image x this rank's images */
    const double ideal = base->m.step_s / base->lay.global_batch * best->lay.global_batch /
                         best->lay.nodes;
    const double terms[4] = {m->allreduce_s + m->sync_s, m->bubble_s, m->p2p_s,
                             fmax(0.0, m->compute_s - ideal)};
    const char *names[4] = {"exposed allreduce", "pipeline bubble", "point-to-point",
                            "compute per image (per-rank batch)"};
    int k = 0;
    for (int j = 1; j < 4; j++)
        if (terms[j] > terms[k])
            k = j;
    fprintf(f, "hcnn plan: %s scaling at %d nodes: recommended %s, efficiency %.3f", 
            weak ? "weak" : "strong", best->lay.nodes, name, best->efficiency);
    if (best->efficiency >= goal)
        fprintf(f, " (>= %.2f)", goal);
    else
        fprintf(f, " (< %.2f)", goal);
    fprintf(f, "; largest loss: %s, %.3f ms of a %.3f ms step\n", names[k], terms[k] * 1e3,
            m->step_s * 1e3);
}

static int write_plots(const plan_opts *o, const char *dir, const char *title, int *written)
{
    *written = 0;
    FILE *gp = popen(o->gnuplot, "w");
    if (!gp)
        return HCNN_OK;
    fprintf(gp,
            "set terminal pngcairo size 900,600 noenhanced\n"
            "set datafile separator ','\n"
            "set logscale x 2\nset grid\nset key left top\n"
            "set xlabel 'nodes'\n");
    for (int weak = 1; weak >= 0; weak--) {
        if ((weak && !o->weak) || (!weak && !o->strong))
            continue;
        const char *sc = weak ? "weak" : "strong";
        fprintf(gp,
                "set output '%s/plan_%s.png'\n"
                "set title \"%s\\n%s scaling, %d threads per rank: projected images/s "
                "(* the recommended layout)\" noenhanced\n"
                "set ylabel 'images/s'\nset logscale y 2\n"
                "layouts = system(\"awk -F, 'NR > 1 && $1 == \\\"%s\\\" { print $3 }' "
                "'%s/plan.csv' | sort -u\")\n"
                "plot for [L in layouts] sprintf(\"< awk -F, '$1 == \\\"%s\\\" && $3 == "
                "\\\"%%s\\\"' '%s/plan.csv'\", L) using 2:9 with linespoints title L, "
                "\"< awk -F, '$1 == \\\"%s\\\" && $18 == 1' '%s/plan.csv'\" using 2:9 "
                "with points pt 3 ps 3 lc rgb 'black' title 'recommended'\n"
                "unset logscale y\n",
                dir, sc, title, sc, o->threads, sc, dir, sc, dir, sc, dir);
        fprintf(gp,
                "set output '%s/plan_%s_breakdown.png'\n"
                "set title \"%s\\n%s scaling, recommended layout: step time per term, %d threads "
                "per rank\" noenhanced\n"
                "set ylabel 'ms per step'\nset style data histograms\n"
                "set style histogram rowstacked\nset style fill solid 0.8 border -1\n"
                "unset logscale x\nset key left top\n"
                "plot '< awk -F, \"NR > 1 && \\$1 == \\\"%s\\\" && \\$18 == 1\" %s/plan.csv' "
                "using 11:xtic(stringcolumn(2).\" \".stringcolumn(3)) title 'compute', "
                "'' using 12 title 'exposed allreduce', '' using 14 title 'bubble', "
                "'' using 15 title 'point-to-point', '' using 16 title 'agreement'\n"
                "set style data lines\nset logscale x 2\nunset style\n",
                dir, sc, title, sc, o->threads, sc, dir);
    }
    const int rc = pclose(gp);
    if (rc != 0) {
        hcnn_warn("plan: %s failed (status %d): no plots (Debian: apt-get install gnuplot-nox)",
                  o->gnuplot, rc);
        return HCNN_OK;
    }
    *written = 1;
    return HCNN_OK;
}

/* ---- --calibrate-network (under mpirun, 2+ ranks) ---------------------------- */

static double pingpong(MPI_Comm world, int rank, char *buf, int bytes, int reps)
{
    double t[64];
    if (reps > 64)
        reps = 64;
    for (int k = 0; k < reps; k++) {
        MPI_Barrier(world);
        const double t0 = MPI_Wtime();
        for (int i = 0; i < 10; i++) {
            if (rank == 0) {
                MPI_Send(buf, bytes, MPI_BYTE, 1, 7, world);
                MPI_Recv(buf, bytes, MPI_BYTE, 1, 7, world, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(buf, bytes, MPI_BYTE, 0, 7, world, MPI_STATUS_IGNORE);
                MPI_Send(buf, bytes, MPI_BYTE, 0, 7, world);
            }
        }
        t[k] = (MPI_Wtime() - t0) / 20.0; /* one way */
    }
    return hcnn_median(t, reps);
}

/* Rank 0 alone (the others sleep, not spin, in a barrier), then every rank
 * at once: the slowdown of a pass when all of the host's ranks compute. */
static void sleep_barrier(MPI_Comm world)
{
    MPI_Request req;
    int done = 0;
    MPI_Ibarrier(world, &req);
    while (!done) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) {
            const struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
}

static double pass_seconds(const hcnn_config *cfg)
{
    double fwd[HCNN_MAX_BLOCKS], bwd[HCNN_MAX_BLOCKS], opt = 0.0, t = 0.0;
    if (hcnn_block_times(cfg, cfg->batch_size, 30, fwd, bwd, &opt))
        return -1.0;
    for (int i = 0; i < cfg->model.nblocks; i++)
        t += fwd[i] + bwd[i];
    return t + opt;
}

/* The machine is shared and noisy: 7 alternations of alone and together,
 * the median of their ratios (2 alternations, the last one taken, gave 1.00
 * to 1.11 on one 2-core VM within minutes, and the 2-rank validation
 * point 18% off when it read 1.00). */
static double contention(const hcnn_config *cfg, MPI_Comm world, int rank)
{
    enum { PAIRS = 7 };
    double ratio[PAIRS];
    for (int k = 0; k < PAIRS; k++) {
        double alone = 0.0;
        if (rank == 0)
            alone = pass_seconds(cfg);
        sleep_barrier(world);
        const double together = pass_seconds(cfg);
        sleep_barrier(world);
        ratio[k] = alone > 0 && together > 0 ? together / alone : 1.0;
    }
    double r = hcnn_median(ratio, PAIRS);
    MPI_Bcast(&r, 1, MPI_DOUBLE, 0, world);
    return r < 1.0 ? 1.0 : r;
}

static int calibrate(const char *path, const hcnn_config *cfg)
{
    hcnn_comm comm;
    int argc = 0;
    char **argv = NULL;
    if (hcnn_comm_init(&comm, &argc, &argv))
        return 1;
    if (comm.size < 2) {
        hcnn_comm_finalize(&comm);
        return hcnn_error_code(HCNN_EINVAL, "--calibrate-network measures between ranks 0 and 1: "
                                            "run it under mpirun with 2 ranks (one per node), "
                                            "e.g. mpirun -np 2 --map-by node hcnn plan "
                                            "--calibrate-network FILE");
    }
    const int big = 8 << 20;
    char *buf = hcnn_calloc((size_t)big, "calibration buffer");
    float *a = hcnn_calloc((size_t)big, "calibration buffer"), *b = hcnn_calloc((size_t)big, "calibration buffer");
    if (!buf || !a || !b)
        HCNN_ABORT(&comm, HCNN_ENOMEM, "cannot allocate the calibration buffers");
    const double lat = pingpong(comm.world, comm.rank, buf, 8, 40);
    const double t_big = pingpong(comm.world, comm.rank, buf, big, 9);
    /* one core summing floats, as OpenMPI's reduction does */
    double tr[9];
    const int nf = big / (int)sizeof(float);
    for (int k = 0; k < 9; k++) {
        const double t0 = MPI_Wtime();
        for (int i = 0; i < nf; i++)
            a[i] += b[i];
        tr[k] = MPI_Wtime() - t0;
    }
    const double t_red = hcnn_median(tr, 9) + (a[nf / 2] == 12345.f ? 1e-12 : 0.0);
    const double cont = cfg ? contention(cfg, comm.world, comm.rank) : 1.0;
    /* the allreduce itself, on all ranks: its bandwidth term, solved from
     * the model's formula for the algorithm OpenMPI picks, is what gradient
     * buckets see (on one host's shared memory it is several times below
     * the ping-pong's: two copies through the sm transport) */
    double ta[9];
    for (int k = 0; k < 9; k++) {
        MPI_Barrier(comm.world);
        const double t0 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, a, nf, MPI_FLOAT, MPI_SUM, comm.world);
        ta[k] = MPI_Wtime() - t0;
    }
    double t_ar = hcnn_median(ta, 9);
    MPI_Bcast(&t_ar, 1, MPI_DOUBLE, 0, comm.world);
    const hcnn_network probe = {"probe", lat, 1.0 / 1e12, 1.0 / (big / fmax(t_red, 1e-9)), lat,
                                1.0, -1}; /* the blocking MPI_Allreduce timed above */
    const double fixed = hcnn_allreduce_seconds(&probe, big, comm.size); /* beta ~ 0 */
    const double per_beta = hcnn_allreduce_seconds(&(hcnn_network){"probe", lat, 1.0 / 1e9,
                                                                   probe.gamma_s, lat, 1.0, -1},
                                                   big, comm.size) - fixed; /* at 1 GB/s */
    const double ar_gbs = per_beta > 0 && t_ar > fixed ? per_beta / (t_ar - fixed) : 1.0;
    int rc = HCNN_OK;
    if (comm.rank == 0) {
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        FILE *f = fopen(path, "w");
        if (!f)
            rc = hcnn_error_code(HCNN_EIO, "cannot write %s", path);
        else {
            fprintf(f,
                    "# hcnn plan --calibrate-network: ping-pong between ranks 0 and 1 (%s and its "
                    "peer), %d ranks launched\n"
                    "# one-way: 8 B %.3f us, %d B %.3f ms; summing %d floats on one core %.3f ms\n"
                    "# MPI_Allreduce of %d B on %d ranks: %.3f ms (%s): bandwidth_gbs solved from it\n"
                    "# (the ping-pong's: %.4f GB/s)\n"
                    "name = measured-%s\nalpha_us = %.4f\nbandwidth_gbs = %.4f\n"
                    "reduce_gbs = %.4f\np2p_alpha_us = %.4f\n"
                    "# a pass of %s with every rank computing at once / with rank 0 alone\n"
                    "host_contention = %.4f\n",
                    host, comm.size, lat * 1e6, big, t_big * 1e3, nf, t_red * 1e3, big, comm.size,
                    t_ar * 1e3, hcnn_allreduce_algo_name(hcnn_allreduce_choice(big, comm.size)),
                    big / fmax(t_big - lat, 1e-9) / 1e9, host, lat * 1e6, ar_gbs,
                    big / fmax(t_red, 1e-9) / 1e9, lat * 1e6,
                    cfg ? cfg->model.name : "(no --config: not measured)", cont);
            if (fclose(f) != 0)
                rc = hcnn_error_code(HCNN_EIO, "cannot write %s", path);
            else
                printf("hcnn plan: network calibrated into %s: latency %.2f us, %.2f GB/s, "
                       "reduction %.2f GB/s, host contention %.3f\n",
                       path, lat * 1e6, ar_gbs,
                       big / fmax(t_red, 1e-9) / 1e9, cont);
        }
    }
    free(buf), free(a), free(b);
    MPI_Bcast(&rc, 1, MPI_INT, 0, comm.world);
    hcnn_comm_finalize(&comm);
    return rc;
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
    cost_cache *cc = calloc(1, sizeof *cc);
    plan_row *rows = calloc((size_t)2 * MAX_NODES * (MAX_STAGE_CHOICES + 1), sizeof *rows);
    int nrows = 0;
    if (!cc || !rows)
        rc = hcnn_error_code(HCNN_ENOMEM, "cannot allocate the plan");
    char cpu[256] = "unknown";
    hcnn_cpu_model(cpu, sizeof cpu);
    printf("hcnn plan: model %s (%.2f M parameters, %d blocks), per-rank batch %d (weak), global "
           "batch %d (strong), network %s (latency %.2f us, %.1f GB/s, reduction %.1f GB/s; "
           "gradient buckets by %s), "
           "%d threads per rank; compute measured here (%s) with %d thread%s%s\n",
           cfg->model.name, net.nparams / 1e6, net.nlayers, b, cfg->batch_size, nw.name,
           nw.alpha_s * 1e6, 1e-9 / nw.beta_s, 1e-9 / nw.gamma_s, iallreduce_text(&nw),
           o->threads, cpu,
           o->measure_threads, o->measure_threads > 1 ? "s" : "",
           o->host_cores > 0 ? ", all ranks on this one host" : "");
    fflush(stdout);
    if (!rc)
        rc = fill_rows(cfg, o, &net, &nw, cc, rows, &nrows);
    if (!rc) {
        print_rows(rows, nrows, &nw, o, stdout, 0);
        if (o->weak)
            print_verdict(rows, nrows, 1, 0.90, stdout);
        if (o->strong)
            print_verdict(rows, nrows, 0, 0.90, stdout);
    }
    if (!rc && o->out[0]) {
        rc = hcnn_mkdir_p(o->out);
        char path[HCNN_FILE_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/plan.csv", o->out);
        FILE *f = rc ? NULL : fopen(path, "w");
        if (!rc && !f)
            rc = hcnn_error_code(HCNN_EIO, "cannot write %s", path);
        if (f) {
            print_rows(rows, nrows, &nw, o, f, 1);
            if (fclose(f) != 0)
                rc = hcnn_error_code(HCNN_EIO, "cannot write %s", path);
        }
        if (!rc) {
            char title[512];
            snprintf(title, sizeof title, "hcnn plan: %s on %s, compute from %s x %d threads",
                     cfg->model.name, nw.name, cpu, o->measure_threads);
            int plots = 0;
            rc = write_plots(o, o->out, title, &plots);
            printf("hcnn plan: table in %s%s\n", path,
                   plots ? ", plots plan_*.png beside it" : " (no plots: gnuplot failed)");
        }
    }
    free(rows);
    free(cc);
    hcnn_net_free(&net);
    return rc;
}

static const char *PLAN_USAGE =
    "usage: hcnn plan --config FILE [--nodes 1,2,4,8,16,32] [--network ib-hdr|eth-25g|FILE]\n"
    "                 [--threads 64] [options]\n"
    "       mpirun -np 2 --map-by node hcnn plan --calibrate-network FILE [--config FILE]\n"
    "\n"
    "Project images/s, the time per step and its terms (compute, exposed gradient allreduce,\n"
    "pipeline bubble, point-to-point, the per-step agreement) and the scaling efficiency of\n"
    "data parallelism and of every pipeline layout S stages x N/S replicas, at each node count\n"
    "(one rank per node), for weak scaling (the per-rank batch held) and strong scaling (the\n"
    "global batch, grown where a rank would get fewer samples than threads), and mark the\n"
    "fastest layout per node count (*).  Compute: per-block forward/backward times measured\n"
    "on this node at each layout's per-thread share of samples; network: the allreduce\n"
    "algorithm OpenMPI 4.1 picks (for the gradient buckets libnbc's, as\n"
    "OMPI_MCA_coll_libnbc_iallreduce_algorithm sets it: hcnn's default 3, Rabenseifner),\n"
    "priced alpha-beta-gamma.  docs/plan.md: model, assumptions, validation.\n"
    "\n"
    "options:\n"
    "  -c, --config FILE         run configuration (its model, batch_size, bucket_mb)\n"
    "  -s, --set KEY=VALUE       override a key (repeatable)\n"
    "  --nodes LIST              node counts (default 1,2,4,8,16,32)\n"
    "  --network NAME|FILE       ib-hdr (default), eth-25g, or a file of alpha_us,\n"
    "                            bandwidth_gbs, reduce_gbs [, p2p_alpha_us, name]\n"
    "  --threads T               threads per rank on the target nodes (default 64)\n"
    "  --measure-threads T       threads for the measurement here (default: min(T, cores))\n"
    "  --stages LIST             pipeline stage counts to consider (default 2,4,8)\n"
    "  --microbatches M          micro-batches per replica (strong), per stage (weak:\n"
    "                            M = S x this); default the config's microbatches, or 4\n"
    "  --batch B                 per-rank batch of weak scaling (default batch_size)\n"
    "  --scaling weak|strong|both   (default both)\n"
    "  --host-cores C            validation: every rank on this one host of C cores\n"
    "  --steps K                 timed steps per measurement (default 5)\n"
    "  -o, --out DIR             write DIR/plan.csv and DIR/plan_*.png (default plan-<model>)\n"
    "  --no-plots                table and CSV only\n"
    "  --calibrate-network FILE  under mpirun: measure latency and bandwidth between ranks\n"
    "                            0 and 1 and the reduction rate, write them as a --network FILE;\n"
    "                            with --config also the host contention (a pass of the model\n"
    "                            on 1 thread, all ranks at once vs rank 0 alone: --host-cores)\n"
    "  -h, --help                this help\n";

int hcnn_plan_main(int argc, char **argv)
{
    plan_opts o = {.network = "ib-hdr", .threads = 64, .steps = 5, .weak = 1, .strong = 1,
                   .gnuplot = "gnuplot"};
    const char *config = NULL, *sets[256];
    int nset = 0, noplots = 0, nodes_given = 0, stages_given = 0;
    char outbuf[HCNN_FILE_PATH_MAX];
    o.out = "";
    const char *env = getenv("GNUPLOT");
    if (env && *env)
        o.gnuplot = env;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                                                    \
    do {                                                                                          \
        if (!v) {                                                                                 \
            fprintf(stderr, "hcnn: option %s needs a value\n\n%s", a, PLAN_USAGE);               \
            return 2;                                                                             \
        }                                                                                         \
        i++;                                                                                      \
    } while (0)
        int rc = HCNN_OK;
        char *end;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(PLAN_USAGE, stdout);
            return 0;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--config")) {
            NEED();
            config = v;
        } else if (!strcmp(a, "-s") || !strcmp(a, "--set")) {
            NEED();
            if (nset == 256) {
                fprintf(stderr, "hcnn: at most 256 --set options\n");
                return 2;
            }
            sets[nset++] = v;
        } else if (!strcmp(a, "--nodes")) {
            NEED();
            rc = parse_list(a, v, o.nodes, &o.nnodes, MAX_NODES, 1, 65536);
            nodes_given = 1;
        } else if (!strcmp(a, "--stages")) {
            NEED();
            rc = parse_list(a, v, o.stages, &o.nstages, MAX_STAGE_CHOICES, 2, HCNN_MAX_BLOCKS);
            stages_given = 1;
        } else if (!strcmp(a, "--network")) {
            NEED();
            o.network = v;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "--measure-threads") ||
                   !strcmp(a, "--microbatches") || !strcmp(a, "--batch") ||
                   !strcmp(a, "--host-cores") || !strcmp(a, "--steps")) {
            NEED();
            const long k = strtol(v, &end, 10);
            const long hi = !strcmp(a, "--steps") ? 64 : !strcmp(a, "--batch") ? (1 << 24) : 1024;
            if (*v == '\0' || *end != '\0' || k < 1 || k > hi) {
                fprintf(stderr, "hcnn: %s: expected an integer in 1..%ld, got '%s'\n", a, hi, v);
                return 2;
            }
            if (!strcmp(a, "--threads"))
                o.threads = (int)k;
            else if (!strcmp(a, "--measure-threads"))
                o.measure_threads = (int)k;
            else if (!strcmp(a, "--microbatches"))
                o.microbatches = (int)k;
            else if (!strcmp(a, "--batch"))
                o.batch = (int)k;
            else if (!strcmp(a, "--host-cores"))
                o.host_cores = (int)k;
            else
                o.steps = (int)k;
        } else if (!strcmp(a, "--scaling")) {
            NEED();
            o.weak = !strcmp(v, "weak") || !strcmp(v, "both");
            o.strong = !strcmp(v, "strong") || !strcmp(v, "both");
            if (!o.weak && !o.strong) {
                fprintf(stderr, "hcnn: --scaling: expected weak, strong or both, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            NEED();
            o.out = v;
        } else if (!strcmp(a, "--no-plots")) {
            noplots = 1;
        } else if (!strcmp(a, "--calibrate-network")) {
            NEED();
            o.calibrate = v;
        } else {
            fprintf(stderr, "hcnn: unknown option '%s' for plan\n\n%s", a, PLAN_USAGE);
            return 2;
        }
#undef NEED
        if (rc)
            return 2;
    }
    if (o.calibrate && !config)
        return calibrate(o.calibrate, NULL) == HCNN_OK ? 0 : 1;
    if (!config) {
        fprintf(stderr, "hcnn: missing --config FILE\n\n%s", PLAN_USAGE);
        return 2;
    }
    if (!nodes_given) {
        const int def[] = {1, 2, 4, 8, 16, 32};
        memcpy(o.nodes, def, sizeof def);
        o.nnodes = 6;
    }
    if (!stages_given) {
        o.stages[0] = 2, o.stages[1] = 4, o.stages[2] = 8;
        o.nstages = 3;
    }
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return 1;
    int rc = hcnn_config_load(cfg, config, sets, nset);
    if (rc) {
        free(cfg);
        return 2;
    }
    const int cores = omp_get_num_procs();
    if (!o.measure_threads)
        o.measure_threads = o.threads < cores ? o.threads : cores;
    if (o.measure_threads > cores) {
        free(cfg);
        fprintf(stderr, "hcnn: --measure-threads %d exceeds this machine's %d cores (hcnn never "
                        "oversubscribes)\n", o.measure_threads, cores);
        return 2;
    }
    if (!o.microbatches)
        o.microbatches = cfg->microbatches > 1 ? cfg->microbatches : 4;
    if (!o.out[0]) {
        snprintf(outbuf, sizeof outbuf, "plan-%s", cfg->model.name);
        o.out = outbuf;
    }
    if (noplots)
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
    if (rc) {
        free(cfg);
        return 1;
    }
    if (reexec)
        hcnn_blas_reexec(argv);
    if (o.calibrate) {
        cfg->threads = 1;
        rc = calibrate(o.calibrate, cfg);
        free(cfg);
        return rc == HCNN_OK ? 0 : 1;
    }
    /* the measurement is one process: MPI for the library's collectives */
    hcnn_comm comm;
    int argc0 = 0;
    char **argv0 = NULL;
    if (hcnn_comm_init(&comm, &argc0, &argv0)) {
        free(cfg);
        return 1;
    }
    if (comm.size > 1) {
        hcnn_comm_finalize(&comm);
        free(cfg);
        fprintf(stderr, "hcnn: plan runs as one process (only --calibrate-network runs under "
                        "mpirun)\n");
        return 2;
    }
    rc = plan_run(cfg, &o);
    hcnn_comm_finalize(&comm);
    free(cfg);
    return rc == HCNN_OK ? 0 : rc == HCNN_EINVAL ? 2 : 1;
}
