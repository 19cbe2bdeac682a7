/* Batch normalisation of the CUDA backend in NHWC (include/hcnn/backend.h,
 * hcnn_act_layout; bn.cu calls here when be->layout is NHWC): x, add, y,
 * dy and dx are [n][h][w][c] = [rows = n np][c]; gamma, beta, the running
 * and saved statistics stay per channel.
 *
 * Here are the per-channel sums; the element-wise kernels are bn.cu's
 * (bn_apply, training's and inference's, and bwd_dx), which read [rows][c]
 * as NCHW planes of one pixel.  Each pass reads the tensors at most twice
 * and takes at most 3 launches, as NCHW's:
 *   forward   nhwc_block_stats (each row block's mean and sum of squared
 *             deviations of each channel), bn_channel.cu's bn_channel_stats (each
 *             channel's statistics from its blocks' pairs and the running
 *             statistics), then bn.cu's bn_apply (with the addition and ReLU);
 *   backward  nhwc_bwd_block (each block's sums of g and g * xhat),
 *             bn_channel.cu's bwd_channel (dgamma, dbeta and the two means), then
 *             bn.cu's bwd_dx;
 *   inference bn.cu's bn_apply alone (a and b from the running statistics).
 *
 * The sums run over row blocks of HCNN_CUDA_NHWC_ROWS rows (more where the blocks'
 * pairs would not fit the reduction scratch): one thread a (block,
 * channel), so that a warp reads neighbouring channels of a row, summing
 * its block as the CPU sums a plane (16 lanes and a tail,
 * hcnn_hd_lanes_total); then bn_channel.cu's kernels merge each channel's
 * blocks in block order, in double: the forward's pairs as src/core/hd.h's
 * hcnn_hd_bn_table_stats (the blocks as the bands of one plane of `rows`
 * values: Chan et al.'s update, as the CPU and the NCHW kernels), the
 * backward's two sums added as NCHW's images.  The order
 * depends on the shape only, and no atomics: the same bits every run.
 * Not NCHW's bits: other blocks (tests/unit/test_cuda_bn.cc compares the
 * two within a few roundings).
 *
 * The statistics a convolution may gather (hcnn_bn_stats) are not used:
 * their table is NCHW's, one pair a plane (bn.cu, hcnn_cuda_bn_gather), and
 * the NHWC convolution gathers none (bands 0); the statistics from x keep
 * the contract at the cost of the pass the table would have saved. */
#include <math.h>

#include "cuda.h"

#define LANES 16 /* bn.cu's and the CPU's lanes of a sum */

/* the rows of a block and their number: the blocks' table, one pair of
 * floats a (block, channel), and c doubles (the backward's two means) fit
 * the scratch; a multiple of LANES, so that only the last block has a tail */
static int nhwc_rows_per_block(const hcnn_backend *be, int rows, int c, int *blocks)
{
    const size_t cap = cuda_of(be)->scratch_doubles;
    if ((size_t)c * 2 > cap)
        hcnn_cuda_fail("batch-norm", __FILE__, __LINE__,
                       "more channels than the reduction scratch holds partial sums for");
    const size_t most = (cap - (size_t)c) / (size_t)c; /* blocks that fit */
    size_t per = HCNN_CUDA_NHWC_ROWS;
    if (((size_t)rows + per - 1) / per > most) {
        per = ((size_t)rows + most - 1) / most;
        per = (per + LANES - 1) / LANES * LANES;
        if (per > (size_t)rows) /* one block: rows <= INT_MAX stays an int */
            per = (size_t)rows;
    }
    *blocks = (int)(((size_t)rows + per - 1) / per);
    return (int)per;
}

/* the rows as an int (the channel kernels' np): refused past INT_MAX */
static int nhwc_rows(int n, int np)
{
    const size_t rows = (size_t)n * np;
    if (rows > 2147483647u)
        hcnn_cuda_fail("batch-norm", __FILE__, __LINE__,
                       "more than 2^31 - 1 rows (n h w) in an NHWC batch-norm");
    return (int)rows;
}

/* the sum over cnt rows from p (stride c) of x (sq 0) or (x - m)^2 in
 * slot_sum's order: lane l takes rows l, l + 16, ... of the whole blocks of
 * 16, the tail in order, then hcnn_hd_lanes_total */
static __device__ float rows_sum(const float *p, int cnt, size_t c, int sq, float m)
{
    float acc[LANES];
    for (int l = 0; l < LANES; l++)
        acc[l] = 0.0f;
    const int whole = cnt / LANES * LANES;
    for (int i = 0; i < whole; i += LANES)
        for (int l = 0; l < LANES; l++) {
            const float v = p[(size_t)(i + l) * c];
            acc[l] += sq ? (v - m) * (v - m) : v;
        }
    float tail = 0.0f;
    for (int i = whole; i < cnt; i++) {
        const float v = p[(size_t)i * c];
        tail += sq ? (v - m) * (v - m) : v;
    }
    return hcnn_hd_lanes_total(acc, tail);
}

/* thread k = b c + ch: block b's mean of channel ch (its total over its
 * rows as a float, the CPU's division) and sum of squared deviations from
 * it, at table[2 k] (the bands of a plane, [block][c]: a warp writes whole
 * lines, and bn_channel_stats reads its channels so; hd.h's tables,
 * [c][band], would be a line a channel); the second pass reads the block
 * again from cache (L2 at worst: a warp's block is 32 KB) */
static __global__ void nhwc_block_stats_kernel(const float *x, int rows, int c, int per, int blocks,
                                               float *table)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= (size_t)blocks * c)
        return;
    const size_t b = k / (size_t)c, ch = k - b * (size_t)c, r0 = b * (size_t)per;
    const int cnt = (size_t)rows - r0 < (size_t)per ? (int)((size_t)rows - r0) : per;
    const float *p = x + r0 * (size_t)c + ch;
    const float mean = rows_sum(p, cnt, (size_t)c, 0, 0.0f) / (float)cnt;
    table[2 * k] = mean;
    table[2 * k + 1] = rows_sum(p, cnt, (size_t)c, 1, mean);
}

/* thread k = b c + ch: block b's sums of g and g * (x - m) * is of channel
 * ch (bwd_plane's, over the block's rows in its order), at table[2 k] and
 * table[2 k + 1], blocks in order as bn_channel.cu's bwd_channel reads them */
static __global__ void nhwc_bwd_block_kernel(const float *x, const float *dy, int rows, int c,
                                             int per, int blocks, const float *gamma,
                                             const float *beta, const float *mean,
                                             const float *invstd, int relu, float *table)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= (size_t)blocks * c)
        return;
    const size_t b = k / (size_t)c, ch = k - b * (size_t)c, r0 = b * (size_t)per;
    const int cnt = (size_t)rows - r0 < (size_t)per ? (int)((size_t)rows - r0) : per;
    const float *xp = x + r0 * (size_t)c + ch, *dp = dy + r0 * (size_t)c + ch;
    const float m = mean[ch], is = invstd[ch];
    float a, bb;
    hcnn_hd_bn_affine(gamma[ch], beta[ch], m, is, &a, &bb);
    float s1[LANES], s2[LANES];
    for (int l = 0; l < LANES; l++)
        s1[l] = 0.0f, s2[l] = 0.0f;
    const int whole = cnt / LANES * LANES;
    for (int i = 0; i < whole; i += LANES)
        for (int l = 0; l < LANES; l++) {
            const size_t o = (size_t)(i + l) * c;
            const float g = hcnn_hd_bn_grad(dp[o], xp[o], relu, a, bb);
            s1[l] += g;
            s2[l] += g * (xp[o] - m) * is;
        }
    float t1 = 0.0f, t2 = 0.0f;
    for (int i = whole; i < cnt; i++) {
        const size_t o = (size_t)i * c;
        const float g = hcnn_hd_bn_grad(dp[o], xp[o], relu, a, bb);
        t1 += g;
        t2 += g * (xp[o] - m) * is;
    }
    table[2 * k] = hcnn_hd_lanes_total(s1, t1);
    table[2 * k + 1] = hcnn_hd_lanes_total(s2, t2);
}

void hcnn_cuda_bn_nhwc_stats(const hcnn_backend *be, const float *x, int n, int c, int np,
                             float eps, float momentum, float *running_mean, float *running_var,
                             float *save_mean, float *save_invstd)
{
    cudaStream_t st = cuda_of(be)->stream;
    const int rows = nhwc_rows(n, np);
    int blocks;
    const int per = nhwc_rows_per_block(be, rows, c, &blocks);
    float *table = (float *)hcnn_cuda_scratch(be, (size_t)blocks * c);
    HCNN_LAUNCH(nhwc_block_stats_kernel, hcnn_cuda_blocks((size_t)blocks * c), HCNN_CUDA_BLOCK, st,
                x, rows, c, per, blocks, table);
    HCNN_CUDA_LAUNCHED();
    /* the blocks as the bands of one plane of `rows` values, table[(b c +
     * ch) * 2] (by piece) */
    hcnn_cuda_bn_table_stats(be, table, 1, c, rows, blocks, per, 1, 0.0, 1, NULL, eps, momentum,
                             save_mean, save_invstd, running_mean, running_var);
}

void hcnn_cuda_bn_nhwc_bwd_sums(const hcnn_backend *be, const float *x, const float *dy, int n,
                                int c, int np, const float *gamma, const float *beta,
                                const float *save_mean, const float *save_invstd, int relu,
                                float *dgamma, float *dbeta, float **mdy, float **mdyx)
{
    cudaStream_t st = cuda_of(be)->stream;
    const int rows = nhwc_rows(n, np);
    int blocks;
    const int per = nhwc_rows_per_block(be, rows, c, &blocks);
    /* the two means ([c] floats each: c doubles), then the table */
    double *s = hcnn_cuda_scratch(be, (size_t)c + (size_t)blocks * c);
    *mdy = (float *)s, *mdyx = *mdy + c;
    float *table = (float *)(s + c);
    HCNN_LAUNCH(nhwc_bwd_block_kernel, hcnn_cuda_blocks((size_t)blocks * c), HCNN_CUDA_BLOCK, st, x,
                dy, rows, c, per, blocks, gamma, beta, save_mean, save_invstd, relu, table);
    HCNN_CUDA_LAUNCHED();
    /* the blocks as the rows of one piece, table[(b c + ch) * 2] */
    hcnn_cuda_bn_table_sums(be, table, blocks, c, 1, 1, (double)rows, NULL, dgamma, dbeta, *mdy,
                            *mdyx);
}
