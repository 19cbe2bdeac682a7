/* 2-D convolution, y = W x + b over n images: the layer's shape, its
 * parameters and their initialisation.  How it runs is the backend's
 * (include/hcnn/backend.h: conv_fwd, conv_bwd): the CPU backend's im2col /
 * shifted-window plan with per-thread items (src/cpu/conv_plan.c,
 * src/cpu/conv.c), cuDNN or im2col + cuBLAS on a GPU. */
#include "hcnn/layer.h"

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
    /* an image's im2col columns and output: checked against the int range
     * the kernels index with (hcnn_layer_setup) */
    l->ws_per_sample = (K + (size_t)s->out) * P;
    l->flops_per_sample = 2.0 * (double)K * s->out * P;
    return HCNN_OK;
}

/* What the backend runs: the layer's geometry, and the configuration's
 * execution keys with the call's workspace and hooks. */
static hcnn_conv_desc desc_of(const hcnn_layer *l)
{
    return (hcnn_conv_desc){.g = l->conv, .out_c = l->out_c};
}

static hcnn_exec exec_of(const hcnn_ctx *ctx)
{
    return (hcnn_exec){.ws = ctx->ws,
                       .ws_floats = ctx->ws_floats,
                       .max_chunk_floats = ctx->max_chunk_floats,
                       .conv_algo = ctx->conv_algo,
                       .in_unit = ctx->in_unit,
                       .poll = ctx->poll,
                       .poll_arg = ctx->poll_arg,
                       /* a unit's threads would share the layer's cache */
                       .weights_key = ctx->in_unit ? 0 : ctx->weights_key,
                       .stats = ctx->bn_stats,
                       .relu = ctx->conv_relu};
}

/* desc_of with the layer's cache: the passes that run it */
static hcnn_conv_desc run_desc_of(hcnn_layer *l)
{
    hcnn_conv_desc d = desc_of(l);
    d.cache = &l->conv_cache;
    return d;
}

static int conv_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                        int n)
{
    (void)aux;
    const hcnn_conv_desc d = run_desc_of(l);
    const hcnn_exec ex = exec_of(ctx);
    return ctx->be->conv_fwd(ctx->be, &d, &ex, x, l->w, l->b, y, n);
}

/* dw, db accumulated; dx overwritten, or added to if dx_acc */
static int conv_backward_into(hcnn_layer *l, const hcnn_ctx *ctx, const float *x,
                              const float *dy, float *dx, int dx_acc, int n)
{
    const hcnn_conv_desc d = run_desc_of(l);
    const hcnn_exec ex = exec_of(ctx);
    return ctx->be->conv_bwd(ctx->be, &d, &ex, x, l->w, dy, l->dw, l->db, dx, dx_acc, n);
}

static int conv_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                         const float *aux, const float *dy, float *dx, int n)
{
    (void)y, (void)aux;
    return conv_backward_into(l, ctx, x, dy, dx, 0, n);
}

static void conv_backward_acc(hcnn_layer *l, const hcnn_ctx *ctx, const float *x,
                              const float *dy, float *dx, int n)
{
    conv_backward_into(l, ctx, x, dy, dx, 1, n);
}

/* The backend's workspace for n images on all its threads, and for a work
 * unit of n images on one */
static size_t conv_workspace(const hcnn_layer *l, const hcnn_ctx *ctx, int n)
{
    const hcnn_conv_desc d = desc_of(l);
    const hcnn_exec ex = exec_of(ctx);
    return ctx->be->conv_workspace(ctx->be, &d, &ex, n);
}

static size_t conv_thread_workspace(const hcnn_layer *l, const hcnn_ctx *ctx, int n)
{
    const hcnn_conv_desc d = desc_of(l);
    hcnn_exec ex = exec_of(ctx);
    ex.in_unit = 1;
    return ctx->be->conv_workspace(ctx->be, &d, &ex, n);
}

static void conv_gemms(const hcnn_layer *l, const hcnn_ctx *ctx, int n, int unit, int need_dx,
                       hcnn_gemm_list *gl)
{
    const hcnn_conv_desc d = desc_of(l);
    const hcnn_exec ex = exec_of(ctx);
    ctx->be->conv_gemms(ctx->be, &d, &ex, n, unit, need_dx, gl);
}

static void conv_describe(const hcnn_layer *l, const hcnn_ctx *ctx, int n, char *buf, size_t cap)
{
    const hcnn_conv_desc d = desc_of(l);
    const hcnn_exec ex = exec_of(ctx);
    ctx->be->conv_describe(ctx->be, &d, &ex, n, buf, cap);
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
    .workspace = conv_workspace,
    .thread_workspace = conv_thread_workspace,
    .gemms = conv_gemms,
    .describe = conv_describe,
    .per_sample = 1,
};
