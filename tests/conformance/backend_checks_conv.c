/* The conformance suite's checks of gemm and of the convolution (conv_fwd,
 * conv_bwd, conv_bwd_filter, conv_bwd_data, conv_workspace, conv_gemms,
 * conv_describe) on every way of running it (backend_check.h).  The
 * activations (x, y, dy, dx) are stated in NCHW and reach the backend in
 * its layout (dnew_act, put_act, get_act, check_act); the weights, biases
 * and their gradients are the same in every layout. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend_check.h"

/* ---- gemm ------------------------------------------------------------------------------ */

static const struct {
    int m, n, k, pad; /* pad: leading dimensions this much larger than the rows' width */
} gemm_cases[] = {
    {1, 1, 1, 0},      {1, 7, 5, 2},       {7, 5, 3, 0},
    {7, 5, 3, 3},      {16, 9, 16, 1}, /* A square: a wrong transposition of A shows */
    {17, 33, 9, 4},    {5, 1, 37, 2},      {33, 65, 1, 1},
    {64, 48, 200, 0},  {300, 260, 130, 5}, /* large enough to be cut into tiles */
    {12, 20, 9000, 3},                     /* a small output over a long k (a weight gradient) */
};
static const float gemm_ab[][2] = {{1.0f, 0.0f}, {-0.75f, 0.5f}, {2.0f, 1.0f}, {0.5f, -1.0f}};

/* C = alpha op(A) op(B) + beta C with leading dimensions > widths: A's and B's
 * padding holds NaN (must not be read), C's padding a sentinel (must not be
 * written), C NaN when beta is 0 (must not be read: the BLAS convention). */
int check_gemm(const hcnn_backend *be, char *why, size_t cap)
{
    char what[128];
    ref_rng r = {21};
    for (size_t c = 0; c < sizeof gemm_cases / sizeof *gemm_cases; c++)
        for (int t = 0; t < 4; t++)
            for (size_t ab = 0; ab < sizeof gemm_ab / sizeof *gemm_ab; ab++) {
                const int mark = arena_mark();
                const int m = gemm_cases[c].m, n = gemm_cases[c].n, k = gemm_cases[c].k;
                const int ta = t >> 1, tb = t & 1, pad = gemm_cases[c].pad;
                const float alpha = gemm_ab[ab][0], beta = gemm_ab[ab][1];
                const int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
                const int lda = ac + pad, ldb = bc + pad, ldc = n + pad;
                float *a = hfill((size_t)ar * lda, NAN), *b = hfill((size_t)br * ldb, NAN);
                float *c0 = hfill((size_t)m * ldc, -999.0f);
                for (int i = 0; i < ar; i++)
                    for (int j = 0; j < ac; j++)
                        a[(size_t)i * lda + j] = ref_uniform(&r, -1, 1);
                for (int i = 0; i < br; i++)
                    for (int j = 0; j < bc; j++)
                        b[(size_t)i * ldb + j] = ref_uniform(&r, -1, 1);
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++)
                        c0[(size_t)i * ldc + j] = beta == 0.0f ? NAN : ref_uniform(&r, -1, 1);
                double *want = hdvec((size_t)m * n);
                ref_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc, want);
                float *da = dnew(be, a, (size_t)ar * lda), *db = dnew(be, b, (size_t)br * ldb);
                float *dc = dnew(be, c0, (size_t)m * ldc);
                be->gemm(be, ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc);
                float *got = hvec((size_t)m * ldc), *body = hvec((size_t)m * n);
                get(be, got, dc, (size_t)m * ldc);
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < ldc; j++) {
                        const float v = got[(size_t)i * ldc + j];
                        if (j < n)
                            body[(size_t)i * n + j] = v;
                        else if (v != -999.0f)
                            FAIL("gemm %dx%dx%d ta %d tb %d ldc %d: C's padding [%d][%d] was "
                                 "written (%g)",
                                 m, n, k, ta, tb, ldc, i, j, (double)v);
                    }
                snprintf(what, sizeof what, "gemm %dx%dx%d ta %d tb %d alpha %g beta %g pad %d", m,
                         n, k, ta, tb, (double)alpha, (double)beta, pad);
                TRY(cmp(what, body, want, (size_t)m * n, TOL_GEMM, why, cap));
                TRY(guard_ok(be, what, dc, (size_t)m * ldc, why, cap));
                arena_pop(mark);
            }
    return 1;
}

/* ---- convolution ---------------------------------------------------------------------- */

typedef struct conv_case {
    int n, c, h, w, oc, kh, kw, sh, sw, ph, pw;
} conv_case;

static const conv_case conv_cases[] = {
    {2, 3, 5, 7, 4, 1, 1, 1, 1, 0, 0},     /* 1x1 kernel */
    {3, 3, 9, 11, 5, 3, 3, 1, 1, 1, 1},    /* 3x3 pad 1, odd sizes */
    {1, 4, 13, 10, 6, 5, 5, 2, 2, 2, 2},   /* 5x5 stride 2 pad 2, n = 1 */
    {2, 2, 8, 9, 3, 3, 5, 2, 1, 1, 2},     /* non-square kernel, stride and padding */
    {3, 8, 9, 9, 12, 1, 1, 2, 2, 0, 0},    /* 1x1 stride 2: pixels without gradient */
    {5, 8, 6, 6, 10, 3, 3, 1, 1, 1, 1},    /* small planes, several images */
    {7, 6, 10, 10, 8, 3, 3, 1, 1, 1, 1},   /* 100-pixel planes: groups of images */
    {4, 5, 11, 7, 7, 3, 3, 2, 2, 0, 0},    /* stride 2 without padding, odd sizes */
    {1, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1},     /* a kernel larger than the image */
    {4, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1}, /* 16 channels, wide planes (shifted windows), 16 out */
    {1, 16, 8, 64, 8, 5, 5, 1, 1, 2, 2},   /* 5x5 on a wide plane, n = 1 */
    {12, 6, 20, 20, 8, 3, 3, 1, 1, 1, 1},  /* 400-pixel planes: weight gradients in partial sums */
    {128, 6, 10, 10, 8, 3, 3, 1, 1, 1, 1}, /* a large batch of small planes */
    /* stride 1 with other paddings than half the kernel (the CUDA data
     * gradient as a transposed convolution pads dy by k - 1 - p) */
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 0, 0},     /* 3x3 without padding: dy padded by 2 */
    {2, 2, 5, 6, 3, 3, 5, 1, 1, 2, 1},     /* padding of kh - 1: outputs past the edges */
    /* 32 channels in and out, 3x3, stride 1: the CPU's Winograd under auto,
     * and the CUDA backend's HCNN_CUDA_CONV=winograd_cudnn (cuDNN's) */
    {4, 32, 8, 8, 32, 3, 3, 1, 1, 1, 1},
};
#define NCONV (sizeof conv_cases / sizeof *conv_cases)

/* how a call runs: the algorithm, whole-network units, the column chunks, and
 * a workspace sized for extra more images than the call has */
typedef struct conv_exec_case {
    hcnn_conv_algo algo;
    int in_unit;
    size_t chunk;
    int extra;
    const char *name;
} conv_exec_case;

static const conv_exec_case conv_execs[] = {
    {HCNN_CONV_AUTO, 0, 1u << 24, 0, "auto"},
    {HCNN_CONV_BATCHED, 0, 1u << 24, 0, "batched"},
    {HCNN_CONV_BATCHED, 0, 1, 0, "batched, chunks of 1 float"},
    {HCNN_CONV_BATCHED, 0, 3000, 2, "batched, chunks of 3000 floats, workspace for n+2"},
    {HCNN_CONV_PER_THREAD, 0, 1u << 24, 0, "per-thread"},
    {HCNN_CONV_PER_THREAD, 0, 1u << 24, 3, "per-thread, workspace for n+3"},
    {HCNN_CONV_AUTO, 1, 1u << 24, 0, "auto, in a unit"},
    {HCNN_CONV_BATCHED, 1, 3000, 0, "batched, in a unit, chunks of 3000 floats"},
    {HCNN_CONV_PER_THREAD, 1, 1u << 24, 1, "per-thread, in a unit, workspace for n+1"},
    /* Winograd (3x3 stride-1 cases; the others take auto's plan) */
    {HCNN_CONV_WINOGRAD_F2, 0, 1u << 24, 0, "winograd F(2x2,3x3)"},
    {HCNN_CONV_WINOGRAD_F4, 0, 1u << 24, 1, "winograd F(4x4,3x3), workspace for n+1"},
    {HCNN_CONV_WINOGRAD, 0, 3000, 0, "winograd, chunks of 3000 floats"},
    {HCNN_CONV_WINOGRAD_F2, 1, 1u << 24, 0, "winograd F(2x2,3x3), in a unit"},
};
#define NEXEC (sizeof conv_execs / sizeof *conv_execs)

/* The tolerance of a call: Winograd's where the backend says it takes
 * Winograd for this layer (conv_describe; its transforms round more than a
 * direct sum, F(4x4,3x3) most: tests/unit/test_winograd.c), else TOL_CONV.
 * A device's Winograd whose tile its library does not say (cuDNN's
 * algorithm "winograd_nonfused" for some pass) is held to F(4x4,3x3)'s. */
static double conv_tol(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex, int n)
{
    char how[1024] = "";
    be->conv_describe(be, d, ex, n, how, sizeof how);
    char *medians = strstr(how, " (ways:"); /* the ways' names: not what runs */
    if (medians)
        *medians = '\0';
    return !strncmp(how, "winograd_f4:", 12)   ? TOL_WINOGRAD_F4
           : !strncmp(how, "winograd_f2:", 12) ? TOL_WINOGRAD_F2
           : strstr(how, " winograd")          ? TOL_WINOGRAD_F4
                                               : TOL_CONV;
}

/* Small chunks on a large batch make a call per image: the small batches have
 * them (and the large one would take seconds on a loaded machine). */
static int exec_applies(const conv_case *cc, const conv_exec_case *xc)
{
    return cc->n <= 16 || xc->chunk >= (1u << 20);
}

static hcnn_conv_desc conv_desc(const conv_case *cc)
{
    hcnn_conv_desc d;
    memset(&d, 0, sizeof d);
    d.g.c = cc->c, d.g.h = cc->h, d.g.w = cc->w, d.g.kh = cc->kh, d.g.kw = cc->kw;
    d.g.sh = cc->sh, d.g.sw = cc->sw, d.g.ph = cc->ph, d.g.pw = cc->pw;
    d.g.oh = (cc->h + 2 * cc->ph - cc->kh) / cc->sh + 1;
    d.g.ow = (cc->w + 2 * cc->pw - cc->kw) / cc->sw + 1;
    d.out_c = cc->oc;
    return d;
}

static void conv_name(const conv_case *cc, const conv_exec_case *xc, const char *what, char *buf,
                      size_t cap)
{
    snprintf(buf, cap, "%s: n %d, %dx%dx%d, %d out, kernel %dx%d, stride %dx%d, pad %dx%d, %s",
             what, cc->n, cc->c, cc->h, cc->w, cc->oc, cc->kh, cc->kw, cc->sh, cc->sw, cc->ph,
             cc->pw, xc->name);
}

static long g_polls; /* the poll hook's calls (not checked: it may never be called) */
static void count_poll(void *arg) { __atomic_fetch_add((long *)arg, 1, __ATOMIC_RELAXED); }

/* A convolution call, run directly or as a work unit of whole-network execution
 * (inside be->parallel, on the first thread). */
enum { CONV_FWD, CONV_BWD, CONV_BWD_FILTER, CONV_BWD_DATA };
typedef struct conv_call {
    const hcnn_backend *be;
    const hcnn_conv_desc *d;
    const hcnn_exec *ex;
    int op;
    const float *x, *w, *b, *dy;
    float *y, *dw, *db, *dx;
    int dx_acc, n, rc;
} conv_call;

static void conv_call_run(conv_call *c)
{
    const hcnn_backend *be = c->be;
    switch (c->op) {
    case CONV_FWD:
        c->rc = be->conv_fwd(be, c->d, c->ex, c->x, c->w, c->b, c->y, c->n);
        break;
    case CONV_BWD:
        c->rc =
            be->conv_bwd(be, c->d, c->ex, c->x, c->w, c->dy, c->dw, c->db, c->dx, c->dx_acc, c->n);
        break;
    case CONV_BWD_FILTER:
        c->rc = be->conv_bwd_filter(be, c->d, c->ex, c->x, c->dy, c->dw, c->db, c->n);
        break;
    default:
        c->rc = be->conv_bwd_data(be, c->d, c->ex, c->w, c->dy, c->dx, c->dx_acc, c->n);
    }
}

static void conv_unit_thread(void *arg, int t, int nt)
{
    (void)nt;
    if (t == 0)
        conv_call_run(arg);
}

/* One convolution case run one way: its data, references and workspace. */
typedef struct conv_env {
    const hcnn_backend *be;
    const conv_case *cc;
    const conv_exec_case *xc;
    hcnn_conv_desc d;
    hcnn_exec ex;
    size_t nx, nw, ny;                       /* floats of x, w (dw), y (dy) */
    int n, c, oc, np_in, np_out;             /* x [n][c][np_in], y [n][oc][np_out] (NCHW) */
    float *x, *w, *b, *dy, *dw0, *db0, *dx0; /* host data */
    float *d_x, *d_w, *d_b, *d_dy;           /* backend copies */
    double *y0, *yb, *gw, *gb, *gx;          /* references: y, y + b, dw, db, dx */
    double tol;                              /* of the results (conv_tol) */
} conv_env;

/* the data and references of case cc (want: which references) */
static void conv_env_data(conv_env *e, const hcnn_backend *be, const conv_case *cc, int want_fwd,
                          int want_bwd)
{
    memset(e, 0, sizeof *e);
    e->be = be, e->cc = cc;
    e->d = conv_desc(cc);
    const hcnn_conv_geom *g = &e->d.g;
    e->nx = (size_t)cc->n * g->c * g->h * g->w;
    e->nw = (size_t)cc->oc * g->c * g->kh * g->kw;
    e->ny = (size_t)cc->n * cc->oc * g->oh * g->ow;
    e->n = cc->n, e->c = g->c, e->oc = cc->oc, e->np_in = g->h * g->w, e->np_out = g->oh * g->ow;
    ref_rng r = {1000 + (uint64_t)(cc - conv_cases)};
    e->x = hrand(&r, e->nx, -1, 1), e->w = hrand(&r, e->nw, -1, 1);
    e->b = hrand(&r, (size_t)cc->oc, -1, 1), e->dy = hrand(&r, e->ny, -1, 1);
    e->dw0 = hrand(&r, e->nw, -1, 1), e->db0 = hrand(&r, (size_t)cc->oc, -1, 1);
    e->dx0 = hrand(&r, e->nx, -1, 1);
    e->d_x = dnew_act(be, e->x, e->n, e->c, e->np_in), e->d_w = dnew(be, e->w, e->nw);
    e->d_b = dnew(be, e->b, (size_t)cc->oc);
    e->d_dy = dnew_act(be, e->dy, e->n, e->oc, e->np_out);
    if (want_fwd) {
        e->y0 = hdvec(e->ny), e->yb = hdvec(e->ny);
        ref_conv_fwd(&e->d, e->x, e->w, NULL, cc->n, e->y0);
        const size_t P = (size_t)g->oh * g->ow;
        for (size_t i = 0; i < e->ny; i++) /* y + b[o], o = (i / P) % out_c */
            e->yb[i] = e->y0[i] + e->b[i / P % (size_t)cc->oc];
    }
    if (want_bwd) {
        e->gw = hdvec(e->nw), e->gb = hdvec((size_t)cc->oc), e->gx = hdvec(e->nx);
        ref_conv_bwd_filter(&e->d, e->x, e->dy, cc->n, e->gw, e->gb);
        ref_conv_bwd_data(&e->d, e->w, e->dy, cc->n, e->gx);
    }
}

/* the way xc: the execution and a workspace of conv_workspace's size (+ guard) */
static void conv_env_exec(conv_env *e, const conv_exec_case *xc)
{
    e->xc = xc;
    memset(&e->ex, 0, sizeof e->ex);
    e->ex.max_chunk_floats = xc->chunk;
    e->ex.conv_algo = xc->algo;
    e->ex.in_unit = xc->in_unit;
    e->ex.poll = count_poll, e->ex.poll_arg = &g_polls;
    e->tol = conv_tol(e->be, &e->d, &e->ex, e->cc->n);
    const size_t ws = e->be->conv_workspace(e->be, &e->d, &e->ex, e->cc->n + xc->extra);
    e->ex.ws = dvec(e->be, ws);
    e->ex.ws_floats = ws;
}

static int conv_run(conv_env *e, int op, const float *b, float *y, float *dw, float *db, float *dx,
                    int dx_acc, int n, char *why, size_t cap)
{
    conv_call c = {e->be, &e->d, &e->ex, op, e->d_x, e->d_w, b, e->d_dy,
                   y,     dw,    db,     dx, dx_acc, n,      -1};
    if (e->xc->in_unit)
        e->be->parallel(e->be, conv_unit_thread, &c);
    else
        conv_call_run(&c);
    if (c.rc != HCNN_OK)
        FAIL("convolution %d (%s) returned %d", op, e->xc->name, c.rc);
    return 1;
}

static int conv_ws_ok(conv_env *e, char *why, size_t cap)
{
    char what[256];
    conv_name(e->cc, e->xc, "workspace", what, sizeof what);
    return guard_ok(e->be, what, e->ex.ws, e->ex.ws_floats, why, cap);
}

/* y = conv(x, w) + b (y NaN before), with b and with NULL */
int check_conv_fwd(const hcnn_backend *be, char *why, size_t cap)
{
    char what[256];
    for (size_t c = 0; c < NCONV; c++) {
        const int mark = arena_mark();
        conv_env e;
        conv_env_data(&e, be, &conv_cases[c], 1, 0);
        float *y = dvec(be, e.ny);
        for (size_t x = 0; x < NEXEC; x++) {
            if (!exec_applies(e.cc, &conv_execs[x]))
                continue;
            const int m2 = arena_mark();
            conv_env_exec(&e, &conv_execs[x]);
            put_nan(be, y, e.ny);
            TRY(conv_run(&e, CONV_FWD, e.d_b, y, NULL, NULL, NULL, 0, e.cc->n, why, cap));
            conv_name(e.cc, e.xc, "conv_fwd y (bias)", what, sizeof what);
            TRY(check_act(be, what, y, e.yb, e.n, e.oc, e.np_out, e.tol, why, cap));
            put_nan(be, y, e.ny);
            TRY(conv_run(&e, CONV_FWD, NULL, y, NULL, NULL, NULL, 0, e.cc->n, why, cap));
            conv_name(e.cc, e.xc, "conv_fwd y (no bias)", what, sizeof what);
            TRY(check_act(be, what, y, e.y0, e.n, e.oc, e.np_out, e.tol, why, cap));
            TRY(conv_ws_ok(&e, why, cap));
            arena_pop(m2);
        }
        arena_pop(mark);
    }
    return 1;
}

/* conv_fwd with hcnn_exec.relu, on a backend with conv_relu (backend.h):
 * y = relu(conv(x, w) + b), with b and with NULL, against the references,
 * and bit for bit what conv_fwd then relu_fwd (the ReLU layer) give.
 * Nothing to check on a backend without conv_relu (the chain never asks it). */
int check_conv_relu(const hcnn_backend *be, char *why, size_t cap)
{
    if (!be->conv_relu)
        return 1;
    char what[256];
    for (size_t c = 0; c < NCONV; c++) {
        const int mark = arena_mark();
        conv_env e;
        conv_env_data(&e, be, &conv_cases[c], 1, 0);
        double *want[2] = {hdvec(e.ny), hdvec(e.ny)}; /* relu(y0), relu(y0 + b) */
        for (size_t i = 0; i < e.ny; i++) {
            want[0][i] = e.y0[i] > 0 ? e.y0[i] : 0.0;
            want[1][i] = e.yb[i] > 0 ? e.yb[i] : 0.0;
        }
        float *y = dvec(be, e.ny), *apart = dvec(be, e.ny);
        float *hy = hvec(e.ny), *ha = hvec(e.ny);
        for (size_t x = 0; x < NEXEC; x++) {
            if (!exec_applies(e.cc, &conv_execs[x]))
                continue;
            const int m2 = arena_mark();
            conv_env_exec(&e, &conv_execs[x]);
            for (int with_b = 1; with_b >= 0; with_b--) {
                const float *b = with_b ? e.d_b : NULL;
                e.ex.relu = 1;
                put_nan(be, y, e.ny);
                TRY(conv_run(&e, CONV_FWD, b, y, NULL, NULL, NULL, 0, e.cc->n, why, cap));
                e.ex.relu = 0;
                put_nan(be, apart, e.ny);
                TRY(conv_run(&e, CONV_FWD, b, apart, NULL, NULL, NULL, 0, e.cc->n, why, cap));
                be->relu_fwd(be, apart, apart, e.ny, 0.0f);
                conv_name(e.cc, e.xc, with_b ? "conv_fwd relu y (bias)" : "conv_fwd relu y",
                          what, sizeof what);
                TRY(check_act(be, what, y, want[with_b], e.n, e.oc, e.np_out, e.tol, why, cap));
                get_act(be, hy, y, e.n, e.oc, e.np_out);
                get_act(be, ha, apart, e.n, e.oc, e.np_out);
                for (size_t i = 0; i < e.ny; i++)
                    if (memcmp(&hy[i], &ha[i], sizeof hy[i]) != 0)
                        FAIL("%s: element %zu is %.9g, conv_fwd then relu_fwd give %.9g", what, i,
                             hy[i], ha[i]);
            }
            TRY(conv_ws_ok(&e, why, cap));
            arena_pop(m2);
        }
        arena_pop(mark);
    }
    return 1;
}

/* conv_bwd: dw += dL/dw, db += sum dy (db NULL: none), dx = or += dL/dx (dx NULL: none) */
int check_conv_bwd(const hcnn_backend *be, char *why, size_t cap)
{
    char what[256];
    for (size_t c = 0; c < NCONV; c++) {
        const int mark = arena_mark();
        conv_env e;
        conv_env_data(&e, be, &conv_cases[c], 0, 1);
        const size_t oc = (size_t)e.cc->oc;
        double *want_dw = plus(e.dw0, e.gw, e.nw), *want_db = plus(e.db0, e.gb, oc);
        double *want_dxacc = plus(e.dx0, e.gx, e.nx);
        float *dw = dvec(be, e.nw), *db = dvec(be, oc), *dx = dvec(be, e.nx);
        for (size_t x = 0; x < NEXEC; x++) {
            if (!exec_applies(e.cc, &conv_execs[x]))
                continue;
            const int m2 = arena_mark();
            conv_env_exec(&e, &conv_execs[x]);
            /* dw, db accumulated, dx overwritten */
            put(be, dw, e.dw0, e.nw), put(be, db, e.db0, oc), put_nan(be, dx, e.nx);
            TRY(conv_run(&e, CONV_BWD, NULL, NULL, dw, db, dx, 0, e.cc->n, why, cap));
            conv_name(e.cc, e.xc, "conv_bwd dw (accumulated)", what, sizeof what);
            TRY(check_dev(be, what, dw, want_dw, e.nw, e.tol, why, cap));
            conv_name(e.cc, e.xc, "conv_bwd db (accumulated)", what, sizeof what);
            TRY(check_dev(be, what, db, want_db, oc, e.tol, why, cap));
            conv_name(e.cc, e.xc, "conv_bwd dx (overwritten)", what, sizeof what);
            TRY(check_act(be, what, dx, e.gx, e.n, e.c, e.np_in, e.tol, why, cap));
            /* db NULL, dx accumulated */
            put(be, dw, e.dw0, e.nw), put(be, db, e.db0, oc);
            put_act(be, dx, e.dx0, e.n, e.c, e.np_in);
            TRY(conv_run(&e, CONV_BWD, NULL, NULL, dw, NULL, dx, 1, e.cc->n, why, cap));
            conv_name(e.cc, e.xc, "conv_bwd dw (db NULL)", what, sizeof what);
            TRY(check_dev(be, what, dw, want_dw, e.nw, e.tol, why, cap));
            conv_name(e.cc, e.xc, "conv_bwd db untouched (NULL)", what, sizeof what);
            TRY(check_dev(be, what, db, hd(e.db0, oc), oc, TOL_EXACT, why, cap));
            conv_name(e.cc, e.xc, "conv_bwd dx (dx_acc)", what, sizeof what);
            TRY(check_act(be, what, dx, want_dxacc, e.n, e.c, e.np_in, e.tol, why, cap));
            /* dx NULL */
            put(be, dw, e.dw0, e.nw), put(be, db, e.db0, oc);
            TRY(conv_run(&e, CONV_BWD, NULL, NULL, dw, db, NULL, 0, e.cc->n, why, cap));
            conv_name(e.cc, e.xc, "conv_bwd dw (dx NULL)", what, sizeof what);
            TRY(check_dev(be, what, dw, want_dw, e.nw, e.tol, why, cap));
            conv_name(e.cc, e.xc, "conv_bwd db (dx NULL)", what, sizeof what);
            TRY(check_dev(be, what, db, want_db, oc, e.tol, why, cap));
            TRY(conv_ws_ok(&e, why, cap));
            arena_pop(m2);
        }
        arena_pop(mark);
    }
    return 1;
}

/* conv_bwd_filter: dw += dL/dw, db += sum dy (db NULL: none) */
int check_conv_bwd_filter(const hcnn_backend *be, char *why, size_t cap)
{
    char what[256];
    for (size_t c = 0; c < NCONV; c++) {
        const int mark = arena_mark();
        conv_env e;
        conv_env_data(&e, be, &conv_cases[c], 0, 1);
        const size_t oc = (size_t)e.cc->oc;
        double *want_dw = plus(e.dw0, e.gw, e.nw), *want_db = plus(e.db0, e.gb, oc);
        float *dw = dvec(be, e.nw), *db = dvec(be, oc);
        for (size_t x = 0; x < NEXEC; x++) {
            if (!exec_applies(e.cc, &conv_execs[x]))
                continue;
            const int m2 = arena_mark();
            conv_env_exec(&e, &conv_execs[x]);
            for (int with_db = 1; with_db >= 0; with_db--) {
                put(be, dw, e.dw0, e.nw), put(be, db, e.db0, oc);
                TRY(conv_run(&e, CONV_BWD_FILTER, NULL, NULL, dw, with_db ? db : NULL, NULL, 0,
                             e.cc->n, why, cap));
                conv_name(e.cc, e.xc,
                          with_db ? "conv_bwd_filter dw" : "conv_bwd_filter dw (db NULL)", what,
                          sizeof what);
                TRY(check_dev(be, what, dw, want_dw, e.nw, e.tol, why, cap));
                conv_name(e.cc, e.xc,
                          with_db ? "conv_bwd_filter db" : "conv_bwd_filter db untouched", what,
                          sizeof what);
                TRY(check_dev(be, what, db, with_db ? want_db : hd(e.db0, oc), oc,
                              with_db ? e.tol : TOL_EXACT, why, cap));
            }
            TRY(conv_ws_ok(&e, why, cap));
            arena_pop(m2);
        }
        arena_pop(mark);
    }
    return 1;
}

/* conv_bwd_data: dx = dL/dx, or dx += with dx_acc */
int check_conv_bwd_data(const hcnn_backend *be, char *why, size_t cap)
{
    char what[256];
    for (size_t c = 0; c < NCONV; c++) {
        const int mark = arena_mark();
        conv_env e;
        conv_env_data(&e, be, &conv_cases[c], 0, 1);
        double *want_acc = plus(e.dx0, e.gx, e.nx);
        float *dx = dvec(be, e.nx);
        for (size_t x = 0; x < NEXEC; x++) {
            if (!exec_applies(e.cc, &conv_execs[x]))
                continue;
            const int m2 = arena_mark();
            conv_env_exec(&e, &conv_execs[x]);
            put_nan(be, dx, e.nx);
            TRY(conv_run(&e, CONV_BWD_DATA, NULL, NULL, NULL, NULL, dx, 0, e.cc->n, why, cap));
            conv_name(e.cc, e.xc, "conv_bwd_data dx (overwritten)", what, sizeof what);
            TRY(check_act(be, what, dx, e.gx, e.n, e.c, e.np_in, e.tol, why, cap));
            put_act(be, dx, e.dx0, e.n, e.c, e.np_in);
            TRY(conv_run(&e, CONV_BWD_DATA, NULL, NULL, NULL, NULL, dx, 1, e.cc->n, why, cap));
            conv_name(e.cc, e.xc, "conv_bwd_data dx (dx_acc)", what, sizeof what);
            TRY(check_act(be, what, dx, want_acc, e.n, e.c, e.np_in, e.tol, why, cap));
            TRY(conv_ws_ok(&e, why, cap));
            arena_pop(m2);
        }
        arena_pop(mark);
    }
    return 1;
}

/* conv_workspace: the same size for the same arguments, a sane one, and enough
 * "for up to n images": a workspace sized for n runs a forward and a backward
 * of the first image alone within it. */
int check_conv_workspace(const hcnn_backend *be, char *why, size_t cap)
{
    char what[256];
    for (size_t c = 0; c < NCONV; c++) {
        const int mark = arena_mark();
        conv_env e;
        conv_env_data(&e, be, &conv_cases[c], 1, 0);
        const hcnn_conv_geom *g = &e.d.g;
        const size_t ny1 = (size_t)e.cc->oc * g->oh * g->ow, nx1 = (size_t)g->c * g->h * g->w;
        /* the references for image 0 alone */
        double *gw1 = hdvec(e.nw), *gb1 = hdvec((size_t)e.cc->oc), *gx1 = hdvec(nx1);
        ref_conv_bwd_filter(&e.d, e.x, e.dy, 1, gw1, gb1);
        ref_conv_bwd_data(&e.d, e.w, e.dy, 1, gx1);
        float *y = dvec(be, ny1), *dw = dvec(be, e.nw), *dx = dvec(be, nx1);
        for (size_t x = 0; x < NEXEC; x++) {
            if (!exec_applies(e.cc, &conv_execs[x]))
                continue;
            const int m2 = arena_mark();
            conv_env_exec(&e, &conv_execs[x]);
            const size_t again = be->conv_workspace(be, &e.d, &e.ex, e.cc->n + e.xc->extra);
            conv_name(e.cc, e.xc, "conv_workspace", what, sizeof what);
            if (again != e.ex.ws_floats)
                FAIL("%s: %zu floats, then %zu for the same arguments", what, e.ex.ws_floats,
                     again);
            if (e.ex.ws_floats > ((size_t)1 << 31))
                FAIL("%s: %zu floats", what, e.ex.ws_floats);
            put_nan(be, y, ny1);
            TRY(conv_run(&e, CONV_FWD, e.d_b, y, NULL, NULL, NULL, 0, 1, why, cap));
            conv_name(e.cc, e.xc, "conv_fwd of 1 image, workspace for n", what, sizeof what);
            TRY(check_act(be, what, y, e.yb, 1, e.oc, e.np_out, e.tol, why, cap));
            be->zero(be, dw, e.nw * sizeof(float));
            put_nan(be, dx, nx1);
            TRY(conv_run(&e, CONV_BWD, NULL, NULL, dw, NULL, dx, 0, 1, why, cap));
            conv_name(e.cc, e.xc, "conv_bwd dw of 1 image, workspace for n", what, sizeof what);
            TRY(check_dev(be, what, dw, gw1, e.nw, e.tol, why, cap));
            conv_name(e.cc, e.xc, "conv_bwd dx of 1 image, workspace for n", what, sizeof what);
            TRY(check_act(be, what, dx, gx1, 1, e.c, e.np_in, e.tol, why, cap));
            TRY(conv_ws_ok(&e, why, cap));
            arena_pop(m2);
        }
        arena_pop(mark);
    }
    return 1;
}

/* conv_gemms lists the same GEMMs when asked twice (counting, then into arrays),
 * each of positive sizes; conv_describe writes a non-empty line within cap. */
int check_conv_gemms_describe(const hcnn_backend *be, char *why, size_t cap)
{
    char what[256];
    for (size_t c = 0; c < NCONV; c++) {
        const int mark = arena_mark();
        conv_env e;
        conv_env_data(&e, be, &conv_cases[c], 0, 0);
        for (size_t x = 0; x < NEXEC; x++) {
            if (!exec_applies(e.cc, &conv_execs[x]))
                continue;
            const int m2 = arena_mark();
            conv_env_exec(&e, &conv_execs[x]);
            conv_name(e.cc, e.xc, "conv_gemms", what, sizeof what);
            const int n = e.cc->n, u = be->unit_images(be, n);
            const int units[2] = {0, u > 0 ? u : 1};
            for (int ui = 0; ui < 2; ui++)
                for (int need_dx = 0; need_dx < 2; need_dx++) {
                    hcnn_gemm_list count = {0}, list = {0};
                    be->conv_gemms(be, &e.d, &e.ex, n, units[ui], need_dx, &count);
                    list.fwd = host_bytes(sizeof(hcnn_gemm_shape) * (size_t)(count.nfwd + 1));
                    list.bwd = host_bytes(sizeof(hcnn_gemm_shape) * (size_t)(count.nbwd + 1));
                    be->conv_gemms(be, &e.d, &e.ex, n, units[ui], need_dx, &list);
                    if (count.nfwd < 0 || count.nbwd < 0 || list.nfwd != count.nfwd ||
                        list.nbwd != count.nbwd || !(count.flops >= 0) || !isfinite(count.flops))
                        FAIL("%s unit %d need_dx %d: %d+%d GEMMs, then %d+%d, flops %g", what,
                             units[ui], need_dx, count.nfwd, count.nbwd, list.nfwd, list.nbwd,
                             count.flops);
                    for (int i = 0; i < list.nfwd + list.nbwd; i++) {
                        const hcnn_gemm_shape *s =
                            i < list.nfwd ? &list.fwd[i] : &list.bwd[i - list.nfwd];
                        if (s->m < 1 || s->n < 1 || s->k < 1 || (s->ta & ~1) || (s->tb & ~1))
                            FAIL("%s: GEMM %d is %dx%dx%d ta %d tb %d", what, i, s->m, s->n, s->k,
                                 s->ta, s->tb);
                    }
                }
            char buf[300];
            memset(buf, 'X', sizeof buf);
            be->conv_describe(be, &e.d, &e.ex, n, buf, 256);
            if (!memchr(buf, '\0', 256) || !buf[0] || buf[256] != 'X')
                FAIL("conv_describe (%s): no line of 1 to 255 characters within 256 bytes", what);
            memset(buf, 'X', sizeof buf);
            be->conv_describe(be, &e.d, &e.ex, n, buf, 8);
            if (!memchr(buf, '\0', 8) || buf[8] != 'X')
                FAIL("conv_describe (%s) with 8 bytes: not terminated within them", what);
            note(what, 0, 0, 0);
            arena_pop(m2);
        }
        arena_pop(mark);
    }
    return 1;
}

/* pass_pieces (hcnn plan's cut of a pass): each pass of every operation has
 * phases of >= 1 piece, positive finite work, repeat >= 1 and a largest
 * piece within the phase's work; the same answer twice, on 1 to 256 threads */
static int pieces_ok(const char *what, int nt, const hcnn_pieces *p, char *why, size_t cap)
{
    if (p->nphases < 1 || p->nphases > HCNN_MAX_PHASES)
        FAIL("%s, %d threads: %d phases (1 to %d)", what, nt, p->nphases, HCNN_MAX_PHASES);
    for (int k = 0; k < p->nphases; k++) {
        const hcnn_phase *ph = &p->phase[k];
        if (ph->pieces < 1 || !(ph->work > 0) || !isfinite(ph->work) || ph->repeat < 1 ||
            !(ph->largest >= 0) || ph->largest > ph->work)
            FAIL("%s, %d threads: phase %d has %ld pieces, work %g, largest %g, repeat %d", what,
                 nt, k, ph->pieces, ph->work, ph->largest, ph->repeat);
    }
    return 1;
}

static int same_pieces(const hcnn_pieces *a, const hcnn_pieces *b)
{
    if (a->nphases != b->nphases)
        return 0;
    for (int k = 0; k < a->nphases; k++) {
        const hcnn_phase *x = &a->phase[k], *y = &b->phase[k];
        if (x->pieces != y->pieces || x->work != y->work || x->largest != y->largest ||
            x->repeat != y->repeat)
            return 0;
    }
    return 1;
}

static int pieces_twice(const hcnn_backend *be, const hcnn_op *op, const hcnn_exec *ex, int n,
                        const char *what, char *why, size_t cap)
{
    static const int nts[] = {1, 2, 3, 64, 256};
    for (size_t t = 0; t < sizeof nts / sizeof *nts; t++) {
        hcnn_pieces f, b, f2, b2;
        be->pass_pieces(be, op, ex, n, nts[t], &f, &b);
        be->pass_pieces(be, op, ex, n, nts[t], &f2, &b2);
        TRY(pieces_ok(what, nts[t], &f, why, cap));
        TRY(pieces_ok(what, nts[t], &b, why, cap));
        if (!same_pieces(&f, &f2) || !same_pieces(&b, &b2))
            FAIL("%s, %d threads: another answer when asked again", what, nts[t]);
    }
    return 1;
}

int check_pass_pieces(const hcnn_backend *be, char *why, size_t cap)
{
    char what[256];
    for (size_t c = 0; c < NCONV; c++) {
        const int mark = arena_mark();
        conv_env e;
        conv_env_data(&e, be, &conv_cases[c], 0, 0);
        for (size_t x = 0; x < NEXEC; x++) {
            if (!exec_applies(e.cc, &conv_execs[x]))
                continue;
            const int m2 = arena_mark();
            conv_env_exec(&e, &conv_execs[x]);
            conv_name(e.cc, e.xc, "pass_pieces", what, sizeof what);
            for (int need_dx = 0; need_dx < 2; need_dx++) {
                const hcnn_op op = {.kind = HCNN_OP_CONV, .conv = &e.d, .need_dx = need_dx,
                                    .has_bias = 1};
                TRY(pieces_twice(be, &op, &e.ex, e.cc->n, what, why, cap));
            }
            note(what, 0, 0, 0);
            arena_pop(m2);
        }
        arena_pop(mark);
    }
    const hcnn_exec ex = {.max_chunk_floats = (size_t)1 << 20};
    const hcnn_op ops[] = {
        {.kind = HCNN_OP_FC, .in = 400, .out = 120, .need_dx = 1, .has_bias = 1},
        {.kind = HCNN_OP_FC, .in = 512, .out = 10, .has_bias = 0},
        {.kind = HCNN_OP_BN, .c = 64, .np = 1024},
        {.kind = HCNN_OP_BN, .c = 512, .np = 16},
        {.kind = HCNN_OP_POOL, .c = 6, .np = 784, .out_np = 196},
        {.kind = HCNN_OP_ELEMENTWISE, .c = 64, .np = 1024},
        {.kind = HCNN_OP_ELEMENTWISE, .c = 10, .np = 1},
        {.kind = HCNN_OP_COPY, .c = 400, .np = 1},
    };
    static const int ns[] = {1, 2, 16, 256};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
            snprintf(what, sizeof what, "pass_pieces op %d (%d x %d, in %d out %d), %d samples",
                     (int)ops[i].kind, ops[i].c, ops[i].np, ops[i].in, ops[i].out, ns[k]);
            TRY(pieces_twice(be, &ops[i], &ex, ns[k], what, why, cap));
        }
    note("pass_pieces", 0, 0, 0);
    return 1;
}

/* ---- precision bf16 (the backends that offer it) ---------------------------------------- */

/* f rounded to bfloat16, to nearest, ties to even (what precision bf16 does to
 * a GEMM's inputs; finite f only) */
static float ref_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float *rounded_bf16(const float *x, size_t n)
{
    float *r = hvec(n);
    for (size_t i = 0; i < n; i++)
        r[i] = ref_bf16(x[i]);
    return r;
}

/* whether set_precision takes bf16 (the CPU backend refuses it with a message,
 * which is not this check's to print) */
static int offers_bf16(hcnn_backend *be)
{
    fflush(stderr);
    const int saved = dup(2), null = open("/dev/null", O_WRONLY);
    if (saved >= 0 && null >= 0)
        dup2(null, 2);
    const int rc = be->set_precision(be, HCNN_PRECISION_BF16);
    fflush(stderr);
    if (saved >= 0) {
        dup2(saved, 2);
        close(saved);
    }
    if (null >= 0)
        close(null);
    return rc == HCNN_OK;
}

static int conv_bf16_cases(const hcnn_backend *be, char *why, size_t cap)
{
    char what[256];
    /* per-thread; batched, chunks of 3000 floats, workspace for n+2.  Not
     * auto: the CPU's keeps FP32 on products where bf16 loses, all of
     * these small cases (conv_plan.c; tests/unit/test_layers.c) */
    static const size_t execs[] = {4, 3};
    for (size_t c = 0; c < NCONV; c++) {
        const int mark = arena_mark();
        conv_env e;
        conv_env_data(&e, be, &conv_cases[c], 0, 0);
        const size_t oc = (size_t)e.cc->oc, n = (size_t)e.cc->n;
        float *xr = rounded_bf16(e.x, e.nx), *wr = rounded_bf16(e.w, e.nw);
        float *dyr = rounded_bf16(e.dy, e.ny);
        double *yb = hdvec(e.ny), *gw = hdvec(e.nw), *gx = hdvec(e.nx), *gb = hdvec(oc);
        double *gw32 = hdvec(e.nw), *y32 = hdvec(e.ny);
        ref_conv_fwd(&e.d, xr, wr, e.b, (int)n, yb);  /* the bias in FP32 */
        ref_conv_bwd_filter(&e.d, xr, dyr, (int)n, gw, gb);
        ref_conv_bwd_filter(&e.d, e.x, e.dy, (int)n, gw32, gb); /* db: dy's sum in FP32 */
        ref_conv_bwd_data(&e.d, wr, dyr, (int)n, gx);
        ref_conv_fwd(&e.d, e.x, e.w, e.b, (int)n, y32);
        double *want_dw = plus(e.dw0, gw, e.nw), *want_db = plus(e.db0, gb, oc);
        double *want_dxacc = plus(e.dx0, gx, e.nx);
        float *y = dvec(be, e.ny), *dw = dvec(be, e.nw), *db = dvec(be, oc), *dx = dvec(be, e.nx);
        float *host_y = hvec(e.ny);
        for (size_t k = 0; k < sizeof execs / sizeof *execs; k++) {
            if (!exec_applies(e.cc, &conv_execs[execs[k]]))
                continue;
            const int m2 = arena_mark();
            conv_env_exec(&e, &conv_execs[execs[k]]);
            put_nan(be, y, e.ny);
            TRY(conv_run(&e, CONV_FWD, e.d_b, y, NULL, NULL, NULL, 0, (int)n, why, cap));
            conv_name(e.cc, e.xc, "bf16 conv_fwd y (bias)", what, sizeof what);
            TRY(check_act(be, what, y, yb, e.n, e.oc, e.np_out, TOL_CONV, why, cap));
            /* the inputs were rounded: far from the FP32 result somewhere */
            get_act(be, host_y, y, e.n, e.oc, e.np_out);
            double far = 0.0;
            for (size_t i = 0; i < e.ny; i++)
                far = fmax(far, fabs(host_y[i] - y32[i]) / (1.0 + fabs(y32[i])));
            if (far < 1e-4)
                FAIL("%s: within %.1e of the FP32 result: the inputs were not rounded to bf16",
                     what, far);
            put(be, dw, e.dw0, e.nw), put(be, db, e.db0, oc), put_nan(be, dx, e.nx);
            TRY(conv_run(&e, CONV_BWD, NULL, NULL, dw, db, dx, 0, (int)n, why, cap));
            conv_name(e.cc, e.xc, "bf16 conv_bwd dw (accumulated)", what, sizeof what);
            TRY(check_dev(be, what, dw, want_dw, e.nw, TOL_CONV, why, cap));
            conv_name(e.cc, e.xc, "bf16 conv_bwd db (accumulated, FP32)", what, sizeof what);
            TRY(check_dev(be, what, db, want_db, oc, TOL_CONV, why, cap));
            conv_name(e.cc, e.xc, "bf16 conv_bwd dx (overwritten)", what, sizeof what);
            TRY(check_act(be, what, dx, gx, e.n, e.c, e.np_in, TOL_CONV, why, cap));
            /* dx += (a residual block's sum): on a GPU with cuDNN, the graph
             * whose epilogue adds the dx before and writes dx in place */
            put(be, dw, e.dw0, e.nw), put(be, db, e.db0, oc);
            put_act(be, dx, e.dx0, e.n, e.c, e.np_in);
            TRY(conv_run(&e, CONV_BWD, NULL, NULL, dw, db, dx, 1, (int)n, why, cap));
            conv_name(e.cc, e.xc, "bf16 conv_bwd dx (dx_acc)", what, sizeof what);
            TRY(check_act(be, what, dx, want_dxacc, e.n, e.c, e.np_in, TOL_CONV, why, cap));
            TRY(conv_ws_ok(&e, why, cap));
            arena_pop(m2);
        }
        arena_pop(mark);
    }
    return 1;
}

/* Precision bf16 (AMP-style: each GEMM's inputs rounded to bfloat16, FP32
 * accumulation and outputs, the bias and its gradient in FP32): conv_fwd and
 * conv_bwd against the references over the rounded inputs, and away from the
 * FP32 result (the rounding happened).  Nothing to check on a backend that
 * computes in FP32 only; the backend is set back to FP32 after. */
int check_conv_bf16(const hcnn_backend *be, char *why, size_t cap)
{
    hcnn_backend *mut = (hcnn_backend *)(uintptr_t)be; /* set_precision changes the backend */
    if (!offers_bf16(mut))
        return 1;
    const int ok = conv_bf16_cases(be, why, cap);
    mut->set_precision(mut, HCNN_PRECISION_FP32);
    return ok;
}

/* conv_fwd gathering the next batch-norm's statistics (backend.h,
 * hcnn_bn_stats), then bn_fwd_train from them: y, the saved mean and
 * inverse std and the running statistics against the double reference
 * over the convolution's own output (downloaded), within TOL_BN, as
 * bn_fwd_train from x is held; a backend may gather nothing (bands 0),
 * and then bn_fwd_train takes them from x.  An NHWC backend must gather
 * nothing: bands are runs of a plane's pixels, which NHWC does not lay
 * side by side.  A band whose mean missed the bias, or a band counted
 * twice, is off by far more. */
int check_conv_fwd_bn_stats(const hcnn_backend *be, char *why, size_t cap)
{
    char what[256];
    for (size_t c = 0; c < NCONV; c++) {
        const int mark = arena_mark();
        conv_env e;
        conv_env_data(&e, be, &conv_cases[c], 1, 0);
        const int n = e.cc->n, oc = e.cc->oc, np = e.d.g.oh * e.d.g.ow;
        const size_t table = (size_t)n * oc * e.d.g.oh * 2;
        float *y = dvec(be, e.ny), *z = dvec(be, e.ny), *hy = hvec(e.ny);
        float *sm = dvec(be, (size_t)oc), *si = dvec(be, (size_t)oc);
        float *rm = dvec(be, (size_t)oc), *rv = dvec(be, (size_t)oc);
        ref_rng r = {4200 + c};
        float *gamma = hrand(&r, (size_t)oc, 0.5f, 1.5f), *beta = hrand(&r, (size_t)oc, -1, 1);
        float *ones = hvec((size_t)oc), *zeros = hvec((size_t)oc);
        for (int k = 0; k < oc; k++)
            ones[k] = 1.0f, zeros[k] = 0.0f;
        float *d_g = dnew(be, gamma, (size_t)oc), *d_b = dnew(be, beta, (size_t)oc);
        double *mean = hdvec((size_t)oc), *var = hdvec((size_t)oc), *is = hdvec((size_t)oc);
        double *rm_want = hdvec((size_t)oc), *rv_want = hdvec((size_t)oc), *z_want = hdvec(e.ny);
        for (size_t x = 0; x < NEXEC; x++) {
            if (!exec_applies(e.cc, &conv_execs[x]) || conv_execs[x].in_unit)
                continue;
            const int m2 = arena_mark();
            conv_env_exec(&e, &conv_execs[x]);
            hcnn_bn_stats st = {dvec(be, table), table, -1, -1};
            e.ex.stats = &st;
            put_nan(be, y, e.ny);
            TRY(conv_run(&e, CONV_FWD, e.d_b, y, NULL, NULL, NULL, 0, n, why, cap));
            e.ex.stats = NULL;
            conv_name(e.cc, e.xc, "conv_fwd y (gathering statistics)", what, sizeof what);
            TRY(check_act(be, what, y, e.yb, e.n, e.oc, e.np_out, e.tol, why, cap));
            if (st.bands < 0 || (st.bands > 0 && (st.band_px < 1 || st.band_px > np)))
                FAIL("%s: bands %d of %d pixels for planes of %d", what, st.bands, st.band_px, np);
            if (be->layout == HCNN_LAYOUT_NHWC && st.bands != 0)
                FAIL("%s: bands %d in an NHWC backend (0: none gathered)", what, st.bands);
            get_act(be, hy, y, n, oc, np);
            ref_bn_stats(hy, n, oc, np, mean, var);
            const size_t cnt = (size_t)n * np;
            for (int k = 0; k < oc; k++) {
                is[k] = 1.0 / sqrt(var[k] + 1e-5);
                rm_want[k] = 0.9 * 0.0 + 0.1 * mean[k];
                rv_want[k] = 0.9 * 1.0 + 0.1 * var[k] * (double)cnt / (double)(cnt > 1 ? cnt - 1 : 1);
            }
            ref_bn_apply(hy, n, oc, np, gamma, beta, mean, is, NULL, 1, z_want);
            put(be, rm, zeros, (size_t)oc), put(be, rv, ones, (size_t)oc);
            put_nan(be, z, e.ny), put_nan(be, sm, (size_t)oc), put_nan(be, si, (size_t)oc);
            be->bn_fwd_train(be, y, n, oc, np, d_g, d_b, 1e-5f, 0.1f, rm, rv, sm, si, NULL, 1, &st,
                             z);
            conv_name(e.cc, e.xc, "bn_fwd_train y from the gathered statistics", what, sizeof what);
            TRY(check_act(be, what, z, z_want, n, oc, np, TOL_BN, why, cap));
            conv_name(e.cc, e.xc, "bn_fwd_train save_mean from them", what, sizeof what);
            TRY(check_dev(be, what, sm, mean, (size_t)oc, TOL_BN, why, cap));
            conv_name(e.cc, e.xc, "bn_fwd_train save_invstd from them", what, sizeof what);
            TRY(check_dev(be, what, si, is, (size_t)oc, TOL_BN, why, cap));
            conv_name(e.cc, e.xc, "bn_fwd_train running_mean from them", what, sizeof what);
            TRY(check_dev(be, what, rm, rm_want, (size_t)oc, TOL_BN, why, cap));
            conv_name(e.cc, e.xc, "bn_fwd_train running_var from them", what, sizeof what);
            TRY(check_dev(be, what, rv, rv_want, (size_t)oc, TOL_BN, why, cap));
            arena_pop(m2);
        }
        arena_pop(mark);
    }
    return 1;
}
