/* Unit test of the CPU backend's internals (src/cpu/): the convolution's
 * plans (conv_plan.c) and the pieces its pass_pieces offers for them, the
 * transposes (layout.c), im2col/col2im (im2col.c), batch-norm's pieces
 * (bn.c) and the sum of squares: includes the private headers
 * src/cpu/conv_plan.h and, through it, src/cpu/cpu.h and winograd.h.
 * What the CPU backend computes through the backend table is tested in
 * tests/unit/test_layers.c and tests/conformance/. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <omp.h>

#include "../../src/cpu/conv_plan.h" /* private: the CPU backend's plans and kernels */
#include "hcnn/common.h"
#include "hcnn/config.h"
#include "hcnn/net.h"
#include "net_fixture.h"
#include "hcnn/plan.h"

/* ---- helpers -------------------------------------------------------------- */

static void fill_random(float *x, size_t n, unsigned seed, float lo, float hi)
{
    hcnn_rng r;
    hcnn_rng_seed(&r, seed, 1);
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * hcnn_rng_uniform(&r);
}

static int close_enough(double a, double b, double atol, double rtol)
{
    return fabs(a - b) <= atol + rtol * fmax(fabs(a), fabs(b));
}

/* ---- the convolution's plans (conv_plan.c) ------------------------------- */

/* Which convolutions take shifted windows: the per-thread one-image path,
 * stride 1, C >= 16, at most 1/16 of the padded width discarded. */
static void test_conv_shifted_choice(void **state)
{
    (void)state;
    static const int cases[][8] = {
        /* c, h, w, co, k, s, p, shifted */
        {64, 32, 32, 64, 3, 1, 1, 1}, /* ResNet-18's layer1 */
        {16, 32, 32, 8, 3, 1, 1, 1},
        {3, 32, 32, 64, 3, 1, 1, 0},   /* the stem: C = 3 */
        {128, 16, 16, 128, 3, 1, 1, 0}, /* layer2: 2 of 18 columns discarded */
        {64, 32, 32, 128, 3, 2, 1, 0},  /* stride 2 */
        {64, 32, 32, 64, 1, 1, 0, 0},   /* 1x1: no taps to shift */
        {16, 20, 64, 3, 5, 1, 2, 1},
        {16, 20, 48, 3, 5, 1, 2, 0},    /* 4 of 52 columns discarded */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *q = cases[i];
        /* the layer's geometry, as hcnn_net_create makes it */
        const int oh = (q[1] + 2 * q[6] - q[4]) / q[5] + 1;
        const int ow = (q[2] + 2 * q[6] - q[4]) / q[5] + 1;
        const hcnn_conv_desc d = {
            .g = {q[0], q[1], q[2], q[4], q[4], q[5], q[5], q[6], q[6], oh, ow}, .out_c = q[3]};
        if (hcnn_conv_shifted(&d) != q[7])
            fail_msg("case %zu: shifted %d, expected %d", i, hcnn_conv_shifted(&d), q[7]);
    }
}

/* conv_algo auto at few images (docs/performance.md, "Convolutions at
 * small batches", the sweep behind each rule): Winograd with the larger
 * tile that still gives the call >= 32 tiles, F(4x4) else F(2x2), else an
 * im2col plan, per-thread items for K >= 512 only from 4096 columns
 * (images x pixels), batched below.  Before, F(2x2) was never auto's and
 * the 256-channel layers on 2 images ran per-thread im2col at 3x the cost
 * per image. */
static void test_conv_plan_small_batches(void **state)
{
    (void)state;
    static const struct {
        int c, plane, n, wino, per_thread;
    } cases[] = {
        {64, 32, 1, 4, 0},   {64, 32, 8, 4, 0},   {128, 16, 1, 2, 0},  {128, 16, 2, 4, 0},
        {256, 8, 1, 0, 0},   {256, 8, 2, 2, 0},   {256, 8, 4, 2, 0},   {256, 8, 8, 4, 0},
        {512, 4, 2, 0, 0},   {512, 4, 4, 0, 0},   {512, 4, 8, 2, 0},   {512, 4, 16, 2, 0},
        {512, 4, 32, 4, 0},  {512, 4, 64, 4, 0},
    };
    const int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int c = cases[i].c, h = cases[i].plane;
        const hcnn_conv_desc d = {.g = {c, h, h, 3, 3, 1, 1, 1, 1, h, h}, .out_c = c};
        hcnn_exec ex = {.conv_algo = HCNN_CONV_AUTO, .max_chunk_floats = (size_t)32 << 20};
        hcnn_conv_plan p;
        hcnn_conv_plan_make(&d, &ex, cases[i].n, 0, &p);
        static const char *const names[] = {"batched", "per_thread", "F(2x2)", "", "F(4x4)"};
        const int got = p.wino ? p.wino : p.per_thread;
        const int want = cases[i].wino ? cases[i].wino : cases[i].per_thread;
        if (got != want || (p.wino != 0) != (cases[i].wino != 0))
            fail_msg("%d channels on %dx%d, %d images: plan %s, expected %s", c, h, h, cases[i].n,
                     names[got], names[want]);
    }
    omp_set_num_threads(saved);
}

/* ---- pass_pieces (backend.c): the counts its kernels use ------------------ */

static int has_phase(const hcnn_pieces *p, long pieces)
{
    for (int k = 0; k < p->nphases; k++)
        if (p->phase[k].pieces == pieces)
            return 1;
    return 0;
}

static void check_conv(const hcnn_backend *be, const hcnn_layer *l, const hcnn_exec *ex, int n,
                       int nt, int need_dx)
{
    const hcnn_conv_desc d = {.g = l->conv, .out_c = l->out_c};
    const hcnn_op op = {.kind = HCNN_OP_CONV, .conv = &d, .need_dx = need_dx,
                        .has_bias = l->has_bias};
    hcnn_pieces f, b;
    be->pass_pieces(be, &op, ex, n, nt, &f, &b);
    hcnn_conv_plan p;
    hcnn_exec big = *ex;
    big.ws_floats = (size_t)-1;
    hcnn_conv_plan_make(&d, &big, n, 0, &p);
    if (p.wino) {
        hcnn_wino_phases ph;
        hcnn_wino_pieces(&d, &big, p.wino, n, nt, &ph);
        if (!has_phase(&f, ph.fwd[0]) || !has_phase(&f, ph.fwd[1]) || !has_phase(&f, ph.fwd[2]))
            fail_msg("%s, %d images, %d threads: forward phases lack Winograd's %ld/%ld/%ld",
                     l->name, n, nt, ph.fwd[0], ph.fwd[1], ph.fwd[2]);
        if (p.wino_dw && !has_phase(&b, ph.dw[1]))
            fail_msg("%s: no weight-gradient GEMM phase of %ld pieces", l->name, ph.dw[1]);
        if (need_dx && !has_phase(&b, ph.dx[1]))
            fail_msg("%s: no input-gradient GEMM phase of %ld pieces", l->name, ph.dx[1]);
    } else if (p.per_thread) {
        if (!has_phase(&f, p.nitems) || !has_phase(&b, p.nchunks + (need_dx ? p.ndx : 0)))
            fail_msg("%s, %d images: per-thread items %d, chunks %d + input-gradient items %d "
                     "not among the phases",
                     l->name, n, p.nitems, p.nchunks, p.ndx);
    } else {
        int partial;
        const int gemm = hcnn_cpu_gemm_pieces(l->out_c, p.group * hcnn_conv_p(&d),
                                              hcnn_conv_k(&d), hcnn_pieces_for(n), &partial);
        if (p.group > 1 && !has_phase(&f, gemm))
            fail_msg("%s, %d images: the batched GEMM's %d pieces not among the phases",
                     l->name, n, gemm);
    }
}

static void conv_layers(const hcnn_backend *be, const hcnn_layer *l, const hcnn_exec *ex, int n,
                        int need_dx, int *seen)
{
    if (l->kind == HCNN_BLOCK_CONV) {
        static const int nts[] = {2, 64};
        for (int t = 0; t < 2; t++)
            check_conv(be, l, ex, n, nts[t], need_dx);
        (*seen)++;
    }
    for (int j = 0; j < l->nchildren; j++)
        conv_layers(be, &l->children[j], ex, n, 1, seen);
}

static void test_cpu_pieces_are_its_plans(void **state)
{
    (void)state;
    model *m = model_load("configs/cifar_resnet18.yaml", hcnn_backend_cpu());
    const hcnn_exec ex = {.max_chunk_floats = m->net.chunk_floats, .conv_algo = m->net.conv_algo,
                          .weights_key = 1};
    static const int ns[] = {1, 2, 8, 16, 64};
    for (int k = 0; k < 5; k++) {
        int seen = 0;
        for (int i = 0; i < m->net.nlayers; i++)
            conv_layers(m->net.be, &m->net.layers[i], &ex, ns[k], i > 0, &seen);
        assert_int_equal(seen, 20); /* ResNet-18's convolutions */
    }
    model_free(m);
}

/* ---- the kernels ----------------------------------------------------------- */

/* The backend transpose, serial (small) and threaded (large), odd sizes. */
static void test_transpose(void **state)
{
    (void)state;
    const hcnn_backend *be = hcnn_backend_cpu();
    const int sizes[][2] = {{1, 1}, {17, 33}, {300, 301}, {1000, 67}};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int r = sizes[k][0], c = sizes[k][1];
        float *a = malloc(sizeof(float) * r * c), *t = malloc(sizeof(float) * r * c);
        assert_true(a && t);
        fill_random(a, (size_t)r * c, 61 + k, -1, 1);
        hcnn_cpu_transpose(be, a, r, c, t);
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++)
                if (t[(size_t)j * r + i] != a[(size_t)i * c + j])
                    fail_msg("%dx%d: t[%d][%d] = %g, expected %g", r, c, j, i,
                             (double)t[(size_t)j * r + i], (double)a[(size_t)i * c + j]);
        free(a), free(t);
    }
}

/* the strided transpose (Winograd's pieces): a block of a larger matrix
 * into a block of another, nothing outside the block touched */
static void test_transpose_ld(void **state)
{
    (void)state;
    const int sizes[][2] = {{1, 1}, {16, 16}, {17, 33}, {48, 80}};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int r = sizes[k][0], c = sizes[k][1], lda = c + 7, ldt = r + 5;
        float *a = malloc(sizeof(float) * r * lda), *t = malloc(sizeof(float) * c * ldt);
        assert_true(a && t);
        fill_random(a, (size_t)r * lda, 71 + k, -1, 1);
        for (size_t i = 0; i < (size_t)c * ldt; i++)
            t[i] = -7.0f;
        hcnn_cpu_transpose_ld(a, (size_t)lda, r, c, t, (size_t)ldt);
        for (int j = 0; j < c; j++)
            for (int i = 0; i < ldt; i++) {
                const float want = i < r ? a[(size_t)i * lda + j] : -7.0f;
                if (t[(size_t)j * ldt + i] != want)
                    fail_msg("%dx%d: t[%d][%d] = %g, expected %g", r, c, j, i,
                             (double)t[(size_t)j * ldt + i], (double)want);
            }
        free(a), free(t);
    }
}

/* Batch-norm's passes by planes (few channel blocks for the threads: n x c
 * pieces) give the bits of its passes by blocks of channels: ResNet-18's
 * layer1 and layer4 shapes at 8 images, 1 thread (blocks) against 64
 * (planes), forward and backward, with the fused ReLU. */
static void test_bn_pieces_same_bits(void **state)
{
    (void)state;
    const hcnn_backend *be = hcnn_backend_cpu();
    const int shapes[][3] = {{8, 64, 1024}, {8, 512, 16}, {2, 600, 49}};
    const int saved = omp_get_max_threads();
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int n = shapes[k][0], c = shapes[k][1], np = shapes[k][2];
        const size_t sz = (size_t)n * c * np;
        assert_true(hcnn_cpu_bn_pieces(n, c, np, 1) < n * c);
        assert_int_equal(hcnn_cpu_bn_pieces(n, c, np, 64), n * c);
        float *x = malloc(sizeof(float) * sz), *dy = malloc(sizeof(float) * sz);
        float *g = malloc(sizeof(float) * c), *b = malloc(sizeof(float) * c);
        float *out[2][7];
        assert_true(x && dy && g && b);
        fill_random(x, sz, 91 + k, -2, 3);
        fill_random(dy, sz, 92 + k, -1, 1);
        fill_random(g, (size_t)c, 93 + k, 0.5f, 1.5f);
        fill_random(b, (size_t)c, 94 + k, -0.5f, 0.5f);
        for (int run = 0; run < 2; run++) {
            omp_set_num_threads(run ? 64 : 1);
            float **o = out[run];
            const size_t len[7] = {sz, c, c, c, c, sz, 2 * (size_t)c};
            for (int i = 0; i < 7; i++) {
                o[i] = calloc(len[i], sizeof(float));
                assert_non_null(o[i]);
            }
            for (int ch = 0; ch < c; ch++)
                o[4][ch] = 1.0f; /* running variance */
            hcnn_cpu_bn_fwd_train(be, x, n, c, np, g, b, 1e-5f, 0.1f, o[3], o[4], o[1], o[2], NULL,
                                  1, NULL, o[0]);
            hcnn_cpu_bn_bwd(be, x, dy, n, c, np, g, b, o[1], o[2], 1, o[5], o[6], o[6] + c);
        }
        const size_t len[7] = {sz, c, c, c, c, sz, 2 * (size_t)c};
        static const char *const what[7] = {"y", "mean", "invstd", "running mean",
                                            "running variance", "dx", "dgamma, dbeta"};
        for (int i = 0; i < 7; i++) {
            if (memcmp(out[0][i], out[1][i], len[i] * sizeof(float)))
                fail_msg("n %d, c %d, %d pixels: %s differs by planes", n, c, np, what[i]);
            free(out[0][i]), free(out[1][i]);
        }
        free(x), free(dy), free(g), free(b);
    }
    omp_set_num_threads(saved);
}

/* The gradients' sum of squares (the step's finiteness check): the same
 * bits on 1, 2, 3, 17 and 64 threads (blocks fixed by n, 16 lanes added in
 * order), within 1e-12 of a long double sum, for lengths around the lanes'
 * and the blocks' edges; a square that overflows float is still finite. */
static void test_sum_sq_same_bits(void **state)
{
    (void)state;
    const hcnn_backend *be = hcnn_backend_cpu();
    static const size_t sizes[] = {1, 15, 16, 17, 65535, 65537, 3000001};
    static const int threads[] = {1, 2, 3, 17, 64};
    const int saved = omp_get_max_threads();
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        const size_t n = sizes[k];
        float *x = malloc(sizeof(float) * n);
        assert_non_null(x);
        fill_random(x, n, 171 + k, -3, 2);
        long double ref = 0.0L;
        for (size_t i = 0; i < n; i++)
            ref += (long double)x[i] * x[i];
        double first = 0.0;
        for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
            omp_set_num_threads(threads[t]);
            double stats[HCNN_STATS] = {0};
            hcnn_cpu_sum_sq(be, x, n, stats);
            const double got = stats[HCNN_STAT_SUMSQ];
            if (!isfinite(got) || fabsl((long double)got - ref) > 1e-12L * ref)
                fail_msg("n %zu, %d threads: sum of squares %.17g, expected %.17Lg", n,
                         threads[t], got, ref);
            if (t == 0)
                first = got;
            else if (memcmp(&got, &first, sizeof got))
                fail_msg("n %zu: %.17g on %d threads, %.17g on 1", n, got, threads[t], first);
        }
        x[n / 2] = 1e30f; /* its square, 1e60, is inf in float and finite in double */
        double stats[HCNN_STATS] = {0};
        hcnn_cpu_sum_sq(be, x, n, stats);
        if (!(stats[HCNN_STAT_SUMSQ] >= 1e60 && isfinite(stats[HCNN_STAT_SUMSQ])))
            fail_msg("n %zu: sum of squares with a 1e30 element %g, expected finite >= 1e60", n,
                     stats[HCNN_STAT_SUMSQ]);
        free(x);
    }
    omp_set_num_threads(saved);
}

/* im2col and col2im are adjoint (<im2col x, c> = <x, col2im c>), and
 * col2im's accumulate mode adds to dx what overwriting writes; on the
 * scalar path (strides differing) and both vector strides. */
static void test_im2col_adjoint(void **state)
{
    (void)state;
    const hcnn_backend *be = hcnn_backend_cpu();
    static const int geoms[][9] = {
        /* c, h, w, kh, kw, sh, sw, ph, pw */
        {3, 7, 6, 3, 2, 2, 1, 1, 1},
        {3, 9, 20, 1, 1, 2, 2, 0, 0}, /* ResNet's projections */
        {2, 6, 18, 3, 3, 1, 1, 1, 1},
    };
    for (size_t gi = 0; gi < sizeof geoms / sizeof geoms[0]; gi++) {
        const int *q = geoms[gi];
        hcnn_conv_geom g = {.c = q[0], .h = q[1], .w = q[2], .kh = q[3], .kw = q[4], .sh = q[5],
                            .sw = q[6], .ph = q[7], .pw = q[8]};
        g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
        g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
        const int n = 2;
        size_t xs = (size_t)n * g.c * g.h * g.w, cs = (size_t)g.c * g.kh * g.kw * n * g.oh * g.ow;
        float *x = malloc(xs * 4), *col = malloc(cs * 4), *c2 = malloc(cs * 4);
        float *x2 = malloc(xs * 4), *x3 = malloc(xs * 4);
        assert_true(x && col && c2 && x2 && x3);
        fill_random(x, xs, 1, -1, 1);
        fill_random(c2, cs, 2, -1, 1);
        hcnn_cpu_im2col(be, &g, x, n, col);
        hcnn_cpu_col2im(be, &g, c2, n, 0, x2);
        double a = 0, b = 0;
        for (size_t i = 0; i < cs; i++)
            a += (double)col[i] * c2[i];
        for (size_t i = 0; i < xs; i++)
            b += (double)x[i] * x2[i];
        if (!(fabs(a - b) < 1e-4 * (1 + fabs(a))))
            fail_msg("geometry %zu: <im2col x, c> = %g, <x, col2im c> = %g", gi, a, b);
        memcpy(x3, x, xs * 4);
        hcnn_cpu_col2im(be, &g, c2, n, 1, x3);
        for (size_t i = 0; i < xs; i++)
            if (!close_enough(x3[i], (double)x[i] + x2[i], 1e-6, 1e-5))
                fail_msg("geometry %zu: accumulated dx[%zu] = %g, expected %g + %g", gi, i,
                         (double)x3[i], (double)x[i], (double)x2[i]);
        free(x), free(col), free(c2), free(x2), free(x3);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_shifted_choice),
        cmocka_unit_test(test_conv_plan_small_batches),
        cmocka_unit_test(test_cpu_pieces_are_its_plans),
        cmocka_unit_test(test_im2col_adjoint),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_transpose_ld),
        cmocka_unit_test(test_bn_pieces_same_bits),
        cmocka_unit_test(test_sum_sq_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
