/* Bias additions and the fully connected layer's bias-gradient sum of the
 * CUDA backend (convolution: per channel of NCHW; fully connected: per
 * column, in a fixed order, one thread a column).  The convolution's
 * bias gradient is a channel sum: bn.cu's, in the CPU's order. */
#include "cuda.h"

/* db[j] += sum over rows i of dy[i][j], rows in order */
static __global__ void row_sum_kernel(const float *dy, int n, int m, float *db)
{
    const size_t j = HCNN_CUDA_INDEX();
    if (j >= (size_t)m)
        return;
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += dy[(size_t)i * m + j];
    db[j] += s;
}

static __global__ void add_row_bias_kernel(float *y, const float *b, size_t total, int m)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k < total)
        y[k] += b[k % (size_t)m];
}

/* y[i][c][p] += bias[c] */
static __global__ void add_channel_bias_kernel(float *y, const float *bias, size_t total, int c,
                                               int np)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k < total)
        y[k] += bias[k / (size_t)np % (size_t)c];
}

void hcnn_cuda_row_sum_acc(const hcnn_backend *be, const float *dy, int n, int m, float *db)
{
    if (m <= 0)
        return;
    HCNN_LAUNCH(row_sum_kernel, hcnn_cuda_blocks((size_t)m), HCNN_CUDA_BLOCK, cuda_of(be)->stream,
                dy, n, m, db);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_add_row_bias(const hcnn_backend *be, float *y, const float *b, int n, int m)
{
    const size_t total = (size_t)n * m;
    if (total == 0)
        return;
    HCNN_LAUNCH(add_row_bias_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                cuda_of(be)->stream, y, b, total, m);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_add_channel_bias(const hcnn_backend *be, float *y, const float *bias, int n, int c,
                                int np)
{
    const size_t total = (size_t)n * c * np;
    if (total == 0)
        return;
    HCNN_LAUNCH(add_channel_bias_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                cuda_of(be)->stream, y, bias, total, c, np);
    HCNN_CUDA_LAUNCHED();
}
