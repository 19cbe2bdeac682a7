/* 2-D convolution as im2col + one GEMM over a group of images (Caffe /
 * Darknet style), backward as GEMM + col2im; it executes the plan of
 * conv_plan.c (include/hcnn/conv.h).
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
 * activations directly and no layout change runs.  Shifted windows (one
 * image, stride 1, wide planes): with W_t = W[:, :, ki, kj] and the input
 * zero-padded (src/layers/conv_plan.h),
 *   Yext                      = sum over taps of W_t xpad[:, off_t : off_t + N]
 *   dxpad[:, off_t : off_t + N] += W_t^T dYext  (dYext: dy, junk columns zero)
 * and the weight gradient keeps the columns. */
#include "conv_plan.h"

/* y = W x + b: kernel kh x kw, stride, padding; K*P multiply-adds a sample */
static int conv_setup(hcnn_layer *l, const char *cfg_path, int index)
{
    (void)cfg_path, (void)index;
    const hcnn_block_spec *s = &l->spec;
    hcnn_conv_geom *g = &l->conv;
    g->c = l->in_c, g->h = l->in_h, g->w = l->in_w;
    g->kh = s->kh, g->kw = s->kw, g->sh = s->sh, g->sw = s->sw, g->ph = s->ph, g->pw = s->pw;
    if (s->out < 1 || s->kh < 1 || s->kw < 1 || s->sh < 1 || s->sw < 1 || s->ph < 0 || s->pw < 0)
        return HCNN_LAYER_BAD_SHAPE;
    if (l->in_h + 2 * s->ph < s->kh || l->in_w + 2 * s->pw < s->kw)
        return HCNN_LAYER_BAD_SHAPE;
    g->oh = (l->in_h + 2 * s->ph - s->kh) / s->sh + 1;
    g->ow = (l->in_w + 2 * s->pw - s->kw) / s->sw + 1;
    l->out_c = s->out, l->out_h = g->oh, l->out_w = g->ow;
    const size_t K = (size_t)l->in_c * s->kh * s->kw, P = (size_t)g->oh * g->ow;
    l->nw = (size_t)s->out * K;
    l->nb = s->bias ? (size_t)s->out : 0;
    l->has_bias = s->bias;
    l->ws_per_sample = (K + (size_t)s->out) * P;
    l->flops_per_sample = 2.0 * (double)K * s->out * P;
    return HCNN_OK;
}

/* Forward of nb images; col holds K*nb*P floats, Y Cout*nb*P (unused for
 * nb = 1, whose output rows go in blocks: plan.rows_per_block). */
static void forward_group(const hcnn_layer *l, const hcnn_backend *be, const hcnn_conv_plan *p,
                          const float *x, float *y, int nb, float *col, float *Y)
{
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c;
    if (nb == 1) {
        /* Y[:, block] = W col(block), written into y with row stride P */
        const int rb = p->rows_per_block, ow = l->conv.ow;
        for (int oy0 = 0; oy0 < l->conv.oh; oy0 += rb) {
            const int rows = l->conv.oh - oy0 < rb ? l->conv.oh - oy0 : rb;
            const hcnn_conv_geom g = hcnn_conv_row_block(l, oy0, rows);
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

/* Forward of one image by shifted windows; the padded planes' borders are
 * zero. */
static void forward_shifted(const hcnn_layer *l, const hcnn_backend *be, const float *wt,
                            const hcnn_conv_slot *s, const float *x, float *y)
{
    const hcnn_conv_geom *g = &l->conv;
    const int Wp = hcnn_conv_padded_w(l), N = hcnn_conv_shifted_columns(l);
    const int co = l->out_c, P = hcnn_conv_p(l);
    const size_t plane = hcnn_conv_padded_plane(l);
    be->copy_planes(x, (size_t)g->h * g->w, g->w, g->c, g->h, g->w,
                    s->pad + (size_t)g->ph * Wp + g->pw, plane, Wp, 0);
    for (int t = 0; t < g->kh * g->kw; t++)
        be->gemm(0, 0, co, N, g->c, 1.0f, wt + (size_t)t * co * g->c, g->c,
                 s->pad + hcnn_conv_tap_offset(l, t), (int)plane, t ? 1.0f : 0.0f, s->ext, N);
    be->copy_planes(s->ext, (size_t)N, Wp, co, g->oh, g->ow, y, (size_t)P, g->ow, 0);
    if (l->b)
        be->add_channel_bias(y, l->b, 1, co, P);
}

/* dx of one image by shifted windows (added to dx if dx_acc); the
 * padded-width output buffer's junk columns are zero. */
static void dx_shifted(const hcnn_layer *l, const hcnn_backend *be, const float *wt,
                       const hcnn_conv_slot *s, const float *dy, float *dx, int dx_acc)
{
    const hcnn_conv_geom *g = &l->conv;
    const int Wp = hcnn_conv_padded_w(l), N = hcnn_conv_shifted_columns(l), co = l->out_c;
    const size_t plane = hcnn_conv_padded_plane(l);
    be->copy_planes(dy, (size_t)hcnn_conv_p(l), g->ow, co, g->oh, g->ow, s->ext, (size_t)N, Wp, 0);
    be->fill(s->pad, hcnn_conv_padded_floats(l), 0.0f);
    for (int t = 0; t < g->kh * g->kw; t++)
        be->gemm(1, 0, g->c, N, co, 1.0f, wt + (size_t)t * co * g->c, g->c, s->ext, N, 1.0f,
                 s->pad + hcnn_conv_tap_offset(l, t), (int)plane);
    be->copy_planes(s->pad + (size_t)g->ph * Wp + g->pw, plane, Wp, g->c, g->h, g->w, dx,
                    (size_t)g->h * g->w, g->w, dx_acc);
}

/* Backward of nb images: dw = dw_beta * dw + dY col^T, or, with s->dyt,
 * dw = dw_beta * dw + col dY^T ([K][Cout]); dx (if wanted) overwritten, or
 * added to if dx_acc. */
static void backward_group(const hcnn_layer *l, const hcnn_ctx *ctx, const hcnn_conv_plan *p,
                           const float *x, const float *dy, float *dx, int dx_acc, int nb,
                           const hcnn_conv_slot *s, const float *wt, float dw_beta)
{
    float *col = s->col, *dY = s->out, *dYT = s->dyt, *dw = s->dw;
    const hcnn_backend *be = ctx->be;
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c;
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
        const int rb = p->rows_per_block, ow = l->conv.ow;
        for (int oy0 = 0; oy0 < l->conv.oh; oy0 += rb) {
            const int rows = l->conv.oh - oy0 < rb ? l->conv.oh - oy0 : rb;
            const hcnn_conv_geom gb = hcnn_conv_row_block(l, oy0, rows);
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

typedef struct conv_job {
    const hcnn_layer *l;
    const hcnn_ctx *ctx;
    const hcnn_conv_plan *p;
    const float *x, *dy;
    float *y, *dx;
    int dx_acc;
    const float *wt; /* the taps' weights (shifted windows), else NULL */
    int n;
    int team; /* threads that ran (written by thread 0) */
} conv_job;

/* The taps' weights of shifted windows, W_t[co][c] = W[co][c][t], after the
 * plan's slots; NULL if the plan has none. */
static const float *prepare_shifted(const hcnn_layer *l, const hcnn_ctx *ctx,
                                    const hcnn_conv_plan *p)
{
    if (!p->shifted)
        return NULL;
    float *wt = hcnn_conv_shifted_weights(l, ctx->ws, p->nt);
    ctx->be->transpose(l->w, l->out_c * l->conv.c, l->conv.kh * l->conv.kw, wt);
    return wt;
}

static void forward_thread(void *arg, int t, int nt)
{
    const conv_job *j = arg;
    const hcnn_layer *l = j->l;
    const hcnn_backend *be = j->ctx->be;
    const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
    const int g = j->p->group;
    const hcnn_conv_slot s = hcnn_conv_slot_at(l, j->ctx->ws, t);
    const int i0 = (int)((long)j->n * t / nt), i1 = (int)((long)j->n * (t + 1) / nt);
    if (j->wt && i0 < i1) /* the padded planes' borders stay zero */
        be->fill(s.pad, hcnn_conv_padded_floats(l), 0.0f);
    for (int i = i0; i < i1; i += g) {
        const int nb = i1 - i < g ? i1 - i : g;
        const float *x = j->x + (size_t)i * in_sz;
        float *y = j->y + (size_t)i * out_sz;
        if (j->wt)
            forward_shifted(l, be, j->wt, &s, x, y);
        else
            forward_group(l, be, j->p, x, y, nb, s.col, s.out);
        if (t == 0)
            hcnn_ctx_poll(j->ctx);
    }
}

static void backward_thread(void *arg, int t, int nt)
{
    conv_job *j = arg;
    const hcnn_layer *l = j->l;
    const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
    const int g = j->p->group;
    const hcnn_conv_slot s = hcnn_conv_slot_at(l, j->ctx->ws, t);
    /* only thread 0 drives communication (MPI_THREAD_FUNNELED) */
    hcnn_ctx ctx = *j->ctx;
    if (t != 0)
        ctx.poll = NULL;
    if (t == 0)
        j->team = nt;
    const int i0 = (int)((long)j->n * t / nt), i1 = (int)((long)j->n * (t + 1) / nt);
    if (j->wt && j->dx && i0 < i1) /* dy on the padded width: junk columns stay zero */
        ctx.be->fill(s.ext, hcnn_conv_padded_out_floats(l), 0.0f);
    for (int i = i0; i < i1; i += g) {
        const int nb = i1 - i < g ? i1 - i : g;
        backward_group(l, &ctx, j->p, j->x + (size_t)i * in_sz, j->dy + (size_t)i * out_sz,
                       j->dx ? j->dx + (size_t)i * in_sz : NULL, j->dx_acc, nb, &s, j->wt,
                       i == i0 ? 0.0f : 1.0f);
    }
}

static int conv_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                        int n)
{
    (void)aux;
    const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
    hcnn_conv_plan p;
    hcnn_conv_plan_make(l, ctx, n, &p);
    if (p.per_thread) {
        conv_job job = {.l = l, .ctx = ctx, .p = &p, .x = x, .y = y, .n = n};
        job.wt = prepare_shifted(l, ctx, &p);
        ctx->be->parallel(forward_thread, &job);
        return HCNN_OK;
    }
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l);
    for (int i0 = 0; i0 < n; i0 += p.group) {
        const int nb = n - i0 < p.group ? n - i0 : p.group;
        float *col = ctx->ws, *Y = ctx->ws + (size_t)K * nb * P;
        forward_group(l, ctx->be, &p, x + (size_t)i0 * in_sz, y + (size_t)i0 * out_sz, nb, col, Y);
        hcnn_ctx_poll(ctx);
    }
    return HCNN_OK;
}

/* Backward; dx overwritten, or added to if dx_acc. */
static void conv_backward_into(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *dy,
                               float *dx, int dx_acc, int n)
{
    const hcnn_backend *be = ctx->be;
    const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l);
    if (l->db)
        be->channel_sum_acc(dy, n, l->out_c, P, l->db);
    hcnn_conv_plan p;
    hcnn_conv_plan_make(l, ctx, n, &p);
    if (p.per_thread) {
        conv_job job = {
            .l = l, .ctx = ctx, .p = &p, .x = x, .dy = dy, .dx = dx, .dx_acc = dx_acc, .n = n};
        job.wt = dx ? prepare_shifted(l, ctx, &p) : NULL;
        be->parallel(backward_thread, &job);
        /* dW += the threads' partials, in thread order */
        for (int t = 0; t < job.team; t++) {
            if ((long)n * t / job.team >= (long)n * (t + 1) / job.team) /* had no images */
                continue;
            const hcnn_conv_slot s = hcnn_conv_slot_at(l, ctx->ws, t);
            float *part = s.dw;
            if (p.dw_transposed) { /* [K][Cout] -> [Cout][K], into the columns */
                be->transpose(part, K, l->out_c, s.col);
                part = s.col;
            }
            be->add_acc(part, l->dw, (size_t)l->out_c * K);
        }
        return;
    }
    for (int i0 = 0; i0 < n; i0 += p.group) {
        const int nb = n - i0 < p.group ? n - i0 : p.group;
        const hcnn_conv_slot s = {.col = ctx->ws, .out = ctx->ws + (size_t)K * nb * P, .dw = l->dw};
        backward_group(l, ctx, &p, x + (size_t)i0 * in_sz, dy + (size_t)i0 * out_sz,
                       dx ? dx + (size_t)i0 * in_sz : NULL, dx_acc, nb, &s, NULL, 1.0f);
    }
}

static int conv_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                         const float *aux, const float *dy, float *dx, int n)
{
    (void)y, (void)aux;
    conv_backward_into(l, ctx, x, dy, dx, 0, n);
    return HCNN_OK;
}

static void conv_backward_acc(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *dy,
                              float *dx, int n)
{
    conv_backward_into(l, ctx, x, dy, dx, 1, n);
}

static void conv_init(const hcnn_layer *l, hcnn_init init, hcnn_rng *rng, float *w, float *b,
                      float *state)
{
    (void)state;
    const size_t taps = (size_t)l->conv.kh * l->conv.kw;
    hcnn_init_weights(init, rng, (size_t)l->in_c * taps, (size_t)l->out_c * taps, w, l->nw, b,
                      l->nb);
}

/* PyTorch's [out, in, kh, kw] */
static int conv_weight_dims(const hcnn_layer *l, int *dims)
{
    dims[0] = l->out_c, dims[1] = l->in_c, dims[2] = l->conv.kh, dims[3] = l->conv.kw;
    return 4;
}

const hcnn_layer_ops hcnn_layer_conv = {
    .setup = conv_setup,
    .forward = conv_forward,
    .backward = conv_backward,
    .backward_acc = conv_backward_acc,
    .init = conv_init,
    .weight_dims = conv_weight_dims,
    .workspace = hcnn_conv_workspace,
    .thread_workspace = hcnn_conv_thread_workspace,
    .gemms = hcnn_conv_gemms,
    .per_sample = 1,
};
