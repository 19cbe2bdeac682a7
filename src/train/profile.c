/* Per-block profile and raw-GEMM reference (see include/hcnn/profile.h). */
#include <stdlib.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/profile.h"

int hcnn_profile_init(hcnn_profile *p, int nblocks, int nids)
{
    memset(p, 0, sizeof *p);
    p->nblocks = nblocks;
    p->nids = nids;
    p->fwd = hcnn_calloc(sizeof(double) * (size_t)(nblocks + 1), "profile");
    p->bwd = hcnn_calloc(sizeof(double) * (size_t)(nblocks + 1), "profile");
    p->cfwd = hcnn_calloc(sizeof(double) * (size_t)(nids + 1), "profile");
    p->cbwd = hcnn_calloc(sizeof(double) * (size_t)(nids + 1), "profile");
    p->ref = hcnn_calloc(sizeof(double) * (size_t)(nids + 1) * HCNN_PROFILE_MAX_REF, "profile");
    return p->fwd && p->bwd && p->cfwd && p->cbwd && p->ref ? HCNN_OK : HCNN_ENOMEM;
}

void hcnn_profile_reset(hcnn_profile *p)
{
    memset(p->fwd, 0, sizeof(double) * (size_t)p->nblocks);
    memset(p->bwd, 0, sizeof(double) * (size_t)p->nblocks);
    memset(p->cfwd, 0, sizeof(double) * (size_t)p->nids);
    memset(p->cbwd, 0, sizeof(double) * (size_t)p->nids);
    p->steps = 0;
    p->nref = 0;
    p->step_s = p->data_s = p->opt_s = p->comm_s = p->bubble_s = 0.0;
}

void hcnn_profile_free(hcnn_profile *p)
{
    hcnn_free(p->fwd);
    hcnn_free(p->bwd);
    hcnn_free(p->cfwd);
    hcnn_free(p->cbwd);
    hcnn_free(p->ref);
    memset(p, 0, sizeof *p);
}

/* per_thread: issued by every thread at once, single-threaded, each on its
 * own images (the per-thread convolution path); else one threaded call. */
typedef struct gemm_shape {
    int ta, tb, m, n, k;
    int per_thread;
} gemm_shape;

/* The GEMMs a layer (and, for a residual block, its children) issues for
 * n samples (whole_nt > 0: under whole-network per-thread execution on
 * that many threads): forward into f[], backward into b[], counted in
 * *nf, *nb (with f and b NULL: only counted). */
#define PUSH(arr, cnt, ...)                                                                        \
    do {                                                                                           \
        if (arr)                                                                                   \
            (arr)[*(cnt)] = (gemm_shape){__VA_ARGS__};                                             \
        (*(cnt))++;                                                                                \
    } while (0)
static void layer_gemms(const hcnn_layer *l, const hcnn_ctx *ctx, int n, int whole_nt,
                        int need_dx, gemm_shape *f, int *nf, gemm_shape *b, int *nb,
                        double *flops)
{
    for (int j = 0; j < l->nbody; j++)
        layer_gemms(&l->body[j], ctx, n, whole_nt, 1, f, nf, b, nb, flops);
    for (int j = 0; j < l->nproj; j++)
        layer_gemms(&l->proj[j], ctx, n, whole_nt, 1, f, nf, b, nb, flops);
    if (l->kind == HCNN_BLOCK_CONV) {
        const int K = l->conv.c * l->conv.kh * l->conv.kw, P = l->conv.oh * l->conv.ow;
        const int co = l->out_c;
        int group, nt, chunk = hcnn_conv_chunk(l, ctx, n), count = n, per = 0;
        if (hcnn_conv_per_thread(l, ctx, n, &group, &nt)) {
            /* the largest thread share, in groups: the slowest thread */
            chunk = group, count = (n + nt - 1) / nt, per = 1;
        }
        const int dwt = per && hcnn_conv_dw_transposed(l);
        /* one-image groups: forward and weight gradient by blocks of rows,
         * or forward and dx by shifted windows (a GEMM per tap on the padded
         * width) */
        const int rb = per && chunk == 1 && !dwt ? hcnn_conv_rows_per_block(l) : l->conv.oh;
        const int shifted = per && chunk == 1 && hcnn_conv_shifted(l);
        const int taps = l->conv.kh * l->conv.kw, c = l->conv.c;
        const int wide = shifted ? hcnn_conv_shifted_columns(l) : 0;
        for (int i0 = 0; i0 < count; i0 += chunk) {
            const int cn = (count - i0 < chunk ? count - i0 : chunk) * P;
            for (int t = 0; shifted && t < taps; t++)
                PUSH(f, nf, 0, 0, co, wide, c, per);
            for (int oy0 = 0; oy0 < l->conv.oh; oy0 += rb) {
                const int rows = l->conv.oh - oy0 < rb ? l->conv.oh - oy0 : rb;
                const int bn = rb == l->conv.oh ? cn : rows * l->conv.ow;
                if (!shifted)
                    PUSH(f, nf, 0, 0, co, bn, K, per);
                if (dwt)
                    PUSH(b, nb, 0, 0, K, co, bn, per);
                else
                    PUSH(b, nb, 0, 1, co, K, bn, per);
            }
            for (int t = 0; need_dx && shifted && t < taps; t++)
                PUSH(b, nb, 1, 0, c, wide, co, per);
            if (need_dx && !shifted)
                PUSH(b, nb, 1, 0, K, cn, co, per);
        }
        *flops += 2.0 * K * co * (double)P * n * (need_dx ? 3 : 2);
    } else if (l->kind == HCNN_BLOCK_FC) {
        const int in = (int)hcnn_layer_in_size(l), out = l->out_c;
        /* whole-network execution: every thread its share of the rows */
        const int per = whole_nt > 0, m = per ? (n + whole_nt - 1) / whole_nt : n;
        PUSH(f, nf, 0, 1, m, out, in, per);
        PUSH(b, nb, 1, 0, out, in, m, per);
        if (need_dx)
            PUSH(b, nb, 0, 0, m, in, out, per);
        *flops += 2.0 * in * out * (double)n * (need_dx ? 3 : 2);
    }
}

typedef struct gemm_run {
    const hcnn_backend *be;
    const gemm_shape *g;
    int ng;
    float *A, *B, *C;    /* one slice of each per thread */
    size_t a, b, c;      /* slice sizes */
} gemm_run;

static void run_shapes(const gemm_run *r, int t)
{
    const float *A = r->A + (size_t)t * r->a, *B = r->B + (size_t)t * r->b;
    float *C = r->C + (size_t)t * r->c;
    for (int i = 0; i < r->ng; i++) {
        const gemm_shape *s = &r->g[i];
        r->be->gemm(s->ta, s->tb, s->m, s->n, s->k, 1.0f, A, s->ta ? s->m : s->k, B,
                    s->tb ? s->k : s->n, 0.0f, C, s->n);
    }
}

static void run_shapes_thread(void *arg, int t, int nt)
{
    (void)nt;
    run_shapes(arg, t);
}

/* Median of reps (<= 5) timings of the GEMM list on scratch buffers, each
 * run of per-thread shapes issued by all threads at once as the layer
 * does. */
static double time_gemms(const hcnn_backend *be, const gemm_shape *g, int ng, int reps)
{
    const int nt = be->threads();
    gemm_run run = {.be = be, .a = 1, .b = 1, .c = 1};
    for (int i = 0; i < ng; i++) {
        size_t ea = (size_t)g[i].m * g[i].k, eb = (size_t)g[i].k * g[i].n,
               ec = (size_t)g[i].m * g[i].n;
        run.a = ea > run.a ? ea : run.a, run.b = eb > run.b ? eb : run.b;
        run.c = ec > run.c ? ec : run.c;
    }
    run.A = hcnn_calloc(sizeof(float) * run.a * nt, "GEMM reference");
    run.B = hcnn_calloc(sizeof(float) * run.b * nt, "GEMM reference");
    run.C = hcnn_calloc(sizeof(float) * run.c * nt, "GEMM reference");
    double t[5] = {0, 0, 0, 0, 0};
    if (run.A && run.B && run.C) {
        for (size_t i = 0; i < run.a * nt; i++)
            run.A[i] = 0.001f * (float)(i % 13);
        for (size_t i = 0; i < run.b * nt; i++)
            run.B[i] = 0.001f * (float)(i % 7);
        for (int r = 0; r < reps; r++) {
            const double t0 = hcnn_now();
            for (int i = 0, j; i < ng; i = j) {
                for (j = i + 1; j < ng && g[j].per_thread == g[i].per_thread; j++)
                    ;
                run.g = g + i, run.ng = j - i;
                if (g[i].per_thread)
                    be->parallel(run_shapes_thread, &run);
                else
                    run_shapes(&run, 0);
            }
            t[r] = hcnn_now() - t0;
        }
    }
    hcnn_free(run.A), hcnn_free(run.B), hcnn_free(run.C);
    return hcnn_median(t, reps);
}

/* A row's raw-GEMM seconds per pass (reps timings, median; reps = 0: not
 * timed), and its flops per pass; 0 seconds for a layer without GEMMs. */
static double row_reference(const hcnn_layer *l, const hcnn_net *net, const hcnn_ctx *ctx, int n,
                            int whole_nt, int need_dx, int reps, double *flops)
{
    int nf = 0, nb = 0;
    *flops = 0.0;
    layer_gemms(l, ctx, n, whole_nt, need_dx, NULL, &nf, NULL, &nb, flops);
    if (nf + nb == 0 || reps == 0)
        return 0.0;
    gemm_shape *f = malloc(sizeof *f * (size_t)nf), *b = malloc(sizeof *b * (size_t)nb);
    double s = 0.0;
    if (f && b) {
        nf = nb = 0, *flops = 0.0;
        layer_gemms(l, ctx, n, whole_nt, need_dx, f, &nf, b, &nb, flops);
        s = time_gemms(net->be, f, nf, reps) + time_gemms(net->be, b, nb, reps);
    }
    free(f), free(b);
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
        for (int j = 0; j < l->nbody + l->nproj; j++)
            fn(arg, j < l->nbody ? &l->body[j] : &l->proj[j - l->nbody], -1, 1);
    }
}

typedef struct sample_job {
    hcnn_profile *p;
    const hcnn_net *net;
    const hcnn_ctx *ctx;
    int n, whole_nt;
} sample_job;

static void sample_row(void *arg, const hcnn_layer *l, int top, int need_dx)
{
    (void)top;
    sample_job *j = arg;
    double flops;
    j->p->ref[(size_t)j->p->nref * j->p->nids + l->id] =
        row_reference(l, j->net, j->ctx, j->n, j->whole_nt, need_dx, 1, &flops);
}

void hcnn_profile_sample_reference(hcnn_profile *p, const hcnn_net *net, const hcnn_ctx *ctx,
                                   int first, int last, int n)
{
    if (p->nref >= HCNN_PROFILE_MAX_REF)
        return;
    sample_job j = {p, net, ctx, n, hcnn_net_whole_threads(net, ctx, first, last, n)};
    for_each_row(net, first, last, sample_row, &j);
    p->nref++;
}

typedef struct print_job {
    const hcnn_profile *p;
    const hcnn_net *net;
    const hcnn_ctx *ctx;
    int n, whole_nt, micro_per_step;
    FILE *out;
    double gemm_total, fwd_total, bwd_total; /* of the top-level rows */
} print_job;

/* One table row. */
static void print_row(void *arg, const hcnn_layer *l, int top, int need_dx)
{
    print_job *j = arg;
    const hcnn_profile *p = j->p;
    const double steps = p->steps > 0 ? (double)p->steps : 1.0;
    const double fw = (top >= 0 ? p->fwd[top] : p->cfwd[l->id]) / steps * 1e3;
    const double bw = (top >= 0 ? p->bwd[top] : p->cbwd[l->id]) / steps * 1e3;
    double flops;
    double s = row_reference(l, j->net, j->ctx, j->n, j->whole_nt, need_dx, p->nref ? 0 : 5,
                             &flops);
    if (p->nref) { /* the median of the samples */
        double t[HCNN_PROFILE_MAX_REF];
        for (int k = 0; k < p->nref; k++)
            t[k] = p->ref[(size_t)k * p->nids + l->id];
        s = hcnn_median(t, p->nref);
    }
    if (top >= 0)
        j->fwd_total += fw, j->bwd_total += bw;
    if (flops == 0.0) {
        fprintf(j->out, "  %-18s %-8s %9.3f %9.3f %9s %10s %10s %9s\n", l->name,
                hcnn_block_kind_name(l->kind), fw, bw, "-", "-", "-", "-");
        return;
    }
    flops *= j->micro_per_step;
    const double g = s * j->micro_per_step * 1e3;
    if (top >= 0)
        j->gemm_total += g;
    const double layer_gflops = fw + bw > 0 ? flops / ((fw + bw) * 1e-3) / 1e9 : 0.0;
    fprintf(j->out, "  %-18s %-8s %9.3f %9.3f %9.1f %10.3f %10.1f %8.2fx\n", l->name,
            hcnn_block_kind_name(l->kind), fw, bw, layer_gflops, g,
            g > 0 ? flops / (g * 1e-3) / 1e9 : 0.0, g > 0 ? (fw + bw) / g : 0.0);
}

double hcnn_profile_print(const hcnn_profile *p, const hcnn_net *net, const hcnn_ctx *ctx,
                          int first, int last, int n, int micro_per_step, FILE *out)
{
    const double steps = p->steps > 0 ? (double)p->steps : 1.0;
    fprintf(out, "# profile over %ld steps, %d samples per pass x %d passes per step (per rank)\n",
            p->steps, n, micro_per_step);
    fprintf(out, "# %-18s %-8s %9s %9s %9s %10s %10s %9s\n", "block", "kind", "fwd_ms", "bwd_ms",
            "gflops", "gemm_ms", "gemm_gflops", "vs_gemm");
    print_job j = {.p = p, .net = net, .ctx = ctx, .n = n, .micro_per_step = micro_per_step,
                   .whole_nt = hcnn_net_whole_threads(net, ctx, first, last, n), .out = out};
    for_each_row(net, first, last, print_row, &j);
    const double gemm_total = j.gemm_total, fwd_total = j.fwd_total, bwd_total = j.bwd_total;
    const double step_ms = p->step_s / steps * 1e3;
    const double share = step_ms > 0 ? gemm_total / step_ms : 0.0;
    fprintf(out, "# step_ms=%.3f forward_ms=%.3f backward_ms=%.3f raw_gemm_ms=%.3f\n", step_ms,
            fwd_total, bwd_total, gemm_total);
    if (step_ms > 0)
        fprintf(out, "# shares of the step: gemm=%.3f data_wait=%.4f optimizer=%.4f "
                     "communication=%.4f bubble=%.4f outside_gemm=%.3f\n",
                share, p->data_s / steps * 1e3 / step_ms, p->opt_s / steps * 1e3 / step_ms,
                p->comm_s / steps * 1e3 / step_ms, p->bubble_s / steps * 1e3 / step_ms,
                1.0 - share);
    return share;
}
