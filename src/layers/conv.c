/* 2-D convolution as im2col + one GEMM over a chunk of the mini-batch
 * (Caffe/Darknet style), backward as GEMM + col2im.
 *
 * Shapes, with K = C*kh*kw and P = oh*ow for a chunk of nb images:
 *   col  = im2col(x)            [K][nb*P]
 *   Y    = W col                [Cout][nb*P]   W is [Cout][K]
 *   y    = nchw(Y) + b          [nb][Cout][P]
 * backward, with dY = cnp(dy)   [Cout][nb*P]:
 *   dW  += dY col^T             [Cout][K]
 *   db  += sum over (nb, P) of dy
 *   dcol = W^T dY               [K][nb*P]
 *   dx   = col2im(dcol)
 * The chunk is as large as the workspace allows (usually the whole
 * mini-batch), never one small GEMM per image. */
#include "hcnn/layer.h"

int hcnn_conv_chunk(const hcnn_layer *l, const hcnn_ctx *ctx, int n)
{
    size_t per = l->ws_per_sample ? l->ws_per_sample : 1;
    size_t cap = ctx->max_chunk_floats / per;
    if (cap < 1)
        cap = 1;
    if (cap * per > ctx->ws_floats)
        cap = ctx->ws_floats / per;
    if (cap < 1)
        cap = 1;
    return (size_t)n < cap ? n : (int)cap;
}

void hcnn_conv_forward(const hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, int n)
{
    const hcnn_backend *be = ctx->be;
    const hcnn_conv_geom *g = &l->conv;
    const int K = g->c * g->kh * g->kw, P = g->oh * g->ow, co = l->out_c;
    const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
    const int chunk = hcnn_conv_chunk(l, ctx, n);
    for (int i0 = 0; i0 < n; i0 += chunk) {
        const int nb = n - i0 < chunk ? n - i0 : chunk;
        float *col = ctx->ws, *Y = ctx->ws + (size_t)K * nb * P;
        be->im2col(g, x + (size_t)i0 * in_sz, nb, col);
        be->gemm(0, 0, co, nb * P, K, 1.0f, l->w, K, col, nb * P, 0.0f, Y, nb * P);
        be->cnp_to_nchw(Y, l->b, nb, co, P, y + (size_t)i0 * out_sz);
        hcnn_ctx_poll(ctx);
    }
}

void hcnn_conv_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *dy,
                        float *dx, int n)
{
    const hcnn_backend *be = ctx->be;
    const hcnn_conv_geom *g = &l->conv;
    const int K = g->c * g->kh * g->kw, P = g->oh * g->ow, co = l->out_c;
    const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
    const int chunk = hcnn_conv_chunk(l, ctx, n);
    if (l->db)
        be->channel_sum_acc(dy, n, co, P, l->db);
    for (int i0 = 0; i0 < n; i0 += chunk) {
        const int nb = n - i0 < chunk ? n - i0 : chunk;
        float *col = ctx->ws, *dY = ctx->ws + (size_t)K * nb * P;
        be->nchw_to_cnp(dy + (size_t)i0 * out_sz, nb, co, P, dY);
        be->im2col(g, x + (size_t)i0 * in_sz, nb, col);
        be->gemm(0, 1, co, K, nb * P, 1.0f, dY, nb * P, col, nb * P, 1.0f, l->dw, K);
        hcnn_ctx_poll(ctx);
        if (dx) {
            /* the columns are no longer needed: reuse them for dcol */
            be->gemm(1, 0, K, nb * P, co, 1.0f, l->w, K, dY, nb * P, 0.0f, col, nb * P);
            be->col2im(g, col, nb, dx + (size_t)i0 * in_sz);
            hcnn_ctx_poll(ctx);
        }
    }
}
