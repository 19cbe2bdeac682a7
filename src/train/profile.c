/* Per-block profile and raw-GEMM reference (see include/hcnn/profile.h;
 * the GEMMs are timed by src/model/gemms.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/profile.h"

int hcnn_profile_init(hcnn_profile *p, int nids)
{
    memset(p, 0, sizeof *p);
    p->nids = nids;
    p->fwd = hcnn_calloc(sizeof(double) * (size_t)(nids + 1), "profile");
    p->bwd = hcnn_calloc(sizeof(double) * (size_t)(nids + 1), "profile");
    p->ref = hcnn_calloc(sizeof(double) * (size_t)(nids + 1) * HCNN_PROFILE_MAX_REF, "profile");
    return p->fwd && p->bwd && p->ref ? HCNN_OK : HCNN_ENOMEM;
}

void hcnn_profile_reset(hcnn_profile *p)
{
    memset(p->fwd, 0, sizeof(double) * (size_t)p->nids);
    memset(p->bwd, 0, sizeof(double) * (size_t)p->nids);
    p->steps = 0;
    p->nref = 0;
    p->step_s = p->data_s = p->opt_s = p->comm_s = p->bubble_s = 0.0;
}

void hcnn_profile_free(hcnn_profile *p)
{
    hcnn_free(p->fwd);
    hcnn_free(p->bwd);
    hcnn_free(p->ref);
    memset(p, 0, sizeof *p);
}

/* A row's raw-GEMM seconds per pass (reps timings, median; reps = 0: not
 * timed), and its flops per pass; 0 seconds for a layer without GEMMs.
 * unit > 0: whole-network execution in units of that many samples, the
 * busiest thread running ceil(units / threads) of them. */
static double row_reference(const hcnn_layer *l, const hcnn_net *net, const hcnn_ctx *ctx, int n,
                            int unit, int need_dx, int reps, double *flops)
{
    hcnn_gemm_list g = {0};
    hcnn_layer_gemms(l, ctx, n, unit, need_dx, &g);
    *flops = g.flops;
    if (g.nfwd + g.nbwd == 0 || reps == 0)
        return 0.0;
    g.fwd = malloc(sizeof *g.fwd * (size_t)g.nfwd);
    g.bwd = malloc(sizeof *g.bwd * (size_t)g.nbwd);
    double s = 0.0;
    if (g.fwd && g.bwd) {
        g.nfwd = g.nbwd = 0, g.flops = 0.0;
        hcnn_layer_gemms(l, ctx, n, unit, need_dx, &g);
        s = hcnn_time_gemms(net->be, g.fwd, g.nfwd, reps) + hcnn_time_gemms(net->be, g.bwd, g.nbwd, reps);
        if (unit > 0) {
            const int nt = net->be->threads(net->be), units = (n + unit - 1) / unit;
            s *= (units + nt - 1) / nt;
        }
    }
    free(g.fwd), free(g.bwd);
    return s;
}

/* Calls fn for every row of the table: blocks [first, last), each followed
 * by the layers inside it. */
typedef void (*row_fn)(void *arg, const hcnn_layer *l, int top, int need_dx);
static void for_each_row(const hcnn_net *net, int first, int last, row_fn fn, void *arg)
{
    for (int i = first; i < last; i++) {
        const hcnn_layer *l = &net->layers[i];
        fn(arg, l, i, i > 0);
        for (int j = 0; j < l->nchildren; j++)
            fn(arg, &l->children[j], -1, 1);
    }
}

typedef struct sample_job {
    hcnn_profile *p;
    const hcnn_net *net;
    const hcnn_ctx *ctx;
    int n, unit;
} sample_job;

static void sample_row(void *arg, const hcnn_layer *l, int top, int need_dx)
{
    (void)top;
    sample_job *j = arg;
    double flops;
    j->p->ref[(size_t)j->p->nref * j->p->nids + l->id] =
        row_reference(l, j->net, j->ctx, j->n, j->unit, need_dx, 1, &flops);
}

void hcnn_profile_sample_reference(hcnn_profile *p, const hcnn_net *net, const hcnn_ctx *ctx,
                                   int first, int last, int n)
{
    if (p->nref >= HCNN_PROFILE_MAX_REF)
        return;
    sample_job j = {p, net, ctx, n, hcnn_net_unit_images(net, ctx, first, last, n)};
    for_each_row(net, first, last, sample_row, &j);
    p->nref++;
}

typedef struct print_job {
    const hcnn_profile *p;
    const hcnn_net *net;
    const hcnn_ctx *ctx;
    int n, unit, micro_per_step;
    FILE *out;
    double gemm_total, fwd_total, bwd_total; /* of the top-level rows */
} print_job;

/* The name of the backend's plan for layer l ("-" for none): the describe
 * line up to its colon. */
static void plan_name(const hcnn_layer *l, const hcnn_ctx *ctx, int n, char *how, size_t how_cap,
                      char *name, size_t cap)
{
    how[0] = '\0';
    if (l->ops->describe)
        l->ops->describe(l, ctx, n, how, how_cap);
    snprintf(name, cap, "%.*s", how[0] ? (int)strcspn(how, ":") : 1, how[0] ? how : "-");
}

/* One table row. */
static void print_row(void *arg, const hcnn_layer *l, int top, int need_dx)
{
    print_job *j = arg;
    const hcnn_profile *p = j->p;
    const double steps = p->steps > 0 ? (double)p->steps : 1.0;
    const double fw = p->fwd[l->id] / steps * 1e3;
    const double bw = p->bwd[l->id] / steps * 1e3;
    double flops;
    double s =
        row_reference(l, j->net, j->ctx, j->n, j->unit, need_dx, p->nref ? 0 : 5, &flops);
    if (p->nref) { /* the median of the samples */
        double t[HCNN_PROFILE_MAX_REF];
        for (int k = 0; k < p->nref; k++)
            t[k] = p->ref[(size_t)k * p->nids + l->id];
        s = hcnn_median(t, p->nref);
    }
    if (top >= 0)
        j->fwd_total += fw, j->bwd_total += bw;
    char how[1024], plan[64];
    plan_name(l, j->ctx, j->n, how, sizeof how, plan, sizeof plan);
    if (flops == 0.0) {
        fprintf(j->out, "  %-18s %-8s %9.3f %9.3f %9s %10s %10s %9s %s\n", l->name,
                hcnn_block_kind_name(l->kind), fw, bw, "-", "-", "-", "-", plan);
        return;
    }
    flops *= j->micro_per_step;
    const double g = s * j->micro_per_step * 1e3;
    if (top >= 0)
        j->gemm_total += g;
    const double layer_gflops = fw + bw > 0 ? flops / ((fw + bw) * 1e-3) / 1e9 : 0.0;
    fprintf(j->out, "  %-18s %-8s %9.3f %9.3f %9.1f %10.3f %10.1f %8.2fx %s\n", l->name,
            hcnn_block_kind_name(l->kind), fw, bw, layer_gflops, g,
            g > 0 ? flops / (g * 1e-3) / 1e9 : 0.0, g > 0 ? (fw + bw) / g : 0.0, plan);
}

/* A "# plan" line per layer that has one: the backend's whole line. */
typedef struct plan_job {
    const hcnn_ctx *ctx;
    int n;
    FILE *out;
    char names[16][32];
    int counts[16], nnames;
    int fp32_kept; /* layers that keep FP32 under a lower precision */
} plan_job;

static void plan_row(void *arg, const hcnn_layer *l, int top, int need_dx)
{
    (void)top, (void)need_dx;
    plan_job *j = arg;
    if (!l->ops->describe)
        return;
    char how[1024], name[32];
    plan_name(l, j->ctx, j->n, how, sizeof how, name, sizeof name);
    if (j->out)
        fprintf(j->out, "# plan %s: %s\n", l->name, how);
    int k = 0;
    while (k < j->nnames && strcmp(j->names[k], name))
        k++;
    if (k == j->nnames && j->nnames < 16)
        snprintf(j->names[j->nnames++], sizeof j->names[0], "%s", name);
    if (k < j->nnames)
        j->counts[k]++;
    j->fp32_kept += strstr(how, HCNN_DESCRIBE_FP32_KEPT) != NULL;
}

const char *hcnn_profile_plans(const hcnn_net *net, const hcnn_ctx *ctx, int first, int last,
                               int n, char *buf, size_t cap)
{
    plan_job j = {.ctx = ctx, .n = n};
    for_each_row(net, first, last, plan_row, &j);
    size_t off = 0;
    buf[0] = '\0';
    for (int k = 0; k < j.nnames && off < cap; k++) {
        const int w = snprintf(buf + off, cap - off, "%s%s %d", k ? ", " : "", j.names[k],
                               j.counts[k]);
        off += w > 0 ? (size_t)w : 0;
    }
    if (!j.nnames)
        snprintf(buf, cap, "none");
    if (j.fp32_kept && off < cap)
        snprintf(buf + off, cap - off, "; %d " HCNN_DESCRIBE_FP32_KEPT " (their products lose "
                 "in the run's precision: hcnn bench's \"# plan\" lines)", j.fp32_kept);
    return buf;
}

/* ---- the bytes a step streams -------------------------------------------- */

/* Floats per sample that a chain's training passes read and write, each
 * pass's tensors counted whole (caches ignored: an upper bound, the same
 * rule before and after a change): a convolution reads x and writes y,
 * backward reads dy twice (weight and input gradients) and x, writes dx; a
 * batch-norm reads x three times (sum, deviations, apply) and writes y, or
 * once when its convolution gathered the statistics (gathered), plus the
 * residual addition it takes, backward reads x and dy twice and writes dx;
 * a ReLU fused into a batch-norm costs nothing of its own, one run in its
 * convolution's forward (conv_relu: the backend's) only its backward.
 * with[0] counts the gathering, with[1] counts the statistics taken from x. */
static void chain_streams(const hcnn_layer *l, int count, int first_needs_dx, int conv_relu,
                          double with[2])
{
    for (int j = 0; j < count; j++) {
        const hcnn_layer *c = &l[j], *prev = j > 0 ? &l[j - 1] : NULL;
        const double in = (double)hcnn_layer_in_size(c), out = (double)hcnn_layer_out_size(c);
        const int dx = j > 0 || first_needs_dx;
        double f = 0.0, b = 0.0;
        switch (c->kind) {
        case HCNN_BLOCK_CONV:
        case HCNN_BLOCK_FC: f = in + out, b = 2 * out + in + (dx ? in : 0.0); break;
        case HCNN_BLOCK_BN: /* apply; the statistics' two reads of x when not gathered */
            f = 2 * out, b = 5 * out;
            with[0] += prev && prev->kind == HCNN_BLOCK_CONV ? 0.0 : 2 * out;
            with[1] += 2 * out;
            break;
        case HCNN_BLOCK_RELU:
        case HCNN_BLOCK_LEAKY_RELU:
            /* (the chain fuses a ReLU, not a leaky one: src/layers/chain.c) */
            if (!(c->ops->is_relu && prev && prev->ops->forward_fused)) {
                const int in_conv = c->ops->is_relu && conv_relu && prev &&
                                    prev->kind == HCNN_BLOCK_CONV;
                f = in_conv ? 0.0 : 2 * out, b = 3 * out;
            }
            break;
        case HCNN_BLOCK_RESIDUAL:
            chain_streams(c->body, c->nbody, 1, conv_relu, with);
            chain_streams(c->proj, c->nproj, 1, conv_relu, with);
            f = out; /* the last batch-norm reads the shortcut */
            break;
        case HCNN_BLOCK_FLATTEN: break;
        default: f = in + out, b = in + out + (dx ? in : 0.0); break;
        }
        with[0] += f + b;
        with[1] += f + b;
    }
}

/* A "# pieces" line per convolution, fully connected and batch-norm layer:
 * each phase of its forward and backward with the pieces it offers the
 * run's threads (the backend's pass_pieces), and the fewest
 * (docs/performance.md, "Pieces for many threads"). */
static void print_phases(FILE *out, const char *pass, const hcnn_pieces *p, long *fewest)
{
    for (int k = 0; k < p->nphases; k++) {
        fprintf(out, "%s %s %ld", k ? "," : pass, p->phase[k].name ? p->phase[k].name : "phase",
                p->phase[k].pieces);
        *fewest = *fewest < 0 || p->phase[k].pieces < *fewest ? p->phase[k].pieces : *fewest;
    }
}

static void pieces_rows(FILE *out, const hcnn_ctx *ctx, const hcnn_layer *l,
                        const hcnn_layer *prev, int need_dx, int n, int nt)
{
    if (l->kind == HCNN_BLOCK_RESIDUAL) {
        for (int j = 0; j < l->nchildren; j++) {
            const int first = j == 0 || j == l->nbody;
            pieces_rows(out, ctx, &l->children[j], first ? NULL : &l->children[j - 1],
                        first ? need_dx : 1, n, nt);
        }
        return;
    }
    hcnn_conv_desc d;
    hcnn_op op;
    if (!ctx->be->pass_pieces || !hcnn_layer_op(l, prev, need_dx, &d, &op) ||
        (op.kind != HCNN_OP_CONV && op.kind != HCNN_OP_FC && op.kind != HCNN_OP_BN))
        return;
    const hcnn_exec ex = {.max_chunk_floats = ctx->max_chunk_floats, .conv_algo = ctx->conv_algo,
                          .weights_key = 1};
    hcnn_pieces f, b;
    ctx->be->pass_pieces(ctx->be, &op, &ex, n, nt, &f, &b);
    if (!f.nphases && !b.nphases)
        return;
    long fewest = -1;
    fprintf(out, "# pieces %s:", l->name);
    print_phases(out, " forward:", &f, &fewest);
    print_phases(out, "; backward:", &b, &fewest);
    fprintf(out, " (fewest %ld)\n", fewest);
}

double hcnn_profile_print(const hcnn_profile *p, const hcnn_net *net, const hcnn_ctx *ctx,
                          int first, int last, int n, int micro_per_step, FILE *out)
{
    const double steps = p->steps > 0 ? (double)p->steps : 1.0;
    fprintf(out, "# profile over %ld steps, %d samples per pass x %d passes per step (per rank)\n",
            p->steps, n, micro_per_step);
    fprintf(out, "# %-18s %-8s %9s %9s %9s %10s %10s %9s %s\n", "block", "kind", "fwd_ms",
            "bwd_ms", "gflops", "gemm_ms", "gemm_gflops", "vs_gemm", "plan");
    print_job j = {.p = p,
                   .net = net,
                   .ctx = ctx,
                   .n = n,
                   .micro_per_step = micro_per_step,
                   .unit = hcnn_net_unit_images(net, ctx, first, last, n),
                   .out = out};
    for_each_row(net, first, last, print_row, &j);
    plan_job pj = {.ctx = ctx, .n = n, .out = out};
    for_each_row(net, first, last, plan_row, &pj);
    const int nt = ctx->be->threads(ctx->be);
    fprintf(out, "# pieces of each pass's phases at %d samples on %d threads\n", n, nt);
    for (int i = first; i < last; i++)
        pieces_rows(out, ctx, &net->layers[i], i > first ? &net->layers[i - 1] : NULL, i > 0, n,
                    nt);
    double streams[2] = {0.0, 0.0};
    chain_streams(net->layers + first, last - first, first > 0, ctx->be->conv_relu, streams);
    fprintf(out,
            "# streams a step: %.2f MB an image (each pass's tensors read and written whole); "
            "%.2f MB with the batch-norm statistics read from x instead of gathered by the "
            "convolutions\n",
            streams[0] * sizeof(float) / 1e6, streams[1] * sizeof(float) / 1e6);
    const double gemm_total = j.gemm_total, fwd_total = j.fwd_total, bwd_total = j.bwd_total;
    const double step_ms = p->step_s / steps * 1e3;
    const double share = step_ms > 0 ? gemm_total / step_ms : 0.0;
    fprintf(out, "# step_ms=%.3f forward_ms=%.3f backward_ms=%.3f raw_gemm_ms=%.3f\n", step_ms,
            fwd_total, bwd_total, gemm_total);
    if (step_ms > 0)
        fprintf(out,
                "# shares of the step: gemm=%.3f data_wait=%.4f optimizer=%.4f "
                "communication=%.4f bubble=%.4f outside_gemm=%.3f\n",
                share, p->data_s / steps * 1e3 / step_ms, p->opt_s / steps * 1e3 / step_ms,
                p->comm_s / steps * 1e3 / step_ms, p->bubble_s / steps * 1e3 / step_ms,
                1.0 - share);
    return share;
}
