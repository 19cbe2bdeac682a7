/* The GEMMs of a model's training pass, listed and timed (include/hcnn/net.h):
 * what the BLAS kernels' measurement (src/blas/) and the per-block
 * profile's raw-GEMM reference (src/train/profile.c) both need of the
 * model, here so that neither depends on the other. */
#include <stdlib.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/net.h"

typedef struct gemm_run {
    const hcnn_backend *be;
    const hcnn_gemm_shape *g;
    int ng;
    float *A, *B, *C; /* one slice of each per thread */
    size_t a, b, c;   /* slice sizes */
} gemm_run;

static void run_shapes(const gemm_run *r, int t)
{
    const float *A = r->A + (size_t)t * r->a, *B = r->B + (size_t)t * r->b;
    float *C = r->C + (size_t)t * r->c;
    for (int i = 0; i < r->ng; i++) {
        const hcnn_gemm_shape *s = &r->g[i];
        r->be->gemm(r->be, s->ta, s->tb, s->m, s->n, s->k, 1.0f, A, s->ta ? s->m : s->k, B,
                    s->tb ? s->k : s->n, 0.0f, C, s->n);
    }
}

static void run_shapes_thread(void *arg, int t, int nt)
{
    (void)nt;
    run_shapes(arg, t);
}

double hcnn_time_gemms(const hcnn_backend *be, const hcnn_gemm_shape *g, int ng, int reps)
{
    const int nt = be->threads(be);
    gemm_run run = {.be = be, .a = 1, .b = 1, .c = 1};
    for (int i = 0; i < ng; i++) {
        size_t ea = (size_t)g[i].m * g[i].k, eb = (size_t)g[i].k * g[i].n,
               ec = (size_t)g[i].m * g[i].n;
        run.a = ea > run.a ? ea : run.a, run.b = eb > run.b ? eb : run.b;
        run.c = ec > run.c ? ec : run.c;
    }
    run.A = be->alloc(be, sizeof(float) * run.a * nt, "GEMM reference");
    run.B = be->alloc(be, sizeof(float) * run.b * nt, "GEMM reference");
    run.C = be->alloc(be, sizeof(float) * run.c * nt, "GEMM reference");
    double t[5] = {0, 0, 0, 0, 0};
    if (run.A && run.B && run.C) {
        /* normal numbers (a GEMM's time does not depend on them otherwise) */
        be->fill(be, run.A, run.a * nt, 0.001f);
        be->fill(be, run.B, run.b * nt, 0.002f);
        be->fill(be, run.C, run.c * nt, 0.0f);
        for (int r = 0; r < reps; r++) {
            hcnn_timer tm; /* the backend's timer pair: its work may be asynchronous */
            be->timer_start(be, &tm);
            for (int i = 0, j; i < ng; i = j) {
                for (j = i + 1; j < ng && g[j].per_thread == g[i].per_thread; j++)
                    ;
                run.g = g + i, run.ng = j - i;
                if (g[i].per_thread)
                    be->parallel(be, run_shapes_thread, &run);
                else
                    run_shapes(&run, 0);
            }
            t[r] = be->timer_stop(be, &tm);
        }
    }
    be->free(be, run.A), be->free(be, run.B), be->free(be, run.C);
    return hcnn_median(t, reps);
}

/* ---- the GEMMs of a pass, for the BLAS kernels' measurement ---------------- */

typedef struct shape_count {
    hcnn_gemm_shape g;
    double count; /* calls per pass on the busiest thread */
} shape_count;

typedef struct collect_job {
    const hcnn_net *net;
    const hcnn_ctx *ctx;
    int n, unit, repeat;
    shape_count *shapes;
    int nshapes, cap;
    double flops;
} collect_job;

static void collect_list(collect_job *j, const hcnn_gemm_shape *g, int ng)
{
    for (int i = 0; i < ng; i++) {
        int k = 0;
        while (k < j->nshapes && memcmp(&j->shapes[k].g, &g[i], sizeof g[i]))
            k++;
        if (k == j->nshapes) {
            if (j->nshapes == j->cap)
                continue; /* more distinct shapes than kept: the rest are not timed */
            j->shapes[j->nshapes++] = (shape_count){g[i], 0.0};
        }
        j->shapes[k].count += j->repeat;
    }
}

/* a block's GEMMs (they include those of the layers inside it) */
static void collect_block(collect_job *j, const hcnn_layer *l, int need_dx)
{
    hcnn_gemm_list g = {0};
    hcnn_layer_gemms(l, j->ctx, j->n, j->unit, need_dx, &g);
    j->flops += g.flops;
    if (g.nfwd + g.nbwd == 0)
        return;
    g.fwd = malloc(sizeof *g.fwd * (size_t)g.nfwd);
    g.bwd = malloc(sizeof *g.bwd * (size_t)g.nbwd);
    if (g.fwd && g.bwd) {
        g.nfwd = g.nbwd = 0;
        hcnn_layer_gemms(l, j->ctx, j->n, j->unit, need_dx, &g);
        collect_list(j, g.fwd, g.nfwd);
        collect_list(j, g.bwd, g.nbwd);
    }
    free(g.fwd), free(g.bwd);
}

/* 64-bit FNV-1a */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

int hcnn_net_pass_gemms(const hcnn_net *net, const hcnn_ctx *ctx, int first, int last, int n,
                        int reps, hcnn_pass_gemms *out)
{
    enum { MAX_SHAPES = 512 };
    collect_job j = {.net = net, .ctx = ctx, .n = n, .cap = MAX_SHAPES, .repeat = 1};
    j.unit = hcnn_net_unit_images(net, ctx, first, last, n);
    if (j.unit > 0) { /* the busiest thread runs this many units */
        const int nt = net->be->threads(net->be), units = (n + j.unit - 1) / j.unit;
        j.repeat = (units + nt - 1) / nt;
    }
    j.shapes = malloc(sizeof *j.shapes * MAX_SHAPES);
    if (!j.shapes)
        return hcnn_error("cannot allocate the GEMM shape list");
    for (int i = first; i < last; i++)
        collect_block(&j, &net->layers[i], i > 0);
    memset(out, 0, sizeof *out);
    out->hash = 14695981039346656037ull;
    for (int i = 0; i < j.nshapes; i++) {
        out->hash = fnv(out->hash, &j.shapes[i].g, sizeof j.shapes[i].g);
        out->hash = fnv(out->hash, &j.shapes[i].count, sizeof j.shapes[i].count);
        out->calls += j.shapes[i].count;
        if (reps > 0) { /* a run of up to BATCH calls, as a thread issues them */
            enum { BATCH = 32 };
            hcnn_gemm_shape run[BATCH];
            const int b = j.shapes[i].count < BATCH ? (int)j.shapes[i].count : BATCH;
            for (int k = 0; k < b; k++)
                run[k] = j.shapes[i].g;
            /* a run of 10 ms or more: its first timing is good enough */
            double t = hcnn_time_gemms(net->be, run, b, 1);
            if (t < 0.01 && reps > 1)
                t = hcnn_time_gemms(net->be, run, b, reps);
            out->seconds += j.shapes[i].count / b * t;
        }
    }
    out->shapes = j.nshapes;
    out->flops = j.flops;
    free(j.shapes);
    return HCNN_OK;
}
