/* Batch normalisation over (n, h, w) per channel.
 * Training: y = gamma * (x - mean_B) / sqrt(var_B + eps) + beta with batch
 * statistics; running statistics updated with PyTorch's momentum
 * convention.  Inference: running statistics.  aux holds the batch mean and
 * inverse std ([C] each); backward recomputes xhat from x instead of
 * storing it, which halves the activation memory of a batch-norm layer.
 * The fused forms (forward_fused, backward_relu) take the ReLU that follows
 * and a residual block's addition into the same passes. */
#include "hcnn/layer.h"

static int bn_setup(hcnn_layer *l, const char *cfg_path, int index)
{
    (void)cfg_path, (void)index;
    l->eps = l->spec.eps > 0 ? l->spec.eps : 1e-5f;
    l->momentum = l->spec.momentum > 0 ? l->spec.momentum : 0.1f;
    l->nw = l->nb = (size_t)l->in_c;
    l->nstate = 2 * (size_t)l->in_c;
    l->aux_fixed = 2 * (size_t)l->in_c;
    return HCNN_OK;
}

/* y = act(bn(x) + add): see the backend's bn_fwd_train */
static void bn_forward_fused(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *add,
                             int relu, float *y, float *aux, int n)
{
    const int c = l->out_c, np = l->out_h * l->out_w;
    if (ctx->training)
        ctx->be->bn_fwd_train(ctx->be, x, n, c, np, l->w, l->b, l->eps, l->momentum, l->running_mean,
                              l->running_var, aux, aux + c, add, relu, ctx->bn_stats, y);
    else
        ctx->be->bn_fwd_infer(ctx->be, x, n, c, np, l->w, l->b, l->eps, l->running_mean, l->running_var, add,
                              relu, y);
}

static int bn_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                      int n)
{
    bn_forward_fused(l, ctx, x, NULL, 0, y, aux, n);
    return HCNN_OK;
}

/* dy: the gradient of the ReLU that followed if relu (its mask applied here) */
static void bn_backward_masked(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *aux,
                               const float *dy, int relu, float *dx, int n)
{
    const int c = l->out_c, np = l->out_h * l->out_w;
    ctx->be->bn_bwd(ctx->be, x, dy, n, c, np, l->w, l->b, aux, aux + c, relu, dx, l->dw, l->db);
}

static int bn_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                       const float *aux, const float *dy, float *dx, int n)
{
    (void)y;
    bn_backward_masked(l, ctx, x, aux, dy, 0, dx, n);
    return HCNN_OK;
}

static void bn_backward_relu(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *aux,
                             const float *dy, float *dx, int n)
{
    bn_backward_masked(l, ctx, x, aux, dy, 1, dx, n);
}

/* gamma 1, beta 0; running mean 0, running variance 1 */
static void bn_init(const hcnn_layer *l, hcnn_init init, hcnn_rng *rng, float *w, float *b,
                    float *state)
{
    (void)init, (void)rng;
    for (size_t i = 0; i < l->nw; i++)
        w[i] = 1.0f, b[i] = 0.0f;
    for (int i = 0; i < l->in_c; i++)
        state[i] = 0.0f, state[l->in_c + i] = 1.0f;
}

const hcnn_layer_ops hcnn_layer_bn = {
    .setup = bn_setup,
    .forward = bn_forward,
    .backward = bn_backward,
    .forward_fused = bn_forward_fused,
    .backward_relu = bn_backward_relu,
    .init = bn_init,
};
