/* Fully connected layer, PyTorch layout: W is [out][in].
 *   y  = x W^T + b          x [n][in], y [n][out]
 *   dW += dy^T x,  db += sum_n dy,  dx = dy W */
#include "hcnn/layer.h"

void hcnn_fc_forward(const hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, int n)
{
    const int in = (int)hcnn_layer_in_size(l), out = l->out_c;
    ctx->be->gemm(0, 1, n, out, in, 1.0f, x, in, l->w, in, 0.0f, y, out);
    if (l->b)
        ctx->be->add_row_bias(y, l->b, n, out);
}

void hcnn_fc_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *dy,
                      float *dx, int n)
{
    const int in = (int)hcnn_layer_in_size(l), out = l->out_c;
    ctx->be->gemm(1, 0, out, in, n, 1.0f, dy, out, x, in, 1.0f, l->dw, in);
    if (l->db)
        ctx->be->row_sum_acc(dy, n, out, l->db);
    if (dx)
        ctx->be->gemm(0, 0, n, in, out, 1.0f, dy, out, l->w, in, 0.0f, dx, in);
}
