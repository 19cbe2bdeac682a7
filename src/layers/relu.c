/* ReLU: y = max(x, 0), dx = dy * [y > 0].  A ReLU right after a
 * batch-norm runs inside the batch-norm's passes (src/layers/chain.c). */
#include "hcnn/layer.h"

static int relu_setup(hcnn_layer *l, const char *cfg_path, int index)
{
    (void)l, (void)cfg_path, (void)index;
    return HCNN_OK;
}

static int relu_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                        int n)
{
    (void)aux;
    ctx->be->relu_fwd(ctx->be, x, y, hcnn_layer_out_size(l) * (size_t)n, 0.0f);
    return HCNN_OK;
}

static int relu_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                         const float *aux, const float *dy, float *dx, int n)
{
    (void)x, (void)aux;
    if (dx)
        ctx->be->relu_bwd(ctx->be, y, dy, dx, hcnn_layer_out_size(l) * (size_t)n, 0.0f);
    return HCNN_OK;
}

const hcnn_layer_ops hcnn_layer_relu = {
    .setup = relu_setup,
    .forward = relu_forward,
    .backward = relu_backward,
    .per_sample = 1,
    .is_relu = 1,
};
