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
 * per-thread (still 5-10% slower with groups capped as below).  GROUP_N:
 * 256 beat 100 and 512 on LeNet-5's conv2 (P = 100).  A group's columns are
 * capped at GROUP_MAX_COL floats, so that they stay in a core's L2 (2 MB
 * here) with the GEMM's packed weights: ResNet-18's layer3 convolutions
 * with K = 2304 take 2 images, not 4 (2.4 MB), and its three 3x3 rows went
 * 218-229 -> 202-203 ms a step (alternated runs; 1 image: 212-215).
 *
 * Shifted windows (stride 1, one-image groups, wide planes, C >= 16): with
 * the input zero-padded to Hp x Wp planes, output (oy, ox) of tap (ki, kj)
 * reads padded element (oy + ki) * Wp + ox + kj, i.e. q = oy * Wp + ox
 * shifted by off = ki * Wp + kj.  On the padded width (N = oh * Wp output
 * columns, kw - 1 of each row discarded) every tap is one GEMM whose B is
 * the padded input itself, at an offset, with no columns written or read:
 *   Yext                   = sum over taps of W_t xpad[:, off : off + N]
 *   dxpad[:, off : off + N] += W_t^T dYext  (dYext: dy, junk columns zero)
 * with W_t = W[:, :, ki, kj] ([Cout][C], rearranged once per call).  One
 * thread, one image, alternated medians: ResNet-18's layer1 (C = 64,
 * 32 x 32) forward 1036 -> 898 us, dx 979 -> 908 us; C = 16..128 at 32 x 32
 * and C = 64 at 64 x 64 faster by 5-35%; C = 8 even, C = 3 (the stem) 1.75x
 * slower; a 16 x 16 plane (12% junk columns) 3% slower.  The weight
 * gradient keeps the columns (its 9 GEMMs of Cout x C x N were 4% slower). */
#include "hcnn/layer.h"

#define PER_THREAD_MIN_P 64
#define GROUP_N 256 /* columns of one per-thread GEMM */
#define BLOCK_FLOATS ((size_t)150000)
#define SHIFTED_MIN_C 16
#define GROUP_MAX_COL ((size_t)300000) /* floats of a group's columns (1.2 MB) */

static size_t round_up16(size_t f) { return (f + 15) & ~(size_t)15; }

static int conv_k(const hcnn_layer *l) { return l->conv.c * l->conv.kh * l->conv.kw; }
static int conv_p(const hcnn_layer *l) { return l->conv.oh * l->conv.ow; }
static int group_images(const hcnn_layer *l)
{
    const int g = (GROUP_N + conv_p(l) - 1) / conv_p(l);
    const size_t cap = GROUP_MAX_COL / ((size_t)conv_k(l) * conv_p(l));
    return cap < 1 ? 1 : (size_t)g < cap ? g : (int)cap;
}

/* Per-thread groups: dW^T += col dY^T (see above) */
int hcnn_conv_dw_transposed(const hcnn_layer *l) { return l->out_c >= 16 && l->out_c <= 32; }

/* Shifted windows (see above): stride 1, one image per group, at most 1/16
 * of the computed columns discarded, taps of at least SHIFTED_MIN_C rows. */
int hcnn_conv_shifted(const hcnn_layer *l)
{
    const hcnn_conv_geom *g = &l->conv;
    return g->sh == 1 && g->sw == 1 && g->kh * g->kw > 1 && g->c >= SHIFTED_MIN_C &&
           group_images(l) == 1 && 16 * (g->kw - 1) <= g->ow;
}
static int padded_w(const hcnn_layer *l) { return l->conv.w + 2 * l->conv.pw; }
int hcnn_conv_shifted_columns(const hcnn_layer *l) { return l->conv.oh * padded_w(l); }
static size_t padded_plane(const hcnn_layer *l)
{
    return (size_t)(l->conv.h + 2 * l->conv.ph) * padded_w(l);
}
static size_t padded_floats(const hcnn_layer *l)
{
    return round_up16(l->conv.c * padded_plane(l) + (size_t)l->conv.kw - 1);
}
static size_t padded_out_floats(const hcnn_layer *l)
{
    return round_up16((size_t)l->out_c * hcnn_conv_shifted_columns(l));
}
static size_t tap_offset(const hcnn_layer *l, int t)
{
    return (size_t)(t / l->conv.kw) * padded_w(l) + t % l->conv.kw;
}

/* One thread's slot: the group's columns, its GEMM output (nb > 1 only),
 * dY^T (if the weight gradient is transposed), the padded planes and the
 * padded-width output of shifted windows (if shifted), and its
 * weight-gradient partial ([Cout][K], or [K][Cout] if transposed).  The
 * last tap of the last padded plane reads kw - 1 floats past it. */
typedef struct conv_slot {
    float *col, *out, *dyt, *pad, *ext, *dw;
} conv_slot;

static size_t slot_layout(const hcnn_layer *l, float *base, conv_slot *s)
{
    const size_t K = (size_t)conv_k(l), P = (size_t)conv_p(l), g = (size_t)group_images(l);
    const size_t out = round_up16((size_t)l->out_c * g * P);
    const int shifted = hcnn_conv_shifted(l);
    const size_t sizes[6] = {
        round_up16(K * g * P),
        g > 1 ? out : 0,
        hcnn_conv_dw_transposed(l) ? out : 0,
        shifted ? padded_floats(l) : 0,
        shifted ? padded_out_floats(l) : 0,
        round_up16((size_t)l->out_c * K),
    };
    float **at[6] = {&s->col, &s->out, &s->dyt, &s->pad, &s->ext, &s->dw};
    size_t off = 0;
    for (int i = 0; i < 6; i++) {
        *at[i] = base ? base + off : NULL;
        off += sizes[i];
    }
    return off;
}
static size_t slot_floats(const hcnn_layer *l) { return slot_layout(l, NULL, &(conv_slot){0}); }
static conv_slot slot_at(const hcnn_layer *l, float *ws, int t)
{
    conv_slot s;
    slot_layout(l, ws + (size_t)t * slot_floats(l), &s);
    if (!hcnn_conv_dw_transposed(l))
        s.dyt = NULL;
    return s;
}
/* The taps' weights W_t ([kh*kw][Cout][C], shifted windows), after the
 * threads' slots. */
static float *shifted_weights(const hcnn_layer *l, float *ws, int nt)
{
    return ws + (size_t)nt * slot_floats(l);
}

size_t hcnn_conv_per_thread_ws(const hcnn_layer *l, const hcnn_ctx *ctx, int nt)
{
    if (ctx->conv_algo == HCNN_CONV_BATCHED ||
        (ctx->conv_algo == HCNN_CONV_AUTO && conv_p(l) < PER_THREAD_MIN_P))
        return 0;
    return (size_t)nt * slot_floats(l) +
           (hcnn_conv_shifted(l) ? round_up16((size_t)l->out_c * conv_k(l)) : 0);
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

/* Forward of one image by shifted windows (see above); the padded planes'
 * borders are zero. */
static void forward_shifted(const hcnn_layer *l, const hcnn_backend *be, const float *wt,
                            const conv_slot *s, const float *x, float *y)
{
    const hcnn_conv_geom *g = &l->conv;
    const int Wp = padded_w(l), N = hcnn_conv_shifted_columns(l), co = l->out_c, P = conv_p(l);
    const size_t plane = padded_plane(l);
    be->copy_planes(x, (size_t)g->h * g->w, g->w, g->c, g->h, g->w,
                    s->pad + (size_t)g->ph * Wp + g->pw, plane, Wp, 0);
    for (int t = 0; t < g->kh * g->kw; t++)
        be->gemm(0, 0, co, N, g->c, 1.0f, wt + (size_t)t * co * g->c, g->c,
                 s->pad + tap_offset(l, t), (int)plane, t ? 1.0f : 0.0f, s->ext, N);
    be->copy_planes(s->ext, (size_t)N, Wp, co, g->oh, g->ow, y, (size_t)P, g->ow, 0);
    if (l->b)
        be->add_channel_bias(y, l->b, 1, co, P);
}

/* dx of one image by shifted windows (added to dx if dx_acc); the
 * padded-width output buffer's junk columns are zero. */
static void dx_shifted(const hcnn_layer *l, const hcnn_backend *be, const float *wt,
                       const conv_slot *s, const float *dy, float *dx, int dx_acc)
{
    const hcnn_conv_geom *g = &l->conv;
    const int Wp = padded_w(l), N = hcnn_conv_shifted_columns(l), co = l->out_c;
    const size_t plane = padded_plane(l);
    be->copy_planes(dy, (size_t)conv_p(l), g->ow, co, g->oh, g->ow, s->ext, (size_t)N, Wp, 0);
    be->fill(s->pad, padded_floats(l), 0.0f);
    for (int t = 0; t < g->kh * g->kw; t++)
        be->gemm(1, 0, g->c, N, co, 1.0f, wt + (size_t)t * co * g->c, g->c, s->ext, N, 1.0f,
                 s->pad + tap_offset(l, t), (int)plane);
    be->copy_planes(s->pad + (size_t)g->ph * Wp + g->pw, plane, Wp, g->c, g->h, g->w, dx,
                    (size_t)g->h * g->w, g->w, dx_acc);
}

/* Backward of nb images: dw = dw_beta * dw + dY col^T, or, with dYT
 * given, dw = dw_beta * dw + col dY^T ([K][Cout]); dx (if wanted)
 * overwritten, or added to if dx_acc. */
static void backward_group(const hcnn_layer *l, const hcnn_ctx *ctx, const float *x,
                           const float *dy, float *dx, int dx_acc, int nb, const conv_slot *s,
                           const float *wt, float dw_beta)
{
    float *col = s->col, *dY = s->out, *dYT = s->dyt, *dw = s->dw;
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
    if (dx && wt) {
        dx_shifted(l, be, wt, s, g, dx, dx_acc);
        hcnn_ctx_poll(ctx);
    } else if (dx) {
        /* the columns are no longer needed: reuse them for dcol */
        be->gemm(1, 0, K, nb * P, co, 1.0f, l->w, K, g, nb * P, 0.0f, col, nb * P);
        be->col2im(&l->conv, col, nb, dx_acc, dx);
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
    int dx_acc;
    const float *wt; /* the taps' weights (shifted windows), else NULL */
    int n;
    int team; /* threads that ran (written by thread 0) */
} conv_job;

/* The taps' weights of shifted windows, W_t[co][c] = W[co][c][t], after nt
 * slots of the workspace; NULL if the layer does not take them. */
static const float *prepare_shifted(const hcnn_layer *l, const hcnn_ctx *ctx, int nt)
{
    if (!hcnn_conv_shifted(l))
        return NULL;
    float *wt = shifted_weights(l, ctx->ws, nt);
    ctx->be->transpose(l->w, l->out_c * l->conv.c, l->conv.kh * l->conv.kw, wt);
    return wt;
}

static void forward_thread(void *arg, int t, int nt)
{
    const conv_job *j = arg;
    const hcnn_layer *l = j->l;
    const hcnn_backend *be = j->ctx->be;
    const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
    const int g = group_images(l);
    const conv_slot s = slot_at(l, j->ctx->ws, t);
    const int i0 = (int)((long)j->n * t / nt), i1 = (int)((long)j->n * (t + 1) / nt);
    if (j->wt && i0 < i1) /* the padded planes' borders stay zero */
        be->fill(s.pad, padded_floats(l), 0.0f);
    for (int i = i0; i < i1; i += g) {
        const int nb = i1 - i < g ? i1 - i : g;
        const float *x = j->x + (size_t)i * in_sz;
        float *y = j->y + (size_t)i * out_sz;
        if (j->wt)
            forward_shifted(l, be, j->wt, &s, x, y);
        else
            forward_group(l, be, x, y, nb, s.col, s.out);
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
    const conv_slot s = slot_at(l, j->ctx->ws, t);
    /* only thread 0 drives communication (MPI_THREAD_FUNNELED) */
    hcnn_ctx ctx = *j->ctx;
    if (t != 0)
        ctx.poll = NULL;
    if (t == 0)
        j->team = nt;
    const int i0 = (int)((long)j->n * t / nt), i1 = (int)((long)j->n * (t + 1) / nt);
    if (j->wt && j->dx && i0 < i1) /* dy on the padded width: junk columns stay zero */
        ctx.be->fill(s.ext, padded_out_floats(l), 0.0f);
    for (int i = i0; i < i1; i += g) {
        const int nb = i1 - i < g ? i1 - i : g;
        backward_group(l, &ctx, j->x + (size_t)i * in_sz, j->dy + (size_t)i * out_sz,
                       j->dx ? j->dx + (size_t)i * in_sz : NULL, j->dx_acc, nb, &s, j->wt,
                       i == i0 ? 0.0f : 1.0f);
    }
}

void hcnn_conv_forward(const hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, int n)
{
    const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
    int group, nt;
    if (hcnn_conv_per_thread(l, ctx, n, &group, &nt)) {
        conv_job job = {.l = l, .ctx = ctx, .x = x, .y = y, .n = n};
        job.wt = prepare_shifted(l, ctx, nt);
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
    hcnn_conv_backward_into(l, ctx, x, dy, dx, 0, n);
}

void hcnn_conv_backward_into(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *dy,
                             float *dx, int dx_acc, int n)
{
    const hcnn_backend *be = ctx->be;
    const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
    if (l->db)
        be->channel_sum_acc(dy, n, l->out_c, conv_p(l), l->db);
    int group, nt;
    if (hcnn_conv_per_thread(l, ctx, n, &group, &nt)) {
        conv_job job = {.l = l, .ctx = ctx, .x = x, .dy = dy, .dx = dx, .dx_acc = dx_acc, .n = n};
        job.wt = dx ? prepare_shifted(l, ctx, nt) : NULL;
        be->parallel(backward_thread, &job);
        for (int t = 0; t < job.team; t++) {
            if ((long)n * t / job.team >= (long)n * (t + 1) / job.team) /* had no images */
                continue;
            const conv_slot s = slot_at(l, ctx->ws, t);
            float *part = s.dw;
            if (hcnn_conv_dw_transposed(l)) { /* [K][Cout] -> [Cout][K], into the columns */
                be->transpose(part, conv_k(l), l->out_c, s.col);
                part = s.col;
            }
            be->add_acc(part, l->dw, (size_t)l->out_c * conv_k(l));
        }
        return;
    }
    const int chunk = hcnn_conv_chunk(l, ctx, n);
    for (int i0 = 0; i0 < n; i0 += chunk) {
        const int nb = n - i0 < chunk ? n - i0 : chunk;
        const conv_slot s = {.col = ctx->ws, .out = ctx->ws + (size_t)conv_k(l) * nb * conv_p(l),
                             .dw = l->dw};
        backward_group(l, ctx, x + (size_t)i0 * in_sz, dy + (size_t)i0 * out_sz,
                       dx ? dx + (size_t)i0 * in_sz : NULL, dx_acc, nb, &s, NULL, 1.0f);
    }
}
