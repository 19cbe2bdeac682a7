/* Dropout (inverted): y = x * mask, mask in {0, 1/(1-p)}, saved in aux;
 * dx = dy * mask; the identity at inference.  The mask of an element is a
 * counter-based hash of (seed, step, layer id, sample's epoch position,
 * element), so it does not depend on which thread, rank or stage draws it. */
#include "hcnn/layer.h"

static int dropout_setup(hcnn_layer *l, const char *cfg_path, int index)
{
    (void)cfg_path, (void)index;
    l->p = l->spec.p;
    if (l->p < 0.0f || l->p >= 1.0f)
        return HCNN_LAYER_BAD_SHAPE;
    l->aux_per_sample = hcnn_layer_in_size(l);
    return HCNN_OK;
}

static int dropout_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                           int n)
{
    const size_t sz = hcnn_layer_out_size(l) * (size_t)n;
    if (!ctx->training || l->p == 0.0f)
        ctx->be->copy(ctx->be, y, x, sz);
    else
        ctx->be->dropout_fwd(ctx->be, x, y, aux, n, hcnn_layer_in_size(l), l->p, ctx->seed, ctx->step,
                             ctx->first_sample, (uint64_t)l->id);
    return HCNN_OK;
}

static int dropout_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                            const float *aux, const float *dy, float *dx, int n)
{
    (void)x, (void)y;
    const size_t sz = hcnn_layer_out_size(l) * (size_t)n;
    if (!dx)
        return HCNN_OK;
    if (!ctx->training || l->p == 0.0f)
        ctx->be->copy(ctx->be, dx, dy, sz);
    else
        ctx->be->mul(ctx->be, dy, aux, dx, sz);
    return HCNN_OK;
}

const hcnn_layer_ops hcnn_layer_dropout = {
    .setup = dropout_setup,
    .forward = dropout_forward,
    .backward = dropout_backward,
    .per_sample = 1,
    .nchw_features = 1,
};
