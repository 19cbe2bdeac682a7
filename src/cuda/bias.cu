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

/* The addition below finds each element's bias by hd.h's 32-bit dividers
 * (a GPU has no division instruction: a 64-bit division and remainder a
 * thread bound the H200's bn_apply_kernel, bn.cu) where the elements
 * number fewer than 2^32 (narrow), else by 64-bit ones (unmeasured on a
 * GPU, 2026-12-02).  y is [rows][m], or
 * [n][c][np] as [n c][np] (row: the plane, m: its channel's count c). */
typedef struct bias_geom {
    hcnn_hd_divider np, m; /* np 1: rows of m */
    int narrow;
} bias_geom;

static bias_geom bias_geom_of(size_t total, int np, int m)
{
    bias_geom g = {hcnn_hd_divider_of((uint32_t)np), hcnn_hd_divider_of((uint32_t)m),
                   total <= 0xffffffffu};
    return g;
}

/* element k's bias: (k / np) % m */
static __device__ size_t bias_index(bias_geom g, size_t k)
{
    if (!g.narrow)
        return k / g.np.d % g.m.d;
    const uint32_t row = g.np.d == 1 ? (uint32_t)k : hcnn_hd_div(g.np, (uint32_t)k);
    return row - hcnn_hd_div(g.m, row) * g.m.d;
}

/* y[i][j] += b[j] (np 1) or y[i][c][p] += b[c], then the ReLU if relu */
static __global__ void add_bias_kernel(float *y, const float *b, size_t total, bias_geom g,
                                       int relu)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const float v = y[k] + b[bias_index(g, k)];
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
                y, b, total, bias_geom_of(total, 1, m), relu);
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
                y, bias, total, bias_geom_of(total, np, c), relu);
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
