/* 2-D convolution as im2col + one GEMM over a group of images (Caffe/Darknet
 * style), backward as GEMM + col2im.
 *
 * Shapes, with K = C*kh*kw and P = oh*ow for a group of nb images:
 *   col  = im2col(x)            [K][nb*P]
 *   Y    = W col                [Cout][nb*P]   W is [Cout][K]
 *   y    = nchw(Y) + b          [nb][Cout][P]
 * backward, with dY = cnp(dy)   [Cout][nb*P]:
 *   dW  += dY col^T             [Cout][K]
 *   db  += sum over (nb, P) of dy
 *   dcol = W^T dY               [K][nb*P]
 *   dx   = col2im(dcol)
 * For nb = 1, Y and dY are already NCHW: the GEMMs read and write the
 * activations directly and no transpose runs.
 *
 * The weight gradient of per-thread groups with 16 <= Cout <= 32 goes
 * through its transpose, with dY transposed first (small: Cout x nb*P):
 *   dW^T += col dY^T             [K][Cout], both operands untransposed
 * and each thread's partial is transposed back when the partials are
 * added.  OpenBLAS 0.3.21's kernels for dY col^T (B transposed) are slow
 * on such shapes: single-threaded, LeNet-5's conv2 (16 x 150 x 300)
 * 35.6 -> 19.7 us a group, and LeNet-5 trains 15% faster on one thread
 * (14.2k -> 16.4k images/s, 5 alternated runs).  With Cout = 64 (ResNet-18's
 * layer1) the GEMM alone was 10% faster but the layer was not; with
 * Cout < 16 or >= 128 the GEMM was no faster or slower.
 *
 * Two ways to walk the mini-batch (config key conv_algo):
 * - batched: all threads on each operation, over chunks of the mini-batch
 *   as large as im2col_mb allows.  Best when an image's plane is small
 *   (ResNet-18's last stage, P = 16): per-image GEMMs would be too narrow.
 * - per-thread groups: each host thread takes a contiguous share of the
 *   images and runs im2col + single-threaded GEMMs on groups of
 *   ceil(GROUP_N / P) images, so the group's columns stay in the thread's
 *   cache and no operation waits for the other threads; each thread sums
 *   its weight gradient into a private partial, and dW += dW_0 + dW_1 + ...
 *   in thread order afterwards (repeatable for a given thread count).
 * auto takes per-thread groups when P >= PER_THREAD_MIN_P.  Measured with
 * `hcnn bench` (2 threads, batch 64): LeNet-5 17.5k -> 29.4k images/s,
 * ResNet-18 60.2 -> 64.1; ResNet-18's P = 16 stage is 1.4x slower
 * per-thread.  GROUP_N: 256 beat 100 and 512 on LeNet-5's conv2 (P = 100). */
#include "hcnn/layer.h"

#define PER_THREAD_MIN_P 64
#define GROUP_N 256 /* columns of one per-thread GEMM */
#define BLOCK_FLOATS ((size_t)150000)

static size_t round_up16(size_t f) { return (f + 15) & ~(size_t)15; }

static int conv_k(const hcnn_layer *l) { return l->conv.c * l->conv.kh * l->conv.kw; }
static int conv_p(const hcnn_layer *l) { return l->conv.oh * l->conv.ow; }
static int group_images(const hcnn_layer *l) { return (GROUP_N + conv_p(l) - 1) / conv_p(l); }

/* Per-thread groups: dW^T += col dY^T (see above) */
int hcnn_conv_dw_transposed(const hcnn_layer *l) { return l->out_c >= 16 && l->out_c <= 32; }

/* One thread's slot: the group's columns, its GEMM output (nb > 1 only),
 * dY^T (if the weight gradient is transposed) and its weight-gradient
 * partial ([Cout][K], or [K][Cout] if transposed). */
static size_t slot_floats(const hcnn_layer *l)
{
    const size_t K = (size_t)conv_k(l), P = (size_t)conv_p(l), g = (size_t)group_images(l);
    const size_t out = round_up16((size_t)l->out_c * g * P);
    return round_up16(K * g * P) + (g > 1 ? out : 0) + (hcnn_conv_dw_transposed(l) ? out : 0) +
           round_up16((size_t)l->out_c * K);
}
static float *slot_at(const hcnn_layer *l, float *ws, int t)
{
    return ws + (size_t)t * slot_floats(l);
}
static float *slot_out(const hcnn_layer *l, float *slot) /* Y or dY */
{
    return slot + round_up16((size_t)conv_k(l) * group_images(l) * conv_p(l));
}
static float *slot_dyt(const hcnn_layer *l, float *slot)
{
    const int g = group_images(l);
    return slot_out(l, slot) + (g > 1 ? round_up16((size_t)l->out_c * g * conv_p(l)) : 0);
}
static float *slot_dw(const hcnn_layer *l, float *slot)
{
    return slot + slot_floats(l) - round_up16((size_t)l->out_c * conv_k(l));
}

size_t hcnn_conv_per_thread_ws(const hcnn_layer *l, const hcnn_ctx *ctx, int nt)
{
    if (ctx->conv_algo == HCNN_CONV_BATCHED ||
        (ctx->conv_algo == HCNN_CONV_AUTO && conv_p(l) < PER_THREAD_MIN_P))
        return 0;
    return (size_t)nt * slot_floats(l);
}

int hcnn_conv_chunk(const hcnn_layer *l, const hcnn_ctx *ctx, int n)
{
    size_t per = l->ws_per_sample ? l->ws_per_sample : 1;
    size_t cap = ctx->max_chunk_floats / per;
    if (cap < 1)
        cap = 1;
    if (cap * per > ctx->ws_floats)
        cap = ctx->ws_floats / per;
    if (cap < 1)
        cap = 1;
    return (size_t)n < cap ? n : (int)cap;
}

/* One image's output rows in blocks when its columns would not stay in a
 * core's L2 between im2col and the GEMM: rows of at most BLOCK_FLOATS
 * columns (~600 KB) once K*P exceeds twice that.  ResNet-18's layer1 (2.4 MB
 * of columns an image), single-threaded, forward + backward: 5.5-6.0 ->
 * 5.1-5.6 ms for 2 images (4 alternated runs); layer2 (1.2 MB) was 2-4%
 * slower blocked, so it is not. */
int hcnn_conv_rows_per_block(const hcnn_layer *l)
{
    const size_t per_row = (size_t)conv_k(l) * l->conv.ow;
    if (per_row * l->conv.oh <= 2 * BLOCK_FLOATS)
        return l->conv.oh;
    const int rows = (int)(BLOCK_FLOATS / per_row);
    return rows < 1 ? 1 : rows;
}

/* The geometry of output rows [oy0, oy0 + rows): the layer's, with oh =
 * rows and the padding moved up by oy0 * sh (negative past the top), so
 * that im2col writes just that block's columns. */
static hcnn_conv_geom row_block(const hcnn_layer *l, int oy0, int rows)
{
    hcnn_conv_geom g = l->conv;
    g.ph -= oy0 * g.sh;
    g.oh = rows;
    return g;
}

/* Forward of nb images; col holds K*nb*P floats, Y Cout*nb*P (unused for
 * nb = 1). */
static void forward_group(const hcnn_layer *l, const hcnn_backend *be, const float *x, float *y,
                          int nb, float *col, float *Y)
{
    const int K = conv_k(l), P = conv_p(l), co = l->out_c;
    if (nb == 1) {
        /* Y[:, block] = W col(block), written into y with row stride P */
        const int rb = hcnn_conv_rows_per_block(l), ow = l->conv.ow;
        for (int oy0 = 0; oy0 < l->conv.oh; oy0 += rb) {
            const int rows = l->conv.oh - oy0 < rb ? l->conv.oh - oy0 : rb;
            const hcnn_conv_geom g = row_block(l, oy0, rows);
            be->im2col(&g, x, 1, col);
            be->gemm(0, 0, co, rows * ow, K, 1.0f, l->w, K, col, rows * ow, 0.0f,
                     y + (size_t)oy0 * ow, P);
        }
        if (l->b)
            be->add_channel_bias(y, l->b, 1, co, P);
        return;
    }
    be->im2col(&l->conv, x, nb, col);
    be->gemm(0, 0, co, nb * P, K, 1.0f, l->w, K, col, nb * P, 0.0f, Y, nb * P);
    be->cnp_to_nchw(Y, l->b, nb, co, P, y);
}

/* Backward of nb images: dw = dw_beta * dw + dY col^T, or, with dYT
 * given, dw = dw_beta * dw + col dY^T ([K][Cout]); dx (if wanted)
 * overwritten. */
static void backward_group(const hcnn_layer *l, const hcnn_ctx *ctx, const float *x,
                           const float *dy, float *dx, int nb, float *col, float *dY, float *dYT,
                           float *dw, float dw_beta)
{
    const hcnn_backend *be = ctx->be;
    const int K = conv_k(l), P = conv_p(l), co = l->out_c;
    const float *g = dy; /* nb = 1: dy is already [Cout][P] */
    if (nb > 1) {
        be->nchw_to_cnp(dy, nb, co, P, dY);
        g = dY;
    }
    if (dYT) {
        be->im2col(&l->conv, x, nb, col);
        be->transpose(g, co, nb * P, dYT);
        be->gemm(0, 0, K, co, nb * P, 1.0f, col, nb * P, dYT, co, dw_beta, dw, co);
    } else if (nb == 1) {
        /* dw += dY[:, block] col(block)^T, in the forward's row blocks */
        const int rb = hcnn_conv_rows_per_block(l), ow = l->conv.ow;
        for (int oy0 = 0; oy0 < l->conv.oh; oy0 += rb) {
            const int rows = l->conv.oh - oy0 < rb ? l->conv.oh - oy0 : rb;
            const hcnn_conv_geom gb = row_block(l, oy0, rows);
            be->im2col(&gb, x, 1, col);
            be->gemm(0, 1, co, K, rows * ow, 1.0f, g + (size_t)oy0 * ow, P, col, rows * ow,
                     oy0 == 0 ? dw_beta : 1.0f, dw, K);
        }
    } else {
        be->im2col(&l->conv, x, nb, col);
        be->gemm(0, 1, co, K, nb * P, 1.0f, g, nb * P, col, nb * P, dw_beta, dw, K);
    }
    hcnn_ctx_poll(ctx);
    if (dx) {
        /* the columns are no longer needed: reuse them for dcol */
        be->gemm(1, 0, K, nb * P, co, 1.0f, l->w, K, g, nb * P, 0.0f, col, nb * P);
        be->col2im(&l->conv, col, nb, dx);
        hcnn_ctx_poll(ctx);
    }
}

int hcnn_conv_per_thread(const hcnn_layer *l, const hcnn_ctx *ctx, int n, int *group, int *nt)
{
    *group = group_images(l);
    *nt = ctx->be->threads();
    const size_t need = hcnn_conv_per_thread_ws(l, ctx, *nt);
    if (need == 0 || need > ctx->ws_floats)
        return 0;
    return ctx->conv_algo == HCNN_CONV_PER_THREAD || n >= *nt;
}

typedef struct conv_job {
    const hcnn_layer *l;
    const hcnn_ctx *ctx;
    const float *x, *dy;
    float *y, *dx;
    int n;
    int team; /* threads that ran (written by thread 0) */
} conv_job;

static void forward_thread(void *arg, int t, int nt)
{
    const conv_job *j = arg;
    const hcnn_layer *l = j->l;
    const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
    const int g = group_images(l);
    float *col = slot_at(l, j->ctx->ws, t), *Y = slot_out(l, col);
    const int i1 = (int)((long)j->n * (t + 1) / nt);
    for (int i = (int)((long)j->n * t / nt); i < i1; i += g) {
        const int nb = i1 - i < g ? i1 - i : g;
        forward_group(l, j->ctx->be, j->x + (size_t)i * in_sz, j->y + (size_t)i * out_sz, nb,
                      col, Y);
        if (t == 0)
            hcnn_ctx_poll(j->ctx);
    }
}

static void backward_thread(void *arg, int t, int nt)
{
    conv_job *j = arg;
    const hcnn_layer *l = j->l;
    const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
    const int g = group_images(l);
    float *slot = slot_at(l, j->ctx->ws, t), *dY = slot_out(l, slot);
    float *dYT = hcnn_conv_dw_transposed(l) ? slot_dyt(l, slot) : NULL;
    /* only thread 0 drives communication (MPI_THREAD_FUNNELED) */
    hcnn_ctx ctx = *j->ctx;
    if (t != 0)
        ctx.poll = NULL;
    if (t == 0)
        j->team = nt;
    const int i0 = (int)((long)j->n * t / nt), i1 = (int)((long)j->n * (t + 1) / nt);
    for (int i = i0; i < i1; i += g) {
        const int nb = i1 - i < g ? i1 - i : g;
        backward_group(l, &ctx, j->x + (size_t)i * in_sz, j->dy + (size_t)i * out_sz,
                       j->dx ? j->dx + (size_t)i * in_sz : NULL, nb, slot, dY, dYT,
                       slot_dw(l, slot), i == i0 ? 0.0f : 1.0f);
    }
}

void hcnn_conv_forward(const hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, int n)
{
    const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
    int group, nt;
    if (hcnn_conv_per_thread(l, ctx, n, &group, &nt)) {
        conv_job job = {.l = l, .ctx = ctx, .x = x, .y = y, .n = n};
        ctx->be->parallel(forward_thread, &job);
        return;
    }
    const int chunk = hcnn_conv_chunk(l, ctx, n);
    for (int i0 = 0; i0 < n; i0 += chunk) {
        const int nb = n - i0 < chunk ? n - i0 : chunk;
        float *col = ctx->ws, *Y = ctx->ws + (size_t)conv_k(l) * nb * conv_p(l);
        forward_group(l, ctx->be, x + (size_t)i0 * in_sz, y + (size_t)i0 * out_sz, nb, col, Y);
        hcnn_ctx_poll(ctx);
    }
}

void hcnn_conv_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *dy,
                        float *dx, int n)
{
    const hcnn_backend *be = ctx->be;
    const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
    if (l->db)
        be->channel_sum_acc(dy, n, l->out_c, conv_p(l), l->db);
    int group, nt;
    if (hcnn_conv_per_thread(l, ctx, n, &group, &nt)) {
        conv_job job = {.l = l, .ctx = ctx, .x = x, .dy = dy, .dx = dx, .n = n};
        be->parallel(backward_thread, &job);
        for (int t = 0; t < job.team; t++) {
            if ((long)n * t / job.team >= (long)n * (t + 1) / job.team) /* had no images */
                continue;
            float *slot = slot_at(l, ctx->ws, t), *part = slot_dw(l, slot);
            if (hcnn_conv_dw_transposed(l)) { /* [K][Cout] -> [Cout][K], into the columns */
                be->transpose(part, conv_k(l), l->out_c, slot);
                part = slot;
            }
            be->add_acc(part, l->dw, (size_t)l->out_c * conv_k(l));
        }
        return;
    }
    const int chunk = hcnn_conv_chunk(l, ctx, n);
    for (int i0 = 0; i0 < n; i0 += chunk) {
        const int nb = n - i0 < chunk ? n - i0 : chunk;
        float *col = ctx->ws, *dY = ctx->ws + (size_t)conv_k(l) * nb * conv_p(l);
        backward_group(l, ctx, x + (size_t)i0 * in_sz, dy + (size_t)i0 * out_sz,
                       dx ? dx + (size_t)i0 * in_sz : NULL, nb, col, dY, NULL, l->dw, 1.0f);
    }
}
