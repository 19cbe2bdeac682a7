/* Pooling: max (the argmax of each window saved as int32 for backward,
 * which routes dy to it), average (padding counted in the divisor, as
 * PyTorch's default) and global average (one window over the plane).
 * Three block types over one window geometry. */
#include "hcnn/layer.h"

static int pool_window(hcnn_layer *l, int kh, int kw, int sh, int sw, int ph, int pw)
{
    hcnn_pool_geom *g = &l->pool;
    g->c = l->in_c, g->h = l->in_h, g->w = l->in_w;
    g->kh = kh, g->kw = kw, g->sh = sh, g->sw = sw, g->ph = ph, g->pw = pw;
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || ph < 0 || pw < 0 || 2 * ph > kh || 2 * pw > kw)
        return HCNN_LAYER_BAD_SHAPE;
    g->oh = (l->in_h + 2 * ph - kh) / sh + 1;
    g->ow = (l->in_w + 2 * pw - kw) / sw + 1;
    if (l->in_h + 2 * ph < kh || l->in_w + 2 * pw < kw || g->oh < 1 || g->ow < 1)
        return HCNN_LAYER_BAD_SHAPE;
    l->out_c = l->in_c, l->out_h = g->oh, l->out_w = g->ow;
    return HCNN_OK;
}

/* kernel, stride (default: the kernel) and padding from the spec */
static int pool_setup(hcnn_layer *l, const char *cfg_path, int index)
{
    (void)cfg_path, (void)index;
    const hcnn_block_spec *s = &l->spec;
    return pool_window(l, s->kh, s->kw, s->sh > 0 ? s->sh : s->kh, s->sw > 0 ? s->sw : s->kw, s->ph,
                       s->pw);
}

static int maxpool_setup(hcnn_layer *l, const char *cfg_path, int index)
{
    const int rc = pool_setup(l, cfg_path, index);
    l->aux_per_sample = hcnn_layer_out_size(l); /* int32 argmax */
    return rc;
}

static int gap_setup(hcnn_layer *l, const char *cfg_path, int index)
{
    (void)cfg_path, (void)index;
    return pool_window(l, l->in_h, l->in_w, 1, 1, 0, 0);
}

static int maxpool_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                           int n)
{
    ctx->be->maxpool_fwd(ctx->be, &l->pool, x, n, y, (int32_t *)aux);
    return HCNN_OK;
}

static int maxpool_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                            const float *aux, const float *dy, float *dx, int n)
{
    (void)x, (void)y;
    if (dx)
        ctx->be->maxpool_bwd(ctx->be, &l->pool, dy, (const int32_t *)aux, n, dx);
    return HCNN_OK;
}

static int avgpool_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                           int n)
{
    (void)aux;
    ctx->be->avgpool_fwd(ctx->be, &l->pool, x, n, y);
    return HCNN_OK;
}

/* dy spread evenly over each window */
static int avgpool_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                            const float *aux, const float *dy, float *dx, int n)
{
    (void)x, (void)y, (void)aux;
    if (dx)
        ctx->be->avgpool_bwd(ctx->be, &l->pool, dy, n, dx);
    return HCNN_OK;
}

const hcnn_layer_ops hcnn_layer_maxpool = {
    .setup = maxpool_setup,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
    .per_sample = 1,
};

const hcnn_layer_ops hcnn_layer_avgpool = {
    .setup = pool_setup,
    .forward = avgpool_forward,
    .backward = avgpool_backward,
    .per_sample = 1,
};

const hcnn_layer_ops hcnn_layer_gap = {
    .setup = gap_setup,
    .forward = avgpool_forward,
    .backward = avgpool_backward,
    .per_sample = 1,
};
