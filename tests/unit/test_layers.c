/* Layer tests: every backward against central finite differences, the
 * convolution against a naive direct convolution, the loss, the optimiser
 * and the learning-rate schedules; through include/hcnn/ only (the CPU
 * backend's internals: tests/unit/test_cpu.c; src/core/hd.h's divider:
 * tests/unit/test_hd.c). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <omp.h>

#include "hcnn/common.h"
#include "hcnn/onednn.h"
#include "hcnn/net.h"
#include "hcnn/optim.h"

/* ---- helpers -------------------------------------------------------------- */

static hcnn_block_spec blk(hcnn_block_kind kind, int out, int kh, int kw, int sh, int sw, int ph,
                           int pw)
{
    hcnn_block_spec b;
    memset(&b, 0, sizeof b);
    b.kind = kind;
    b.out = out;
    b.kh = kh, b.kw = kw, b.sh = sh, b.sw = sw, b.ph = ph, b.pw = pw;
    b.bias = 1;
    b.eps = 1e-5f;
    b.momentum = 0.1f;
    b.p = 0.5f;
    return b;
}
static hcnn_block_spec simple(hcnn_block_kind kind) { return blk(kind, 0, 0, 0, 0, 0, 0, 0); }

typedef struct model {
    hcnn_model_spec spec;
    hcnn_net net;
    hcnn_acts acts;
    hcnn_scratch s;
    int n;
    size_t in_sz, out_sz;
} model;

/* Build a net of the given blocks on inputs c x h x w; classes is set to
 * the output size so that any block sequence is a valid "model". */
static void model_make_algo(model *m, const hcnn_block_spec *blocks, int nb, int c, int h, int w,
                            int n, hcnn_conv_algo algo)
{
    memset(m, 0, sizeof *m);
    m->spec.in_c = c, m->spec.in_h = h, m->spec.in_w = w;
    m->spec.nblocks = nb;
    snprintf(m->spec.name, sizeof m->spec.name, "test");
    for (int i = 0; i < nb; i++)
        m->spec.blocks[i] = blocks[i];
    /* first pass to learn the output size */
    int cc = c, hh = h, ww = w;
    for (int i = 0; i < nb; i++) {
        hcnn_layer l;
        hcnn_block_spec b = blocks[i];
        snprintf(b.name, sizeof b.name, "probe");
        assert_int_equal(hcnn_layer_setup(&l, &b, cc, hh, ww, "test", i), 0);
        cc = l.out_c, hh = l.out_h, ww = l.out_w;
        hcnn_layer_free(&l);
    }
    m->spec.classes = cc * hh * ww;
    assert_int_equal(hcnn_net_create(&m->net, &m->spec, hcnn_backend_cpu(), "test"), 0);
    m->net.conv_algo = algo;
    hcnn_net_init(&m->net, HCNN_INIT_HE, 7);
    assert_int_equal(hcnn_acts_alloc(&m->acts, &m->net, 0, nb, n), 0);
    assert_int_equal(hcnn_scratch_alloc(&m->s, &m->net, 0, nb, n), 0);
    m->s.ctx.training = 1;
    m->s.ctx.seed = 3;
    m->n = n;
    m->in_sz = (size_t)c * h * w * n;
    m->out_sz = (size_t)m->spec.classes * n;
}

static void model_make(model *m, const hcnn_block_spec *blocks, int nb, int c, int h, int w, int n)
{
    model_make_algo(m, blocks, nb, c, h, w, n, HCNN_CONV_AUTO);
}

static void model_free(model *m)
{
    hcnn_acts_free(&m->acts);
    hcnn_scratch_free(&m->s);
    hcnn_net_free(&m->net);
}

static void fill_random(float *x, size_t n, unsigned seed, float lo, float hi)
{
    hcnn_rng r;
    hcnn_rng_seed(&r, seed, 1);
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * hcnn_rng_uniform(&r);
}

/* Distinct values spaced by at least `gap` (no max-pool ties, no ReLU
 * kinks within the finite-difference step), in random order, with sign. */
static void fill_spaced(float *x, size_t n, unsigned seed, float gap)
{
    hcnn_rng r;
    hcnn_rng_seed(&r, seed, 2);
    for (size_t i = 0; i < n; i++)
        x[i] = ((float)i + 1.0f) * gap * (i % 2 ? 1.0f : -1.0f);
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)hcnn_rng_below(&r, i + 1);
        float t = x[i];
        x[i] = x[j], x[j] = t;
    }
}

/* L = sum(y * r) */
static double loss_of(model *m, const float *x, const float *r)
{
    assert_int_equal(hcnn_net_forward(&m->net, &m->s.ctx, &m->acts, x, m->n), 0);
    const float *y = hcnn_acts_output(&m->acts);
    double l = 0.0;
    for (size_t i = 0; i < m->out_sz; i++)
        l += (double)y[i] * r[i];
    return l;
}

static int close_enough(double a, double b, double atol, double rtol)
{
    return fabs(a - b) <= atol + rtol * fmax(fabs(a), fabs(b));
}

/* Central difference of L with respect to *v at step eps. */
static double numeric(model *m, const float *x, const float *r, float *v, double eps)
{
    const float keep = *v;
    *v = keep + (float)eps;
    double lp = loss_of(m, x, r);
    *v = keep - (float)eps;
    double lm = loss_of(m, x, r);
    *v = keep;
    return (lp - lm) / (2.0 * eps);
}

/* ReLU and max-pool are not differentiable everywhere: when a unit crosses
 * its kink inside [v - eps, v + eps] the central difference is off.  Such
 * a crossing (or strong curvature) is unlikely at all of several step sizes,
 * while a wrong analytic gradient disagrees with every one, so an entry
 * passes if one step agrees. */
static int entry_ok(model *m, const float *x, const float *r, float *v, double analytic,
                    double eps, double atol, double rtol, double *num)
{
    *num = numeric(m, x, r, v, eps);
    if (close_enough(analytic, *num, atol, rtol))
        return 1;
    for (double e = eps / 5; e >= eps / 25; e /= 5) {
        *num = numeric(m, x, r, v, e);
        if (close_enough(analytic, *num, 2 * atol, rtol))
            return 1;
    }
    return 0;
}

/* Check d(sum(y*r))/d(params) and d/dx against central differences on
 * about 60 entries of each. */
static void gradcheck(model *m, float *x, double eps, double atol, double rtol)
{
    hcnn_net *net = &m->net;
    float *r = malloc(sizeof(float) * m->out_sz);
    float *dx = malloc(sizeof(float) * m->in_sz);
    float *g = malloc(sizeof(float) * (net->nparams + 1));
    assert_non_null(r);
    assert_non_null(dx);
    assert_non_null(g);
    fill_random(r, m->out_sz, 11, -1.0f, 1.0f);
    memset(net->grads, 0, sizeof(float) * net->nparams);
    loss_of(m, x, r);
    assert_int_equal(hcnn_net_backward(net, &m->s, &m->acts, x, r, dx, m->n, NULL, NULL), 0);
    memcpy(g, net->grads, sizeof(float) * net->nparams);

    const size_t samples = 60;
    int bad = 0;
    double num;
    size_t np = net->nparams, stride_p = np > samples ? np / samples : 1;
    for (size_t i = 0; i < np; i += stride_p)
        if (!entry_ok(m, x, r, &net->params[i], g[i], eps, atol, rtol, &num) && bad++ < 5)
            print_error("param %zu: analytic %.6g numeric %.6g\n", i, (double)g[i], num);
    size_t stride_x = m->in_sz > samples ? m->in_sz / samples : 1;
    for (size_t i = 0; i < m->in_sz; i += stride_x)
        if (!entry_ok(m, x, r, &x[i], dx[i], eps, atol, rtol, &num) && bad++ < 10)
            print_error("input %zu: analytic %.6g numeric %.6g\n", i, (double)dx[i], num);
    free(r);
    free(dx);
    free(g);
    assert_int_equal(bad, 0);
}

static void check_model(const hcnn_block_spec *b, int nb, int c, int h, int w, int n, int spaced)
{
    model m;
    model_make(&m, b, nb, c, h, w, n);
    float *x = malloc(sizeof(float) * m.in_sz);
    assert_non_null(x);
    if (spaced)
        fill_spaced(x, m.in_sz, 5, 0.02f);
    else
        fill_random(x, m.in_sz, 5, -1.0f, 1.0f);
    /* non-trivial batch-norm affine parameters and biases */
    fill_random(m.net.params, m.net.nparams, 9, -0.5f, 0.5f);
    for (int t = 0; t < m.net.ntensors; t++) {
        const hcnn_tensor_info *ti = &m.net.tensors[t];
        if (!ti->is_state && strstr(ti->name, "bn") && strstr(ti->name, ".weight"))
            for (size_t k = 0; k < ti->count; k++)
                m.net.params[ti->offset + k] += 1.0f;
    }
    gradcheck(&m, x, 4e-3, 2e-3, 2e-2);
    free(x);
    model_free(&m);
}

/* ---- convolution ------------------------------------------------------------ */

/* The naive convolution's loop nest: calls tap(arg, yi, xi, wi) for every
 * product x[xi] * w[wi] that output yi sums, output after output, each in
 * (ci, ki, kj) order, skipping the zero padding. */
typedef struct naive_geom {
    int n, c, h, wd, co, kh, kw, sh, sw, ph, pw, oh, ow;
} naive_geom;
typedef void (*naive_tap_fn)(void *arg, size_t yi, size_t xi, size_t wi);

static void naive_conv_taps(const naive_geom *g, naive_tap_fn tap, void *arg)
{
    for (int i = 0; i < g->n; i++)
        for (int o = 0; o < g->co; o++)
            for (int oy = 0; oy < g->oh; oy++)
                for (int ox = 0; ox < g->ow; ox++) {
                    const size_t yi = ((size_t)(i * g->co + o) * g->oh + oy) * g->ow + ox;
                    for (int ci = 0; ci < g->c; ci++)
                        for (int ki = 0; ki < g->kh; ki++)
                            for (int kj = 0; kj < g->kw; kj++) {
                                int iy = oy * g->sh - g->ph + ki, ix = ox * g->sw - g->pw + kj;
                                if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->wd)
                                    continue;
                                tap(arg, yi, ((size_t)(i * g->c + ci) * g->h + iy) * g->wd + ix,
                                    ((size_t)(o * g->c + ci) * g->kh + ki) * g->kw + kj);
                            }
                }
}

typedef struct naive_fwd {
    const float *x, *w;
    double *acc;
} naive_fwd;

static void fwd_tap(void *arg, size_t yi, size_t xi, size_t wi)
{
    naive_fwd *f = arg;
    f->acc[yi] += (double)f->x[xi] * f->w[wi];
}

static void naive_conv(const float *x, const float *w, const float *b, int n, int c, int h,
                       int wd, int co, int kh, int kw, int sh, int sw, int ph, int pw, float *y,
                       int oh, int ow)
{
    const naive_geom g = {n, c, h, wd, co, kh, kw, sh, sw, ph, pw, oh, ow};
    const size_t plane = (size_t)oh * ow, out = (size_t)n * co * plane;
    naive_fwd f = {x, w, malloc(sizeof(double) * out)};
    assert_non_null(f.acc);
    for (size_t yi = 0; yi < out; yi++)
        f.acc[yi] = b ? b[yi / plane % co] : 0.0;
    naive_conv_taps(&g, fwd_tap, &f);
    for (size_t yi = 0; yi < out; yi++)
        y[yi] = (float)f.acc[yi];
    free(f.acc);
}

static void conv_vs_naive(int n, int c, int h, int w, int co, int kh, int kw, int sh, int sw,
                          int ph, int pw, int bias, size_t max_chunk)
{
    hcnn_block_spec b = blk(HCNN_BLOCK_CONV, co, kh, kw, sh, sw, ph, pw);
    b.bias = bias;
    model m;
    model_make(&m, &b, 1, c, h, w, n);
    if (max_chunk)
        m.s.ctx.max_chunk_floats = max_chunk; /* force several chunks */
    float *x = malloc(sizeof(float) * m.in_sz);
    float *ref = malloc(sizeof(float) * m.out_sz);
    assert_non_null(x);
    assert_non_null(ref);
    fill_random(x, m.in_sz, 21, -1.0f, 1.0f);
    fill_random(m.net.params, m.net.nparams, 22, -1.0f, 1.0f);
    const hcnn_layer *l = &m.net.layers[0];
    assert_int_equal(hcnn_net_forward(&m.net, &m.s.ctx, &m.acts, x, n), 0);
    naive_conv(x, l->w, l->b, n, c, h, w, co, kh, kw, sh, sw, ph, pw, ref, l->out_h, l->out_w);
    const float *y = hcnn_acts_output(&m.acts);
    for (size_t i = 0; i < m.out_sz; i++)
        if (fabsf(y[i] - ref[i]) > 1e-4f * (1.0f + fabsf(ref[i])))
            fail_msg("output %zu: %g vs naive %g", i, (double)y[i], (double)ref[i]);
    free(x);
    free(ref);
    model_free(&m);
}

static void test_conv_forward_vs_naive(void **state)
{
    (void)state;
    conv_vs_naive(2, 3, 7, 9, 4, 3, 3, 1, 1, 1, 1, 1, 0);
    conv_vs_naive(3, 2, 8, 8, 5, 5, 5, 1, 1, 2, 2, 1, 0);
    conv_vs_naive(2, 3, 9, 7, 4, 3, 5, 2, 1, 1, 2, 1, 0);   /* non-square kernel, stride */
    conv_vs_naive(4, 4, 8, 8, 6, 1, 1, 2, 2, 0, 0, 0, 0);   /* 1x1 projection, stride 2 */
    conv_vs_naive(5, 2, 10, 6, 3, 3, 3, 3, 2, 0, 1, 0, 64); /* chunked through the batch */
    conv_vs_naive(1, 1, 4, 4, 2, 4, 4, 1, 1, 0, 0, 1, 0);   /* kernel = input */
    conv_vs_naive(4, 1, 12, 10, 6, 5, 5, 1, 1, 2, 2, 1, 0); /* grey input, 5x5, padded */
    conv_vs_naive(3, 3, 7, 9, 4, 3, 3, 1, 1, 1, 0, 0, 0);   /* asymmetric padding */
}

static void test_conv_backward(void **state)
{
    (void)state;
    hcnn_block_spec b = blk(HCNN_BLOCK_CONV, 3, 3, 3, 1, 1, 1, 1);
    check_model(&b, 1, 2, 6, 5, 2, 0);
    b = blk(HCNN_BLOCK_CONV, 4, 3, 5, 2, 1, 1, 2); /* non-square, strided */
    check_model(&b, 1, 3, 7, 6, 3, 0);
    b = blk(HCNN_BLOCK_CONV, 2, 1, 1, 2, 2, 0, 0);
    b.bias = 0;
    check_model(&b, 1, 3, 5, 5, 2, 0);
}

static void test_conv_backward_chunked(void **state)
{
    (void)state;
    hcnn_block_spec b = blk(HCNN_BLOCK_CONV, 3, 3, 3, 1, 1, 1, 1);
    model m;
    model_make(&m, &b, 1, 2, 5, 5, 4);
    m.s.ctx.max_chunk_floats = 1; /* one image per chunk */
    float *x = malloc(sizeof(float) * m.in_sz);
    assert_non_null(x);
    fill_random(x, m.in_sz, 5, -1.0f, 1.0f);
    gradcheck(&m, x, 1e-2, 2e-3, 2e-2);
    free(x);
    model_free(&m);
}

/* Reference backward of naive_conv: dw, db accumulate, dx overwritten. */
typedef struct naive_bwd {
    const float *x, *w, *dy;
    double *dw, *dx;
} naive_bwd;

static void bwd_tap(void *arg, size_t yi, size_t xi, size_t wi)
{
    naive_bwd *d = arg;
    const double g = d->dy[yi];
    d->dw[wi] += g * d->x[xi];
    d->dx[xi] += g * d->w[wi];
}

static void naive_conv_backward(const float *x, const float *w, const float *dy, int n, int c,
                                int h, int wd, int co, int kh, int kw, int sh, int sw, int ph,
                                int pw, int oh, int ow, double *dw, double *db, double *dx)
{
    const naive_geom g = {n, c, h, wd, co, kh, kw, sh, sw, ph, pw, oh, ow};
    const size_t plane = (size_t)oh * ow, out = (size_t)n * co * plane;
    memset(dx, 0, sizeof(double) * (size_t)n * c * h * wd);
    for (size_t yi = 0; yi < out; yi++)
        db[yi / plane % co] += dy[yi];
    naive_bwd d = {x, w, dy, dw, dx};
    naive_conv_taps(&g, bwd_tap, &d);
}

static void expect_close(const char *what, const float *got, const double *ref, size_t n,
                         const char *algo, int threads)
{
    for (size_t i = 0; i < n; i++)
        if (fabs(got[i] - ref[i]) > 1e-4 * (1.0 + fabs(ref[i])))
            fail_msg("%s[%zu] = %g, naive %g (conv_algo %s, %d threads)", what, i,
                     (double)got[i], ref[i], algo, threads);
}

/* One convolution, forward and backward (dx overwritten, then added to),
 * through the given conv_algo on the given number of threads, against the
 * naive loops; returns the
 * layer's output and gradients (y, dw, db, dx concatenated) for the
 * caller's repeatability check. */
static float *conv_run_vs_naive(int n, int c, int h, int w, int co, int k, int s, int p,
                                hcnn_conv_algo algo, int threads)
{
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    hcnn_block_spec b = blk(HCNN_BLOCK_CONV, co, k, k, s, s, p, p);
    model m;
    model_make_algo(&m, &b, 1, c, h, w, n, algo);
    hcnn_layer *l = &m.net.layers[0];
    if (algo == HCNN_CONV_PER_THREAD) /* the workspace admits the per-thread path: it holds
                                         * what the backend asks for n images under it */
        assert_true(m.s.ctx.ws_floats >=
                    m.net.be->conv_workspace(m.net.be,
                                             &(hcnn_conv_desc){.g = l->conv, .out_c = l->out_c},
                                             &(hcnn_exec){.conv_algo = algo}, n));
    float *x = malloc(sizeof(float) * m.in_sz), *dy = malloc(sizeof(float) * m.out_sz);
    float *dx = malloc(sizeof(float) * m.in_sz);
    double *ref = calloc(m.out_sz + l->nw + l->nb + m.in_sz, sizeof(double));
    float *yref = malloc(sizeof(float) * m.out_sz);
    float *out = malloc(sizeof(float) * (m.out_sz + l->nw + l->nb + m.in_sz));
    assert_true(x && dy && dx && ref && yref && out);
    fill_random(x, m.in_sz, 31, -1.0f, 1.0f);
    fill_random(dy, m.out_sz, 32, -1.0f, 1.0f);
    fill_random(m.net.params, m.net.nparams, 33, -1.0f, 1.0f);
    memset(m.net.grads, 0, sizeof(float) * m.net.nparams);

    assert_int_equal(hcnn_net_forward(&m.net, &m.s.ctx, &m.acts, x, n), 0);
    assert_int_equal(hcnn_net_backward(&m.net, &m.s, &m.acts, x, dy, dx, n, NULL, NULL), 0);
    const char *name = hcnn_conv_algo_name(algo);
    naive_conv(x, l->w, l->b, n, c, h, w, co, k, k, s, s, p, p, yref, l->out_h, l->out_w);
    for (size_t i = 0; i < m.out_sz; i++)
        ref[i] = yref[i];
    double *dwr = ref + m.out_sz, *dbr = dwr + l->nw, *dxr = dbr + l->nb;
    naive_conv_backward(x, l->w, dy, n, c, h, w, co, k, k, s, s, p, p, l->out_h, l->out_w, dwr,
                        dbr, dxr);
    expect_close("y", hcnn_acts_output(&m.acts), ref, m.out_sz, name, threads);
    expect_close("dw", l->dw, dwr, l->nw, name, threads);
    expect_close("db", l->db, dbr, l->nb, name, threads);
    expect_close("dx", dx, dxr, m.in_sz, name, threads);

    memcpy(out, hcnn_acts_output(&m.acts), sizeof(float) * m.out_sz);
    memcpy(out + m.out_sz, l->dw, sizeof(float) * l->nw);
    memcpy(out + m.out_sz + l->nw, l->db, sizeof(float) * l->nb);
    memcpy(out + m.out_sz + l->nw + l->nb, dx, sizeof(float) * m.in_sz);
    /* the accumulate mode (a residual block's first convolution adding its
     * dx to the shortcut's): dx = prior + the naive dx */
    double *acc_ref = malloc(sizeof(double) * m.in_sz);
    assert_non_null(acc_ref);
    fill_random(dx, m.in_sz, 34, -1.0f, 1.0f);
    for (size_t i = 0; i < m.in_sz; i++)
        acc_ref[i] = dx[i] + dxr[i];
    l->ops->backward_acc(l, &m.s.ctx, x, dy, dx, n);
    expect_close("accumulated dx", dx, acc_ref, m.in_sz, name, threads);
    free(acc_ref);
    free(x), free(dy), free(dx), free(ref), free(yref);
    model_free(&m);
    omp_set_num_threads(saved);
    return out;
}

/* Both ways of walking the batch (and auto's choice), on 1-3 threads:
 * groups of several images (P < 256), one image per GEMM (P >= 256), fewer
 * images than threads, uneven shares, stride and padding, the transposed
 * weight gradient (16 <= Cout <= 32); and a repeated
 * run is bit-for-bit identical. */
static void test_conv_algorithms(void **state)
{
    (void)state;
    static const int shapes[][8] = {
        /* n, c, h, w, co, k, s, p */
        {5, 2, 10, 6, 3, 3, 1, 1},   /* P = 60: groups of 5 images */
        {3, 2, 20, 20, 5, 5, 2, 2},  /* P = 100, stride 2: groups of 3 */
        {1, 3, 17, 16, 4, 3, 1, 1},  /* P = 272: one image per GEMM, n < threads */
        {7, 1, 28, 28, 6, 5, 1, 2},  /* LeNet-5's conv1 */
        {2, 2, 40, 37, 3, 3, 2, 1},  /* stride 2, two 16-lane pieces per row, odd width */
        {4, 3, 9, 9, 4, 1, 2, 0},    /* 1x1 projection, stride 2 */
        {2, 2, 20, 18, 3, 3, 1, 0},  /* P = 288, unpadded: dx larger than P */
        {2, 4, 16, 16, 3, 3, 1, 1},  /* P = 256, fewer output than input channels */
        /* 16 <= Cout <= 32: the transposed weight gradient, per-thread */
        {5, 4, 9, 9, 16, 3, 1, 1},   /* P = 81: groups of 4 images */
        {3, 3, 16, 16, 20, 3, 1, 1}, /* P = 256: one image per GEMM */
        /* K * P * 4 images > GROUP_MAX_COL: groups of 2 */
        {5, 256, 8, 8, 4, 3, 1, 1},
        /* columns of an image > 300k floats: blocks of 24, 24, 8 rows */
        {1, 12, 56, 56, 3, 3, 1, 1},
        /* shifted windows (C >= 16, wide planes), the weight gradient in
         * blocks of 13, 13, 6 rows */
        {2, 40, 32, 32, 4, 3, 1, 1},
        {2, 16, 32, 32, 8, 3, 1, 1},  /* the smallest C */
        {1, 16, 34, 34, 4, 3, 1, 0},  /* unpadded: the padded width is the input's */
        {1, 17, 20, 64, 3, 5, 1, 2},  /* 5x5, rectangular */
        {3, 16, 32, 32, 20, 3, 1, 1}, /* with the transposed weight gradient */
    };
    const hcnn_conv_algo algos[] = {HCNN_CONV_BATCHED, HCNN_CONV_PER_THREAD, HCNN_CONV_AUTO};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int *q = shapes[si];
        for (int a = 0; a < 3; a++)
            for (int t = 1; t <= 3; t++) {
                float *first = conv_run_vs_naive(q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7],
                                                 algos[a], t);
                float *again = conv_run_vs_naive(q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7],
                                                 algos[a], t);
                /* y + dw + db + dx sizes, recomputed */
                const int oh = (q[2] + 2 * q[7] - q[5]) / q[6] + 1;
                const int ow = (q[3] + 2 * q[7] - q[5]) / q[6] + 1;
                const size_t total = (size_t)q[0] * q[4] * oh * ow +
                                     (size_t)q[4] * q[1] * q[5] * q[5] + (size_t)q[4] +
                                     (size_t)q[0] * q[1] * q[2] * q[3];
                if (memcmp(first, again, sizeof(float) * total) != 0)
                    fail_msg("shape %zu, conv_algo %s, %d threads: a repeated run differs", si,
                             hcnn_conv_algo_name(algos[a]), t);
                free(first);
                free(again);
            }
    }
}

/* One conv_fwd of n images through the backend table under precision
 * prec and conv_algo algo; its output (malloc'ed) and describe line. */
static float *conv_fwd_in(hcnn_precision prec, hcnn_conv_algo algo, const int *q, int n,
                          char *how, size_t cap)
{
    hcnn_block_spec b = blk(HCNN_BLOCK_CONV, q[3], q[4], q[4], q[5], q[5], q[6], q[6]);
    model m;
    model_make(&m, &b, 1, q[0], q[1], q[2], n);
    hcnn_backend *be = NULL; /* an instance: the shared table computes in FP32 only */
    assert_int_equal(hcnn_backend_create("cpu", 0, &be), HCNN_OK);
    assert_int_equal(be->set_precision(be, prec), HCNN_OK);
    const hcnn_layer *l = &m.net.layers[0];
    const hcnn_conv_desc d = {.g = l->conv, .out_c = l->out_c};
    hcnn_exec ex = {.conv_algo = algo, .max_chunk_floats = (size_t)1 << 24};
    ex.ws_floats = be->conv_workspace(be, &d, &ex, n);
    ex.ws = malloc(sizeof(float) * (ex.ws_floats ? ex.ws_floats : 1));
    const size_t nx = (size_t)n * q[0] * q[1] * q[2], ny = (size_t)n * l->out_c * l->out_h * l->out_w;
    const size_t nw = (size_t)l->out_c * q[0] * q[4] * q[4];
    float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nw);
    float *bias = calloc((size_t)l->out_c, sizeof(float)), *y = malloc(sizeof(float) * ny);
    assert_non_null(ex.ws), assert_non_null(x), assert_non_null(w), assert_non_null(bias);
    assert_non_null(y);
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)((i * 7919u) % 1013u) / 1013.0f - 0.5f;
    for (size_t i = 0; i < nw; i++)
        w[i] = (float)((i * 104729u) % 997u) / 997.0f - 0.5f;
    assert_int_equal(be->conv_fwd(be, &d, &ex, x, w, bias, y, n), HCNN_OK);
    be->conv_describe(be, &d, &ex, n, how, cap);
    hcnn_backend_destroy(be);
    free(ex.ws), free(x), free(w), free(bias);
    model_free(&m);
    return y;
}

/* precision bf16 under conv_algo auto (conv_plan.c, hcnn_conv_bf16): a
 * layer whose products bf16 loses on (LeNet-5's conv1 and conv2) keeps
 * FP32, gives FP32's bits and says so in its describe line; conv_algo
 * per_thread rounds the same layer (other bits, nothing said); and on
 * any layer the line and the bits agree (ResNet-18's layer3 shape: bf16
 * where oneDNN multiplies, FP32 where this CPU's bf16 loses). */
static void test_bf16_auto_keeps_fp32(void **state)
{
    (void)state;
    char why[256];
    if (!hcnn_cpu_bf16_supported(why, sizeof why))
        skip();
    static const int shapes[][7] = {
        /* c, h, w, co, k, s, p; small: bf16 loses on it everywhere */
        {1, 28, 28, 6, 5, 1, 2},  /* LeNet-5's conv1: 6 x 784 x 25 */
        {6, 14, 14, 16, 5, 1, 0}, /* conv2: 16 x 100 x 150 */
        {128, 8, 8, 256, 3, 1, 1}, /* ResNet-18's layer3: 256 x 64 x 1152 */
    };
    const int n = 4;
    for (int i = 0; i < 3; i++) {
        const int *q = shapes[i], small = i < 2;
        char how32[384], how16[384], howpt[384];
        const size_t ny = (size_t)n * q[3] * ((q[1] + 2 * q[6] - q[4]) / q[5] + 1) *
                          ((q[2] + 2 * q[6] - q[4]) / q[5] + 1);
        float *y32 = conv_fwd_in(HCNN_PRECISION_FP32, HCNN_CONV_AUTO, q, n, how32, sizeof how32);
        float *y16 = conv_fwd_in(HCNN_PRECISION_BF16, HCNN_CONV_AUTO, q, n, how16, sizeof how16);
        const int kept = strstr(how16, HCNN_DESCRIBE_FP32_KEPT) != NULL;
        const int same = !memcmp(y32, y16, sizeof(float) * ny);
        if (small && !kept)
            fail_msg("shape %d: bf16 under auto does not keep FP32: \"%s\"", i, how16);
        if (kept != same)
            fail_msg("shape %d: describe says %s FP32, the bits %s FP32's: \"%s\"", i,
                     kept ? "kept in" : "not", same ? "are" : "differ from", how16);
        if (strstr(how32, HCNN_DESCRIBE_FP32_KEPT))
            fail_msg("shape %d: an FP32 run says \"%s\"", i, how32);
        if (small) {
            float *ypt = conv_fwd_in(HCNN_PRECISION_BF16, HCNN_CONV_PER_THREAD, q, n, howpt,
                                     sizeof howpt);
            float *ypt32 = conv_fwd_in(HCNN_PRECISION_FP32, HCNN_CONV_PER_THREAD, q, n, how32,
                                       sizeof how32);
            if (strstr(howpt, HCNN_DESCRIBE_FP32_KEPT) || !memcmp(ypt, ypt32, sizeof(float) * ny))
                fail_msg("shape %d: conv_algo per_thread in bf16 did not round: \"%s\"", i, howpt);
            free(ypt), free(ypt32);
        }
        free(y32), free(y16);
    }
}

/* Forward + backward of a LeNet-like stack of image-local blocks (conv,
 * ReLU, max-pool, dropout, FC) on t threads under conv_algo; returns the
 * output, the parameter gradients and dx, concatenated. */
static float *lenet_like_run(hcnn_conv_algo algo, int threads, int n, size_t *total)
{
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    hcnn_block_spec b[] = {
        blk(HCNN_BLOCK_CONV, 6, 5, 5, 1, 1, 2, 2), simple(HCNN_BLOCK_RELU),
        blk(HCNN_BLOCK_MAXPOOL, 0, 2, 2, 2, 2, 0, 0), blk(HCNN_BLOCK_CONV, 8, 3, 3, 1, 1, 0, 0),
        simple(HCNN_BLOCK_RELU), simple(HCNN_BLOCK_FLATTEN),
        blk(HCNN_BLOCK_DROPOUT, 0, 0, 0, 0, 0, 0, 0),
        blk(HCNN_BLOCK_FC, 20, 0, 0, 0, 0, 0, 0), simple(HCNN_BLOCK_RELU),
        blk(HCNN_BLOCK_FC, 5, 0, 0, 0, 0, 0, 0)};
    const int nb = (int)(sizeof b / sizeof b[0]);
    model m;
    model_make_algo(&m, b, nb, 1, 16, 16, n, algo);
    /* the whole-network path is set up for two work units (of 16) or more */
    if (algo != HCNN_CONV_BATCHED && n >= 32)
        assert_non_null(m.s.ulayers);
    else
        assert_null(m.s.ulayers);
    float *x = malloc(sizeof(float) * m.in_sz), *dy = malloc(sizeof(float) * m.out_sz);
    float *dx = malloc(sizeof(float) * m.in_sz);
    *total = m.out_sz + m.net.nparams + m.in_sz;
    float *out = malloc(sizeof(float) * *total);
    assert_true(x && dy && dx && out);
    fill_random(x, m.in_sz, 51, -1.0f, 1.0f);
    fill_random(dy, m.out_sz, 52, -1.0f, 1.0f);
    fill_random(m.net.params, m.net.nparams, 53, -0.5f, 0.5f);
    memset(m.net.grads, 0, sizeof(float) * m.net.nparams);
    m.s.ctx.first_sample = 100;
    assert_int_equal(hcnn_net_forward(&m.net, &m.s.ctx, &m.acts, x, n), 0);
    assert_int_equal(hcnn_net_backward(&m.net, &m.s, &m.acts, x, dy, dx, n, NULL, NULL), 0);
    memcpy(out, hcnn_acts_output(&m.acts), sizeof(float) * m.out_sz);
    memcpy(out + m.out_sz, m.net.grads, sizeof(float) * m.net.nparams);
    memcpy(out + m.out_sz + m.net.nparams, dx, sizeof(float) * m.in_sz);
    free(x), free(dy), free(dx);
    model_free(&m);
    omp_set_num_threads(saved);
    return out;
}

/* Whole-network per-thread execution (every block image-local) against
 * the per-block batched path: same output, gradients and dx up to float
 * summation order, dropout masks included; bit-identical when repeated
 * (threads run through blocks of different sizes without waiting for each
 * other: their gradient buffers must not overlap). */
static void test_whole_net_per_thread(void **state)
{
    (void)state;
    /* 9 samples go block by block; 33 and 47 in whole-network units */
    const int sizes[] = {9, 33, 47};
    for (int s = 0; s < 3; s++) {
        const int n = sizes[s];
        size_t total;
        float *ref = lenet_like_run(HCNN_CONV_BATCHED, 1, n, &total);
        float *one = lenet_like_run(HCNN_CONV_AUTO, 1, n, &total);
        for (size_t i = 0; i < total; i++)
            if (fabsf(one[i] - ref[i]) > 1e-4f * (1.0f + fabsf(ref[i])))
                fail_msg("n %d: value %zu = %g, batched %g", n, i, (double)one[i], (double)ref[i]);
        for (int t = 1; t <= 3; t++)
            for (int rep = 0; rep < 3; rep++) { /* the same bits on any thread count */
                float *again = lenet_like_run(HCNN_CONV_AUTO, t, n, &total);
                if (memcmp(one, again, sizeof(float) * total) != 0)
                    fail_msg("n %d, %d threads: run %d differs from 1 thread", n, t, rep);
                free(again);
            }
        free(one);
        free(ref);
    }
}

/* The backend GEMM against a naive one, on shapes that take the split-k
 * path (small output, long k) and with every transpose combination. */
static void test_gemm_split_k(void **state)
{
    (void)state;
    const hcnn_backend *be = hcnn_backend_cpu();
    const int m = 6, n = 25, k = 20011;
    float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * k * n);
    float *c = malloc(sizeof(float) * m * n);
    assert_true(a && b && c);
    fill_random(a, (size_t)m * k, 41, -1, 1);
    fill_random(b, (size_t)k * n, 42, -1, 1);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            for (int i = 0; i < m * n; i++)
                c[i] = 1.0f;
            /* c = 0.5 * op(a) op(b) + 2 * c, with a and b read in the layout op() implies */
            be->gemm(be, ta, tb, m, n, k, 0.5f, a, ta ? m : k, b, tb ? k : n, 2.0f, c, n);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double ref = 0.0;
                    for (int l = 0; l < k; l++)
                        ref += (double)(ta ? a[(size_t)l * m + i] : a[(size_t)i * k + l]) *
                               (tb ? b[(size_t)j * k + l] : b[(size_t)l * n + j]);
                    ref = 0.5 * ref + 2.0;
                    if (fabs(c[i * n + j] - ref) > 1e-3 * (1.0 + fabs(ref)))
                        fail_msg("ta %d tb %d c[%d][%d] = %g, expected %g", ta, tb, i, j,
                                 (double)c[i * n + j], ref);
                }
        }
    free(a), free(b), free(c);
}

/* The 2x2 stride-2 max-pool (LeNet's; vectorised where the CPU allows)
 * against a naive one: values, argmax (the first strict maximum in
 * row-major window order, ties included) and the backward, exactly; widths
 * below, at and past one 16-lane vector, odd sizes (a last row or column in
 * no window) and a NaN. */
static void test_maxpool2x2_vs_naive(void **state)
{
    (void)state;
    const hcnn_backend *be = hcnn_backend_cpu();
    const int shapes[][2] = {{28, 28}, {10, 10}, {7, 9}, {5, 40}, {6, 33}, {3, 65}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        hcnn_pool_geom g = {.c = 3, .h = shapes[s][0], .w = shapes[s][1], .kh = 2, .kw = 2,
                            .sh = 2, .sw = 2};
        g.oh = g.h / 2, g.ow = g.w / 2;
        const int n = 2, planes = n * g.c, in = g.h * g.w, out = g.oh * g.ow;
        float *x = malloc(sizeof(float) * planes * in), *y = malloc(sizeof(float) * planes * out);
        float *dy = malloc(sizeof(float) * planes * out), *dx = malloc(sizeof(float) * planes * in);
        int32_t *arg = malloc(sizeof(int32_t) * planes * out);
        assert_true(x && y && dy && dx && arg);
        fill_random(x, (size_t)planes * in, 7 + s, -1, 1);
        for (int i = 0; i < planes * in; i++) /* a few levels: many ties */
            x[i] = roundf(x[i] * 2.0f);
        x[1] = NAN;
        fill_random(dy, (size_t)planes * out, 8 + s, -1, 1);
        for (int i = 0; i < planes * in; i++)
            dx[i] = 99.0f; /* every element must be written */
        be->maxpool_fwd(be, &g, x, n, y, arg);
        be->maxpool_bwd(be, &g, dy, arg, n, dx);
        for (int p = 0; p < planes; p++) {
            const float *xp = x + (size_t)p * in;
            for (int o = 0; o < out; o++) {
                const int oy = o / g.ow, ox = o % g.ow;
                int best = 2 * oy * g.w + 2 * ox;
                for (int k = 1; k < 4; k++) {
                    const int at = (2 * oy + k / 2) * g.w + 2 * ox + k % 2;
                    if (xp[at] > xp[best])
                        best = at;
                }
                assert_int_equal(arg[p * out + o], best);
                assert_memory_equal(&y[p * out + o], &xp[best], sizeof(float));
            }
            for (int i = 0; i < in; i++) {
                float expect = 0.0f;
                for (int o = 0; o < out; o++)
                    if (arg[p * out + o] == i)
                        expect = dy[p * out + o];
                if (dx[p * in + i] != expect)
                    fail_msg("%dx%d plane %d: dx[%d] = %g, expected %g", g.h, g.w, p, i,
                             (double)dx[p * in + i], (double)expect);
            }
        }
        free(x), free(y), free(dy), free(dx), free(arg);
    }
}

/* ---- other layers -------------------------------------------------------------- */

static void test_fc_backward(void **state)
{
    (void)state;
    hcnn_block_spec b = blk(HCNN_BLOCK_FC, 5, 0, 0, 0, 0, 0, 0);
    check_model(&b, 1, 2, 3, 2, 4, 0);
    b.bias = 0;
    check_model(&b, 1, 7, 1, 1, 3, 0);
}

static void test_bn_backward_training(void **state)
{
    (void)state;
    hcnn_block_spec b = simple(HCNN_BLOCK_BN);
    check_model(&b, 1, 3, 4, 5, 4, 0);
    hcnn_block_spec fcbn[2] = {blk(HCNN_BLOCK_FC, 6, 0, 0, 0, 0, 0, 0), simple(HCNN_BLOCK_BN)};
    check_model(fcbn, 2, 4, 1, 1, 5, 0);
}

static void test_bn_statistics(void **state)
{
    (void)state;
    hcnn_block_spec b = simple(HCNN_BLOCK_BN);
    model m;
    model_make(&m, &b, 1, 2, 3, 3, 4);
    float *x = malloc(sizeof(float) * m.in_sz);
    assert_non_null(x);
    fill_random(x, m.in_sz, 3, -2.0f, 3.0f);
    const hcnn_layer *l = &m.net.layers[0];
    assert_int_equal(hcnn_net_forward(&m.net, &m.s.ctx, &m.acts, x, m.n), 0);
    const float *y = hcnn_acts_output(&m.acts);
    for (int c = 0; c < 2; c++) {
        double s = 0, ss = 0, ys = 0, yss = 0;
        const int cnt = 4 * 9;
        for (int i = 0; i < 4; i++)
            for (int p = 0; p < 9; p++) {
                double v = x[(i * 2 + c) * 9 + p], u = y[(i * 2 + c) * 9 + p];
                s += v, ss += v * v, ys += u, yss += u * u;
            }
        double mean = s / cnt, var = ss / cnt - mean * mean;
        /* normalised output: mean 0, variance 1 (gamma 1, beta 0) */
        assert_true(fabs(ys / cnt) < 1e-5);
        assert_true(fabs(yss / cnt - 1.0) < 1e-3);
        /* running stats: momentum 0.1 from (0, 1), unbiased variance */
        assert_true(fabs(l->running_mean[c] - 0.1 * mean) < 1e-5);
        assert_true(fabs(l->running_var[c] - (0.9 + 0.1 * var * cnt / (cnt - 1))) < 1e-4);
    }
    /* inference uses the running statistics */
    m.s.ctx.training = 0;
    assert_int_equal(hcnn_net_forward(&m.net, &m.s.ctx, &m.acts, x, m.n), 0);
    y = hcnn_acts_output(&m.acts);
    for (int c = 0; c < 2; c++) {
        float expect = (x[c * 9] - l->running_mean[c]) / sqrtf(l->running_var[c] + 1e-5f);
        assert_true(fabsf(y[c * 9] - expect) < 1e-5f);
    }
    free(x);
    model_free(&m);
}

static void test_pool_relu_backward(void **state)
{
    (void)state;
    hcnn_block_spec b = blk(HCNN_BLOCK_MAXPOOL, 0, 2, 2, 2, 2, 0, 0);
    check_model(&b, 1, 2, 6, 6, 2, 1);
    b = blk(HCNN_BLOCK_MAXPOOL, 0, 3, 3, 2, 2, 1, 1); /* overlapping, padded */
    check_model(&b, 1, 2, 7, 7, 2, 1);
    b = blk(HCNN_BLOCK_AVGPOOL, 0, 2, 3, 2, 1, 1, 1);
    check_model(&b, 1, 2, 5, 6, 2, 0);
    b = simple(HCNN_BLOCK_GAP);
    check_model(&b, 1, 3, 4, 4, 2, 0);
    b = simple(HCNN_BLOCK_RELU);
    check_model(&b, 1, 2, 3, 3, 2, 1);
    b = simple(HCNN_BLOCK_FLATTEN);
    check_model(&b, 1, 2, 3, 3, 2, 0);
}

/* The leaky ReLU against finite differences (slopes 0.01 and 0.3), after a
 * convolution, with spaced inputs (no kink within a step); slope 0 is the
 * ReLU bit for bit. */
static void test_leaky_relu(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        hcnn_block_spec b[2] = {blk(HCNN_BLOCK_CONV, 3, 3, 3, 1, 1, 1, 1),
                                simple(HCNN_BLOCK_LEAKY_RELU)};
        b[1].negative_slope = k ? 0.3f : 0.01f;
        check_model(&b[1], 1, 2, 3, 3, 2, 1);
        check_model(b, 2, 2, 4, 4, 2, 1);
    }
    const hcnn_backend *be = hcnn_backend_cpu();
    float x[37], y0[37], y1[37], d0[37], d1[37], g[37];
    fill_random(x, 37, 8, -1.0f, 1.0f);
    fill_random(g, 37, 9, -1.0f, 1.0f);
    be->relu_fwd(be, x, y0, 37, 0.0f);
    hcnn_block_spec s = simple(HCNN_BLOCK_LEAKY_RELU);
    s.negative_slope = 0.0f;
    model m;
    model_make(&m, &s, 1, 37, 1, 1, 1);
    assert_int_equal(hcnn_net_forward(&m.net, &m.s.ctx, &m.acts, x, 1), 0);
    memcpy(y1, hcnn_acts_output(&m.acts), sizeof y1);
    assert_int_equal(hcnn_net_backward(&m.net, &m.s, &m.acts, x, g, d1, 1, NULL, NULL), 0);
    be->relu_bwd(be, y0, g, d0, 37, 0.0f);
    assert_memory_equal(y0, y1, sizeof y0);
    assert_memory_equal(d0, d1, sizeof d0);
    model_free(&m);
}

static void test_dropout(void **state)
{
    (void)state;
    hcnn_block_spec b = simple(HCNN_BLOCK_DROPOUT);
    b.p = 0.25f;
    model m;
    model_make(&m, &b, 1, 4, 8, 8, 8);
    float *x = malloc(sizeof(float) * m.in_sz), *y1 = malloc(sizeof(float) * m.out_sz);
    assert_true(x && y1);
    fill_random(x, m.in_sz, 3, 0.5f, 1.0f);
    assert_int_equal(hcnn_net_forward(&m.net, &m.s.ctx, &m.acts, x, m.n), 0);
    memcpy(y1, hcnn_acts_output(&m.acts), sizeof(float) * m.out_sz);
    size_t zeros = 0;
    for (size_t i = 0; i < m.out_sz; i++) {
        if (y1[i] == 0.0f)
            zeros++;
        else
            assert_true(fabsf(y1[i] - x[i] / 0.75f) < 1e-6f);
    }
    assert_true(zeros > m.out_sz / 5 && zeros < m.out_sz * 3 / 10);
    /* same (seed, step, sample) -> same mask; another step -> another mask */
    assert_int_equal(hcnn_net_forward(&m.net, &m.s.ctx, &m.acts, x, m.n), 0);
    assert_memory_equal(y1, hcnn_acts_output(&m.acts), sizeof(float) * m.out_sz);
    m.s.ctx.step = 1;
    assert_int_equal(hcnn_net_forward(&m.net, &m.s.ctx, &m.acts, x, m.n), 0);
    assert_true(memcmp(y1, hcnn_acts_output(&m.acts), sizeof(float) * m.out_sz) != 0);
    /* a sample's mask depends on its position, not on the batch split */
    m.s.ctx.step = 0;
    m.s.ctx.first_sample = 3;
    assert_int_equal(hcnn_net_forward(&m.net, &m.s.ctx, &m.acts, x + 3 * m.in_sz / 8, 5), 0);
    assert_memory_equal(y1 + 3 * m.out_sz / 8, hcnn_acts_output(&m.acts), sizeof(float) * 5 * m.out_sz / 8);
    m.s.ctx.first_sample = 0;
    check_model(&b, 1, 2, 3, 3, 3, 0); /* backward = mask */
    m.s.ctx.training = 0;              /* identity at inference */
    assert_int_equal(hcnn_net_forward(&m.net, &m.s.ctx, &m.acts, x, m.n), 0);
    assert_memory_equal(x, hcnn_acts_output(&m.acts), sizeof(float) * m.out_sz);
    free(x), free(y1);
    model_free(&m);
}

static void test_residual_backward(void **state)
{
    (void)state;
    hcnn_block_spec r = blk(HCNN_BLOCK_RESIDUAL, 3, 0, 0, 1, 1, 0, 0);
    r.shortcut = HCNN_SHORTCUT_AUTO; /* identity: same shape */
    check_model(&r, 1, 3, 5, 5, 2, 0);
    r = blk(HCNN_BLOCK_RESIDUAL, 4, 0, 0, 2, 2, 0, 0); /* projection: channels and stride */
    check_model(&r, 1, 2, 8, 8, 4, 0);
    r = blk(HCNN_BLOCK_RESIDUAL, 3, 0, 0, 1, 1, 0, 0);
    r.shortcut = HCNN_SHORTCUT_PROJECTION; /* forced projection, same shape */
    check_model(&r, 1, 3, 4, 4, 2, 0);
    /* residual as the first block: no input gradient, parameters still right */
    hcnn_block_spec two[2] = {blk(HCNN_BLOCK_RESIDUAL, 2, 0, 0, 2, 2, 0, 0),
                              blk(HCNN_BLOCK_RESIDUAL, 2, 0, 0, 1, 1, 0, 0)};
    check_model(two, 2, 1, 6, 6, 2, 0);
}

/* The residual block's fused forward (batch-norm + ReLU, batch-norm +
 * shortcut + ReLU in one pass) against its children run one by one and
 * the addition and ReLU as separate passes: bit for bit, in training and
 * inference, with identity and projection shortcuts. */
/* The context a layer run on its own gets where the chain would pair it
 * (src/layers/chain.c): a training convolution followed by a batch-norm
 * gathers the statistics the batch-norm then takes (backend.h,
 * hcnn_bn_stats), so that layer-by-layer references see the same
 * statistics as the fused passes. */
static hcnn_ctx paired(const hcnn_ctx *ctx, const hcnn_layer *layers, int j, int count)
{
    hcnn_ctx c = *ctx;
    c.bn_stats = NULL;
    if (!ctx->training || !ctx->bn_stats_table)
        return c;
    if (j + 1 < count && layers[j].kind == HCNN_BLOCK_CONV && layers[j + 1].kind == HCNN_BLOCK_BN) {
        c.bn_stats = ctx->bn_stats_table;
        c.bn_stats->bands = 0;
    } else if (j > 0 && layers[j].kind == HCNN_BLOCK_BN && layers[j - 1].kind == HCNN_BLOCK_CONV) {
        c.bn_stats = ctx->bn_stats_table;
    }
    return c;
}

static void residual_unfused(hcnn_layer *r, const hcnn_ctx *ctx, const float *x, int n,
                             float *y)
{
    const hcnn_backend *be = ctx->be;
    float *bufs[16] = {0}, *aux[16] = {0};
    const float *h = x, *s = x;
    for (int j = 0; j < r->nbody + r->nproj; j++) {
        hcnn_layer *c = j < r->nbody ? &r->body[j] : &r->proj[j - r->nbody];
        bufs[j] = malloc(sizeof(float) * hcnn_layer_out_size(c) * n);
        aux[j] = malloc(sizeof(float) * (hcnn_layer_aux_size(c, n) + 1));
        assert_true(bufs[j] && aux[j]);
        const float *in = j < r->nbody ? h : s;
        const hcnn_ctx cj = j < r->nbody ? paired(ctx, r->body, j, r->nbody)
                                         : paired(ctx, r->proj, j - r->nbody, r->nproj);
        assert_int_equal(hcnn_layer_forward(c, &cj, in, bufs[j], aux[j], n), 0);
        if (j < r->nbody)
            h = bufs[j];
        else
            s = bufs[j];
    }
    const size_t sz = hcnn_layer_out_size(r) * n;
    be->add(be, h, s, y, sz);
    be->relu_fwd(be, y, y, sz, 0.0f);
    for (int j = 0; j < r->nbody + r->nproj; j++)
        free(bufs[j]), free(aux[j]);
}

static void test_residual_fused_forward(void **state)
{
    (void)state;
    for (int proj = 0; proj < 2; proj++)
        for (int training = 1; training >= 0; training--) {
            hcnn_block_spec r = blk(HCNN_BLOCK_RESIDUAL, proj ? 6 : 4, 0, 0, proj ? 2 : 1,
                                    proj ? 2 : 1, 0, 0);
            r.shortcut = HCNN_SHORTCUT_AUTO;
            model m;
            model_make(&m, &r, 1, 4, 9, 9, 3);
            hcnn_layer *l = &m.net.layers[0];
            assert_int_equal(l->nproj > 0, proj);
            float *x = malloc(sizeof(float) * m.in_sz), *y = malloc(sizeof(float) * m.out_sz);
            assert_true(x && y);
            fill_random(x, m.in_sz, 5, -1.0f, 1.0f);
            /* batch-norm parameters and running statistics away from 1 and 0 */
            for (int j = 0; j < l->nbody + l->nproj; j++) {
                hcnn_layer *c = j < l->nbody ? &l->body[j] : &l->proj[j - l->nbody];
                if (c->kind != HCNN_BLOCK_BN)
                    continue;
                fill_random(c->w, (size_t)c->out_c, 6 + j, 0.5f, 1.5f);
                fill_random(c->b, (size_t)c->out_c, 7 + j, -0.5f, 0.5f);
                fill_random(c->running_mean, (size_t)c->out_c, 8 + j, -0.2f, 0.2f);
                fill_random(c->running_var, (size_t)c->out_c, 9 + j, 0.5f, 2.0f);
            }
            m.s.ctx.training = training;
            residual_unfused(l, &m.s.ctx, x, m.n, y);
            assert_int_equal(hcnn_net_forward(&m.net, &m.s.ctx, &m.acts, x, m.n), 0);
            const float *got = hcnn_acts_output(&m.acts);
            size_t zeros = 0;
            for (size_t i = 0; i < m.out_sz; i++)
                zeros += y[i] == 0.0f;
            assert_true(zeros > 0 && zeros < m.out_sz); /* the ReLU cuts some, not all */
            if (memcmp(got, y, sizeof(float) * m.out_sz) != 0)
                fail_msg("projection %d, training %d: fused forward differs", proj, training);
            free(x), free(y);
            model_free(&m);
        }
}

/* A batch-norm's backward with the following ReLU's mask (relu = 1) gives
 * the bits of a ReLU backward pass then the plain batch-norm backward: in
 * the kernel, on planes with and without a vector tail, and through a net
 * whose batch-norm and ReLU the net fuses, against its layers run one by
 * one (forward and backward). */
static void test_bn_relu_fused_backward(void **state)
{
    (void)state;
    const hcnn_backend *be = hcnn_backend_cpu();
    const int n = 3, c = 4, planes[2] = {19, 64};
    for (int k = 0; k < 2; k++) {
        const int np = planes[k];
        const size_t sz = (size_t)n * c * np;
        float *x = malloc(sizeof(float) * sz * 7), *z = x + sz, *y = z + sz, *dy = y + sz;
        float *g = dy + sz, *dx1 = g + sz, *dx2 = dx1 + sz;
        float gamma[4], beta[4], rm[4] = {0}, rv[4] = {1, 1, 1, 1}, mean[4], istd[4];
        float p1[8] = {0}, p2[8] = {0}; /* dgamma then dbeta */
        assert_non_null(x);
        fill_random(x, sz, 21 + k, -1.0f, 1.0f);
        fill_random(dy, sz, 23 + k, -1.0f, 1.0f);
        fill_random(gamma, 4, 25, 0.5f, 1.5f);
        fill_random(beta, 4, 26, -0.5f, 0.5f);
        be->bn_fwd_train(be, x, n, c, np, gamma, beta, 1e-5f, 0.1f, rm, rv, mean, istd, NULL, 0, NULL,
                         z);
        be->relu_fwd(be, z, y, sz, 0.0f);
        be->relu_bwd(be, y, dy, g, sz, 0.0f);
        be->bn_bwd(be, x, g, n, c, np, gamma, beta, mean, istd, 0, dx1, p1, p1 + 4);
        be->bn_bwd(be, x, dy, n, c, np, gamma, beta, mean, istd, 1, dx2, p2, p2 + 4);
        size_t cut = 0;
        for (size_t i = 0; i < sz; i++)
            cut += y[i] == 0.0f;
        assert_true(cut > 0 && cut < sz);
        if (memcmp(dx1, dx2, sizeof(float) * sz) || memcmp(p1, p2, sizeof p1))
            fail_msg("plane of %d: fused batch-norm and ReLU backward differs", np);
        free(x);
    }

    hcnn_block_spec b[] = {blk(HCNN_BLOCK_CONV, 4, 3, 3, 1, 1, 1, 1), simple(HCNN_BLOCK_BN),
                           simple(HCNN_BLOCK_RELU), blk(HCNN_BLOCK_CONV, 3, 3, 3, 1, 1, 1, 1)};
    model m;
    model_make(&m, b, 4, 2, 6, 6, 3);
    hcnn_net *net = &m.net;
    fill_random(net->params, net->nparams, 9, -0.5f, 0.5f);
    const hcnn_ctx *ctx = &m.s.ctx;
    float *x = malloc(sizeof(float) * m.in_sz), *dy = malloc(sizeof(float) * m.out_sz);
    float *dx = malloc(sizeof(float) * m.in_sz), *dx_ref = malloc(sizeof(float) * m.in_sz);
    float *grads_ref = malloc(sizeof(float) * (net->nparams + 1));
    float *ys[4], *aux[4], *gs[4];
    for (int i = 0; i < 4; i++) {
        const hcnn_layer *l = &net->layers[i];
        ys[i] = malloc(sizeof(float) * hcnn_layer_out_size(l) * m.n);
        gs[i] = malloc(sizeof(float) * hcnn_layer_in_size(l) * m.n);
        aux[i] = malloc(sizeof(float) * (hcnn_layer_aux_size(l, m.n) + 1));
        assert_true(ys[i] && gs[i] && aux[i]);
    }
    assert_true(x && dy && dx && dx_ref && grads_ref);
    fill_random(x, m.in_sz, 5, -1.0f, 1.0f);
    fill_random(dy, m.out_sz, 6, -1.0f, 1.0f);
    memset(net->grads, 0, sizeof(float) * net->nparams);
    const float *in = x;
    for (int i = 0; i < 4; i++, in = ys[i - 1]) {
        const hcnn_ctx ci = paired(ctx, net->layers, i, 4);
        assert_int_equal(hcnn_layer_forward(&net->layers[i], &ci, in, ys[i], aux[i], m.n), 0);
    }
    const float *cur = dy;
    for (int i = 3; i >= 0; i--, cur = gs[i + 1])
        assert_int_equal(hcnn_layer_backward(&net->layers[i], ctx, i ? ys[i - 1] : x, ys[i],
                                             aux[i], cur, gs[i], m.n),
                         0);
    memcpy(dx_ref, gs[0], sizeof(float) * m.in_sz);
    memcpy(grads_ref, net->grads, sizeof(float) * net->nparams);
    memset(net->grads, 0, sizeof(float) * net->nparams);
    assert_int_equal(hcnn_net_forward(net, ctx, &m.acts, x, m.n), 0);
    if (memcmp(hcnn_acts_output(&m.acts), ys[3], sizeof(float) * m.out_sz))
        fail_msg("net: fused forward differs");
    assert_int_equal(hcnn_net_backward(net, &m.s, &m.acts, x, dy, dx, m.n, NULL, NULL), 0);
    if (memcmp(dx, dx_ref, sizeof(float) * m.in_sz) ||
        memcmp(net->grads, grads_ref, sizeof(float) * net->nparams))
        fail_msg("net: fused backward differs");
    for (int i = 0; i < 4; i++)
        free(ys[i]), free(gs[i]), free(aux[i]);
    free(x), free(dy), free(dx), free(dx_ref), free(grads_ref);
    model_free(&m);
}

static void test_small_cnn_backward(void **state)
{
    (void)state;
    hcnn_block_spec b[] = {
        blk(HCNN_BLOCK_CONV, 4, 3, 3, 1, 1, 1, 1), simple(HCNN_BLOCK_BN),
        simple(HCNN_BLOCK_RELU),                   blk(HCNN_BLOCK_MAXPOOL, 0, 2, 2, 2, 2, 0, 0),
        blk(HCNN_BLOCK_RESIDUAL, 6, 0, 0, 1, 1, 0, 0), simple(HCNN_BLOCK_GAP),
        simple(HCNN_BLOCK_FLATTEN),                blk(HCNN_BLOCK_FC, 3, 0, 0, 0, 0, 0, 0),
    };
    check_model(b, 8, 2, 8, 8, 3, 0);
}

static void test_residual_identity_requires_shape(void **state)
{
    (void)state;
    hcnn_block_spec r = blk(HCNN_BLOCK_RESIDUAL, 4, 0, 0, 1, 1, 0, 0);
    r.shortcut = HCNN_SHORTCUT_IDENTITY;
    snprintf(r.name, sizeof r.name, "layer1.0");
    hcnn_layer l;
    assert_int_not_equal(hcnn_layer_setup(&l, &r, 3, 4, 4, "test.yaml", 0), 0);
    hcnn_layer_free(&l);
}

/* The device-memory backend (the backend seam's test) hands out addresses
 * the host cannot read: a read in a child process does not survive; its
 * operations, reached through upload and download, give the CPU backend's
 * results. */
static void test_devmem_backend(void **state)
{
    (void)state;
    hcnn_backend *dm;
    assert_int_equal(hcnn_backend_create("cpu-devmem", 0, &dm), HCNN_OK);
    const hcnn_backend *cpu = hcnn_backend_cpu();
    float host[64], back[64], ref[64];
    fill_random(host, 64, 3, -1.0f, 1.0f);
    assert_false(dm->host_memory);
    assert_true(cpu->host_memory);
    float *d = dm->alloc(dm, sizeof host, "test tensor");
    assert_non_null(d);
    dm->upload(dm, d, host, sizeof host);
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* cmocka's handler would report the child as a test */
        signal(SIGBUS, SIG_DFL);
        volatile float v = d[0]; /* the host touching device memory */
        (void)v;
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    dm->relu_fwd(dm, d, d, 64, 0.0f);
    dm->scale(dm, d, 64, 0.5f);
    dm->download(dm, back, d, sizeof back);
    cpu->relu_fwd(cpu, host, ref, 64, 0.0f);
    cpu->scale(cpu, ref, 64, 0.5f);
    assert_memory_equal(back, ref, sizeof ref);
    dm->free(dm, d);
    hcnn_backend_destroy(dm);
}

/* ---- loss, optimiser, schedule --------------------------------------------------- */

static void test_softmax_xent(void **state)
{
    (void)state;
    const hcnn_backend *be = hcnn_backend_cpu();
    const int n = 3, k = 4;
    float z[12], d[12];
    int32_t lab[3] = {0, 3, 2};
    fill_random(z, 12, 4, -3, 3);
    double st[HCNN_STATS] = {0};
    be->softmax_xent(be, z, lab, n, k, 1.0f / n, d, st);
    const double l = st[HCNN_STAT_LOSS];
    double ref = 0;
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < k; j++)
            s += exp(z[i * k + j]);
        ref += log(s) - z[i * k + lab[i]];
    }
    assert_true(fabs(l - ref) < 1e-5);
    for (int e = 0; e < 12; e++) {
        float keep = z[e];
        z[e] = keep + 1e-3f;
        double sp[HCNN_STATS] = {0}, sm[HCNN_STATS] = {0};
        be->softmax_xent(be, z, lab, n, k, 0, NULL, sp);
        z[e] = keep - 1e-3f;
        be->softmax_xent(be, z, lab, n, k, 0, NULL, sm);
        const double lp = sp[HCNN_STAT_LOSS] / n, lm = sm[HCNN_STAT_LOSS] / n;
        z[e] = keep;
        assert_true(close_enough(d[e], (lp - lm) / 2e-3, 1e-4, 1e-2));
    }
    /* huge logits stay finite */
    float big[4] = {1000, -1000, 0, 999};
    int32_t l0 = 0;
    double sb[HCNN_STATS] = {0};
    be->softmax_xent(be, big, &l0, 1, 4, 1, d, sb);
    assert_true(isfinite(sb[HCNN_STAT_LOSS]));
    assert_int_equal((int)sb[HCNN_STAT_CORRECT], 1);
}

static void test_sgd(void **state)
{
    (void)state;
    const hcnn_backend *be = hcnn_backend_cpu();
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        float w[3] = {1, -2, 3}, g[3] = {0.5f, 0.25f, -1}, v[3] = {0.1f, 0, -0.2f};
        float ew[3], ev[3];
        for (int i = 0; i < 3; i++) {
            float gi = g[i] + 0.01f * w[i];
            ev[i] = 0.9f * v[i] + gi;
            ew[i] = w[i] - 0.1f * (nesterov ? gi + 0.9f * ev[i] : ev[i]);
        }
        be->sgd_step(be, w, g, v, 3, 0.1f, 0.9f, 0.01f, nesterov, NULL);
        for (int i = 0; i < 3; i++) {
            assert_true(fabsf(w[i] - ew[i]) < 1e-6f);
            assert_true(fabsf(v[i] - ev[i]) < 1e-6f);
        }
    }
}

static void test_lr_schedules(void **state)
{
    (void)state;
    hcnn_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.lr = 0.1, cfg.epochs = 10, cfg.lr_step_epochs = 3, cfg.lr_gamma = 0.5;
    cfg.schedule = HCNN_SCHED_CONSTANT;
    assert_true(fabs(hcnn_lr_at(&cfg, 55, 10) - 0.1) < 1e-12);
    cfg.schedule = HCNN_SCHED_STEP;
    assert_true(fabs(hcnn_lr_at(&cfg, 29, 10) - 0.1) < 1e-12);
    assert_true(fabs(hcnn_lr_at(&cfg, 30, 10) - 0.05) < 1e-12);
    assert_true(fabs(hcnn_lr_at(&cfg, 65, 10) - 0.025) < 1e-12);
    cfg.schedule = HCNN_SCHED_COSINE;
    cfg.min_lr = 0.001;
    assert_true(fabs(hcnn_lr_at(&cfg, 0, 10) - 0.1) < 1e-12);
    assert_true(fabs(hcnn_lr_at(&cfg, 99, 10) - 0.001) < 1e-12);
    double mid = hcnn_lr_at(&cfg, 49, 10);
    assert_true(mid < 0.06 && mid > 0.045);
    cfg.warmup_epochs = 2; /* 20 warm-up steps */
    assert_true(fabs(hcnn_lr_at(&cfg, 0, 10) - 0.1 / 20) < 1e-12);
    assert_true(fabs(hcnn_lr_at(&cfg, 19, 10) - 0.1) < 1e-12);
    assert_true(fabs(hcnn_lr_at(&cfg, 20, 10) - 0.1) < 1e-12);
    assert_true(hcnn_lr_at(&cfg, 60, 10) < 0.1);
}

static void test_init_seeded(void **state)
{
    (void)state;
    hcnn_block_spec b[] = {blk(HCNN_BLOCK_CONV, 8, 3, 3, 1, 1, 1, 1), simple(HCNN_BLOCK_FLATTEN),
                           blk(HCNN_BLOCK_FC, 10, 0, 0, 0, 0, 0, 0)};
    model a, c;
    model_make(&a, b, 3, 3, 8, 8, 1);
    model_make(&c, b, 3, 3, 8, 8, 1);
    assert_memory_equal(a.net.params, c.net.params, sizeof(float) * a.net.nparams);
    /* He: std of conv weights about sqrt(2 / 27) */
    const hcnn_layer *l = &a.net.layers[0];
    double ss = 0;
    for (size_t i = 0; i < l->nw; i++)
        ss += (double)l->w[i] * l->w[i];
    double sd = sqrt(ss / l->nw);
    assert_true(sd > 0.7 * sqrt(2.0 / 27) && sd < 1.3 * sqrt(2.0 / 27));
    hcnn_net_init(&c.net, HCNN_INIT_HE, 8);
    assert_true(memcmp(a.net.params, c.net.params, sizeof(float) * a.net.nparams) != 0);
    hcnn_net_init(&c.net, HCNN_INIT_XAVIER, 7);
    const float lim = sqrtf(6.0f / (27 + 72));
    for (size_t i = 0; i < c.net.layers[0].nw; i++)
        assert_true(fabsf(c.net.layers[0].w[i]) <= lim);
    /* tensor names and contiguous views */
    assert_string_equal(a.net.tensors[0].name, "conv1.weight");
    assert_string_equal(a.net.tensors[2].name, "fc1.weight");
    assert_int_equal(a.net.tensors[2].dims[1], 8 * 64);
    model_free(&a);
    model_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_forward_vs_naive),
        cmocka_unit_test(test_conv_backward),
        cmocka_unit_test(test_conv_backward_chunked),
        cmocka_unit_test(test_conv_algorithms),
        cmocka_unit_test(test_bf16_auto_keeps_fp32),
        cmocka_unit_test(test_whole_net_per_thread),
        cmocka_unit_test(test_gemm_split_k),
        cmocka_unit_test(test_maxpool2x2_vs_naive),
        cmocka_unit_test(test_fc_backward),
        cmocka_unit_test(test_bn_backward_training),
        cmocka_unit_test(test_bn_statistics),
        cmocka_unit_test(test_pool_relu_backward),
        cmocka_unit_test(test_leaky_relu),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_residual_backward),
        cmocka_unit_test(test_residual_fused_forward),
        cmocka_unit_test(test_bn_relu_fused_backward),
        cmocka_unit_test(test_small_cnn_backward),
        cmocka_unit_test(test_residual_identity_requires_shape),
        cmocka_unit_test(test_devmem_backend),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_sgd),
        cmocka_unit_test(test_lr_schedules),
        cmocka_unit_test(test_init_seeded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
