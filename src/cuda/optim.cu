/* The optimiser's element-wise update (hcnn_hd_sgd, as the CPU) and the sum
 * of squares of the CUDA backend.  The sum runs on C = ceil(n / SUMSQ_CHUNK)
 * threads, thread c adding elements c, c + C, c + 2C, ... in order (the
 * threads of a warp read neighbouring elements), then one thread adds the
 * C sums in order: an order fixed by n, whatever the GPU. */
#include "cuda.h"

#define SUMSQ_CHUNK 4096

/* lr_dev: the rate in device memory (a captured step), else lr */
__global__ void sgd_kernel(float *w, const float *g, float *v, size_t n, const float *lr_dev,
                           float lr, float mu, float wd, int nesterov)
{
    const size_t i = HCNN_CUDA_INDEX();
    if (i < n)
        hcnn_hd_sgd(&w[i], g[i], &v[i], lr_dev ? *lr_dev : lr, mu, wd, nesterov);
}

__global__ void sumsq_chunk_kernel(const float *x, size_t n, size_t chunks, double *part)
{
    const size_t c = HCNN_CUDA_INDEX();
    if (c >= chunks)
        return;
    double s = 0.0;
    for (size_t i = c; i < n; i += chunks)
        s += (double)x[i] * x[i];
    part[c] = s;
}

__global__ void sumsq_total_kernel(const double *part, size_t chunks, double *stats)
{
    if (HCNN_CUDA_INDEX() != 0)
        return;
    double s = 0.0;
    for (size_t c = 0; c < chunks; c++)
        s += part[c];
    stats[HCNN_STAT_SUMSQ] += s;
}

void hcnn_cuda_sgd_step(const hcnn_backend *be, float *w, const float *g, float *v, size_t n,
                        float lr, float mu, float wd, int nesterov)
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
}

void hcnn_cuda_sgd_replay_lr(const hcnn_backend *be, float lr) { *cuda_of(be)->lr_host = lr; }

void hcnn_cuda_sum_sq(const hcnn_backend *be, const float *x, size_t n, double *stats)
{
    /* in pieces whose chunks' sums fit the scratch */
    const size_t piece = cuda_of(be)->scratch_doubles * SUMSQ_CHUNK;
    for (size_t lo = 0; lo < n; lo += piece) {
        const size_t len = n - lo < piece ? n - lo : piece;
        const size_t chunks = (len + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
        double *part = hcnn_cuda_scratch(be, chunks);
        HCNN_LAUNCH(sumsq_chunk_kernel, hcnn_cuda_blocks(chunks), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, x + lo, len, chunks, part);
        HCNN_CUDA_LAUNCHED();
        HCNN_LAUNCH(sumsq_total_kernel, 1, 1, cuda_of(be)->stream, part, chunks, stats);
        HCNN_CUDA_LAUNCHED();
    }
}
