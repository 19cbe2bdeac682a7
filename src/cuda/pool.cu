/* Max and average pooling of the CUDA backend, in either activation layout
 * (be->layout: NCHW [n][c][h][w], or NHWC [n][h][w][c]).  The forwards:
 * one thread per output, its window in the CPU's order.  The backwards
 * gather: one thread per input element adds the gradients of the outputs
 * whose window holds it, in output order, from 0, which is the order in
 * which the CPU's scatter adds them (src/cpu/pool.c): no atomics, the same
 * sums.  Each kernel serves both layouts (a template argument): the same
 * arithmetic in the same order, on other addresses (in NHWC a thread's
 * neighbours are the pixel's other channels, so a warp's reads are
 * contiguous), so the same bits.  The argmax is the window's first maximum as an index in the
 * image's plane, iy * w + ix, in both layouts; it is stored where y is
 * (NCHW: at y's index, NHWC: at y's NHWC index), and only maxpool_bwd of
 * the same layout reads it. */
#include "cuda.h"

/* Element k of a tensor of planes ph x pw (pwdiv) and c channels (cdiv):
 * its pixel (*py, *px), and where its plane starts in the tensor on the
 * other side of the pooling, whose planes hold `other` pixels; a plane's
 * pixels lie g.c apart in NHWC, 1 in NCHW.
 *   NCHW: k = (plane * ph + py) * pw + px
 *   NHWC: k = ((i * ph + py) * pw + px) * c + ch; the index within an
 *         image fits 32 bits (HCNN_MAX_SAMPLE_FLOATS), so two of the three
 *         divisions are the launch's dividers (src/core/hd.h), as in layout.cu */
template <int NHWC>
static __device__ size_t pool_pos(size_t k, hcnn_hd_divider cdiv, hcnn_hd_divider pwdiv, int ph,
                                  size_t other, int *py, int *px)
{
    const size_t pw = pwdiv.d;
    if (!NHWC) {
        *px = (int)(k % pw), *py = (int)(k / pw % (size_t)ph);
        return k / ((size_t)ph * pw) * other;
    }
    const size_t img = (size_t)cdiv.d * pw * (size_t)ph, i = k / img;
    const uint32_t r = (uint32_t)(k - i * img); /* (py * pw + px) * c + ch */
    const uint32_t pix = hcnn_hd_div(cdiv, r), row = hcnn_hd_div(pwdiv, pix);
    *py = (int)row;
    *px = (int)(pix - row * pwdiv.d);
    return i * other * cdiv.d + (r - pix * cdiv.d);
}

/* output k: its window's first maximum, and where it is as iy * w + ix in
 * the image's plane (the channel is the output's own) */
template <int NHWC>
static __global__ void maxpool_fwd_kernel(hcnn_pool_geom g, hcnn_hd_divider cdiv,
                                          hcnn_hd_divider owdiv, const float *x, size_t total,
                                          float *y, int32_t *argmax)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    int oy, ox;
    const float *xp = x + pool_pos<NHWC>(k, cdiv, owdiv, g.oh, (size_t)g.h * g.w, &oy, &ox);
    const size_t st = NHWC ? (size_t)g.c : 1;
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
            const float v = xp[(size_t)(iy * g.w + ix) * st];
            if (v > best || arg < 0) {
                best = v;
                arg = iy * g.w + ix;
            }
        }
    }
    y[k] = best;
    argmax[k] = arg;
}

/* input element k: the gradients of the outputs of its plane whose
 * maximum it was, in output order */
template <int NHWC>
static __global__ void maxpool_bwd_kernel(hcnn_pool_geom g, hcnn_hd_divider cdiv,
                                          hcnn_hd_divider wdiv, const float *dy,
                                          const int32_t *argmax, size_t total, float *dx)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    int iy, ix;
    const size_t base = pool_pos<NHWC>(k, cdiv, wdiv, g.h, (size_t)g.oh * g.ow, &iy, &ix);
    const float *dyp = dy + base;
    const int32_t *ap = argmax + base;
    const size_t st = NHWC ? (size_t)g.c : 1;
    int y0, y1, x0, x1;
    hcnn_hd_window_outputs(iy, g.kh, g.sh, g.ph, g.oh, &y0, &y1);
    hcnn_hd_window_outputs(ix, g.kw, g.sw, g.pw, g.ow, &x0, &x1);
    const int32_t me = iy * g.w + ix;
    float s = 0.0f;
    for (int oy = y0; oy < y1; oy++)
        for (int ox = x0; ox < x1; ox++) {
            const size_t o = (size_t)(oy * g.ow + ox) * st;
            if (ap[o] == me)
                s += dyp[o];
        }
    dx[k] = s;
}

/* padding counted in the divisor (PyTorch's default) */
template <int NHWC>
static __global__ void avgpool_fwd_kernel(hcnn_pool_geom g, hcnn_hd_divider cdiv,
                                          hcnn_hd_divider owdiv, const float *x, size_t total,
                                          float *y)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const float inv = 1.0f / (float)(g.kh * g.kw);
    int oy, ox;
    const float *xp = x + pool_pos<NHWC>(k, cdiv, owdiv, g.oh, (size_t)g.h * g.w, &oy, &ox);
    const size_t st = NHWC ? (size_t)g.c : 1;
    float s = 0.0f;
    for (int ki = 0; ki < g.kh; ki++) {
        const int iy = hcnn_hd_window_in(oy, ki, g.sh, g.ph);
        if (iy < 0 || iy >= g.h)
            continue;
        for (int kj = 0; kj < g.kw; kj++) {
            const int ix = hcnn_hd_window_in(ox, kj, g.sw, g.pw);
            if (ix >= 0 && ix < g.w)
                s += xp[(size_t)(iy * g.w + ix) * st];
        }
    }
    y[k] = s * inv;
}

template <int NHWC>
static __global__ void avgpool_bwd_kernel(hcnn_pool_geom g, hcnn_hd_divider cdiv,
                                          hcnn_hd_divider wdiv, const float *dy, size_t total,
                                          float *dx)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const float inv = 1.0f / (float)(g.kh * g.kw);
    int iy, ix;
    const float *dyp = dy + pool_pos<NHWC>(k, cdiv, wdiv, g.h, (size_t)g.oh * g.ow, &iy, &ix);
    const size_t st = NHWC ? (size_t)g.c : 1;
    int y0, y1, x0, x1;
    hcnn_hd_window_outputs(iy, g.kh, g.sh, g.ph, g.oh, &y0, &y1);
    hcnn_hd_window_outputs(ix, g.kw, g.sw, g.pw, g.ow, &x0, &x1);
    float s = 0.0f;
    for (int oy = y0; oy < y1; oy++)
        for (int ox = x0; ox < x1; ox++)
            s += dyp[(size_t)(oy * g.ow + ox) * st] * inv;
    dx[k] = s;
}

/* ---- the table's operations ------------------------------------------------------ */

/* kernel<0> or kernel<1> as the instance's layout, over total elements
 * whose planes are pw wide: the dividers of c and pw first */
#define POOL_LAUNCH(be, kernel, total, g, pw, ...)                                                 \
    do {                                                                                           \
        const hcnn_hd_divider c_ = hcnn_hd_divider_of((uint32_t)(g)->c);                           \
        const hcnn_hd_divider w_ = hcnn_hd_divider_of((uint32_t)(pw));                             \
        if ((be)->layout == HCNN_LAYOUT_NHWC)                                                      \
            HCNN_LAUNCH(kernel<1>, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream,  \
                        *(g), c_, w_, __VA_ARGS__);                                                 \
        else                                                                                       \
            HCNN_LAUNCH(kernel<0>, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream,  \
                        *(g), c_, w_, __VA_ARGS__);                                                 \
        HCNN_CUDA_LAUNCHED();                                                                      \
    } while (0)

void hcnn_cuda_maxpool_fwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n,
                           float *y, int32_t *argmax)
{
    const size_t total = (size_t)n * g->c * g->oh * g->ow;
    if (total)
        POOL_LAUNCH(be, maxpool_fwd_kernel, total, g, g->ow, x, total, y, argmax);
}

void hcnn_cuda_maxpool_bwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy,
                           const int32_t *argmax, int n, float *dx)
{
    const size_t total = (size_t)n * g->c * g->h * g->w;
    if (total)
        POOL_LAUNCH(be, maxpool_bwd_kernel, total, g, g->w, dy, argmax, total, dx);
}

void hcnn_cuda_avgpool_fwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n,
                           float *y)
{
    const size_t total = (size_t)n * g->c * g->oh * g->ow;
    if (total)
        POOL_LAUNCH(be, avgpool_fwd_kernel, total, g, g->ow, x, total, y);
}

void hcnn_cuda_avgpool_bwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy, int n,
                           float *dx)
{
    const size_t total = (size_t)n * g->c * g->h * g->w;
    if (total)
        POOL_LAUNCH(be, avgpool_bwd_kernel, total, g, g->w, dy, total, dx);
}
