/* Flatten: [c][h][w] -> [c*h*w]; NCHW is already laid out so, the passes
 * are copies.  An NHWC backend's activations (include/hcnn/backend.h) are
 * converted here, so that the features after it are in the model's NCHW
 * order whatever the backend (a fully connected layer's weights). */
#include "hcnn/layer.h"

static int flatten_setup(hcnn_layer *l, const char *cfg_path, int index)
{
    (void)cfg_path, (void)index;
    l->out_c = l->in_c * l->in_h * l->in_w, l->out_h = l->out_w = 1;
    return HCNN_OK;
}

static int flatten_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                           int n)
{
    (void)aux;
    if (ctx->be->layout != HCNN_LAYOUT_NCHW && l->in_h * l->in_w > 1 && l->in_c > 1)
        ctx->be->layout_to_nchw(ctx->be, x, y, n, l->in_c, l->in_h * l->in_w);
    else
        ctx->be->copy(ctx->be, y, x, hcnn_layer_out_size(l) * (size_t)n);
    return HCNN_OK;
}

static int flatten_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                            const float *aux, const float *dy, float *dx, int n)
{
    (void)x, (void)y, (void)aux;
    if (dx && ctx->be->layout != HCNN_LAYOUT_NCHW && l->in_h * l->in_w > 1 && l->in_c > 1)
        ctx->be->layout_from_nchw(ctx->be, dy, dx, n, l->in_c, l->in_h * l->in_w);
    else if (dx)
        ctx->be->copy(ctx->be, dx, dy, hcnn_layer_out_size(l) * (size_t)n);
    return HCNN_OK;
}

const hcnn_layer_ops hcnn_layer_flatten = {
    .setup = flatten_setup,
    .forward = flatten_forward,
    .backward = flatten_backward,
    .per_sample = 1,
};
