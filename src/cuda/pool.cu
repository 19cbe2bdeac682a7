/* Max and average pooling of the CUDA backend, in either activation layout
 * (be->layout: NCHW [n][c][h][w], or NHWC [n][h][w][c]).  The forwards:
 * one thread per output, its window in the CPU's order.  The backwards
 * gather: one thread per input element adds the gradients of the outputs
 * whose window holds it, in output order, from 0, which is the order in
 * which the CPU's scatter adds them (src/cpu/pool.c): no atomics, the same
 * sums.  The NHWC kernels do the same arithmetic in the same order as the
 * NCHW ones, on other addresses (a thread's neighbours are the pixel's
 * other channels, so a warp's reads are contiguous), and give the same
 * bits.  The argmax is the window's first maximum as an index in the
 * image's plane, iy * w + ix, in both layouts; it is stored where y is
 * (NCHW: at y's index, NHWC: at y's NHWC index), and only maxpool_bwd of
 * the same layout reads it. */
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

/* ---- NHWC ---------------------------------------------------------------------- */

/* Element k of an NHWC tensor of planes ph x pw (pwdiv) and c channels
 * (cdiv): image *i, row *py, column *px, channel *ch.  The index within an
 * image fits 32 bits (HCNN_MAX_SAMPLE_FLOATS), so that two of the three
 * divisions are a launch's dividers (src/core/hd.h), as in layout.cu. */
static __device__ void nhwc_pos(size_t k, hcnn_hd_divider cdiv, hcnn_hd_divider pwdiv, int ph,
                                size_t *i, int *py, int *px, int *ch)
{
    const size_t img = (size_t)cdiv.d * pwdiv.d * (size_t)ph;
    *i = k / img;
    const uint32_t r = (uint32_t)(k - *i * img); /* (py * pw + px) * c + ch */
    const uint32_t pix = hcnn_hd_div(cdiv, r), row = hcnn_hd_div(pwdiv, pix);
    *ch = (int)(r - pix * cdiv.d);
    *py = (int)row;
    *px = (int)(pix - row * pwdiv.d);
}

/* output k = ((i * oh + oy) * ow + ox) * c + ch; the argmax as in NCHW:
 * iy * w + ix, the pixel in the image's plane (the channel is the
 * output's own) */
static __global__ void maxpool_fwd_nhwc_kernel(hcnn_pool_geom g, hcnn_hd_divider cdiv,
                                               hcnn_hd_divider owdiv, const float *x,
                                               size_t total, float *y, int32_t *argmax)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    size_t i;
    int oy, ox, ch;
    nhwc_pos(k, cdiv, owdiv, g.oh, &i, &oy, &ox, &ch);
    const float *xp = x + i * g.h * g.w * (size_t)g.c + ch;
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
            const float v = xp[(size_t)(iy * g.w + ix) * g.c];
            if (v > best || arg < 0) {
                best = v;
                arg = iy * g.w + ix;
            }
        }
    }
    y[k] = best;
    argmax[k] = arg;
}

/* input element k = ((i * h + iy) * w + ix) * c + ch: the outputs of its
 * channel whose window holds it, in the NCHW kernel's order */
static __global__ void maxpool_bwd_nhwc_kernel(hcnn_pool_geom g, hcnn_hd_divider cdiv,
                                               hcnn_hd_divider wdiv, const float *dy,
                                               const int32_t *argmax, size_t total, float *dx)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    size_t i;
    int iy, ix, ch;
    nhwc_pos(k, cdiv, wdiv, g.h, &i, &iy, &ix, &ch);
    const size_t base = i * g.oh * g.ow * (size_t)g.c + ch;
    const float *dyp = dy + base;
    const int32_t *ap = argmax + base;
    int y0, y1, x0, x1;
    hcnn_hd_window_outputs(iy, g.kh, g.sh, g.ph, g.oh, &y0, &y1);
    hcnn_hd_window_outputs(ix, g.kw, g.sw, g.pw, g.ow, &x0, &x1);
    const int32_t me = iy * g.w + ix;
    float s = 0.0f;
    for (int oy = y0; oy < y1; oy++)
        for (int ox = x0; ox < x1; ox++) {
            const size_t o = (size_t)(oy * g.ow + ox) * g.c;
            if (ap[o] == me)
                s += dyp[o];
        }
    dx[k] = s;
}

/* padding counted in the divisor, as avgpool_fwd_kernel */
static __global__ void avgpool_fwd_nhwc_kernel(hcnn_pool_geom g, hcnn_hd_divider cdiv,
                                               hcnn_hd_divider owdiv, const float *x,
                                               size_t total, float *y)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const float inv = 1.0f / (float)(g.kh * g.kw);
    size_t i;
    int oy, ox, ch;
    nhwc_pos(k, cdiv, owdiv, g.oh, &i, &oy, &ox, &ch);
    const float *xp = x + i * g.h * g.w * (size_t)g.c + ch;
    float s = 0.0f;
    for (int ki = 0; ki < g.kh; ki++) {
        const int iy = hcnn_hd_window_in(oy, ki, g.sh, g.ph);
        if (iy < 0 || iy >= g.h)
            continue;
        for (int kj = 0; kj < g.kw; kj++) {
            const int ix = hcnn_hd_window_in(ox, kj, g.sw, g.pw);
            if (ix >= 0 && ix < g.w)
                s += xp[(size_t)(iy * g.w + ix) * g.c];
        }
    }
    y[k] = s * inv;
}

static __global__ void avgpool_bwd_nhwc_kernel(hcnn_pool_geom g, hcnn_hd_divider cdiv,
                                               hcnn_hd_divider wdiv, const float *dy,
                                               size_t total, float *dx)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const float inv = 1.0f / (float)(g.kh * g.kw);
    size_t i;
    int iy, ix, ch;
    nhwc_pos(k, cdiv, wdiv, g.h, &i, &iy, &ix, &ch);
    const float *dyp = dy + i * g.oh * g.ow * (size_t)g.c + ch;
    int y0, y1, x0, x1;
    hcnn_hd_window_outputs(iy, g.kh, g.sh, g.ph, g.oh, &y0, &y1);
    hcnn_hd_window_outputs(ix, g.kw, g.sw, g.pw, g.ow, &x0, &x1);
    float s = 0.0f;
    for (int oy = y0; oy < y1; oy++)
        for (int ox = x0; ox < x1; ox++)
            s += dyp[(size_t)(oy * g.ow + ox) * g.c] * inv;
    dx[k] = s;
}

/* ---- the table's operations ------------------------------------------------------ */

static int nhwc(const hcnn_backend *be) { return be->layout == HCNN_LAYOUT_NHWC; }

void hcnn_cuda_maxpool_fwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n,
                           float *y, int32_t *argmax)
{
    const size_t total = (size_t)n * g->c * g->oh * g->ow;
    if (total == 0)
        return;
    if (nhwc(be))
        HCNN_LAUNCH(maxpool_fwd_nhwc_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, *g, hcnn_hd_divider_of((uint32_t)g->c),
                    hcnn_hd_divider_of((uint32_t)g->ow), x, total, y, argmax);
    else
        HCNN_LAUNCH(maxpool_fwd_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, *g, x, total, y, argmax);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_maxpool_bwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy,
                           const int32_t *argmax, int n, float *dx)
{
    const size_t total = (size_t)n * g->c * g->h * g->w;
    if (total == 0)
        return;
    if (nhwc(be))
        HCNN_LAUNCH(maxpool_bwd_nhwc_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, *g, hcnn_hd_divider_of((uint32_t)g->c),
                    hcnn_hd_divider_of((uint32_t)g->w), dy, argmax, total, dx);
    else
        HCNN_LAUNCH(maxpool_bwd_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, *g, dy, argmax, total, dx);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_avgpool_fwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n,
                           float *y)
{
    const size_t total = (size_t)n * g->c * g->oh * g->ow;
    if (total == 0)
        return;
    if (nhwc(be))
        HCNN_LAUNCH(avgpool_fwd_nhwc_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, *g, hcnn_hd_divider_of((uint32_t)g->c),
                    hcnn_hd_divider_of((uint32_t)g->ow), x, total, y);
    else
        HCNN_LAUNCH(avgpool_fwd_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, *g, x, total, y);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_avgpool_bwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy, int n,
                           float *dx)
{
    const size_t total = (size_t)n * g->c * g->h * g->w;
    if (total == 0)
        return;
    if (nhwc(be))
        HCNN_LAUNCH(avgpool_bwd_nhwc_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, *g, hcnn_hd_divider_of((uint32_t)g->c),
                    hcnn_hd_divider_of((uint32_t)g->w), dy, total, dx);
    else
        HCNN_LAUNCH(avgpool_bwd_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, *g, dy, total, dx);
    HCNN_CUDA_LAUNCHED();
}
