/* The optimiser's element-wise update (hcnn_hd_sgd, as the CPU) and the sum
 * of squares of the CUDA backend.  The sum is a tree of fan-in SUMSQ_FAN in
 * an order fixed by n, whatever the GPU: C = ceil(n / SUMSQ_FAN) threads,
 * thread c adding elements c, c + C, c + 2C, ... in order (the threads of a
 * warp read neighbouring elements), then the C sums the same way, level
 * after level, until one thread adds the last SUMSQ_FAN or fewer.
 *
 * Why a tree: the first version had C = n / 4096 threads and one thread
 * adding the C sums, each thread a chain of 4096 dependent loads and
 * additions.  On an H200 (2026-11-27, bench/kernel_share.so) it took 1.4 ms a
 * call for LeNet-5's 61706 parameters (16 threads) and 1.6 ms for
 * ResNet-18's 11.2 M: 72% of LeNet-5's kernel time at batch 256 and 6% of
 * ResNet-18's at batch 128.  Chains of 64 keep every level a few
 * microseconds. */
#include "cuda.h"

#define SUMSQ_FAN 64

/* lr_dev: the rate in device memory (a captured step), else lr */
static __global__ void sgd_kernel(float *w, float *g, float *v, size_t n, const float *lr_dev,
                                  float lr, float mu, float wd, int nesterov)
{
    const size_t i = HCNN_CUDA_INDEX();
    if (i < n) {
        hcnn_hd_sgd(&w[i], g[i], &v[i], lr_dev ? *lr_dev : lr, mu, wd, nesterov);
        g[i] = 0.0f; /* the next step's gradients are summed into it */
    }
}

/* part[c] = the sum over i = c, c + chunks, ... below n, in order, of x[i]^2
 * (the first level: x given) or of xd[i] (a later one: the sums below) */
static __global__ void sumsq_level_kernel(const float *x, const double *xd, size_t n, size_t chunks,
                                          double *part)
{
    const size_t c = HCNN_CUDA_INDEX();
    if (c >= chunks)
        return;
    double s = 0.0;
    if (x)
        for (size_t i = c; i < n; i += chunks)
            s += (double)x[i] * x[i];
    else
        for (size_t i = c; i < n; i += chunks)
            s += xd[i];
    part[c] = s;
}

/* *total += the last level's sums (at most SUMSQ_FAN), in order */
static __global__ void sumsq_total_kernel(const double *part, size_t chunks, double *total)
{
    if (HCNN_CUDA_INDEX() != 0)
        return;
    double s = 0.0;
    for (size_t c = 0; c < chunks; c++)
        s += part[c];
    *total += s;
}

static void sum_sq_at(const hcnn_backend *be, const float *x, size_t n, double *total);

void hcnn_cuda_sgd_step(const hcnn_backend *be, float *w, float *g, float *v, size_t n,
                        float lr, float mu, float wd, int nesterov, double *stats)
{
    if (n == 0)
        return;
    hcnn_cuda *cu = cuda_of(be);
    const float *lr_dev = NULL;
    if (cu->capturing) {
        /* a graph's copy from pinned memory reads it when the graph runs:
         * sgd_replay_lr sets the rate of each launch */
        *cu->lr_host = lr;
        HCNN_CUDA(cudaMemcpyAsync(cu->lr_dev, cu->lr_host, sizeof(float), cudaMemcpyHostToDevice,
                                  cu->stream));
        lr_dev = cu->lr_dev;
    }
    HCNN_LAUNCH(sgd_kernel, hcnn_cuda_blocks(n), HCNN_CUDA_BLOCK, cu->stream, w, g, v, n, lr_dev,
                lr, mu, wd, nesterov);
    HCNN_CUDA_LAUNCHED();
    if (stats) { /* two more passes: at the GPU's bandwidth a few microseconds for ResNet-18 */
        sum_sq_at(be, w, n, stats + HCNN_STAT_WSQ);
        sum_sq_at(be, v, n, stats + HCNN_STAT_VSQ);
    }
}

void hcnn_cuda_sgd_replay_lr(const hcnn_backend *be, float lr) { *cuda_of(be)->lr_host = lr; }

/* the scratch doubles a tree over len elements needs: its levels side by side */
static size_t sumsq_scratch(size_t len)
{
    size_t need = 0;
    for (size_t m = len; m > SUMSQ_FAN; m = (m + SUMSQ_FAN - 1) / SUMSQ_FAN)
        need += (m + SUMSQ_FAN - 1) / SUMSQ_FAN;
    return need;
}

void hcnn_cuda_sum_sq(const hcnn_backend *be, const float *x, size_t n, double *stats)
{
    sum_sq_at(be, x, n, stats + HCNN_STAT_SUMSQ);
}

static void sum_sq_at(const hcnn_backend *be, const float *x, size_t n, double *total)
{
    hcnn_cuda *cu = cuda_of(be);
    /* in pieces whose tree fits the scratch (ResNet-18's 11.2 M parameters
     * are one piece: 178 k doubles of 1 M) */
    size_t piece = n;
    while (sumsq_scratch(piece) > cu->scratch_doubles)
        piece /= 2;
    for (size_t lo = 0; lo < n; lo += piece) {
        const size_t len = n - lo < piece ? n - lo : piece;
        const size_t need = sumsq_scratch(len);
        double *part = hcnn_cuda_scratch(be, need ? need : 1); /* 1: a piece of one level */
        const float *xf = x + lo;
        const double *xd = NULL;
        size_t m = len;
        while (m > SUMSQ_FAN) {
            const size_t chunks = (m + SUMSQ_FAN - 1) / SUMSQ_FAN;
            HCNN_LAUNCH(sumsq_level_kernel, hcnn_cuda_blocks(chunks), HCNN_CUDA_BLOCK, cu->stream,
                        xf, xd, m, chunks, part);
            HCNN_CUDA_LAUNCHED();
            xf = NULL, xd = part, part += chunks, m = chunks;
        }
        if (xf) { /* a piece of SUMSQ_FAN elements or fewer: its squares first */
            HCNN_LAUNCH(sumsq_level_kernel, 1, 1, cu->stream, xf, xd, m, (size_t)1, part);
            HCNN_CUDA_LAUNCHED();
            xd = part, m = 1;
        }
        HCNN_LAUNCH(sumsq_total_kernel, 1, 1, cu->stream, xd, m, total);
        HCNN_CUDA_LAUNCHED();
    }
}
