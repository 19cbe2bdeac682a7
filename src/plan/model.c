/* hcnn plan's arithmetic (include/hcnn/plan.h): the network's allreduce
 * and point-to-point costs, and the price of one step of a layout.  The
 * formulas and their assumptions are in docs/plan.md. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hcnn/comm.h"
#include "hcnn/common.h"
#include "hcnn/files.h"
#include "hcnn/grad_sync.h"
#include "hcnn/plan.h"
#include "hcnn/strategy.h"

/* ---- networks ---------------------------------------------------------------- */

/* Presets, one rank per node, everything between nodes.
 *   ib-hdr  InfiniBand HDR (200 Gb/s = 25 GB/s per direction): OSU
 *           osu_latency about 1.1 us between hosts and osu_bw about 24 GB/s
 *           for large messages on ConnectX-6 HDR; 1.5 us and 23 GB/s are
 *           taken for MPI with its software overhead.
 *   eth-25g 25 Gb/s Ethernet over TCP (OpenMPI's tcp BTL): 3.125 GB/s on
 *           the wire, about 2.8 GB/s achieved; latency about 20 us.
 * Reduction (gamma): OpenMPI sums on one core per rank with vector code,
 * memory-bound at 3 streams: 8 GB/s is taken (a Zen/Xeon core's share of
 * a STREAM triad). */
static const hcnn_network PRESETS[] = {
    {"ib-hdr", 1.5e-6, 1.0 / 23e9, 1.0 / 8e9, 1.5e-6, 1.0, HCNN_IALLREDUCE_DEFAULT},
    {"eth-25g", 20e-6, 1.0 / 2.8e9, 1.0 / 8e9, 20e-6, 1.0, HCNN_IALLREDUCE_DEFAULT},
};

/* The gradient buckets' libnbc algorithm as MPI_Init will see it: the
 * environment's (a number or OpenMPI's name for it), else hcnn's default. */
static int iallreduce_setting(int *setting)
{
    static const char *const names[] = {"ignore", "ring", "binomial", "rabenseifner",
                                        "recursive_doubling"};
    const char *v = getenv(HCNN_IALLREDUCE_ENV);
    *setting = HCNN_IALLREDUCE_DEFAULT;
    if (!v || !*v)
        return HCNN_OK;
    for (int i = 0; i < 5; i++) {
        char digit[2] = {(char)('0' + i), '\0'};
        if (!strcmp(v, names[i]) || !strcmp(v, digit)) {
            *setting = i;
            return HCNN_OK;
        }
    }
    return hcnn_error_code(HCNN_EINVAL, "%s='%s': expected 0-4 or ignore, ring, binomial, "
                                        "rabenseifner, recursive_doubling",
                           HCNN_IALLREDUCE_ENV, v);
}

int hcnn_network_load(const char *spec, hcnn_network *nw)
{
    int setting, rc = iallreduce_setting(&setting);
    if (rc)
        return rc;
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
        if (!strcmp(spec, PRESETS[i].name)) {
            *nw = PRESETS[i];
            nw->iallreduce = setting;
            return HCNN_OK;
        }
    struct stat st;
    if (stat(spec, &st) != 0)
        return hcnn_error_code(HCNN_EIO, "--network '%s': neither a preset (ib-hdr, eth-25g) "
                                         "nor a readable file (%s)",
                               spec, strerror(errno));
    FILE *f; /* a FIFO named here blocked hcnn plan in fopen */
    if ((rc = hcnn_fopen_regular(spec, "--network file", HCNN_EIO, &f)))
        return rc;
    memset(nw, 0, sizeof *nw);
    snprintf(nw->name, sizeof nw->name, "%.63s", spec);
    double alpha = -1, bw = -1, red = -1, p2p = -1, cont = 1.0;
    char line[512];
    int lineno = 0;
    nw->iallreduce = setting;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line + strspn(line, " \t");
        if (*p == '#' || *p == '\n' || *p == '\0')
            continue;
        char key[64], val[256];
        if (sscanf(p, " %63[a-z_0-9] = %255[^\n#]", key, val) != 2) {
            rc = hcnn_error("%s:%d: expected 'key = value', got '%.60s'", spec, lineno, p);
            break;
        }
        val[strcspn(val, " \t\r")] = '\0';
        if (!strcmp(key, "name")) {
            snprintf(nw->name, sizeof nw->name, "%.63s", val);
            continue;
        }
        char *end;
        const double v = strtod(val, &end);
        if (*end || !(v > 0) || !isfinite(v)) {
            rc = hcnn_error("%s:%d: %s: expected a positive number, got '%s'", spec, lineno, key,
                            val);
            break;
        }
        if (!strcmp(key, "alpha_us"))
            alpha = v;
        else if (!strcmp(key, "bandwidth_gbs"))
            bw = v;
        else if (!strcmp(key, "reduce_gbs"))
            red = v;
        else if (!strcmp(key, "p2p_alpha_us"))
            p2p = v;
        else if (!strcmp(key, "host_contention"))
            cont = v;
        else
            rc = hcnn_error("%s:%d: unknown key '%s' (alpha_us, bandwidth_gbs, reduce_gbs, "
                            "p2p_alpha_us, host_contention, name)",
                            spec, lineno, key);
    }
    fclose(f);
    if (rc)
        return rc;
    if (alpha < 0 || bw < 0 || red < 0)
        return hcnn_error("%s: needs alpha_us, bandwidth_gbs and reduce_gbs", spec);
    nw->alpha_s = alpha * 1e-6;
    nw->beta_s = 1.0 / (bw * 1e9);
    nw->gamma_s = 1.0 / (red * 1e9);
    nw->p2p_alpha_s = (p2p > 0 ? p2p : alpha) * 1e-6;
    nw->contention = cont;
    return HCNN_OK;
}

/* ---- allreduce ------------------------------------------------------------------ */

/* OpenMPI 4.1, ompi/mca/coll/tuned/coll_tuned_decision_fixed.c,
 * ompi_coll_tuned_allreduce_intra_dec_fixed, commutative operations (the
 * table measured by the OpenMPI team, used unless coll_tuned_use_dynamic_
 * rules is set).  Up to 63 ranks; above, Rabenseifner for every size a
 * gradient bucket has (>= 256 KiB). */
hcnn_allreduce_algo hcnn_allreduce_choice(double bytes, int p)
{
    if (p <= 1)
        return HCNN_AR_NONE;
    if (p < 4) {
        if (bytes < 8)
            return HCNN_AR_RING;
        if (bytes < 4096)
            return HCNN_AR_RECURSIVE_DOUBLING;
        if (bytes < 8192)
            return HCNN_AR_RING;
        if (bytes < 16384)
            return HCNN_AR_RECURSIVE_DOUBLING;
        if (bytes < 65536)
            return HCNN_AR_RING;
        if (bytes < 262144)
            return HCNN_AR_SEGMENTED_RING;
        return HCNN_AR_RABENSEIFNER;
    }
    if (p < 8)
        return bytes < 16 ? HCNN_AR_RING : bytes < 8192 ? HCNN_AR_RECURSIVE_DOUBLING
                                                        : HCNN_AR_RABENSEIFNER;
    if (p < 16)
        return bytes < 8192 ? HCNN_AR_RECURSIVE_DOUBLING : HCNN_AR_RABENSEIFNER;
    if (p < 32)
        return bytes < 64     ? HCNN_AR_SEGMENTED_RING
               : bytes < 4096 ? HCNN_AR_RECURSIVE_DOUBLING
                              : HCNN_AR_RABENSEIFNER;
    if (p < 64)
        return bytes < 128 ? HCNN_AR_SEGMENTED_RING : HCNN_AR_RABENSEIFNER;
    if (p < 128)
        return bytes < 262144 ? HCNN_AR_RECURSIVE_DOUBLING : HCNN_AR_RABENSEIFNER;
    return bytes < 262144 ? HCNN_AR_RECURSIVE_DOUBLING : HCNN_AR_RABENSEIFNER;
}

const char *hcnn_allreduce_algo_name(hcnn_allreduce_algo a)
{
    switch (a) {
    case HCNN_AR_RECURSIVE_DOUBLING: return "recursive_doubling";
    case HCNN_AR_RING: return "ring";
    case HCNN_AR_SEGMENTED_RING: return "segmented_ring";
    case HCNN_AR_RABENSEIFNER: return "rabenseifner";
    case HCNN_AR_BINOMIAL: return "binomial";
    default: return "none";
    }
}

/* Costs with n bytes on p ranks (Thakur, Rabenseifner, Gropp, "Optimization
 * of collective communication operations in MPICH", IJHPCA 2005), p' the
 * largest power of two <= p; a non-power-of-two p first folds the extra
 * ranks in and finally sends them the result: 2 (alpha + n beta) + n gamma.
 *   recursive doubling  log2 p' (alpha + n beta + n gamma)
 *   ring                2 (p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma
 *   Rabenseifner        2 log2 p' alpha + 2 (p'-1)/p' n beta + (p'-1)/p' n gamma
 *   binomial (libnbc)   ceil(log2 p) (2 alpha + 2 n beta + n gamma): the
 *                       reduce's rounds, then the root's broadcast sends
 * The segmented ring is priced as the ring (OpenMPI picks it only for
 * messages below 256 KiB, where both are a few latencies). */
static int largest_pow2_upto(int p)
{
    int pp = 1;
    while (pp * 2 <= p)
        pp *= 2;
    return pp;
}

/* Seconds to sum `bytes` of floats: one core at gamma, or the OpenMP team
 * (grad_sync.c's own MPI_Op) for sums of at least team_min_bytes, each
 * thread at one core's rate (measured on 2 threads here: 2.07-2.25x one
 * core's MPI_SUM on 4-16 MiB, bench/bench_comm sum), and no faster than
 * the node's memory when the three streams outgrow its last-level cache. */
static double sum_seconds(const hcnn_network *nw, const hcnn_comm_setup *team, double bytes)
{
    if (!team || team->team_threads < 2 || bytes < team->team_min_bytes)
        return bytes * nw->gamma_s;
    double per_byte = nw->gamma_s / team->team_threads;
    if (3.0 * bytes > team->llc_bytes)
        per_byte = fmax(per_byte, team->team_mem_gamma_s);
    return bytes * per_byte;
}

/* The costs above, each algorithm's reductions summed round by round (the
 * team only takes rounds whose chunk is large enough). */
static double algo_time(const hcnn_network *nw, hcnn_allreduce_algo a, double n, int p,
                        const hcnn_comm_setup *team)
{
    if (a == HCNN_AR_NONE)
        return 0.0;
    const int pp = largest_pow2_upto(p);
    int lg = 0, lgc = 0; /* log2 pp, ceil(log2 p) */
    while ((1 << lg) < pp)
        lg++;
    while ((1 << lgc) < p)
        lgc++;
    const double fold =
        pp == p ? 0.0 : 2.0 * (nw->alpha_s + n * nw->beta_s) + sum_seconds(nw, team, n);
    const double al = nw->alpha_s, be = nw->beta_s;
    switch (a) {
    case HCNN_AR_RECURSIVE_DOUBLING: return fold + lg * (al + n * be + sum_seconds(nw, team, n));
    case HCNN_AR_RABENSEIFNER: {
        double sums = 0.0, chunk = n; /* recursive halving: n/2, n/4, ... n/pp */
        for (int k = 0; k < lg; k++)
            chunk /= 2.0, sums += sum_seconds(nw, team, chunk);
        return fold + 2.0 * lg * al + 2.0 * (pp - 1) / pp * n * be + sums;
    }
    case HCNN_AR_BINOMIAL: return lgc * (2.0 * al + 2.0 * n * be + sum_seconds(nw, team, n));
    default:
        return 2.0 * (p - 1) * al + 2.0 * (p - 1) / p * n * be +
               (p - 1) * sum_seconds(nw, team, n / p);
    }
}

/* The sharded optimiser's collectives (grad_sync.h), n bytes on p ranks.
 * Its reduce-scatter (src/parallel/reduce_scatter.h): the first half of
 * Rabenseifner's allreduce, on the polling thread or the communication
 * thread alike: when p is not a power of two, the fold (a whole bucket sent
 * and added: alpha + n beta + n gamma), then log2 p' halvings of n/2,
 * n/4 ... n/p' bytes each (alpha + that beta + its sum).  Its all-gather:
 * libnbc's MPI_Iallgatherv is linear, tuned's a ring: both
 * (p-1) (alpha + n/p beta). */
static double reduce_scatter_time(const hcnn_network *nw, double n, int p,
                                  const hcnn_comm_setup *team)
{
    if (p <= 1)
        return 0.0;
    const int pp = largest_pow2_upto(p);
    double t = pp == p ? 0.0 : nw->alpha_s + n * nw->beta_s + sum_seconds(nw, team, n);
    for (double chunk = n / 2.0; pp > 1 && chunk >= n / pp; chunk /= 2.0)
        t += nw->alpha_s + chunk * nw->beta_s + sum_seconds(nw, team, chunk);
    return t;
}

static double allgather_time(const hcnn_network *nw, double n, int p)
{
    return p <= 1 ? 0.0 : (p - 1) * (nw->alpha_s + n / p * nw->beta_s);
}

static double algo_seconds(const hcnn_network *nw, hcnn_allreduce_algo a, double n, int p)
{
    return algo_time(nw, a, n, p, NULL);
}

double hcnn_allreduce_seconds(const hcnn_network *nw, double n, int p)
{
    return algo_seconds(nw, hcnn_allreduce_choice(n, p), n, p);
}

/* OpenMPI 4.1, ompi/mca/coll/libnbc/nbc_iallreduce.c, nbc_allreduce_init:
 * setting 0 takes the binomial tree when p < 4, under 64 KiB, or in place
 * (hcnn's buckets always are), else Rabenseifner; 3 takes Rabenseifner when
 * the count is at least the largest power of two <= p, else the ring. */
hcnn_allreduce_algo hcnn_iallreduce_choice(double bytes, int p, int setting)
{
    if (p <= 1)
        return HCNN_AR_NONE;
    if (setting < 0)
        return hcnn_allreduce_choice(bytes, p);
    switch (setting) {
    case 1: return HCNN_AR_RING;
    case 3:
        return bytes / sizeof(float) >= largest_pow2_upto(p) ? HCNN_AR_RABENSEIFNER : HCNN_AR_RING;
    case 4: return HCNN_AR_RECURSIVE_DOUBLING;
    default: return HCNN_AR_BINOMIAL; /* 2, and 0 for an in-place call */
    }
}

double hcnn_iallreduce_seconds(const hcnn_network *nw, double n, int p)
{
    return algo_seconds(nw, hcnn_iallreduce_choice(n, p, nw->iallreduce), n, p);
}

double hcnn_p2p_seconds(const hcnn_network *nw, double bytes)
{
    return nw->p2p_alpha_s + bytes * nw->beta_s;
}

/* ---- a step --------------------------------------------------------------------- */

/* The gradient allreduce of blocks [first, last) on p ranks, overlapped with
 * the backward pass that produces it: bucket k can start when backward has
 * passed its lowest block (backward runs from the last block down) and
 * after bucket k-1 (one allreduce at a time, in order).  What overlaps is
 * not free: with allreduce_progress: test (the default) OpenMPI's libnbc
 * runs a bucket's reductions (MPI_Reduce_local, the n gamma term) inside
 * the MPI_Test that hcnn calls between blocks, on the rank's main thread,
 * while its other threads wait; so a bucket started during backward
 * lengthens backward by its reduction time.  With every rank on one host
 * (shared_memory) the transfer is CPU work too: OpenMPI's vader transport
 * copies the bytes inside those MPI_Test calls, so the whole bucket's time
 * lengthens backward (on 2 ranks of a 2-core VM the 2-rank data point of
 * tests/integration/test_plan.sh was predicted 11-15% fast when only the reduction was
 * charged; see docs/plan.md).  Returns the time the
 * allreduce adds to the step: that lengthening plus what ends after the
 * (lengthened) backward; *total: all buckets' time. */
static double bucket_timeline(const hcnn_net *net, int first, int last, const double *bwd,
                              double stretch, double bucket_mb, const hcnn_network *nw,
                              const hcnn_comm_setup *cs, int p, int shared_memory, double *total,
                              int *nbuckets, double *gathers)
{
    *gathers = 0.0;
    hcnn_bucket buckets[HCNN_MAX_BLOCKS];
    const int nb = hcnn_grad_buckets(net, first, last, bucket_mb, buckets);
    *nbuckets = nb;
    *total = 0.0;
    if (p <= 1 || nb == 0)
        return 0.0;
    const hcnn_network gamma_only = {.gamma_s = nw->gamma_s, .iallreduce = nw->iallreduce};
    const hcnn_network *on_cpu = shared_memory ? nw : &gamma_only;
    double backward = 0.0;
    for (int i = first; i < last; i++)
        backward += bwd[i] * stretch;
    double end = 0.0, delay = 0.0;
    for (int k = 0; k < nb; k++) {
        double ready = delay; /* backward time until the bucket's lowest block is done */
        for (int i = last - 1; i >= buckets[k].lowest_block; i--)
            ready += bwd[i] * stretch;
        const double bytes = (double)buckets[k].count * sizeof(float);
        /* the team sums only what runs outside backward's parallel regions:
         * priced as all of it (the part inside is in delay below) */
        const hcnn_allreduce_algo a = hcnn_iallreduce_choice(bytes, p, nw->iallreduce);
        const double t = cs->sharded ? reduce_scatter_time(nw, bytes, p,
                                                           cs->reserved_core ? NULL : cs)
                                     : algo_time(nw, a, bytes, p, cs->reserved_core ? NULL : cs),
                     start = fmax(end, ready);
        /* on a reserved core the reductions stall no computing thread */
        if (start < backward + delay && !cs->reserved_core)
            delay += cs->sharded ? reduce_scatter_time(on_cpu, bytes, p, NULL)
                                 : hcnn_iallreduce_seconds(on_cpu, bytes, p);
        *total += t;
        end = start + t;
        /* sharded: the bucket's parameters all-gathered after the update */
        if (cs->sharded)
            *gathers += allgather_time(nw, bytes, p);
    }
    *total += *gathers;
    return delay + fmax(0.0, end - (backward + delay));
}

/* Sharded data parallelism with MPI_Test progress: the all-gathers, the
 * first blocks' bucket first, one after another from the update's end,
 * overlap the next forward, which waits for each bucket just before its
 * first block (grad_sync.h); what the forward waits: the largest lag of a
 * bucket's arrival behind the forward's arrival at its first block. */
static double gathers_exposed(const hcnn_net *net, const double *fwd, double stretch,
                              double bucket_mb, const hcnn_network *nw, int p)
{
    hcnn_bucket buckets[HCNN_MAX_BLOCKS];
    const int nb = hcnn_grad_buckets(net, 0, net->nlayers, bucket_mb, buckets);
    double arrived = 0.0, lag = 0.0;
    for (int k = nb - 1; k >= 0; k--) {
        arrived += allgather_time(nw, (double)buckets[k].count * sizeof(float), p);
        double reached = 0.0; /* the forward's time to the bucket's first block */
        for (int i = 0; i < buckets[k].lowest_block; i++)
            reached += fwd[i] * stretch;
        lag = fmax(lag, arrived - reached);
    }
    return lag;
}

static double params_share(const hcnn_net *net, int first, int last)
{
    size_t off, count;
    hcnn_net_param_range(net, first, last, &off, &count);
    return net->nparams ? (double)count / (double)net->nparams : 0.0;
}

int hcnn_plan_step(const hcnn_net *net, const hcnn_layout *lay, const hcnn_pass_cost *cost,
                   const hcnn_network *nw, const hcnn_comm_setup *cs, double bucket_mb,
                   int threads, int host_cores, hcnn_step_model *m)
{
    memset(m, 0, sizeof *m);
    const int L = net->nlayers, N = lay->nodes, S = lay->stages, R = lay->replicas;
    if (S < 1 || R < 1 || S * R != N || S > L || lay->pass_samples < 1)
        return hcnn_error("plan: layout %d nodes = %d stages x %d replicas with %d samples "
                          "per pass is not possible for %d blocks",
                          N, S, R, lay->pass_samples, L);
    /* ranks sharing one host's cores: every rank computes at once */
    const double load = host_cores > 0 ? (double)N * threads / host_cores : 1.0;
    /* and slow each other down (shared caches, memory, SMT siblings) */
    double contended = host_cores > 0 && N > 1 ? nw->contention : 1.0;
    /* a core reserved for the allreduce: the pass on threads - 1 (each
     * thread's share of the samples grows by threads / (threads - 1)) */
    if (cs->reserved_core && threads > 1 && R > 1)
        contended *= (double)threads / (threads - 1);
    /* data parallel: the agreement's floats ride on the first bucket, but
     * when sharded (a reduce-scatter leaves them on one rank); sharded, the
     * ranks' sums of squares are gathered too (an allgather of 3 doubles a
     * rank: the allreduce of that many bytes prices its latencies) */
    const int P = S == 1 ? N : R; /* the ranks that hold the same parameters */
    const int sharded = cs->sharded && P > 1;
    m->sync_s = S == 1 && cs->fold_agreement && !sharded
                    ? 0.0
                    : hcnn_allreduce_seconds(nw, 3 * sizeof(int), N);
    if (sharded)
        m->sync_s += hcnn_allreduce_seconds(nw, 3.0 * sizeof(double) * P, P);
    if (S == 1) {
        const double stretch = fmax(1.0, load) * contended;
        double F = 0.0, B = 0.0;
        for (int i = 0; i < L; i++)
            F += cost->fwd[i] * stretch, B += cost->bwd[i] * stretch;
        m->opt_s = cost->opt_s * stretch / (sharded ? N : 1);
        m->compute_s = F + B + m->opt_s;
        m->allreduce_s = bucket_timeline(net, 0, L, cost->bwd, stretch, bucket_mb, nw, cs, N,
                                         host_cores > 0, &m->allreduce_total_s, &m->nbuckets,
                                         &m->gather_s);
        /* the all-gathers: waited in the next forward with MPI_Test
         * progress, after the update on the communication thread */
        if (sharded && !cs->reserved_core)
            m->gather_s = gathers_exposed(net, cost->fwd, stretch, bucket_mb, nw, N);
        m->allreduce_s += m->gather_s;
        m->bounds[0] = 0, m->bounds[1] = L;
        m->step_s = m->compute_s + m->allreduce_s + m->sync_s;
    } else {
        const int M = lay->microbatches;
        double c[HCNN_MAX_BLOCKS];
        for (int i = 0; i < L; i++)
            c[i] = cost->fwd[i] + cost->bwd[i];
        unsigned char no_cut[HCNN_MAX_BLOCKS];
        hcnn_pipe_no_cut(net, no_cut);
        const int rc = hcnn_pipe_balance(c, L, S, no_cut, m->bounds);
        if (rc)
            return rc;
        double fw[HCNN_MAX_BLOCKS], bw[HCNN_MAX_BLOCKS];
        for (int i = 0; i < L; i++)
            fw[i] = cost->fwd[i] * contended, bw[i] = cost->bwd[i] * contended;
        double f[HCNN_MAX_BLOCKS], b[HCNN_MAX_BLOCKS], x[HCNN_MAX_BLOCKS], opt[HCNN_MAX_BLOCKS];
        double slowest = 0.0, fill = 0.0, busy = 0.0;
        int star = 0;
        for (int s = 0; s < S; s++) {
            f[s] = b[s] = 0.0;
            for (int i = m->bounds[s]; i < m->bounds[s + 1]; i++)
                f[s] += fw[i], b[s] += bw[i];
            /* activations forward and their gradients back, per micro-batch */
            const hcnn_layer *out = &net->layers[m->bounds[s + 1] - 1];
            x[s] = s < S - 1 ? 2.0 * hcnn_p2p_seconds(nw, (double)lay->pass_samples *
                                                              hcnn_layer_out_size(out) *
                                                              sizeof(float))
                             : 0.0;
            opt[s] = cost->opt_s * contended * params_share(net, m->bounds[s], m->bounds[s + 1]) /
                     (sharded ? R : 1);
            if (f[s] + b[s] > slowest)
                slowest = f[s] + b[s], star = s;
            fill += f[s] + b[s] + x[s];
            busy += R * (M * (f[s] + b[s]) + opt[s]);
        }
        /* the first micro-batch crosses every stage forward and back (with
         * the transfers), the other M - 1 follow at the slowest stage's pace
         * (GPipe and 1F1B alike) */
        const double pipe = fill + (M - 1) * slowest;
        /* stage s ends its last backward before stages 0..s-1 do theirs;
         * then its replicas' allreduce (what it adds) and its optimiser */
        double end = 0.0;
        for (int s = 0; s < S; s++) {
            double total, gathers;
            int nb;
            double added = bucket_timeline(net, m->bounds[s], m->bounds[s + 1], bw, 1.0,
                                           bucket_mb, nw, cs, R, host_cores > 0, &total, &nb,
                                           &gathers);
            double done = pipe;
            for (int j = 0; j < s; j++)
                done -= b[j];
            added += gathers; /* a pipeline waits for them after the update */
            if (done + added + opt[s] > end) {
                end = done + added + opt[s];
                m->allreduce_s = added, m->allreduce_total_s = total, m->nbuckets = nb;
                m->gather_s = gathers;
            }
        }
        m->compute_s = M * (f[star] + b[star]) + opt[star];
        m->opt_s = opt[star];
        m->p2p_s = 0.0;
        for (int s = 0; s < S; s++)
            m->p2p_s += x[s];
        m->step_s = end + m->sync_s;
        /* one host's cores shared by all ranks: the step takes at least the
         * ranks' summed busy time over the cores */
        if (load > 1.0)
            m->step_s = fmax(m->step_s, busy * threads / host_cores + m->allreduce_s + m->sync_s);
        m->bubble_s = fmax(0.0, m->step_s - m->compute_s - m->allreduce_s - m->p2p_s - m->sync_s);
    }
    m->images_per_s = m->step_s > 0 ? lay->global_batch / m->step_s : 0.0;
    return HCNN_OK;
}

/* ---- compute on the node asked about ------------------------------------------ */

/* Per-sample floats streamed by one non-GEMM layer (see plan.h); prev: the
 * layer before it in its chain (a ReLU after a layer with forward_fused
 * runs inside that layer's pass). */
static void layer_stream(const hcnn_layer *l, const hcnn_layer *prev, double *f, double *b,
                         double *kept)
{
    const double in = (double)l->in_c * l->in_h * l->in_w,
                 out = (double)l->out_c * l->out_h * l->out_w;
    *kept += out;
    switch (l->kind) {
    case HCNN_BLOCK_CONV:
    case HCNN_BLOCK_FC:
    case HCNN_BLOCK_FLATTEN: break;
    case HCNN_BLOCK_BN: *f += 3 * out, *b += 5 * out; break;
    case HCNN_BLOCK_RELU:
    case HCNN_BLOCK_LEAKY_RELU:
        if (!(l->ops->is_relu && prev && prev->ops->forward_fused))
            *f += 2 * out, *b += 3 * out;
        break;
    case HCNN_BLOCK_MAXPOOL: *f += in + 2 * out, *b += 2 * out + in; break;
    case HCNN_BLOCK_DROPOUT: *f += 3 * out, *b += 3 * out; break;
    case HCNN_BLOCK_RESIDUAL:
        for (int j = 0; j < l->nchildren; j++)
            layer_stream(&l->children[j], j > 0 && j != l->nbody ? &l->children[j - 1] : NULL, f,
                         b, kept);
        *f += 3 * out, *b += 2 * out;
        break;
    default: *f += in + out, *b += in + out; break; /* average pools */
    }
}

void hcnn_block_stream_bytes(const hcnn_layer *l, double *fwd, double *bwd, double *kept)
{
    double f = 0.0, b = 0.0, k = 0.0;
    layer_stream(l, NULL, &f, &b, &k);
    *fwd = f * sizeof(float), *bwd = b * sizeof(float), *kept = k * sizeof(float);
}

static double block_flops(const hcnn_layer *l)
{
    double s = hcnn_layer_is_gemm(l) ? l->flops_per_sample : 0.0;
    for (int j = 0; j < l->nchildren; j++)
        s += block_flops(&l->children[j]);
    return s;
}

/* ---- how a pass divides among threads (the backend's pieces) ------------------ */

/* A phase of `pieces` pieces (work in all, the largest `largest`) on nt
 * threads: each thread takes whole pieces, ceil(pieces / nt) of them at
 * most, and none ends before the largest piece. */
static double phase_time(const hcnn_phase *ph, int nt)
{
    const double rounds = (double)((ph->pieces + nt - 1) / nt);
    const double spread = ph->work * rounds / (double)ph->pieces;
    return ph->repeat * fmax(spread, ph->largest);
}

/* A GEMM layer's pass, for the table: its time on the cuts' threads (in
 * the backend's work units: comparable between its layers), its one-thread
 * work, and the pieces of its costliest phase. */
typedef struct gemm_pass {
    const hcnn_layer *layer;
    int bwd;
    double time, work;
    long pieces;
} gemm_pass;

#define MAX_GEMM_PASSES 256

/* What one block's layers add up to (hcnn_plan_cuts), and the GEMM
 * layers' passes of the whole network. */
typedef struct cut_acc {
    double work[HCNN_CUTS], time[HCNN_CUTS];
    int phases[HCNN_CUTS];
    gemm_pass *passes;
    int npasses;
    int nt;
} cut_acc;

static void add_pieces(cut_acc *a, const hcnn_layer *l, int gemm, int bwd, const hcnn_pieces *p)
{
    const int g = (gemm ? HCNN_CUT_GEMM_FWD : HCNN_CUT_OTHER_FWD) + bwd;
    double work = 0.0, time = 0.0, costliest = -1.0;
    long pieces = 0;
    for (int k = 0; k < p->nphases; k++) {
        const hcnn_phase *ph = &p->phase[k];
        const double t = phase_time(ph, a->nt);
        work += ph->work * ph->repeat, time += t;
        a->phases[g] += ph->repeat;
        if (t > costliest)
            costliest = t, pieces = ph->pieces;
    }
    a->work[g] += work, a->time[g] += time;
    if (gemm && time > 0.0 && a->npasses < MAX_GEMM_PASSES)
        a->passes[a->npasses++] = (gemm_pass){l, bwd, time, work, pieces};
}

/* The table's figures from the GEMM layers' passes: the slowest on the
 * cuts' threads, and the range of pieces of those that take at least 1%
 * of their time (a fully connected layer's tiny GEMM offers one piece) */
static void slowest_pass(const gemm_pass *ps, int np, hcnn_plan_cuts *c)
{
    double total = 0.0;
    const gemm_pass *slow = NULL;
    for (int k = 0; k < np; k++) {
        total += ps[k].time;
        if (!slow || ps[k].time > slow->time)
            slow = &ps[k];
    }
    if (!slow)
        return;
    for (int k = 0; k < np; k++) {
        if (ps[k].time < 0.01 * total)
            continue;
        const long p = ps[k].pieces;
        c->fewest_pieces = c->fewest_pieces && c->fewest_pieces < p ? c->fewest_pieces : p;
        c->most_pieces = c->most_pieces > p ? c->most_pieces : p;
    }
    snprintf(c->narrowest, sizeof c->narrowest, "%s %s", slow->layer->name,
             slow->bwd ? "backward" : "forward");
    c->narrowest_pieces = slow->pieces;
    c->narrowest_threads = slow->work / slow->time;
}

static void op_pieces(cut_acc *a, const hcnn_net *net, const hcnn_exec *ex, const hcnn_layer *l,
                      const hcnn_op *op, int n, int gemm, int fwd_too)
{
    hcnn_pieces f, b;
    net->be->pass_pieces(net->be, op, ex, n, a->nt, &f, &b);
    if (fwd_too)
        add_pieces(a, l, gemm, 0, &f);
    add_pieces(a, l, gemm, 1, &b);
}

/* An element-wise pass over the layer's output (forward or backward) */
static void elementwise(cut_acc *a, const hcnn_net *net, const hcnn_exec *ex, const hcnn_layer *l,
                        int n, int bwd)
{
    const hcnn_op op = {.kind = HCNN_OP_ELEMENTWISE, .c = l->out_c, .np = l->out_h * l->out_w};
    hcnn_pieces f, b;
    net->be->pass_pieces(net->be, &op, ex, n, a->nt, &f, &b);
    add_pieces(a, l, 0, bwd, &f);
}

/* The operations a layer's passes ask of the backend, as its type runs
 * them (src/layers/): prev is the layer before it in its chain (a ReLU
 * after a layer with forward_fused runs inside that layer's passes, as
 * layer_stream counts its bytes), need_dx whether its backward computes
 * the input gradient. */
static void layer_cuts(cut_acc *a, const hcnn_net *net, const hcnn_exec *ex, const hcnn_layer *l,
                       const hcnn_layer *prev, int need_dx, int n)
{
    if (l->kind == HCNN_BLOCK_RESIDUAL) { /* src/layers/residual.c */
        for (int j = 0; j < l->nchildren; j++) {
            const int first = j == 0 || j == l->nbody;
            layer_cuts(a, net, ex, &l->children[j], first ? NULL : &l->children[j - 1],
                       first ? need_dx : 1, n);
        }
        /* the addition and ReLU: in the body's last pass when it fuses them */
        if (!(l->nbody && l->body[l->nbody - 1].ops->forward_fused)) {
            elementwise(a, net, ex, l, n, 0);
            elementwise(a, net, ex, l, n, 0);
        }
        elementwise(a, net, ex, l, n, 1); /* the ReLU's mask */
        const int into_dx = l->nproj == 0 && l->nbody > 1 && l->body[0].ops->backward_acc;
        const int direct = l->nproj > 0 && l->proj[0].ops->backward_acc;
        if (need_dx && !into_dx && !direct) /* the shortcut's gradient added */
            elementwise(a, net, ex, l, n, 1);
        return;
    }
    hcnn_conv_desc d;
    hcnn_op op;
    if (hcnn_layer_op(l, prev, need_dx, &d, &op)) {
        const int gemm = op.kind == HCNN_OP_CONV || op.kind == HCNN_OP_FC;
        op_pieces(a, net, ex, l, &op, n, gemm, 1);
    }
}

int hcnn_plan_cuts_make(const hcnn_net *net, int n, int threads, hcnn_plan_cuts *c)
{
    const int L = net->nlayers;
    if (n < 1 || threads < 1 || !net->be->pass_pieces)
        return hcnn_error("plan: cannot cut a pass of %d samples for %d threads (backend %s: "
                          "pass_pieces %s)",
                          n, threads, net->be->name, net->be->pass_pieces ? "set" : "missing");
    memset(c, 0, sizeof *c);
    c->n = n, c->threads = threads;
    const hcnn_ctx ctx = {.be = net->be, .conv_algo = net->conv_algo,
                          .max_chunk_floats = net->chunk_floats ? net->chunk_floats
                                                                : HCNN_DEFAULT_CHUNK_FLOATS};
    const hcnn_exec ex = {.max_chunk_floats = ctx.max_chunk_floats, .conv_algo = ctx.conv_algo,
                          .weights_key = 1};
    const int unit = hcnn_net_unit_images(net, &ctx, 0, L, n);
    c->units = unit > 0 ? (n + unit - 1) / unit : 0;
    gemm_pass *passes = malloc(sizeof *passes * MAX_GEMM_PASSES);
    if (!passes)
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the plan's list of passes");
    int npasses = 0;
    for (int i = 0; i < L; i++) {
        cut_acc a = {.passes = passes, .npasses = npasses, .nt = threads};
        /* (the top-level chain's layers priced alone: a fused ReLU as a pass of
         * its own, a batch-norm as reading x for its statistics) */
        layer_cuts(&a, net, &ex, &net->layers[i], NULL, i > 0, n);
        npasses = a.npasses;
        for (int g = 0; g < HCNN_CUTS; g++) {
            c->share[i][g] = a.work[g] > 0.0 ? a.time[g] / a.work[g] : 1.0;
            c->phases[i][g] = a.phases[g];
        }
        /* whole-network execution: each unit through every block on one
         * thread, one parallel region a pass (src/model/pass.c) */
        if (c->units)
            for (int g = 0; g < HCNN_CUTS; g++) {
                const int u = c->units;
                c->share[i][g] = (double)((u + threads - 1) / threads) / u;
                c->phases[i][g] = i == 0 && (g == HCNN_CUT_GEMM_FWD || g == HCNN_CUT_GEMM_BWD);
            }
    }
    slowest_pass(passes, npasses, c);
    free(passes);
    if (c->units) {
        c->fewest_pieces = c->most_pieces = c->narrowest_pieces = c->units;
        snprintf(c->narrowest, sizeof c->narrowest, "every block (whole-network units)");
        c->narrowest_threads = c->units < threads ? c->units : threads;
    }
    return HCNN_OK;
}

/* ---- compute on the node ------------------------------------------------------ */

int hcnn_price_pass(const hcnn_net *net, const hcnn_node *node, int threads,
                    const hcnn_pass_measured *m, const hcnn_plan_cuts *here,
                    const hcnn_plan_cuts *there, double barrier_s, hcnn_pass_cost *c)
{
    const int L = net->nlayers, n = m->n;
    if (threads < 1 || m->threads < 1 || m->n < 1 || !(m->core_gflops > 0))
        return hcnn_error("plan: cannot price a pass of %d samples on %d threads from %d on %d",
                          n, threads, m->n, m->threads);
    if (here->n != n || there->n != n || here->threads != m->threads || there->threads != threads)
        return hcnn_error("plan: the cuts of passes of %d and %d samples on %d and %d threads do "
                          "not price the pass of %d samples measured on %d threads for %d",
                          here->n, there->n, here->threads, there->threads, n, m->threads, threads);
    const double bw = hcnn_node_bandwidth_gbs(node, threads) * 1e9,
                 llc = node->llc_mib * 1024.0 * 1024.0,
                 core_ratio = m->core_gflops / (node->peak_gflops / node->cores);
    c->n = n;
    c->footprint_bytes = 0.0;
    c->cuts = *there;
    double fb[HCNN_MAX_BLOCKS], bb[HCNN_MAX_BLOCKS];
    for (int i = 0; i < L; i++) {
        double kept;
        hcnn_block_stream_bytes(&net->layers[i], &fb[i], &bb[i], &kept);
        c->footprint_bytes += kept * n;
    }
    /* streams come from memory when the step's activations cannot stay in
     * the last-level cache (a node of unknown cache: always) */
    const int to_memory = !(llc > 0) || c->footprint_bytes > llc;
    double work = 0.0, wall = 0.0;
    c->barrier_s = 0.0, c->phases = 0;
    for (int i = 0; i < L; i++) {
        const double f = block_flops(&net->layers[i]);
        c->flops_fwd[i] = f * n;
        c->flops_bwd[i] = (i > 0 ? 2.0 : 1.0) * f * n; /* block 0 computes no input gradient */
        c->bytes_fwd[i] = fb[i] * n, c->bytes_bwd[i] = bb[i] * n;
        const double gf = fmax(0.0, m->fwd[i] - m->fwd_mem[i]),
                     gb = fmax(0.0, m->bwd[i] - m->bwd_mem[i]);
        const double peak_here = m->core_gflops * 1e9 * m->threads;
        c->gemm_peak_share[i] = gf + gb > 0 && f > 0
                                    ? (f * m->n * (i > 0 ? 3.0 : 2.0)) / ((gf + gb) * peak_here)
                                    : 0.0;
        /* each of the four terms: its work here (one thread's seconds),
         * from the time less its barriers, over the share of it the
         * busiest thread here spent; there, that share of the work (on
         * the node's core), and its barriers */
        const double measured[HCNN_CUTS] = {gf, gb, m->fwd_mem[i], m->bwd_mem[i]};
        double t[HCNN_CUTS];
        for (int g = 0; g < HCNN_CUTS; g++) {
            const double w = fmax(0.0, measured[g] - here->phases[i][g] * m->barrier_s) /
                             here->share[i][g];
            const double node_w = w * (g <= HCNN_CUT_GEMM_BWD ? core_ratio : 1.0);
            const double sync = there->phases[i][g] * barrier_s;
            t[g] = node_w * there->share[i][g] + sync;
            work += node_w, c->barrier_s += sync, c->phases += there->phases[i][g];
        }
        const double df = to_memory ? c->bytes_fwd[i] / bw : 0.0,
                     db = to_memory ? c->bytes_bwd[i] / bw : 0.0;
        c->bw_fwd[i] = df > t[HCNN_CUT_OTHER_FWD], c->bw_bwd[i] = db > t[HCNN_CUT_OTHER_BWD];
        c->gemm_fwd[i] = t[HCNN_CUT_GEMM_FWD], c->gemm_bwd[i] = t[HCNN_CUT_GEMM_BWD];
        c->fwd[i] = c->gemm_fwd[i] + fmax(t[HCNN_CUT_OTHER_FWD], df);
        c->bwd[i] = c->gemm_bwd[i] + fmax(t[HCNN_CUT_OTHER_BWD], db);
        wall += c->fwd[i] + c->bwd[i];
    }
    c->thread_use = wall > 0.0 ? fmin(1.0, work / (wall * threads)) : 1.0;
    c->below_threads = n < threads;
    /* the optimiser: spread over all threads, 20 bytes per parameter */
    const double opt_here = m->opt_s * m->threads / threads, opt_bytes = 20.0 * net->nparams / bw;
    c->opt_bw = opt_bytes > opt_here;
    c->opt_s = fmax(opt_here, opt_bytes);
    return HCNN_OK;
}
