/* Leaky ReLU (PyTorch's nn.LeakyReLU): y = x for x > 0, else s * x, with
 * s = negative_slope in [0, 1) (default 0.01); dx = dy for y > 0, else
 * s * dy.  Nothing is saved: the backward reads the sign from y (for
 * s >= 0, y > 0 exactly where x > 0).  The worked example of adding a
 * layer type (docs/architecture.md): this file, its line in
 * HCNN_BLOCK_TYPES, its row in the config schema. */
#include "hcnn/layer.h"

static int leaky_relu_setup(hcnn_layer *l, const char *cfg_path, int index)
{
    (void)cfg_path, (void)index;
    const float s = l->spec.negative_slope;
    return s >= 0.0f && s < 1.0f ? HCNN_OK : HCNN_LAYER_BAD_SHAPE;
}

static int leaky_relu_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y,
                              float *aux, int n)
{
    (void)aux;
    ctx->be->relu_fwd(ctx->be, x, y, hcnn_layer_out_size(l) * (size_t)n, l->spec.negative_slope);
    return HCNN_OK;
}

static int leaky_relu_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                               const float *aux, const float *dy, float *dx, int n)
{
    (void)x, (void)aux;
    if (dx)
        ctx->be->relu_bwd(ctx->be, y, dy, dx, hcnn_layer_out_size(l) * (size_t)n, l->spec.negative_slope);
    return HCNN_OK;
}

const hcnn_layer_ops hcnn_layer_leaky_relu = {
    .setup = leaky_relu_setup,
    .forward = leaky_relu_forward,
    .backward = leaky_relu_backward,
    .per_sample = 1,
};
