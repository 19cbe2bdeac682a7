/* Batch normalisation over (n, h, w) per channel.
 * Training: y = gamma * (x - mean_B) / sqrt(var_B + eps) + beta with batch
 * statistics; running statistics updated with PyTorch's momentum
 * convention.  Inference: running statistics.  aux holds the batch mean and
 * inverse std ([C] each); backward recomputes xhat from x instead of
 * storing it, which halves the activation memory of a batch-norm layer. */
#include "hcnn/layer.h"

void hcnn_bn_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                     int n)
{
    hcnn_bn_forward_fused(l, ctx, x, NULL, 0, y, aux, n);
}

/* y = act(bn(x) + add): see the backend's bn_fwd_train */
void hcnn_bn_forward_fused(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *add,
                           int relu, float *y, float *aux, int n)
{
    const int c = l->out_c, np = l->out_h * l->out_w;
    if (ctx->training)
        ctx->be->bn_fwd_train(x, n, c, np, l->w, l->b, l->eps, l->momentum, l->running_mean,
                              l->running_var, aux, aux + c, add, relu, y);
    else
        ctx->be->bn_fwd_infer(x, n, c, np, l->w, l->b, l->eps, l->running_mean, l->running_var,
                              add, relu, y);
}

void hcnn_bn_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *aux,
                      const float *dy, float *dx, int n)
{
    hcnn_bn_backward_fused(l, ctx, x, aux, dy, 0, dx, n);
}

void hcnn_bn_backward_fused(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *aux,
                            const float *dy, int relu, float *dx, int n)
{
    const int c = l->out_c, np = l->out_h * l->out_w;
    ctx->be->bn_bwd(x, dy, n, c, np, l->w, l->b, aux, aux + c, relu, dx, l->dw, l->db);
}

int hcnn_bn_relu_fused(const hcnn_layer *layers, int i, int end)
{
    return i >= 0 && i + 1 < end && layers[i].kind == HCNN_BLOCK_BN &&
           layers[i + 1].kind == HCNN_BLOCK_RELU;
}
