/* Element-wise operations of the CUDA backend: fill, ReLU (and leaky ReLU)
 * both ways, sums, products, scaling, and dropout with the CPU's
 * counter-based masks (src/core/hd.h: the same mask bits on either
 * backend).  One thread per element. */
#include "cuda.h"

static __global__ void fill_kernel(float *x, size_t n, float v)
{
    const size_t i = HCNN_CUDA_INDEX();
    if (i < n)
        x[i] = v;
}

static __global__ void relu_fwd_kernel(const float *x, float *y, size_t n, float slope)
{
    const size_t i = HCNN_CUDA_INDEX();
    if (i < n)
        y[i] = slope == 0.0f ? hcnn_hd_relu(x[i]) : hcnn_hd_leaky(x[i], slope);
}

static __global__ void relu_bwd_kernel(const float *y, const float *dy, float *dx, size_t n,
                                       float slope)
{
    const size_t i = HCNN_CUDA_INDEX();
    if (i < n)
        dx[i] = slope == 0.0f ? hcnn_hd_relu_grad(y[i], dy[i]) : hcnn_hd_leaky_grad(y[i], dy[i], slope);
}

static __global__ void add_kernel(const float *a, const float *b, float *y, size_t n)
{
    const size_t i = HCNN_CUDA_INDEX();
    if (i < n)
        y[i] = a[i] + b[i];
}

static __global__ void add_acc_kernel(const float *a, float *y, size_t n)
{
    const size_t i = HCNN_CUDA_INDEX();
    if (i < n)
        y[i] += a[i];
}

static __global__ void scale_kernel(float *x, size_t n, float a)
{
    const size_t i = HCNN_CUDA_INDEX();
    if (i < n)
        x[i] *= a;
}

static __global__ void mul_kernel(const float *a, const float *b, float *y, size_t n)
{
    const size_t i = HCNN_CUDA_INDEX();
    if (i < n)
        y[i] = a[i] * b[i];
}

/* element e of sample i: its mask from the sample's key and e */
static __global__ void dropout_kernel(const float *x, float *y, float *mask, size_t total,
                                      size_t per_sample, uint64_t threshold, float scale,
                                      uint64_t seed, uint64_t step, uint64_t first_sample,
                                      uint64_t layer_id)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const size_t i = k / per_sample, e = k % per_sample;
    const uint64_t key = hcnn_hd_dropout_key(seed, step, layer_id, first_sample + (uint64_t)i);
    const float m = hcnn_hd_dropout_mask(key, e, threshold, scale);
    mask[k] = m;
    y[k] = x[k] * m;
}

void hcnn_cuda_fill(const hcnn_backend *be, float *x, size_t n, float v)
{
    if (n == 0)
        return;
    if (v == 0.0f) { /* all-zero bytes: the copy engine's memset */
        HCNN_CUDA(cudaMemsetAsync(x, 0, n * sizeof *x, cuda_of(be)->stream));
        return;
    }
    HCNN_LAUNCH(fill_kernel, hcnn_cuda_blocks(n), HCNN_CUDA_BLOCK, cuda_of(be)->stream, x, n, v);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_relu_fwd(const hcnn_backend *be, const float *x, float *y, size_t n, float slope)
{
    if (n == 0)
        return;
    HCNN_LAUNCH(relu_fwd_kernel, hcnn_cuda_blocks(n), HCNN_CUDA_BLOCK, cuda_of(be)->stream, x, y,
                n, slope);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_relu_bwd(const hcnn_backend *be, const float *y, const float *dy, float *dx,
                        size_t n, float slope)
{
    if (n == 0)
        return;
    HCNN_LAUNCH(relu_bwd_kernel, hcnn_cuda_blocks(n), HCNN_CUDA_BLOCK, cuda_of(be)->stream, y, dy,
                dx, n, slope);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_add(const hcnn_backend *be, const float *a, const float *b, float *y, size_t n)
{
    if (n == 0)
        return;
    HCNN_LAUNCH(add_kernel, hcnn_cuda_blocks(n), HCNN_CUDA_BLOCK, cuda_of(be)->stream, a, b, y, n);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_add_acc(const hcnn_backend *be, const float *a, float *y, size_t n)
{
    if (n == 0)
        return;
    HCNN_LAUNCH(add_acc_kernel, hcnn_cuda_blocks(n), HCNN_CUDA_BLOCK, cuda_of(be)->stream, a, y, n);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_scale(const hcnn_backend *be, float *x, size_t n, float a)
{
    if (n == 0)
        return;
    HCNN_LAUNCH(scale_kernel, hcnn_cuda_blocks(n), HCNN_CUDA_BLOCK, cuda_of(be)->stream, x, n, a);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_mul(const hcnn_backend *be, const float *a, const float *b, float *y, size_t n)
{
    if (n == 0)
        return;
    HCNN_LAUNCH(mul_kernel, hcnn_cuda_blocks(n), HCNN_CUDA_BLOCK, cuda_of(be)->stream, a, b, y, n);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_dropout_fwd(const hcnn_backend *be, const float *x, float *y, float *mask, int n,
                           size_t per_sample, float p, uint64_t seed, uint64_t step,
                           uint64_t first_sample, uint64_t layer_id)
{
    const size_t total = (size_t)n * per_sample;
    if (total == 0)
        return;
    HCNN_LAUNCH(dropout_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream, x,
                y, mask, total, per_sample, hcnn_hd_dropout_threshold(p), 1.0f / (1.0f - p), seed,
                step, first_sample, layer_id);
    HCNN_CUDA_LAUNCHED();
}
