/* 2-D convolution as im2col + one GEMM over a group of images (Caffe /
 * Darknet style), backward as GEMM + col2im; it executes the plan of
 * conv_plan.c.
 *
 * With K = C*kh*kw and P = oh*ow, for a group of nb images:
 *   col  = im2col(x)            [K][nb*P]
 *   Y    = W col                [Cout][nb*P]   W is [Cout][K]
 *   y    = nchw(Y) + b          [nb][Cout][P]
 * backward, with dY = cnp(dy)   [Cout][nb*P]:
 *   dW  += dY col^T             [Cout][K]      (or dW^T += col dY^T)
 *   db  += sum over (nb, P) of dy
 *   dcol = W^T dY               [K][nb*P]
 *   dx   = col2im(dcol)
 * For nb = 1, Y and dY are already NCHW: the GEMMs read and write the
 * activations directly and no layout change runs; a block of output rows
 * is a block of Y's columns, a block of input channels a block of dcol's
 * rows.  Shifted windows (one image, stride 1, wide planes): with W_t =
 * W[:, :, ki, kj] and the input zero-padded (src/cpu/conv_plan.h),
 *   Yext                      = sum over taps of W_t xpad[:, off_t : off_t + N]
 *   dxpad[:, off_t : off_t + N] += W_t^T dYext  (dYext: dy, junk columns zero)
 * and the weight gradient keeps the columns.
 *
 * On the per-thread path the backward's tasks, weight-gradient chunks (each
 * into its partial sum) and input-gradient items, go to whichever thread
 * is free; the partials are then added to dW in chunk order. */
#include <stdatomic.h>

#include "bf16.h"
#include "conv_plan.h"

static void exec_poll(const hcnn_exec *ex)
{
    if (ex->poll)
        ex->poll(ex->poll_arg);
}

/* A product of the plan: FP32 by the BLAS, or with bf (precision bf16) of
 * inputs rounded to bfloat16 (bf16.c); a16, b16: an operand already
 * rounded (then a, b are not read); target: the most tiles a product
 * outside a parallel region is cut into (hcnn_pieces_for). */
static void conv_gemm(hcnn_bf16 *bf, int target, int ta, int tb, int m, int n, int k,
                      const float *a, const uint16_t *a16, int lda, const float *b,
                      const uint16_t *b16, int ldb, float beta, float *c, int ldc)
{
    hcnn_cpu_gemm_mixed(bf, target, ta, tb, m, n, k, 1.0f, a16 ? NULL : a, a16, lda,
                        b16 ? NULL : b, b16, ldb, beta, c, ldc);
}

/* y[0..n) = x[0..n) rounded to bfloat16, on all threads */
static void round_all(const float *x, size_t n, uint16_t *y)
{
    const size_t block = 16384;
    const long blocks = (long)((n + block - 1) / block);
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (long i = 0; i < blocks; i++) {
        const size_t lo = (size_t)i * block, hi = lo + block < n ? lo + block : n;
        hcnn_bf16_round(x + lo, hi - lo, y + lo);
    }
}

/* ---- forward ------------------------------------------------------------- */

/* Output rows [oy0, oy0 + rows) of one image by im2col + GEMM. */
static void forward_rows(hcnn_bf16 *bf, int target, const hcnn_conv_desc *l, const float *w,
                         const uint16_t *w16, const float *b, const float *x, float *y, int oy0,
                         int rows, float *col)
{
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c, ow = l->g.ow;
    const hcnn_conv_geom g = hcnn_conv_row_block(l, oy0, rows);
    hcnn_cpu_im2col(NULL, &g, x, 1, col);
    conv_gemm(bf, target, 0, 0, co, rows * ow, K, w, w16, K, col, NULL, rows * ow, 0.0f,
              y + (size_t)oy0 * ow, P);
    if (b)
        hcnn_cpu_add_channel_bias(NULL, y + (size_t)oy0 * ow, b, 1, co, rows * ow, (size_t)P);
}

/* Forward of nb > 1 images; col holds K*nb*P floats, Y Cout*nb*P. */
static void forward_group(hcnn_bf16 *bf, int target, const hcnn_conv_desc *l, const float *w,
                          const uint16_t *w16, const float *b, const float *x, float *y, int nb,
                          float *col, float *Y)
{
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c;
    hcnn_cpu_im2col(NULL, &l->g, x, nb, col);
    conv_gemm(bf, target, 0, 0, co, nb * P, K, w, w16, K, col, NULL, nb * P, 0.0f, Y, nb * P);
    hcnn_cpu_cnp_to_nchw(NULL, Y, b, nb, co, P, y);
}

/* Output rows [oy0, oy0 + rows) of one image by shifted windows: the
 * padded rows they read, [oy0, oy0 + rows + kh - 1), copied into s->pad
 * (whose border columns stay zero; rows outside the image are zeroed). */
static void forward_shifted(const hcnn_conv_desc *l, const float *wt, const float *b,
                            const hcnn_conv_slot *s, const float *x, float *y, int oy0, int rows)
{
    const hcnn_conv_geom *g = &l->g;
    const int Wp = hcnn_conv_padded_w(l), co = l->out_c, P = hcnn_conv_p(l), N = rows * Wp;
    const int prows = rows + g->kh - 1;                /* padded rows read */
    const size_t plane = (size_t)prows * Wp;           /* of the item's padded planes */
    int top = g->ph - oy0, iy0 = 0;                    /* padded rows above the image */
    if (top < 0)
        iy0 = -top, top = 0;
    int inside = g->h - iy0 < prows - top ? g->h - iy0 : prows - top;
    inside = inside < 0 ? 0 : inside;
    for (int c = 0; c < g->c; c++) {
        float *pc = s->pad + (size_t)c * plane;
        if (top)
            hcnn_cpu_fill(NULL, pc, (size_t)top * Wp, 0.0f);
        if (top + inside < prows)
            hcnn_cpu_fill(NULL, pc + (size_t)(top + inside) * Wp,
                          (size_t)(prows - top - inside) * Wp, 0.0f);
    }
    hcnn_cpu_copy_planes(NULL, x + (size_t)iy0 * g->w, (size_t)g->h * g->w, g->w, g->c, inside,
                         g->w, s->pad + (size_t)top * Wp + g->pw, plane, Wp, 0);
    for (int t = 0; t < g->kh * g->kw; t++)
        hcnn_cpu_gemm(NULL, 0, 0, co, N, g->c, 1.0f, wt + (size_t)t * co * g->c, g->c,
                      s->pad + hcnn_conv_tap_offset(l, t), (int)plane, t ? 1.0f : 0.0f, s->ext,
                      N);
    hcnn_cpu_copy_planes(NULL, s->ext, (size_t)N, Wp, co, rows, g->ow, y + (size_t)oy0 * g->ow,
                         (size_t)P, g->ow, 0);
    if (b)
        hcnn_cpu_add_channel_bias(NULL, y + (size_t)oy0 * g->ow, b, 1, co, rows * g->ow,
                                  (size_t)P);
}

/* ---- the items ----------------------------------------------------------- */

typedef struct conv_job {
    const hcnn_conv_desc *l;
    const hcnn_exec *ctx;
    const hcnn_conv_plan *p;
    const float *w, *b;  /* the weights, the bias (NULL: none) */
    const float *x, *dy;
    float *y, *dx;
    float *dw;           /* backward: NULL when only the input gradient is wanted */
    int dx_acc;
    const float *wt; /* the taps' weights (shifted windows), else NULL */
    hcnn_bf16 *bf;   /* precision bf16: the products' state (bf16.c); NULL: FP32 */
    const uint16_t *w16; /* bf16: the weights rounded, once a call */
    int n;
    atomic_int next; /* backward: the next task to take */
} conv_job;

/* Item i: group i / row_items (first image, images), row block i % row_items. */
typedef struct conv_item {
    int i0, nb, oy0, rows;
} conv_item;

static conv_item item_at(const conv_job *j, int i)
{
    const hcnn_conv_plan *p = j->p;
    const int k = i / p->row_items, r = i % p->row_items, oh = j->l->g.oh;
    conv_item it = {k * p->group, 0, r * p->rows, 0};
    it.nb = j->n - it.i0 < p->group ? j->n - it.i0 : p->group;
    it.rows = oh - it.oy0 < p->rows ? oh - it.oy0 : p->rows;
    return it;
}

/* The taps' weights of shifted windows, W_t[co][c] = W[co][c][t], after the
 * plan's slots and partials; NULL if the plan has none. */
static const float *prepare_shifted(const hcnn_conv_desc *l, const hcnn_exec *ctx,
                                    const hcnn_conv_plan *p, const float *w)
{
    if (!p->shifted)
        return NULL;
    float *wt = hcnn_conv_shifted_weights(l, p, ctx->ws);
    hcnn_cpu_transpose(NULL, w, l->out_c * l->g.c, l->g.kh * l->g.kw, wt);
    return wt;
}

/* The batch-norm statistics of output rows [oy0, oy0 + rows) of images
 * [i0, i0 + nb), all channels, while they are in cache (ctx->stats set up
 * by gather_stats; nothing when it is not). */
static void stats_rows(const hcnn_conv_desc *l, const hcnn_exec *ctx, const float *y, int i0,
                       int nb, int oy0, int rows)
{
    const hcnn_bn_stats *st = ctx->stats;
    if (!st || !st->bands)
        return;
    const size_t out_sz = hcnn_conv_out_size(l), P = (size_t)hcnn_conv_p(l);
    const size_t per_image = (size_t)l->out_c * st->bands * 2;
    for (int i = 0; i < nb; i++)
        hcnn_cpu_bn_stats_rows(st, y + (size_t)i * out_sz, P, l->g.ow, 0, l->out_c, oy0, rows,
                               st->part + (size_t)(i0 + i) * per_image);
}

/* Whether this call gathers its output's statistics (backend.h,
 * hcnn_bn_stats), in bands of `rows` output rows: the rows every piece of
 * the plan writes whole.  Not when the table is too small. */
static void gather_stats(const hcnn_conv_desc *l, const hcnn_exec *ctx, int n, int rows)
{
    hcnn_bn_stats *st = ctx->stats;
    if (!st)
        return;
    rows = rows < l->g.oh ? rows : l->g.oh;
    const int bands = (l->g.oh + rows - 1) / rows;
    const int ok = (size_t)n * l->out_c * bands * 2 <= st->cap;
    st->bands = ok ? bands : 0;
    st->band_px = ok ? rows * l->g.ow : 0;
}

static void forward_thread(void *arg, int t, int nt)
{
    const conv_job *j = arg;
    const hcnn_conv_desc *l = j->l;
    const size_t in_sz = hcnn_conv_in_size(l), out_sz = hcnn_conv_out_size(l);
    const hcnn_conv_slot s = hcnn_conv_slot_at(l, j->p, j->ctx->ws, t);
    const int a = (int)((long)j->p->nitems * t / nt), b = (int)((long)j->p->nitems * (t + 1) / nt);
    if (j->wt && a < b) /* the padded planes' border columns stay zero */
        hcnn_cpu_fill(NULL, s.pad, hcnn_conv_padded_floats(l), 0.0f);
    for (int i = a; i < b; i++) {
        const conv_item it = item_at(j, i);
        const float *x = j->x + (size_t)it.i0 * in_sz;
        float *y = j->y + (size_t)it.i0 * out_sz;
        if (j->wt)
            forward_shifted(l, j->wt, j->b, &s, x, y, it.oy0, it.rows);
        else if (it.nb == 1)
            forward_rows(j->bf, HCNN_PIECES_MANY, l, j->w, j->w16, j->b, x, y, it.oy0, it.rows, s.col);
        else
            forward_group(j->bf, HCNN_PIECES_MANY, l, j->w, j->w16, j->b, x, y, it.nb, s.col, s.out);
        stats_rows(l, j->ctx, y, it.i0, it.nb, it.oy0, it.rows);
        if (t == 0)
            exec_poll(j->ctx);
    }
}

/* A batched chunk's statistics, by (image, channel) planes on all threads
 * (the chunk was written by all threads: whole planes, bands of oh rows). */
static void stats_planes(const hcnn_conv_desc *l, const hcnn_exec *ctx, const float *y, int i0,
                         int nb)
{
    const hcnn_bn_stats *st = ctx->stats;
    if (!st || !st->bands)
        return;
    const size_t out_sz = hcnn_conv_out_size(l), P = (size_t)hcnn_conv_p(l);
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < nb; i++)
        for (int c = 0; c < l->out_c; c++)
            hcnn_cpu_bn_stats_rows(st, y + (size_t)i * out_sz, P, l->g.ow, c, c + 1, 0, l->g.oh,
                                   st->part + (size_t)(i0 + i) * l->out_c * 2);
}

/* Weight gradient of output rows [oy0, oy0 + rows) of one image:
 * dw = beta * dw + dY[:, rows] col(rows)^T. */
static void dw_rows(hcnn_bf16 *bf, int target, const hcnn_conv_desc *l, const float *x, const float *dy,
                    int oy0, int rows, float *col, float beta, float *dw)
{
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c, ow = l->g.ow;
    const hcnn_conv_geom gb = hcnn_conv_row_block(l, oy0, rows);
    hcnn_cpu_im2col(NULL, &gb, x, 1, col);
    conv_gemm(bf, target, 0, 1, co, K, rows * ow, dy + (size_t)oy0 * ow, NULL, P, col, NULL, rows * ow,
              beta, dw, K);
}

/* Weight gradient of nb > 1 images: dY into out, dw = beta * dw + dY col^T,
 * or with dyt (transposed) dw = beta * dw + col dY^T ([K][Cout]). */
static void dw_group(hcnn_bf16 *bf, int target, const hcnn_conv_desc *l, const float *x, const float *dy,
                     int nb, const hcnn_conv_slot *s, float beta, float *dw)
{
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c;
    const float *g = dy;
    if (nb > 1) {
        hcnn_cpu_nchw_to_cnp(NULL, dy, nb, co, P, s->out);
        g = s->out;
    }
    hcnn_cpu_im2col(NULL, &l->g, x, nb, s->col);
    if (s->dyt) {
        hcnn_cpu_transpose(NULL, g, co, nb * P, s->dyt);
        hcnn_cpu_gemm(NULL, 0, 0, K, co, nb * P, 1.0f, s->col, nb * P, s->dyt, co, beta, dw,
                      co);
    } else {
        conv_gemm(bf, target, 0, 1, co, K, nb * P, g, NULL, nb * P, s->col, NULL, nb * P, beta, dw, K);
    }
}

/* Input gradient of nb images by dcol = W^T dY and col2im (added to dx if
 * acc); for one image, of its input channels [c0, c0 + cb) only (rows
 * [c0*taps, (c0+cb)*taps) of dcol, dx pointing at channel c0). */
static void dx_columns(hcnn_bf16 *bf, int target, const hcnn_conv_desc *l, const float *w,
                       const uint16_t *w16, const float *dy, int nb, int c0, int cb,
                       const hcnn_conv_slot *s, int acc, float *dx)
{
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c;
    const int taps = l->g.kh * l->g.kw;
    const float *g = dy;
    if (nb > 1) {
        hcnn_cpu_nchw_to_cnp(NULL, dy, nb, co, P, s->out);
        g = s->out;
    }
    hcnn_conv_geom gc = l->g;
    gc.c = cb;
    conv_gemm(bf, target, 1, 0, cb * taps, nb * P, co, w + (size_t)c0 * taps,
              w16 ? w16 + (size_t)c0 * taps : NULL, K, g, NULL, nb * P, 0.0f, s->col, nb * P);
    hcnn_cpu_col2im(NULL, &gc, s->col, nb, acc, dx);
}

/* Item i's weight gradient into dw (beta: 0 for a chunk's first item). */
static void dw_item(const conv_job *j, const hcnn_conv_slot *s, int i, float beta, float *dw)
{
    const conv_item it = item_at(j, i);
    const float *x = j->x + (size_t)it.i0 * hcnn_conv_in_size(j->l);
    const float *dy = j->dy + (size_t)it.i0 * hcnn_conv_out_size(j->l);
    if (it.nb == 1 && !s->dyt)
        dw_rows(j->bf, HCNN_PIECES_MANY, j->l, x, dy, it.oy0, it.rows, s->col, beta, dw);
    else
        dw_group(j->bf, HCNN_PIECES_MANY, j->l, x, dy, it.nb, s, beta, dw);
}

/* Weight-gradient chunk c: its items in order into partial c. */
static void dw_chunk(const conv_job *j, const hcnn_conv_slot *s, int c, int t)
{
    const hcnn_conv_plan *p = j->p;
    float *part = hcnn_conv_partial(j->l, p, j->ctx->ws, c);
    const int a = (int)((long)p->nitems * c / p->nchunks);
    const int b = (int)((long)p->nitems * (c + 1) / p->nchunks);
    for (int i = a; i < b; i++) {
        dw_item(j, s, i, i == a ? 0.0f : 1.0f, part);
        if (t == 0) /* only thread 0 drives communication (MPI_THREAD_FUNNELED) */
            exec_poll(j->ctx);
    }
}

/* Input-gradient item d: group d / per_group, channel block d % per_group. */
static void dx_item(const conv_job *j, const hcnn_conv_slot *s, int d)
{
    const hcnn_conv_desc *l = j->l;
    const hcnn_conv_plan *p = j->p;
    const hcnn_conv_geom *g = &l->g;
    const int P = hcnn_conv_p(l), co = l->out_c, taps = g->kh * g->kw;
    const int per_group = p->ndx / p->ngroups, k = d / per_group;
    const int c0 = d % per_group * p->dx_channels;
    const int cb = g->c - c0 < p->dx_channels ? g->c - c0 : p->dx_channels;
    const int i0 = k * p->group, nb = j->n - i0 < p->group ? j->n - i0 : p->group;
    const size_t hw = (size_t)g->h * g->w;
    const float *dy = j->dy + (size_t)i0 * hcnn_conv_out_size(l);
    float *dx = j->dx + (size_t)i0 * hcnn_conv_in_size(l) + (size_t)c0 * hw;
    if (!j->wt) {
        dx_columns(j->bf, HCNN_PIECES_MANY, l, j->w, j->w16, dy, nb, c0, cb, s, j->dx_acc, dx);
        return;
    }
    /* shifted windows, one image: dy onto the padded width, the taps into
     * cb padded planes, their interior into dx */
    const int Wp = hcnn_conv_padded_w(l), N = hcnn_conv_shifted_columns(l);
    const size_t plane = hcnn_conv_padded_plane(l);
    hcnn_cpu_copy_planes(NULL, dy, (size_t)P, g->ow, co, g->oh, g->ow, s->ext, (size_t)N, Wp, 0);
    hcnn_cpu_fill(NULL, s->pad, hcnn_round_up16((size_t)cb * plane + (size_t)g->kw - 1), 0.0f);
    for (int t = 0; t < taps; t++)
        hcnn_cpu_gemm(NULL, 1, 0, cb, N, co, 1.0f, j->wt + (size_t)t * co * g->c + c0, g->c,
                      s->ext, N, 1.0f, s->pad + hcnn_conv_tap_offset(l, t), (int)plane);
    hcnn_cpu_copy_planes(NULL, s->pad + (size_t)g->ph * Wp + g->pw, plane, Wp, cb, g->h, g->w, dx,
                         hw, g->w, j->dx_acc);
}

/* The backward's tasks, taken in turn by whichever thread is free: the
 * weight-gradient chunks (the larger tasks) first, then the input-gradient
 * items.  Who runs a task does not change its result. */
static void backward_thread(void *arg, int t, int nt)
{
    (void)nt;
    conv_job *j = arg;
    const hcnn_conv_plan *p = j->p;
    const hcnn_conv_slot s = hcnn_conv_slot_at(j->l, p, j->ctx->ws, t);
    const int nchunks = j->dw ? p->nchunks : 0;
    const int ntasks = nchunks + (j->dx ? p->ndx : 0);
    int dx_ready = 0;
    for (int k; (k = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < ntasks;) {
        if (k < nchunks) {
            dw_chunk(j, &s, k, t);
            continue;
        }
        if (j->wt && !dx_ready) /* dy on the padded width: junk columns stay zero */
            hcnn_cpu_fill(NULL, s.ext, hcnn_conv_padded_out_floats(j->l), 0.0f);
        dx_ready = 1;
        dx_item(j, &s, k - nchunks);
        if (t == 0)
            exec_poll(j->ctx);
    }
}

/* ---- the table's operations ------------------------------------------------- */

/* With bf16, the weights rounded once for the call, where the plan keeps
 * them (NULL: FP32, or no weights wanted). */
static const uint16_t *weights16(const hcnn_conv_desc *l, const hcnn_exec *ctx,
                                 const hcnn_conv_plan *p, const float *w)
{
    if (!p->bf16 || !w)
        return NULL;
    uint16_t *w16 = hcnn_conv_weights16(l, p, ctx->ws);
    round_all(w, (size_t)l->out_c * hcnn_conv_k(l), w16);
    return w16;
}

/* The batched path's bf16 operands: a chunk's columns and dY rounded
 * (hcnn_conv_weights16 describes their place) */
static uint16_t *batched_col16(const hcnn_conv_desc *l, const hcnn_conv_plan *p, float *ws)
{
    return (uint16_t *)(ws + (size_t)(hcnn_conv_k(l) + l->out_c) * p->group * hcnn_conv_p(l));
}

static uint16_t *batched_dy16(const hcnn_conv_desc *l, const hcnn_conv_plan *p, float *ws)
{
    const size_t cols = (size_t)hcnn_conv_k(l) * hcnn_conv_p(l) * p->group;
    return batched_col16(l, p, ws) + 2 * hcnn_round_up16((cols + 1) / 2);
}

/* A batched chunk's forward in bf16: its columns on all threads, rounded
 * once, one GEMM cut by shape, then the layout change with the bias. */
static void forward_chunk16(hcnn_bf16 *bf, int target, const hcnn_conv_desc *l,
                            const hcnn_exec *ctx, const hcnn_conv_plan *p, const uint16_t *w16,
                            const float *b, const float *x, float *y, int nb)
{
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c;
    float *col = ctx->ws, *Y = nb == 1 ? y : ctx->ws + (size_t)K * nb * P;
    uint16_t *col16 = batched_col16(l, p, ctx->ws);
    hcnn_cpu_im2col(NULL, &l->g, x, nb, col);
    round_all(col, (size_t)K * nb * P, col16);
    conv_gemm(bf, target, 0, 0, co, nb * P, K, NULL, w16, K, NULL, col16, nb * P, 0.0f, Y, nb * P);
    if (nb > 1)
        hcnn_cpu_cnp_to_nchw(NULL, Y, b, nb, co, P, y);
    else if (b)
        hcnn_cpu_add_channel_bias(NULL, y, b, 1, co, P, (size_t)P);
}

int hcnn_cpu_conv_fwd(const hcnn_backend *be, const hcnn_conv_desc *l, const hcnn_exec *ctx,
                      const float *x, const float *w, const float *b, float *y, int n)
{
    hcnn_bf16 *bf = hcnn_conv_bf16(be, l, ctx);
    hcnn_conv_plan p;
    hcnn_conv_plan_make(l, ctx, n, bf != NULL, &p);
    if (p.wino) {
        gather_stats(l, ctx, n, p.wino); /* bands of a tile row */
        return hcnn_wino_fwd(l, ctx, bf, p.wino, x, w, b, y, n);
    }
    const size_t in_sz = hcnn_conv_in_size(l), out_sz = hcnn_conv_out_size(l);
    const uint16_t *w16 = weights16(l, ctx, &p, w);
    if (p.per_thread) {
        conv_job job = {.l = l, .ctx = ctx, .p = &p, .w = w, .b = b, .x = x, .y = y, .n = n,
                        .bf = bf, .w16 = w16};
        job.wt = prepare_shifted(l, ctx, &p, w);
        gather_stats(l, ctx, n, p.rows); /* an item's rows: a block, or the whole plane */
        hcnn_cpu_parallel(NULL, forward_thread, &job);
        return HCNN_OK;
    }
    gather_stats(l, ctx, n, l->g.oh);
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l);
    for (int i0 = 0; i0 < n; i0 += p.group) {
        const int nb = n - i0 < p.group ? n - i0 : p.group;
        float *col = ctx->ws, *Y = ctx->ws + (size_t)K * nb * P;
        const float *xi = x + (size_t)i0 * in_sz;
        float *yi = y + (size_t)i0 * out_sz;
        if (bf)
            forward_chunk16(bf, hcnn_pieces_for(n), l, ctx, &p, w16, b, xi, yi, nb);
        else if (nb == 1)
            for (int oy0 = 0; oy0 < l->g.oh; oy0 += p.rows)
                forward_rows(NULL, hcnn_pieces_for(n), l, w, NULL, b, xi, yi, oy0,
                             l->g.oh - oy0 < p.rows ? l->g.oh - oy0 : p.rows, col);
        else
            forward_group(NULL, hcnn_pieces_for(n), l, w, NULL, b, xi, yi, nb, col, Y);
        stats_planes(l, ctx, yi, i0, nb);
        exec_poll(ctx);
    }
    return HCNN_OK;
}

/* A batched chunk's backward in bf16: dY in [Cout][nb P] and its columns,
 * each rounded once, then dW += dY col^T and dcol = W^T dY, col2im. */
static void backward_chunk16(hcnn_bf16 *bf, int target, const hcnn_conv_desc *l,
                             const hcnn_exec *ctx, const hcnn_conv_plan *p, const uint16_t *w16,
                             const float *x, const float *dy, float *dw, float *dx, int dx_acc,
                             int nb)
{
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c;
    float *col = ctx->ws, *g = ctx->ws + (size_t)K * nb * P;
    uint16_t *col16 = batched_col16(l, p, ctx->ws), *g16 = batched_dy16(l, p, ctx->ws);
    if (nb > 1)
        hcnn_cpu_nchw_to_cnp(NULL, dy, nb, co, P, g);
    round_all(nb > 1 ? g : dy, (size_t)co * nb * P, g16);
    if (dw) {
        hcnn_cpu_im2col(NULL, &l->g, x, nb, col);
        round_all(col, (size_t)K * nb * P, col16);
        conv_gemm(bf, target, 0, 1, co, K, nb * P, NULL, g16, nb * P, NULL, col16, nb * P, 1.0f, dw, K);
        exec_poll(ctx);
    }
    if (dx) {
        conv_gemm(bf, target, 1, 0, K, nb * P, co, NULL, w16, K, NULL, g16, nb * P, 0.0f, col, nb * P);
        hcnn_cpu_col2im(NULL, &l->g, col, nb, dx_acc, dx);
    }
}

/* The backward of the plan: dw += (dw not NULL), db +=, dx = or += (dx not
 * NULL, dx_acc). */
static void conv_backward(hcnn_bf16 *bf, const hcnn_conv_desc *l, const hcnn_exec *ctx,
                          const float *x, const float *w, const float *dy, float *dw, float *db,
                          float *dx, int dx_acc, int n)
{
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l);
    if (db)
        hcnn_cpu_channel_sum_acc(NULL, dy, n, l->out_c, P, db);
    hcnn_conv_plan p;
    hcnn_conv_plan_make(l, ctx, n, bf != NULL, &p);
    const uint16_t *w16 = dx ? weights16(l, ctx, &p, w) : NULL;
    if (!p.per_thread) { /* batched: every chunk and its columns on all threads */
        const size_t in_sz = hcnn_conv_in_size(l), out_sz = hcnn_conv_out_size(l);
        const hcnn_conv_slot s = {.col = ctx->ws, .out = ctx->ws + (size_t)K * p.group * P};
        for (int i0 = 0; i0 < n; i0 += p.group) {
            const int nb = n - i0 < p.group ? n - i0 : p.group;
            const float *xi = x ? x + (size_t)i0 * in_sz : NULL, *dyi = dy + (size_t)i0 * out_sz;
            if (bf) {
                backward_chunk16(bf, hcnn_pieces_for(n), l, ctx, &p, w16, xi, dyi, dw,
                                 dx ? dx + (size_t)i0 * in_sz : NULL, dx_acc, nb);
                exec_poll(ctx);
                continue;
            }
            if (dw && nb == 1) /* in the forward's row blocks */
                for (int oy0 = 0; oy0 < l->g.oh; oy0 += p.rows)
                    dw_rows(NULL, hcnn_pieces_for(n), l, xi, dyi, oy0, l->g.oh - oy0 < p.rows ? l->g.oh - oy0 : p.rows,
                            s.col, 1.0f, dw);
            else if (dw)
                dw_group(NULL, hcnn_pieces_for(n), l, xi, dyi, nb, &s, 1.0f, dw);
            exec_poll(ctx);
            if (dx) {
                dx_columns(NULL, hcnn_pieces_for(n), l, w, NULL, dyi, nb, 0, l->g.c, &s, dx_acc,
                           dx + (size_t)i0 * in_sz);
                exec_poll(ctx);
            }
        }
        return;
    }
    conv_job job = {.l = l, .ctx = ctx, .p = &p, .w = w, .x = x, .dy = dy, .dx = dx, .dw = dw,
                    .dx_acc = dx_acc, .n = n, .bf = bf, .w16 = w16};
    atomic_init(&job.next, 0);
    if (dx)
        job.wt = prepare_shifted(l, ctx, &p, w);
    hcnn_cpu_parallel(NULL, backward_thread, &job);
    /* dW += the partial sums, in chunk order */
    for (int c = 0; dw && c < p.nchunks; c++) {
        float *part = hcnn_conv_partial(l, &p, ctx->ws, c);
        if (p.dw_transposed) { /* [K][Cout] -> [Cout][K] */
            float *t = hcnn_conv_dw_buffer(l, &p, ctx->ws);
            hcnn_cpu_transpose(NULL, part, K, l->out_c, t);
            part = t;
        }
        hcnn_cpu_add_acc(NULL, part, dw, (size_t)l->out_c * K);
    }
}

/* The backward by the plan: a Winograd layer's input gradient by
 * Winograd, its weight gradient by Winograd or by the im2col plan (db
 * always by the plan's sum); the other layers' by conv_backward. */
static int backward(const hcnn_backend *be, const hcnn_conv_desc *l, const hcnn_exec *ctx,
                    const float *x, const float *w, const float *dy, float *dw, float *db,
                    float *dx, int dx_acc, int n)
{
    hcnn_bf16 *bf = hcnn_conv_bf16(be, l, ctx);
    hcnn_conv_plan p;
    hcnn_conv_plan_make(l, ctx, n, bf != NULL, &p);
    if (!p.wino) {
        conv_backward(bf, l, ctx, x, w, dy, dw, db, dx, dx_acc, n);
        return HCNN_OK;
    }
    if (dw && p.wino_dw) {
        if (db)
            hcnn_cpu_channel_sum_acc(NULL, dy, n, l->out_c, hcnn_conv_p(l), db);
        int rc = hcnn_wino_bwd_filter(l, ctx, bf, p.wino, x, dy, dw, n);
        if (rc)
            return rc;
    } else if (dw || db) {
        conv_backward(bf, l, ctx, x, NULL, dy, dw, db, NULL, 0, n);
    }
    return dx ? hcnn_wino_bwd_data(l, ctx, bf, p.wino, w, dy, dx, dx_acc, n) : HCNN_OK;
}

int hcnn_cpu_conv_bwd(const hcnn_backend *be, const hcnn_conv_desc *l, const hcnn_exec *ctx,
                      const float *x, const float *w, const float *dy, float *dw, float *db,
                      float *dx, int dx_acc, int n)
{
    return backward(be, l, ctx, x, w, dy, dw, db, dx, dx_acc, n);
}

int hcnn_cpu_conv_bwd_filter(const hcnn_backend *be, const hcnn_conv_desc *l,
                             const hcnn_exec *ctx, const float *x, const float *dy, float *dw,
                             float *db, int n)
{
    return backward(be, l, ctx, x, NULL, dy, dw, db, NULL, 0, n);
}

int hcnn_cpu_conv_bwd_data(const hcnn_backend *be, const hcnn_conv_desc *l, const hcnn_exec *ctx,
                           const float *w, const float *dy, float *dx, int dx_acc, int n)
{
    return backward(be, l, ctx, NULL, w, dy, NULL, NULL, dx, dx_acc, n);
}
