/* The pieces of ResNet-18's passes at 8 images (issue 43): a node of a
 * 32-node job holds 8-32 images, and each of its 64 (or 256) threads needs
 * work.  For every layer whose backend cuts its passes (the convolutions,
 * batch-norm), every phase must offer nt threads at least
 *   min(nt, what the layer's shape allows)
 * pieces, nt = 64 and 256.  What a shape allows is counted here, from the
 * shape alone, by the rules the CPU backend publishes (src/cpu/cpu.h,
 * "Pieces"): pieces of whole vectors (16 channels, 16 tiles, 16 GEMM rows
 * or columns of Winograd's products), of whole images' planes, of whole
 * rows of output, an im2col GEMM's tiles and items of >= 64 rows and
 * columns (or the whole dimension), none of a GEMM smaller than
 * HCNN_PIECE_MIN_MACS multiply-adds; and, since the backend's cuts round
 * to those units, half of a GEMM phase's multiply-adds over that minimum.  The phases whose cut is fixed by the
 * shape (the GEMMs: the BLAS gives other bits for other blocks) are held
 * to min(256, allowed) at both thread counts.  Before the pieces, a
 * Winograd GEMM phase offered 16-72 pieces here, its input-gradient
 * scatter 32, a batched GEMM 64 at most. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/backend.h"
#include "hcnn/config.h"
#include "hcnn/layer.h"
#include "hcnn/net.h"

/* the backend's published rules (src/cpu/cpu.h) */
#define TARGET 256
#define MIN_MACS ((double)(1 << 18))
#define BATCH 8

static long at_most(long a, long b) { return a < b ? a : b; }

/* a product cut into tiles of >= 16 x 16 (Winograd's blocks) or >= 64 x 64
 * (an im2col GEMM's: each tile packs its own panels), of >= MIN_MACS */
static long tiles_allowed(long m, long n, long k, long side)
{
    const double by_size = (double)m * n * k / (2.0 * MIN_MACS);
    return at_most((m / side > 0 ? m / side : 1) * (n / side > 0 ? n / side : 1),
                   by_size < 1.0 ? 1 : (long)by_size);
}

static long gemm_allowed(long m, long n, long k) { return tiles_allowed(m, n, k, 16); }

/* the im2col GEMM's tiles halve a side at a time (to multiples of 16):
 * half of what the sides allow */
static long im2col_gemm_allowed(long m, long n, long k)
{
    const long t = tiles_allowed(m, n, k, 64) / 2;
    return t > 1 ? t : 1;
}

/* The plan the backend names for a convolution: Winograd's tile (0: an
 * im2col plan) and images a chunk. */
static void plan_of(const hcnn_layer *l, const hcnn_ctx *ctx, int *tile, long *chunk)
{
    char how[512];
    l->ops->describe(l, ctx, BATCH, how, sizeof how);
    *tile = !strncmp(how, "winograd_f4", 11) ? 4 : !strncmp(how, "winograd_f2", 11) ? 2 : 0;
    const char *c = strstr(how, "chunks of ");
    *chunk = c ? atol(c + 10) : BATCH;
}

/* What the shape of layer l allows phase `name` of a pass of BATCH images. */
static long allowed(const hcnn_layer *l, const hcnn_ctx *ctx, const char *name)
{
    const long n = BATCH, C = l->in_c, co = l->out_c, oh = l->out_h, ow = l->out_w;
    const long vec_in = C >= 32 ? C / 16 : 1, vec_out = co >= 32 ? co / 16 : 1;
    if (l->kind == HCNN_BLOCK_BN)
        return strstr(name, "means") || strstr(name, "variances") || strstr(name, "totals") ||
                       strstr(name, "statistics") || strstr(name, "affine")
                   ? C
                   : n * C;
    if (strstr(name, "bias gradient"))
        return l->out_c;
    if (strstr(name, "partials summed")) /* element-wise: on all threads from 65536 floats */
        return (double)l->out_c * l->in_c * l->conv.kh * l->conv.kw > 65536 ? TARGET : 1;
    const long kh = l->conv.kh, kw = l->conv.kw, K = C * kh * kw, P = oh * ow;
    const double macs = (double)n * P * K * co;
    int m;
    long nb;
    plan_of(l, ctx, &m, &nb);
    if (m) { /* Winograd: a^2 products over the chunk's tiles; images x vectors x tile rows */
        const long a2 = (long)(m + 2) * (m + 2), nty = (oh + m - 1) / m;
        const long tiles = nb * nty * ((ow + m - 1) / m);
        if (strstr(name, "weights' transform") || strstr(name, "weight-gradient inverse"))
            return co * vec_in;
        if (strstr(name, "forward GEMMs"))
            return a2 * gemm_allowed(tiles, co, C);
        if (strstr(name, "input-gradient GEMMs"))
            return a2 * gemm_allowed(tiles, C, co);
        if (strstr(name, "weight-gradient GEMMs"))
            return a2 * gemm_allowed(co, C, tiles);
        if (strstr(name, "weight-gradient transforms"))
            return nb * (vec_in + vec_out) * nty;
        if (strstr(name, "forward inverse") || strstr(name, "input-gradient transform"))
            return nb * vec_out * nty;
        if (strstr(name, "forward transform") || strstr(name, "input-gradient scatter") ||
            strstr(name, "input-gradient seams"))
            return nb * vec_in * nty;
        /* the weight gradient by the im2col plan: below */
    }
    if (strstr(name, "im2col") || strstr(name, "col2im"))
        return n * C;
    if (strstr(name, "layout"))
        return n * co;
    if (strstr(name, "partial sums")) /* a k-split's partials: summed by rows */
        return co;
    if (strstr(name, "forward GEMM"))
        return im2col_gemm_allowed(co, n * P, K);
    if (strstr(name, "weight-gradient GEMM"))
        return im2col_gemm_allowed(co, K, n * P);
    if (strstr(name, "input-gradient GEMM"))
        return im2col_gemm_allowed(K, n * P, co);
    /* an item's GEMM keeps >= 64 columns (output rows of an image) or rows
     * (input channels' taps) */
    const long row_blocks = oh / ((64 + ow - 1) / ow) > 1 ? oh / ((64 + ow - 1) / ow) : 1;
    const long taps = kh * kw, ch_blocks = C / ((64 + taps - 1) / taps) > 1
                                              ? C / ((64 + taps - 1) / taps) : 1;
    if (strstr(name, "forward items"))
        return at_most(n * row_blocks, (long)(macs / (2.0 * MIN_MACS)));
    if (strstr(name, "weight-gradient tasks")) /* partial sums of >= 2048 columns */
        return at_most(64, n * P / 2048 > 1 ? n * P / 2048 : 1);
    /* the backward's queue: weight-gradient chunks and input-gradient items */
    return at_most(n * ch_blocks, (long)(macs / (2.0 * MIN_MACS)));
}

/* the phases whose cut is fixed by the shape (the BLAS gives other bits for
 * other blocks; the scatter's bands are summed in their order) */
static int shape_fixed(const char *name) { return strstr(name, "GEMM") != NULL; }

static void check_phases(const hcnn_layer *l, const hcnn_ctx *ctx, int nt, const hcnn_pieces *p,
                         int *checked)
{
    for (int k = 0; k < p->nphases; k++) {
        const char *name = p->phase[k].name;
        assert_non_null(name);
        const long want = at_most(shape_fixed(name) ? TARGET : nt, allowed(l, ctx, name));
        if (p->phase[k].pieces < want)
            fail_msg("%s at %d images, %d threads: the %s offers %ld pieces, the shape allows "
                     "%ld",
                     l->name, BATCH, nt, name, p->phase[k].pieces, want);
        (*checked)++;
    }
}

/* the layer's passes (its children's, a residual block's), as the chain
 * runs them: prev the layer before it in its chain */
static void check_layer(const hcnn_layer *l, const hcnn_layer *prev, const hcnn_ctx *ctx, int nt,
                        int need_dx, int *checked)
{
    if (l->kind == HCNN_BLOCK_RESIDUAL) {
        for (int j = 0; j < l->nchildren; j++) {
            const int first = j == 0 || j == l->nbody;
            check_layer(&l->children[j], first ? NULL : &l->children[j - 1], ctx, nt,
                        first ? need_dx : 1, checked);
        }
        return;
    }
    hcnn_conv_desc d;
    hcnn_op op;
    if (!hcnn_layer_op(l, prev, need_dx, &d, &op) ||
        (op.kind != HCNN_OP_CONV && op.kind != HCNN_OP_BN))
        return;
    const hcnn_exec ex = {.max_chunk_floats = ctx->max_chunk_floats, .conv_algo = ctx->conv_algo,
                          .weights_key = 1};
    hcnn_pieces f, b;
    ctx->be->pass_pieces(ctx->be, &op, &ex, BATCH, nt, &f, &b);
    assert_true(f.nphases > 0 && b.nphases > 0);
    printf("  %-22s %3d threads:", l->name, nt);
    for (int k = 0; k < f.nphases; k++)
        printf(" %ld", f.phase[k].pieces);
    printf(" |");
    for (int k = 0; k < b.nphases; k++)
        printf(" %ld", b.phase[k].pieces);
    printf("\n");
    check_phases(l, ctx, nt, &f, checked);
    check_phases(l, ctx, nt, &b, checked);
}

static void test_resnet18_batch_8(void **state)
{
    (void)state;
    char path[1024];
    const char *src = getenv("HCNN_SRCDIR");
    snprintf(path, sizeof path, "%s/configs/cifar_resnet18.yaml", src ? src : ".");
    hcnn_config cfg;
    if (hcnn_config_load(&cfg, path, NULL, 0))
        fail_msg("cannot load %s (set HCNN_SRCDIR to the source root)", path);
    hcnn_net net;
    assert_int_equal(hcnn_net_create(&net, &cfg.model, hcnn_backend_cpu(), cfg.path), HCNN_OK);
    const int saved = omp_get_max_threads();
    const int counts[] = {64, 256};
    int checked = 0;
    for (int c = 0; c < 2; c++) {
        omp_set_num_threads(counts[c]); /* the plans a run on that many threads makes */
        hcnn_ctx ctx = {.be = hcnn_backend_cpu(),
                        .ws_floats = (size_t)1 << 40, /* a run sizes it for the plan */
                        .training = 1,
                        .max_chunk_floats = (size_t)(cfg.im2col_mb * 1048576.0 / sizeof(float)),
                        .conv_algo = cfg.conv_algo};
        for (int i = 0; i < net.nlayers; i++)
            check_layer(&net.layers[i], i > 0 ? &net.layers[i - 1] : NULL, &ctx, counts[c], i > 0,
                        &checked);
    }
    omp_set_num_threads(saved);
    printf("  %d phases checked\n", checked);
    assert_true(checked > 100);
    hcnn_net_free(&net);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet18_batch_8),
    };
    return cmocka_run_group_tests_name("pieces", tests, NULL, NULL);
}
