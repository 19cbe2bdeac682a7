/* Bias additions and bias-gradient sums of the CUDA backend (convolution:
 * per channel of NCHW; fully connected: per column).  The sums run in a
 * fixed order in one thread per output: a column (row_sum_acc) or a
 * channel's planes, each plane summed by its own thread first
 * (channel_sum_acc, two kernels). */
#include "cuda.h"

/* db[j] += sum over rows i of dy[i][j], rows in order */
__global__ void row_sum_kernel(const float *dy, int n, int m, float *db)
{
    const size_t j = HCNN_CUDA_INDEX();
    if (j >= (size_t)m)
        return;
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += dy[(size_t)i * m + j];
    db[j] += s;
}

__global__ void add_row_bias_kernel(float *y, const float *b, size_t total, int m)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k < total)
        y[k] += b[k % (size_t)m];
}

/* y[i][c][p] += bias[c] */
__global__ void add_channel_bias_kernel(float *y, const float *bias, size_t total, int c, int np)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k < total)
        y[k] += bias[k / (size_t)np % (size_t)c];
}

/* the sum of plane k of dy (image k / c, channel k % c), in order */
__global__ void plane_sum_kernel(const float *dy, size_t planes, int np, double *part)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= planes)
        return;
    const float *p = dy + k * (size_t)np;
    float s = 0.0f;
    for (int q = 0; q < np; q++)
        s += p[q];
    part[k] = s;
}

/* db[ch] += the channel's planes, images in order */
__global__ void channel_total_kernel(const double *part, int n, int c, float *db)
{
    const size_t ch = HCNN_CUDA_INDEX();
    if (ch >= (size_t)c)
        return;
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += part[(size_t)i * c + ch];
    db[ch] += (float)s;
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

void hcnn_cuda_channel_sum_acc(const hcnn_backend *be, const float *dy, int n, int c, int np,
                               float *db)
{
    if (n <= 0 || c <= 0)
        return;
    /* in pieces of images whose planes fit the scratch */
    const size_t cap = cuda_of(be)->scratch_doubles / (size_t)c;
    for (int i0 = 0; i0 < n; i0 += (int)cap) {
        const int nb = (size_t)(n - i0) < cap ? n - i0 : (int)cap;
        const size_t planes = (size_t)nb * c;
        double *part = hcnn_cuda_scratch(be, planes);
        HCNN_LAUNCH(plane_sum_kernel, hcnn_cuda_blocks(planes), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, dy + (size_t)i0 * c * np, planes, np, part);
        HCNN_CUDA_LAUNCHED();
        HCNN_LAUNCH(channel_total_kernel, hcnn_cuda_blocks((size_t)c), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, part, nb, c, db);
        HCNN_CUDA_LAUNCHED();
    }
}
