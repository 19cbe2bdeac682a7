/* Unit test of src/cpu/winograd.c and winograd_plan.c: includes the
 * private header src/cpu/winograd.h (the pieces of its phases).
 *
 * Winograd convolutions (conv_algo winograd_f2 / winograd_f4) against this
 * test's own float64 direct convolution, written here and not taken from
 * src/: the forward, the input gradient and the weight gradient, on
 * several shapes (sizes that the tiles do not divide, no padding, padding
 * 2, ResNet-18's channel counts) and value ranges.  The error of a result
 * is max |got - ref| / max |ref|; the bound asserted per tile size is 4x
 * the worst error observed over these inputs on the CPUs this was written
 * on (docs/performance.md, "Winograd", lists the observed figures; this
 * test prints them).  Then determinism: the same call on 1, 2 and 3
 * threads gives the same bits.  Then the layer's cache: the calls of one
 * training step (one weights_key) transform the weights once, the same
 * bits as transforming at every call.  Then the pieces each phase offers
 * many threads on ResNet-18's layers at 8 images; and a workspace sized
 * for up to n images serves every call on fewer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/backend.h"
#include "hcnn/blas.h"
#include "hcnn/common.h"

#include "../../src/cpu/winograd.h" /* the pieces of its phases: their own test below */

/* 4x the worst errors observed over every shape, range and pass below
 * (Intel Xeon, OpenBLAS 0.3.21 SkylakeX kernels: F(2x2,3x3) 4.9e-7, the
 * weight gradient of ResNet-18's layer1; F(4x4,3x3) 9.4e-6, the forward of
 * layer3 on inputs in [-1000, 1000)) */
#define BOUND_F2 2.0e-6
#define BOUND_F4 3.8e-5

typedef struct shape {
    int n, c, h, w, oc, pad;
} shape;

static const shape shapes[] = {
    {2, 16, 9, 11, 8, 1},   /* sizes the tiles do not divide */
    {3, 24, 7, 5, 20, 0},   /* no padding */
    {1, 20, 6, 6, 20, 2},   /* padding 2: output larger than the input */
    {2, 64, 32, 32, 64, 1}, /* ResNet-18's layer1 */
    {4, 256, 8, 8, 256, 1}, /* layer3 */
    {2, 512, 4, 4, 512, 1}, /* layer4: one F(4x4) tile an image */
};
#define NSHAPES (sizeof shapes / sizeof *shapes)

/* value ranges: inputs in [lo, hi), weights in [-wr, wr) */
typedef struct range {
    double lo, hi, wr;
    const char *name;
} range;

static const range ranges[] = {
    {-1.0, 1.0, 1.0, "uniform [-1, 1)"},
    {0.0, 1.0, 0.1, "after ReLU [0, 1), small weights"},
    {-1000.0, 1000.0, 0.01, "large inputs [-1000, 1000)"},
};
#define NRANGES (sizeof ranges / sizeof *ranges)

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static float *random_floats(size_t n, double lo, double hi, uint64_t *s)
{
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(lo + (hi - lo) * (double)(rng_next(s) >> 11) / 9007199254740992.0);
    return v;
}

static int out_size(const shape *s, int in) { return in + 2 * s->pad - 2; }

/* the direct convolution in float64: y = conv(x, w), dx, dw */
static void direct(const shape *s, const float *x, const float *w, const float *dy, double *y,
                   double *dx, double *dw)
{
    const int oh = out_size(s, s->h), ow = out_size(s, s->w);
    memset(dx, 0, sizeof *dx * (size_t)s->n * s->c * s->h * s->w);
    memset(dw, 0, sizeof *dw * (size_t)s->oc * s->c * 9);
    for (int i = 0; i < s->n; i++)
        for (int o = 0; o < s->oc; o++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    double acc = 0.0;
                    const size_t yi = (((size_t)i * s->oc + o) * oh + oy) * ow + ox;
                    for (int c = 0; c < s->c; c++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                const int iy = oy + ky - s->pad, ix = ox + kx - s->pad;
                                if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w)
                                    continue;
                                const size_t xi = (((size_t)i * s->c + c) * s->h + iy) * s->w + ix;
                                const size_t wi = (((size_t)o * s->c + c) * 3 + ky) * 3 + kx;
                                acc += (double)x[xi] * w[wi];
                                dx[xi] += (double)dy[yi] * w[wi];
                                dw[wi] += (double)dy[yi] * x[xi];
                            }
                    y[yi] = acc;
                }
}

static double rel_error(const float *got, const double *ref, size_t n)
{
    double scale = 0.0, worst = 0.0;
    for (size_t i = 0; i < n; i++)
        scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            return INFINITY;
        const double e = fabs(got[i] - ref[i]);
        worst = e > worst ? e : worst;
    }
    return worst / (scale > 0 ? scale : 1.0);
}

/* one shape's convolution through the CPU backend's table */
typedef struct conv_run {
    const hcnn_backend *be;
    hcnn_conv_desc d;
    hcnn_exec ex;
} conv_run;

static void run_init(conv_run *r, const shape *s, hcnn_conv_algo algo)
{
    memset(r, 0, sizeof *r);
    r->be = hcnn_backend_cpu();
    r->d.g = (hcnn_conv_geom){s->c, s->h, s->w, 3, 3, 1, 1, s->pad, s->pad,
                              out_size(s, s->h), out_size(s, s->w)};
    r->d.out_c = s->oc;
    r->ex.max_chunk_floats = (size_t)32 << 20;
    r->ex.conv_algo = algo;
    r->ex.ws_floats = r->be->conv_workspace(r->be, &r->d, &r->ex, s->n);
    r->ex.ws = malloc(r->ex.ws_floats * sizeof(float));
    assert_non_null(r->ex.ws);
}

/* y, dx, dw (dw starts at zero) of one call each */
static void run_all(conv_run *r, const shape *s, const float *x, const float *w, const float *dy,
                    float *y, float *dx, float *dw)
{
    memset(dw, 0, sizeof *dw * (size_t)s->oc * s->c * 9);
    assert_int_equal(r->be->conv_fwd(r->be, &r->d, &r->ex, x, w, NULL, y, s->n), HCNN_OK);
    assert_int_equal(r->be->conv_bwd_filter(r->be, &r->d, &r->ex, x, dy, dw, NULL, s->n), HCNN_OK);
    assert_int_equal(r->be->conv_bwd_data(r->be, &r->d, &r->ex, w, dy, dx, 0, s->n), HCNN_OK);
}

static void check_accuracy(hcnn_conv_algo algo, const char *name, double bound)
{
    double worst[4] = {0, 0, 0, 0};
    const char *pass[4] = {"forward", "input gradient", "weight gradient", "input grad. added"};
    for (size_t k = 0; k < NSHAPES; k++)
        for (size_t v = 0; v < NRANGES; v++) {
            const shape *s = &shapes[k];
            const range *rg = &ranges[v];
            uint64_t seed = 0x9e3779b97f4a7c15ull ^ (k * 131 + v);
            const size_t nx = (size_t)s->n * s->c * s->h * s->w, nw = (size_t)s->oc * s->c * 9;
            const size_t ny = (size_t)s->n * s->oc * out_size(s, s->h) * out_size(s, s->w);
            float *x = random_floats(nx, rg->lo, rg->hi, &seed);
            float *w = random_floats(nw, -rg->wr, rg->wr, &seed);
            float *dy = random_floats(ny, -1.0, 1.0, &seed);
            double *ry = malloc(ny * sizeof *ry), *rdx = malloc(nx * sizeof *rdx),
                   *rdw = malloc(nw * sizeof *rdw);
            float *y = malloc(ny * sizeof *y), *dx = malloc(nx * sizeof *dx),
                  *dw = malloc(nw * sizeof *dw);
            assert_true(ry && rdx && rdw && y && dx && dw);
            direct(s, x, w, dy, ry, rdx, rdw);
            conv_run r;
            run_init(&r, s, algo);
            run_all(&r, s, x, w, dy, y, dx, dw);
            const double e_dx = rel_error(dx, rdx, nx);
            /* added to what dx holds (a residual block's two branches): dx + dx */
            float *dx2 = malloc(nx * sizeof *dx2);
            assert_non_null(dx2);
            memcpy(dx2, dx, nx * sizeof *dx2);
            assert_int_equal(r.be->conv_bwd_data(r.be, &r.d, &r.ex, w, dy, dx2, 1, s->n),
                             HCNN_OK);
            for (size_t i = 0; i < nx; i++)
                rdx[i] *= 2.0;
            const double e[4] = {rel_error(y, ry, ny), e_dx, rel_error(dw, rdw, nw),
                                 rel_error(dx2, rdx, nx)};
            free(dx2);
            for (int p = 0; p < 4; p++) {
                printf("  %s %-15s n %d, %3dx%2dx%2d -> %3d, pad %d, %-34s error %.2e\n", name,
                       pass[p], s->n, s->c, s->h, s->w, s->oc, s->pad, rg->name, e[p]);
                worst[p] = e[p] > worst[p] ? e[p] : worst[p];
                if (!(e[p] <= bound))
                    fail_msg("%s %s: error %.3g above the bound %.3g (n %d, %dx%dx%d -> %d, pad "
                             "%d, %s)",
                             name, pass[p], e[p], bound, s->n, s->c, s->h, s->w, s->oc, s->pad,
                             rg->name);
            }
            free(r.ex.ws);
            free(x), free(w), free(dy), free(ry), free(rdx), free(rdw), free(y), free(dx), free(dw);
        }
    printf("  %s worst: forward %.2e, input gradient %.2e (added %.2e), weight gradient %.2e "
           "(bound %.1e)\n",
           name, worst[0], worst[1], worst[3], worst[2], bound);
}

static void test_f2_accuracy(void **state)
{
    (void)state;
    check_accuracy(HCNN_CONV_WINOGRAD_F2, "F(2x2,3x3)", BOUND_F2);
}

static void test_f4_accuracy(void **state)
{
    (void)state;
    check_accuracy(HCNN_CONV_WINOGRAD_F4, "F(4x4,3x3)", BOUND_F4);
}

/* The same call on 1, 2, 3, 17, 64 and 256 threads: the same bits (the chunks,
 * GEMM blocks and sums are fixed by the shape; the per-image phases' pieces
 * follow the thread count, and cut only between channels and tiles). */
static const int thread_counts[] = {1, 2, 3, 17, 64, 256};
#define NCOUNTS (int)(sizeof thread_counts / sizeof *thread_counts)

static void check_threads(hcnn_conv_algo algo)
{
    const int saved = omp_get_max_threads();
    for (size_t k = 0; k < NSHAPES; k++) {
        const shape *s = &shapes[k];
        uint64_t seed = 77 + k;
        const size_t nx = (size_t)s->n * s->c * s->h * s->w, nw = (size_t)s->oc * s->c * 9;
        const size_t ny = (size_t)s->n * s->oc * out_size(s, s->h) * out_size(s, s->w);
        float *x = random_floats(nx, -1, 1, &seed), *w = random_floats(nw, -1, 1, &seed);
        float *dy = random_floats(ny, -1, 1, &seed);
        float *out[NCOUNTS][3];
        for (int t = 0; t < NCOUNTS; t++) {
            omp_set_num_threads(thread_counts[t]);
            conv_run r;
            run_init(&r, s, algo);
            out[t][0] = malloc(ny * sizeof(float)), out[t][1] = malloc(nx * sizeof(float));
            out[t][2] = malloc(nw * sizeof(float));
            assert_true(out[t][0] && out[t][1] && out[t][2]);
            run_all(&r, s, x, w, dy, out[t][0], out[t][1], out[t][2]);
            free(r.ex.ws);
        }
        const size_t sizes[3] = {ny, nx, nw};
        for (int t = 1; t < NCOUNTS; t++)
            for (int p = 0; p < 3; p++)
                if (memcmp(out[0][p], out[t][p], sizes[p] * sizeof(float)))
                    fail_msg("shape %zu, result %d: 1 and %d threads differ", k, p,
                             thread_counts[t]);
        for (int t = 0; t < NCOUNTS; t++)
            for (int p = 0; p < 3; p++)
                free(out[t][p]);
        free(x), free(w), free(dy);
    }
    omp_set_num_threads(saved);
}

static void test_f2_threads(void **state)
{
    (void)state;
    check_threads(HCNN_CONV_WINOGRAD_F2);
}

static void test_f4_threads(void **state)
{
    (void)state;
    check_threads(HCNN_CONV_WINOGRAD_F4);
}

/* A layer's steps: forward, weight and input gradient with one weights_key
 * a step (the trainer's), the weights changed between steps.  A call of
 * fewer than 64 tiles keeps U in the layer's cache: one transform a step
 * (the forward's; the input gradient reads it); the bits are those of the
 * same calls without a key (a transform at every call: two a step). */
static void check_one_transform_a_step(hcnn_conv_algo algo, const shape *s, int tiles,
                                       long per_step_cached)
{
    enum { STEPS = 4 };
    const size_t nx = (size_t)s->n * s->c * s->h * s->w, nw = (size_t)s->oc * s->c * 9;
    const size_t ny = (size_t)s->n * s->oc * out_size(s, s->h) * out_size(s, s->w);
    uint64_t seed = 4242;
    float *x = random_floats(nx, -1, 1, &seed), *w = random_floats(nw, -1, 1, &seed);
    float *dy = random_floats(ny, -1, 1, &seed);
    float *out[2][3];
    long transforms[2];
    for (int keyed = 0; keyed < 2; keyed++) {
        conv_run r;
        run_init(&r, s, algo);
        hcnn_conv_cache cache = {0};
        r.d.cache = &cache;
        out[keyed][0] = malloc(ny * sizeof(float)), out[keyed][1] = malloc(nx * sizeof(float));
        out[keyed][2] = malloc(nw * sizeof(float));
        float *wk = malloc(nw * sizeof(float));
        assert_true(out[keyed][0] && out[keyed][1] && out[keyed][2] && wk);
        memcpy(wk, w, nw * sizeof(float));
        for (int step = 0; step < STEPS; step++) {
            r.ex.weights_key = keyed ? (uint64_t)step + 1 : 0;
            run_all(&r, s, x, wk, dy, out[keyed][0], out[keyed][1], out[keyed][2]);
            for (size_t i = 0; i < nw; i++) /* the optimiser's step */
                wk[i] -= 0.01f * out[keyed][2][i];
        }
        transforms[keyed] = cache.transforms;
        if (cache.release)
            cache.release(cache.data);
        free(wk);
        free(r.ex.ws);
    }
    printf("  F(%dx%d), %d tiles a call: %ld weight transforms in %d steps without a key, %ld "
           "with\n",
           algo == HCNN_CONV_WINOGRAD_F2 ? 2 : 4, algo == HCNN_CONV_WINOGRAD_F2 ? 2 : 4, tiles,
           transforms[0], STEPS, transforms[1]);
    assert_int_equal(transforms[0], 2 * STEPS);
    assert_int_equal(transforms[1], per_step_cached * STEPS);
    const size_t sizes[3] = {ny, nx, nw};
    for (int p = 0; p < 3; p++)
        if (memcmp(out[0][p], out[1][p], sizes[p] * sizeof(float)))
            fail_msg("result %d differs with the weights kept across the step's calls", p);
    for (int k = 0; k < 2; k++)
        for (int p = 0; p < 3; p++)
            free(out[k][p]);
    free(x), free(w), free(dy);
}

static void test_one_weight_transform_a_step(void **state)
{
    (void)state;
    /* 2 images of 8 x 8: F(2x2) 32 tiles a call, F(4x4) 8: kept */
    const shape few = {2, 32, 8, 8, 48, 1};
    check_one_transform_a_step(HCNN_CONV_WINOGRAD_F2, &few, 32, 1);
    check_one_transform_a_step(HCNN_CONV_WINOGRAD_F4, &few, 8, 1);
    /* 4 images of 16 x 16 by F(2x2): 256 tiles a call, transformed at each */
    const shape many = {4, 16, 16, 16, 16, 1};
    check_one_transform_a_step(HCNN_CONV_WINOGRAD_F2, &many, 256, 2);
}

/* ResNet-18's Winograd layers at 8 images, by each tile size: every phase
 * offers nt threads (256, a 2-socket node's hardware threads; 64) at least
 * min(nt, what the shape allows) pieces, every GEMM phase min(256, what
 * the shape allows) at either count (its cut is fixed by the shape: the
 * BLAS gives other bits for other blocks).  What a shape allows, from this
 * test's own count: a per-image phase cut between images, vectors of 16
 * channels and tile rows; a GEMM phase between the a^2 tile elements and
 * blocks of >= 16 rows and >= 16 columns of >= 2^18 multiply-adds (half of
 * them, the cut rounding to 16); the weights' transforms between output
 * channels and vectors of 16 input channels.  Before the pieces, a GEMM
 * phase offered 16-72 pieces here, the input gradient's scatter 32 for 64
 * channels, the weights' transforms one an output channel.
 * (tests/unit/test_pieces.c checks every pass of ResNet-18 the same way.) */
static long at_least(long want, long allowed) { return want < allowed ? want : allowed; }

static long blocks_allowed(long m, long n, long k)
{
    const double by_size = (double)m * n * k / (2.0 * (1 << 18));
    const long by_width = (m / 16 > 0 ? m / 16 : 1) * (n / 16 > 0 ? n / 16 : 1);
    return by_size < 1.0 ? 1 : by_width < (long)by_size ? by_width : (long)by_size;
}

static void test_pieces_at_batch_8(void **state)
{
    (void)state;
    const shape layers[] = {{8, 64, 32, 32, 64, 1}, {8, 128, 16, 16, 128, 1},
                            {8, 256, 8, 8, 256, 1}, {8, 512, 4, 4, 512, 1}};
    const int counts[] = {64, 256};
    for (size_t k = 0; k < sizeof layers / sizeof *layers; k++)
        for (int m = 2; m <= 4; m += 2)
            for (int c = 0; c < 2; c++) {
                const shape *s = &layers[k];
                conv_run r;
                memset(&r, 0, sizeof r);
                r.d.g = (hcnn_conv_geom){s->c, s->h, s->w, 3, 3, 1, 1, 1, 1, s->h, s->w};
                r.d.out_c = s->oc;
                r.ex.max_chunk_floats = (size_t)32 << 20;
                hcnn_wino_phases ph;
                hcnn_wino_pieces(&r.d, &r.ex, m, s->n, counts[c], &ph);
                const long nt = counts[c], nb = ph.images, a2 = (long)(m + 2) * (m + 2);
                const long rows = (s->h + m - 1) / m, tiles = nb * rows * rows;
                const long vecs = s->c >= 32 ? s->c / 16 : 1;
                const long per_image = nb * vecs * rows;
                const long gemm = a2 * blocks_allowed(tiles, s->oc, s->c);
                const long dw_gemm = a2 * blocks_allowed(s->oc, s->c, tiles);
                const long got[9] = {ph.fwd[0], ph.fwd[1], ph.fwd[2], ph.dx[0], ph.dx[1],
                                     ph.dx[2],  ph.dw[0],  ph.dw[1],  ph.weights};
                const long want[9] = {at_least(nt, per_image),     at_least(256, gemm),
                                      at_least(nt, per_image),     at_least(nt, per_image),
                                      at_least(256, gemm),         at_least(nt, per_image),
                                      at_least(nt, 2 * per_image), at_least(256, dw_gemm),
                                      at_least(nt, (long)s->oc * vecs)};
                static const char *const phase[9] = {
                    "forward transform",          "forward GEMMs",
                    "forward inverse",            "input-gradient transform",
                    "input-gradient GEMMs",       "input-gradient scatter",
                    "weight-gradient transforms", "weight-gradient GEMMs",
                    "weights' transforms"};
                printf("  F(%dx%d) %3dx%2dx%2d, %ld images a chunk, %3ld threads: pieces", m, m,
                       s->c, s->h, s->w, nb, nt);
                for (int p = 0; p < 9; p++)
                    printf(" %ld", got[p]);
                printf("\n");
                for (int p = 0; p < 9; p++)
                    if (got[p] < want[p])
                        fail_msg("F(%dx%d), %d channels of %dx%d, %ld threads: the %s offers %ld "
                                 "pieces, the shape allows %ld",
                                 m, m, s->c, s->h, s->w, nt, phase[p], got[p], want[p]);
            }
}

/* A workspace conv_workspace sizes for up to `capacity` images serves a
 * call on every n <= capacity (a pass's remainder, an evaluation's last
 * batch), with the same bits as a workspace sized for n: the plan never
 * changes for want of room.  The chunk cap splits capacity unevenly on
 * purpose: on 128 channels of 4x4, F(2x2) takes 16384 floats an image, so
 * 12 images under a cap of 5 go as 4 + 4 + 4 and a call on 5 as one chunk
 * of 5 (F(4x4): 9216 an image, a cap of 8, 6 + 6 against 8); there the
 * Winograd workspace is the largest (per-thread plans need 64 pixels).  On
 * 32 channels of 8x8 the per-thread plan's is. */
static void test_workspace_for_fewer_images(void **state)
{
    (void)state;
    enum { CAPACITY = 12 };
    const shape shapes_ws[] = {{CAPACITY, 128, 4, 4, 128, 1}, {CAPACITY, 32, 8, 8, 32, 1}};
    const hcnn_conv_algo algos[] = {HCNN_CONV_WINOGRAD_F2, HCNN_CONV_WINOGRAD_F4, HCNN_CONV_AUTO,
                                    HCNN_CONV_PER_THREAD};
    const size_t chunk = 5 * 16384;
    for (size_t k = 0; k < sizeof shapes_ws / sizeof *shapes_ws; k++) {
        const shape *s0 = &shapes_ws[k];
        uint64_t seed = 91 + k;
        const size_t nx1 = (size_t)s0->c * s0->h * s0->w, nw = (size_t)s0->oc * s0->c * 9;
        const size_t ny1 = (size_t)s0->oc * out_size(s0, s0->h) * out_size(s0, s0->w);
        float *x = random_floats(nx1 * CAPACITY, -1, 1, &seed);
        float *w = random_floats(nw, -1, 1, &seed), *dy = random_floats(ny1 * CAPACITY, -1, 1, &seed);
        float *got[3], *want[3];
        const size_t sizes[3] = {ny1 * CAPACITY, nx1 * CAPACITY, nw};
        for (int p = 0; p < 3; p++) {
            got[p] = malloc(sizes[p] * sizeof(float)), want[p] = malloc(sizes[p] * sizeof(float));
            assert_true(got[p] && want[p]);
        }
        for (size_t a = 0; a < sizeof algos / sizeof *algos; a++)
            for (int n = 1; n <= CAPACITY; n++) {
                shape s = *s0;
                s.n = n;
                conv_run big, exact;
                run_init(&big, &s, algos[a]);
                run_init(&exact, &s, algos[a]);
                free(big.ex.ws), free(exact.ex.ws);
                big.ex.max_chunk_floats = exact.ex.max_chunk_floats = chunk;
                big.ex.ws_floats = big.be->conv_workspace(big.be, &big.d, &big.ex, CAPACITY);
                exact.ex.ws_floats = exact.be->conv_workspace(exact.be, &exact.d, &exact.ex, n);
                big.ex.ws = malloc(big.ex.ws_floats * sizeof(float));
                exact.ex.ws = malloc(exact.ex.ws_floats * sizeof(float));
                assert_true(big.ex.ws && exact.ex.ws);
                run_all(&big, &s, x, w, dy, got[0], got[1], got[2]);
                run_all(&exact, &s, x, w, dy, want[0], want[1], want[2]);
                const size_t used[3] = {ny1 * n, nx1 * n, nw};
                for (int p = 0; p < 3; p++)
                    if (memcmp(got[p], want[p], used[p] * sizeof(float)))
                        fail_msg("%d channels of %dx%d, conv_algo %d, %d of up to %d images: "
                                 "result %d differs from a workspace sized for %d",
                                 s.c, s.h, s.w, (int)algos[a], n, CAPACITY, p, n);
                free(big.ex.ws), free(exact.ex.ws);
            }
        for (int p = 0; p < 3; p++)
            free(got[p]), free(want[p]);
        free(x), free(w), free(dy);
    }
}

int main(void)
{
    hcnn_blas_single_threaded();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f2_accuracy),
        cmocka_unit_test(test_f4_accuracy),
        cmocka_unit_test(test_f2_threads),
        cmocka_unit_test(test_f4_threads),
        cmocka_unit_test(test_one_weight_transform_a_step),
        cmocka_unit_test(test_pieces_at_batch_8),
        cmocka_unit_test(test_workspace_for_fewer_images),
    };
    return cmocka_run_group_tests_name("winograd", tests, NULL, NULL);
}
