/* Fully connected layer, PyTorch layout: W is [out][in].
 *   y  = x W^T + b          x [n][in], y [n][out]
 *   dW += dy^T x,  db += sum_n dy,  dx = dy W */
#include "hcnn/layer.h"

static int fc_setup(hcnn_layer *l, const char *cfg_path, int index)
{
    (void)cfg_path, (void)index;
    if (l->spec.out < 1)
        return HCNN_LAYER_BAD_SHAPE;
    l->out_c = l->spec.out, l->out_h = l->out_w = 1;
    l->nw = (size_t)l->spec.out * hcnn_layer_in_size(l);
    l->nb = l->spec.bias ? (size_t)l->spec.out : 0;
    l->has_bias = l->spec.bias;
    l->flops_per_sample = 2.0 * (double)l->nw;
    return HCNN_OK;
}

static int fc_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                      int n)
{
    (void)aux;
    const int in = (int)hcnn_layer_in_size(l), out = l->out_c;
    ctx->be->gemm(ctx->be, 0, 1, n, out, in, 1.0f, x, in, l->w, in, 0.0f, y, out);
    if (l->b)
        ctx->be->add_row_bias(ctx->be, y, l->b, n, out);
    return HCNN_OK;
}

static int fc_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                       const float *aux, const float *dy, float *dx, int n)
{
    (void)y, (void)aux;
    const int in = (int)hcnn_layer_in_size(l), out = l->out_c;
    ctx->be->gemm(ctx->be, 1, 0, out, in, n, 1.0f, dy, out, x, in, 1.0f, l->dw, in);
    if (l->db)
        ctx->be->row_sum_acc(ctx->be, dy, n, out, l->db);
    if (dx)
        ctx->be->gemm(ctx->be, 0, 0, n, in, out, 1.0f, dy, out, l->w, in, 0.0f, dx, in);
    return HCNN_OK;
}

static void fc_init(const hcnn_layer *l, hcnn_init init, hcnn_rng *rng, float *w, float *b,
                    float *state)
{
    (void)state;
    hcnn_init_weights(init, rng, hcnn_layer_in_size(l), (size_t)l->out_c, w, l->nw, b, l->nb);
}

/* PyTorch's [out, in] */
static int fc_weight_dims(const hcnn_layer *l, int *dims)
{
    dims[0] = l->out_c, dims[1] = (int)hcnn_layer_in_size(l);
    return 2;
}

/* Under whole-network execution every thread multiplies its unit's rows,
 * all at once. */
static void fc_gemms(const hcnn_layer *l, const hcnn_ctx *ctx, int n, int unit, int need_dx,
                     hcnn_gemm_list *g)
{
    (void)ctx;
    const int in = (int)hcnn_layer_in_size(l), out = l->out_c;
    const int per = unit > 0, m = per ? unit : n;
    hcnn_gemm_push(g, 0, 0, 1, m, out, in, per);
    hcnn_gemm_push(g, 1, 1, 0, out, in, m, per);
    if (need_dx)
        hcnn_gemm_push(g, 1, 0, 0, m, in, out, per);
    g->flops += 2.0 * in * out * (double)n * (need_dx ? 3 : 2);
}

const hcnn_layer_ops hcnn_layer_fc = {
    .setup = fc_setup,
    .forward = fc_forward,
    .backward = fc_backward,
    .init = fc_init,
    .weight_dims = fc_weight_dims,
    .gemms = fc_gemms,
    .per_sample = 1,
    .nchw_features = 1,
};
