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

/* y[i][j] += b[j] (np 1) or y[i][c][p] += b[c], then the ReLU if relu
 * (the channel by cuda.h's 32-bit dividers) */
static __global__ void add_bias_kernel(float *y, const float *b, size_t total,
                                       hcnn_cuda_channels g, int relu)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const float v = y[k] + b[hcnn_cuda_channel(g, k)];
    y[k] = relu ? hcnn_hd_relu(v) : v;
}

void hcnn_cuda_row_sum_acc(const hcnn_backend *be, const float *dy, int n, int m, float *db)
{
    if (m <= 0)
        return;
    HCNN_LAUNCH(row_sum_kernel, hcnn_cuda_blocks((size_t)m), HCNN_CUDA_BLOCK, cuda_of(be)->stream,
                dy, n, m, db);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_add_row_bias_relu(const hcnn_backend *be, float *y, const float *b, int n, int m,
                                 int relu)
{
    const size_t total = (size_t)n * m;
    if (total == 0)
        return;
    HCNN_LAUNCH(add_bias_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream,
                y, b, total, hcnn_cuda_channels_of(total, m, 1), relu);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_add_row_bias(const hcnn_backend *be, float *y, const float *b, int n, int m)
{
    hcnn_cuda_add_row_bias_relu(be, y, b, n, m, 0);
}

void hcnn_cuda_add_channel_bias_relu(const hcnn_backend *be, float *y, const float *bias, int n,
                                     int c, int np, int relu)
{
    const size_t total = (size_t)n * c * np;
    if (total == 0)
        return;
    HCNN_LAUNCH(add_bias_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream,
                y, bias, total, hcnn_cuda_channels_of(total, c, np), relu);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_add_channel_bias(const hcnn_backend *be, float *y, const float *bias, int n, int c,
                                int np)
{
    hcnn_cuda_add_channel_bias_relu(be, y, bias, n, c, np, 0);
}

/* NHWC channel sums: rows in blocks of NHWC_SUM_ROWS (more where the
 * blocks' sums would not fit the reduction scratch), each block's sum of a
 * channel by one thread (the threads of a warp read neighbouring channels),
 * then each channel's blocks added in order: the order depends on the
 * shape only. */
#define NHWC_SUM_ROWS 256

/* part[b][ch] = the sum of dy[r][ch] over the rows r of block b */
static __global__ void nhwc_block_sum_kernel(const float *dy, int rows, int per, int c,
                                             size_t total, double *part)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const size_t b = k / (size_t)c, ch = k - b * (size_t)c;
    const size_t r0 = b * per;
    const size_t r1 = r0 + per < (size_t)rows ? r0 + per : (size_t)rows;
    double s = 0.0;
    for (size_t r = r0; r < r1; r++)
        s += dy[r * (size_t)c + ch];
    part[k] = s;
}

/* db[ch] += the blocks' sums of ch, in block order */
static __global__ void nhwc_channel_total_kernel(const double *part, int blocks, int c, float *db)
{
    const size_t ch = HCNN_CUDA_INDEX();
    if (ch >= (size_t)c)
        return;
    double s = 0.0;
    for (int b = 0; b < blocks; b++)
        s += part[(size_t)b * c + ch];
    db[ch] += (float)s;
}

void hcnn_cuda_nhwc_channel_sum_acc(const hcnn_backend *be, const float *dy, int rows, int c,
                                    float *db)
{
    if (rows <= 0 || c <= 0)
        return;
    const size_t most = cuda_of(be)->scratch_doubles / (size_t)c; /* blocks that fit */
    if (most < 1)
        hcnn_cuda_fail("channel sum", __FILE__, __LINE__,
                       "more channels than the reduction scratch holds partial sums for");
    int per = NHWC_SUM_ROWS;
    if ((size_t)(rows + per - 1) / per > most)
        per = (int)(((size_t)rows + most - 1) / most);
    const int blocks = (rows + per - 1) / per;
    const size_t total = (size_t)blocks * c;
    double *part = hcnn_cuda_scratch(be, total);
    HCNN_LAUNCH(nhwc_block_sum_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                cuda_of(be)->stream, dy, rows, per, c, total, part);
    HCNN_CUDA_LAUNCHED();
    HCNN_LAUNCH(nhwc_channel_total_kernel, hcnn_cuda_blocks((size_t)c), HCNN_CUDA_BLOCK,
                cuda_of(be)->stream, (const double *)part, blocks, c, db);
    HCNN_CUDA_LAUNCHED();
}
