/* Max and average pooling of the CUDA backend.  The forwards: one thread
 * per output, its window in the CPU's order.  The backwards gather: one
 * thread per input element adds the gradients of the outputs whose window
 * holds it, in output order, from 0, which is the order in which the CPU's
 * scatter adds them (src/cpu/pool.c): no atomics, the same sums. */
#include "cuda.h"

/* output k = ((i * c + ch) * oh + oy) * ow + ox */
static __global__ void maxpool_fwd_kernel(hcnn_pool_geom g, const float *x, size_t total, float *y,
                                          int32_t *argmax)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const int ox = (int)(k % (size_t)g.ow), oy = (int)(k / (size_t)g.ow % (size_t)g.oh);
    const size_t plane = k / ((size_t)g.oh * g.ow);
    const float *xp = x + plane * (size_t)g.h * g.w;
    float best = -INFINITY;
    int32_t arg = -1;
    for (int ki = 0; ki < g.kh; ki++) {
        const int iy = hcnn_hd_window_in(oy, ki, g.sh, g.ph);
        if (iy < 0 || iy >= g.h)
            continue;
        for (int kj = 0; kj < g.kw; kj++) {
            const int ix = hcnn_hd_window_in(ox, kj, g.sw, g.pw);
            if (ix < 0 || ix >= g.w)
                continue;
            const float v = xp[iy * g.w + ix];
            if (v > best || arg < 0) {
                best = v;
                arg = iy * g.w + ix;
            }
        }
    }
    y[k] = best;
    argmax[k] = arg;
}

/* input element k = ((i * c + ch) * h + iy) * w + ix */
static __global__ void maxpool_bwd_kernel(hcnn_pool_geom g, const float *dy, const int32_t *argmax,
                                          size_t total, float *dx)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const int ix = (int)(k % (size_t)g.w), iy = (int)(k / (size_t)g.w % (size_t)g.h);
    const size_t plane = k / ((size_t)g.h * g.w);
    const float *dyp = dy + plane * (size_t)g.oh * g.ow;
    const int32_t *ap = argmax + plane * (size_t)g.oh * g.ow;
    int y0, y1, x0, x1;
    hcnn_hd_window_outputs(iy, g.kh, g.sh, g.ph, g.oh, &y0, &y1);
    hcnn_hd_window_outputs(ix, g.kw, g.sw, g.pw, g.ow, &x0, &x1);
    const int32_t me = iy * g.w + ix;
    float s = 0.0f;
    for (int oy = y0; oy < y1; oy++)
        for (int ox = x0; ox < x1; ox++)
            if (ap[oy * g.ow + ox] == me)
                s += dyp[oy * g.ow + ox];
    dx[k] = s;
}

/* padding counted in the divisor (PyTorch's default) */
static __global__ void avgpool_fwd_kernel(hcnn_pool_geom g, const float *x, size_t total, float *y)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const float inv = 1.0f / (float)(g.kh * g.kw);
    const int ox = (int)(k % (size_t)g.ow), oy = (int)(k / (size_t)g.ow % (size_t)g.oh);
    const size_t plane = k / ((size_t)g.oh * g.ow);
    const float *xp = x + plane * (size_t)g.h * g.w;
    float s = 0.0f;
    for (int ki = 0; ki < g.kh; ki++) {
        const int iy = hcnn_hd_window_in(oy, ki, g.sh, g.ph);
        if (iy < 0 || iy >= g.h)
            continue;
        for (int kj = 0; kj < g.kw; kj++) {
            const int ix = hcnn_hd_window_in(ox, kj, g.sw, g.pw);
            if (ix >= 0 && ix < g.w)
                s += xp[iy * g.w + ix];
        }
    }
    y[k] = s * inv;
}

static __global__ void avgpool_bwd_kernel(hcnn_pool_geom g, const float *dy, size_t total,
                                          float *dx)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const float inv = 1.0f / (float)(g.kh * g.kw);
    const int ix = (int)(k % (size_t)g.w), iy = (int)(k / (size_t)g.w % (size_t)g.h);
    const size_t plane = k / ((size_t)g.h * g.w);
    const float *dyp = dy + plane * (size_t)g.oh * g.ow;
    int y0, y1, x0, x1;
    hcnn_hd_window_outputs(iy, g.kh, g.sh, g.ph, g.oh, &y0, &y1);
    hcnn_hd_window_outputs(ix, g.kw, g.sw, g.pw, g.ow, &x0, &x1);
    float s = 0.0f;
    for (int oy = y0; oy < y1; oy++)
        for (int ox = x0; ox < x1; ox++)
            s += dyp[oy * g.ow + ox] * inv;
    dx[k] = s;
}

void hcnn_cuda_maxpool_fwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n,
                           float *y, int32_t *argmax)
{
    const size_t total = (size_t)n * g->c * g->oh * g->ow;
    if (total == 0)
        return;
    HCNN_LAUNCH(maxpool_fwd_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream,
                *g, x, total, y, argmax);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_maxpool_bwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy,
                           const int32_t *argmax, int n, float *dx)
{
    const size_t total = (size_t)n * g->c * g->h * g->w;
    if (total == 0)
        return;
    HCNN_LAUNCH(maxpool_bwd_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream,
                *g, dy, argmax, total, dx);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_avgpool_fwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n,
                           float *y)
{
    const size_t total = (size_t)n * g->c * g->oh * g->ow;
    if (total == 0)
        return;
    HCNN_LAUNCH(avgpool_fwd_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream,
                *g, x, total, y);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_avgpool_bwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy, int n,
                           float *dx)
{
    const size_t total = (size_t)n * g->c * g->h * g->w;
    if (total == 0)
        return;
    HCNN_LAUNCH(avgpool_bwd_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream,
                *g, dy, total, dx);
    HCNN_CUDA_LAUNCHED();
}
