/* 2-D convolution of the CUDA backend as im2col + one cuBLAS GEMM over a
 * chunk of images, backward as GEMMs + col2im (Caffe's structure, as
 * src/cpu/conv.c).  With K = C*kh*kw and P = oh*ow, for a chunk of nb
 * images:
 *   col  = im2col(x)            [K][nb*P]
 *   Y    = W col                [Cout][nb*P]   W is [Cout][K]
 *   y    = nchw(Y) + b          [nb][Cout][P]
 * backward, with dY = cnp(dy)   [Cout][nb*P]:
 *   db  += the sum of dy over images and pixels (bias.cu)
 *   dW  += dY col^T             [Cout][K]      chunk after chunk, in order
 *   dcol = W^T dY               [K][nb*P]
 *   dx   = col2im(dcol)         (+ dx when accumulating)
 * For nb = 1 the GEMMs read and write the activations in place.  col2im
 * gathers: one thread per input element adds its taps in tap order (the
 * CPU's order), so no atomics and the same sums every run.  A chunk holds
 * as many images as cu->chunk_floats (128 MiB) of columns and GEMM output
 * allow.  The
 * index arithmetic is src/core/hd.h's.
 *
 * An NHWC backend (be->layout; x, y, dy, dx [n][h][w][c], the weights as
 * above) takes the same chunks with the columns pixel-major, whose GEMMs
 * read and write the activations in place (im2col_nhwc_kernel, col2im_kernel<1>):
 *   col  = im2col(x)            [nb*P][K]      K ordered (ci, ki, kj) as W's
 *   y    = col W^T              [nb*P][Cout]   the chunk's NHWC output
 *   y   += b                    by rows
 * backward:
 *   db  += the sum of dy's rows (bias.cu)
 *   dW  += dy^T col             [Cout][K]      chunk after chunk, in order
 *   dcol = dy W                 [nb*P][K]
 *   dx   = col2im(dcol)         (+ dx when accumulating), gathered as above
 * The convolution gathers no batch-norm statistics in NHWC (bands 0: the
 * batch-norm takes them from its input).
 *
 * The data gradient of a stride-1 convolution has a second way, the
 * transposed one (data_transposed below):
 *   dx[ci][iy][ix] = sum over co, ki, kj of W[co][ci][ki][kj] dy[co][iy+ph-ki][ix+pw-kj]
 * is the forward convolution of dy (Cout channels, padded by kh-1-ph and
 * kw-1-pw) with the filters flipped and transposed,
 *   Wt[ci][co][a][b] = W[co][ci][kh-1-a][kw-1-b],
 * so im2col of dy and one GEMM of inner size Cout*kh*kw, run by the
 * forward's own code, where dcol = W^T dY has inner size Cout (64 in
 * ResNet-18's layer1) and writes K*nb*P floats for col2im to gather: that
 * GEMM, the longest kernel of the H100's FP32 step (2026-11-27,
 * sm80_xmma_gemm_..._nt: 3.6 ms of 20), and col2im (2.0 ms) are what it
 * replaces.  Its forward may also go by cuDNN (HCNN_WAY_TRANSPOSED_CUDNN,
 * FP32 and TF32: cuDNN's forward algorithm, on the H200 an implicit GEMM
 * for ResNet-18's shapes; the same shape as the layer's own forward where
 * Cin = Cout and the padding is half the kernel), where cuDNN's own
 * deterministic data-gradient algorithm was the slower one on the H200
 * (conv_choice.cu).  Other sums in another order: a run that
 * takes either has other bits than one that does not.
 *
 * Each pass runs by the way conv_choice.cu chose for the shape (cuda.h,
 * hcnn_conv_way): this file's im2col path in chunks as above, the same one
 * image at a time (chunks of one: NCHW's GEMMs then in place), the data
 * gradient transposed, or, where this build links cuDNN, conv_cudnn.cu's
 * plan (in bf16 its graphs); this file's ways are all of a build without
 * cuDNN and of the emulation. */
#include <stdio.h>

#include "cuda.h"


static int conv_k(const hcnn_conv_desc *d) { return d->g.c * d->g.kh * d->g.kw; }
static int conv_p(const hcnn_conv_desc *d) { return d->g.oh * d->g.ow; }

/* images of a chunk: its columns and output within the instance's chunk_floats (NHWC's
 * output is y itself, but its chunks are the same: one rule for both) */
static int chunk_images(const hcnn_backend *be, const hcnn_conv_desc *d, int n)
{
    const size_t per = ((size_t)conv_k(d) + (size_t)d->out_c) * conv_p(d);
    size_t nb = cuda_of(be)->chunk_floats / (per ? per : 1);
    nb = nb < 1 ? 1 : nb;
    return (size_t)n < nb ? (n > 0 ? n : 1) : (int)nb;
}

/* the im2col path's workspace for d over n images: a chunk's columns
 * (K x nb*P), and in NCHW its output (Cout x nb*P; NHWC writes in place) */
static size_t im2col_floats(const hcnn_backend *be, const hcnn_conv_desc *d, int n)
{
    const size_t nb = (size_t)chunk_images(be, d, n);
    const size_t outs = be->layout == HCNN_LAYOUT_NHWC ? 0 : (size_t)d->out_c;
    return nb * ((size_t)conv_k(d) + outs) * conv_p(d);
}

/* The index arithmetic below is 32-bit: a chunk's columns, outputs and
 * inputs stay under 2^32 elements (chunk_images), and its divisions by the
 * launch's sizes are hd.h's dividers (a multiply-high and a shift each; a
 * GPU's own 32-bit division is some 20 instructions). */

/* the divisors of an index kernel, worked out at its launch */
typedef struct im2col_divs {
    /* NCHW nb * P, NHWC kh * kw; P; ow; NHWC's kw and channel groups (NCHW: unused) */
    hcnn_hd_divider minor, np, ow, kw, groups;
} im2col_divs;
typedef struct col2im_divs {
    hcnn_hd_divider hw, w, c, sh, sw; /* h * w, w, c, the strides */
} col2im_divs;
typedef struct plane_divs {
    hcnn_hd_divider np, c; /* P, channels */
} plane_divs;

static hcnn_hd_divider div_of(int d) { return hcnn_hd_divider_of((uint32_t)d); }

/* With r = (ci*kh + ki)*kw + kj and q = i*P + oy*ow + ox:
 *   NCHW: col[r][q] from x[i][ci][iy][ix]
 *   NHWC: col[q][r] from x[i][iy][ix][ci]
 * Each thread works out its indices once and writes several elements
 * (one thread an element, with five divisions each, took 2.9 ms of
 * ResNet-18's 20 ms FP32 step at batch 128 on the H100, 2026-11-27: about
 * 4x what its 2.6 GB of columns a step take at the GPU's 3.35 TB/s), and
 * the threads of a warp store side by side.  The same values in the same
 * places as one thread an element: the columns do not depend on who
 * writes them. */

/* col[at] = val, or its bfloat16 in colb (bf16: the GEMM's input) */
static __device__ void col_store(float *col, __nv_bfloat16 *colb, size_t at, float val)
{
    if (colb)
        colb[at] = __float2bfloat16(val);
    else
        col[at] = val;
}

/* q = i*P + oy*ow + ox: its image and output pixel */
static __device__ void out_pixel(const im2col_divs *v, uint32_t q, uint32_t *i, uint32_t *oy,
                                 uint32_t *ox)
{
    *i = hcnn_hd_div(v->np, q);
    const uint32_t p = q - *i * v->np.d;
    *oy = hcnn_hd_div(v->ow, p), *ox = p - *oy * v->ow.d;
}

/* NCHW: one thread per window (ci, q) writes its kh*kw taps, as Caffe's
 * im2col_gpu_kernel: three divisions a window; neighbouring threads hold
 * neighbouring q, so a warp's stores of a tap fill one stretch of a row
 * of col (and its loads one stretch of a row of x) */
static __global__ void im2col_kernel(hcnn_conv_geom g, im2col_divs v, const float *x,
                                     unsigned total, float *col, __nv_bfloat16 *colb)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const uint32_t kk = (uint32_t)k; /* ci * cols + q */
    const uint32_t ci = hcnn_hd_div(v.minor, kk), q = kk - ci * v.minor.d;
    uint32_t i, oy, ox;
    out_pixel(&v, q, &i, &oy, &ox);
    const size_t cols = v.minor.d;
    size_t at = (size_t)ci * g.kh * g.kw * cols + q; /* col[ci*kh*kw][q], a row a tap */
    const float *xc = x + ((size_t)i * g.c + ci) * g.h * g.w;
    for (int ki = 0; ki < g.kh; ki++) {
        const int iy = hcnn_hd_window_in((int)oy, ki, g.sh, g.ph);
        for (int kj = 0; kj < g.kw; kj++, at += cols) {
            const int ix = hcnn_hd_window_in((int)ox, kj, g.sw, g.pw);
            const int inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
            col_store(col, colb, at, inside ? xc[(size_t)iy * g.w + ix] : 0.0f);
        }
    }
}

/* NHWC: one thread per output pixel q, group of IM2COL_NHWC_GROUP
 * channels and tap (ki, kj) writes that tap for each channel of its group:
 * five divisions a thread, then a load and a store a channel.
 * Neighbouring threads hold neighbouring taps, so a warp's stores of a
 * channel fill the kh*kw floats of that channel in a row of col (a thread
 * per window, as NCHW's, would store kh*kw floats apart); the groups keep
 * enough threads for the memory (a thread per tap walking every channel:
 * ResNet-18's layer4 at batch 128 would have 18432 threads, each walking
 * up to 512 channels one after another). */
#define IM2COL_NHWC_GROUP 8
static __global__ void im2col_nhwc_kernel(hcnn_conv_geom g, im2col_divs v, const float *x,
                                          unsigned total, float *col, __nv_bfloat16 *colb)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const uint32_t kk = (uint32_t)k; /* (q * groups + group) * taps + t */
    const uint32_t qg = hcnn_hd_div(v.minor, kk), t = kk - qg * v.minor.d;
    const uint32_t q = hcnn_hd_div(v.groups, qg), group = qg - q * v.groups.d;
    const uint32_t ki = hcnn_hd_div(v.kw, t), kj = t - ki * v.kw.d;
    uint32_t i, oy, ox;
    out_pixel(&v, q, &i, &oy, &ox);
    const int iy = hcnn_hd_window_in((int)oy, (int)ki, g.sh, g.ph);
    const int ix = hcnn_hd_window_in((int)ox, (int)kj, g.sw, g.pw);
    const int inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
    const size_t taps = v.minor.d;
    const int c0 = (int)group * IM2COL_NHWC_GROUP;
    const int c1 = c0 + IM2COL_NHWC_GROUP < g.c ? c0 + IM2COL_NHWC_GROUP : g.c;
    size_t at = ((size_t)q * g.c + c0) * taps + t; /* col[q][ci*taps + t], ci from c0 */
    const float *px = inside ? x + (((size_t)i * g.h + iy) * g.w + ix) * g.c : NULL;
    for (int ci = c0; ci < c1; ci++, at += taps)
        col_store(col, colb, at, px ? px[ci] : 0.0f);
}

/* dx[i][ci][iy][ix] (NHWC: dx[i][iy][ix][ci]) (+)= the columns that read
 * it, taps in order.  Output row oy reads input row iy at tap ki where oy *
 * sh = iy + ph - ki: ki = (iy + ph) mod sh, then every sh-th tap, oy one
 * less each time, while oy >= 0 (rows past oh skipped); so for columns.
 * Two divisions by the strides a thread, instead of up to two a tap (which
 * took 2.0 ms of the same 20 ms step), besides the three of its index. */
template <int NHWC>
static __global__ void col2im_kernel(hcnn_conv_geom g, col2im_divs v, const float *col, int nb,
                                     unsigned total, int acc, float *dx)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const uint32_t kk = (uint32_t)k;
    uint32_t i, ci, plane;
    if (NHWC) { /* k = (i*h*w + plane)*c + ci */
        const uint32_t px = hcnn_hd_div(v.c, kk);
        ci = kk - px * v.c.d, i = hcnn_hd_div(v.hw, px), plane = px - i * v.hw.d;
    } else { /* k = (i*c + ci)*h*w + plane */
        const uint32_t ic = hcnn_hd_div(v.hw, kk);
        plane = kk - ic * v.hw.d, i = hcnn_hd_div(v.c, ic), ci = ic - i * v.c.d;
    }
    const uint32_t iyu = hcnn_hd_div(v.w, plane), ixu = plane - iyu * v.w.d;
    const uint32_t ty = iyu + (uint32_t)g.ph, tx = ixu + (uint32_t)g.pw;
    const uint32_t oy0 = hcnn_hd_div(v.sh, ty), ox0 = hcnn_hd_div(v.sw, tx);
    const int ki0 = (int)(ty - oy0 * v.sh.d), kj0 = (int)(tx - ox0 * v.sw.d);
    const size_t P = (size_t)g.oh * g.ow, cols = (size_t)nb * P, K = (size_t)g.c * g.kh * g.kw;
    float s = acc ? dx[k] : 0.0f;
    for (int ki = ki0, oy = (int)oy0; ki < g.kh && oy >= 0; ki += g.sh, oy--) {
        if (oy >= g.oh)
            continue;
        for (int kj = kj0, ox = (int)ox0; kj < g.kw && ox >= 0; kj += g.sw, ox--) {
            if (ox >= g.ow)
                continue;
            const size_t r = ((size_t)ci * g.kh + ki) * g.kw + kj;
            const size_t q = (size_t)i * P + (size_t)oy * g.ow + ox;
            s += col[NHWC ? q * K + r : r * cols + q];
        }
    }
    dx[k] = s;
}

/* y[i][co][p] (+ y when acc) = Y[co][i*P + p] + bias[co] (bias may be
 * NULL), then the ReLU if relu (acc: the transposed data gradient, which
 * has neither) */
static __global__ void cnp_to_nchw_kernel(const float *Y, const float *bias, plane_divs v, int nb,
                                          unsigned total, int relu, int acc, float *y)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const uint32_t kk = (uint32_t)k, ic = hcnn_hd_div(v.np, kk), p = kk - ic * v.np.d;
    const uint32_t i = hcnn_hd_div(v.c, ic), co = ic - i * v.c.d;
    const float val = Y[((size_t)co * nb + i) * v.np.d + p];
    const float biased = bias ? val + bias[co] : val;
    const float out = acc ? biased + y[k] : biased; /* (not + 0: a -0 stays -0) */
    y[k] = relu ? hcnn_hd_relu(out) : out;
}

/* Wt[ci][co][t] = W[co][ci][taps-1-t]: the filters transposed and flipped
 * in both directions (t = a*kw + b: (kh-1-a)*kw + kw-1-b = taps-1-t); a
 * pass over the weights, so plain divisions */
static __global__ void flip_filters_kernel(const float *w, int cout, int cin, int taps,
                                           unsigned total, float *wt)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const unsigned t = (unsigned)k % (unsigned)taps, r = (unsigned)k / (unsigned)taps;
    const unsigned co = r % (unsigned)cout, ci = r / (unsigned)cout;
    wt[k] = w[((size_t)co * cin + ci) * taps + (taps - 1 - t)];
}

/* dY[co][i*P + p] = dy[i][co][p] (dYb: as bfloat16 instead) */
static __global__ void nchw_to_cnp_kernel(const float *dy, plane_divs v, int nb, unsigned total,
                                          float *dY, __nv_bfloat16 *dYb)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const uint32_t kk = (uint32_t)k, ic = hcnn_hd_div(v.np, kk), p = kk - ic * v.np.d;
    const uint32_t i = hcnn_hd_div(v.c, ic), co = ic - i * v.c.d;
    const size_t at = ((size_t)co * nb + i) * v.np.d + p;
    if (dYb)
        dYb[at] = __float2bfloat16(dy[k]);
    else
        dY[at] = dy[k];
}

/* a chunk's element count as the kernels' 32-bit total */
static unsigned chunk_total(size_t total)
{
    if (total > 0xffffffffu)
        hcnn_cuda_fail("convolution", __FILE__, __LINE__,
                       "a chunk of more than 2^32 elements (chunk_images keeps them below)");
    return (unsigned)total;
}

static void im2col(const hcnn_backend *be, const hcnn_conv_desc *d, const float *x, int nb,
                   float *col, __nv_bfloat16 *colb)
{
    const unsigned elements = chunk_total((size_t)conv_k(d) * nb * conv_p(d));
    const uint32_t taps = (uint32_t)(d->g.kh * d->g.kw), cols = (uint32_t)nb * (uint32_t)conv_p(d);
    if (elements == 0)
        return;
    /* the threads: NCHW a window each (c * cols), NHWC a tap of an output
     * pixel for a group of channels (cols * groups * taps, at most
     * elements: a group holds a channel or more) */
    if (be->layout == HCNN_LAYOUT_NHWC) {
        const uint32_t groups = ((uint32_t)d->g.c + IM2COL_NHWC_GROUP - 1) / IM2COL_NHWC_GROUP;
        const unsigned total = cols * groups * taps;
        const im2col_divs v = {hcnn_hd_divider_of(taps), div_of(conv_p(d)), div_of(d->g.ow),
                               div_of(d->g.kw), hcnn_hd_divider_of(groups)};
        HCNN_LAUNCH(im2col_nhwc_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, d->g, v, x, total, col, colb);
    } else {
        const unsigned total = (unsigned)d->g.c * cols;
        const im2col_divs v = {hcnn_hd_divider_of(cols), div_of(conv_p(d)), div_of(d->g.ow),
                               div_of(1), div_of(1)};
        HCNN_LAUNCH(im2col_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream,
                    d->g, v, x, total, col, colb);
    }
    HCNN_CUDA_LAUNCHED();
}

/* dx (+)= col2im(col) over a chunk of nb images */
static void col2im(const hcnn_backend *be, const hcnn_conv_desc *d, const float *col, int nb,
                   int acc, float *dx)
{
    const unsigned total = chunk_total((size_t)nb * d->g.c * d->g.h * d->g.w);
    if (total == 0)
        return;
    const col2im_divs v = {div_of(d->g.h * d->g.w), div_of(d->g.w), div_of(d->g.c),
                           div_of(d->g.sh), div_of(d->g.sw)};
    if (be->layout == HCNN_LAYOUT_NHWC)
        HCNN_LAUNCH(col2im_kernel<1>, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, d->g, v, col, nb, total, acc, dx);
    else
        HCNN_LAUNCH(col2im_kernel<0>, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, d->g, v, col, nb, total, acc, dx);
    HCNN_CUDA_LAUNCHED();
}

/* Precision bf16: the GEMMs' inputs are rounded to bfloat16 where they are
 * made (im2col's columns, the channel-major dY) and the weights once a
 * call, instead of hcnn_cuda_gemm rounding both operands of every GEMM: on
 * the H200 (2026-11-27) those conversions took 4.1 ms of ResNet-18's 21 ms
 * bf16 step at batch 128 (190 calls a step), besides im2col's 7.5 ms of
 * writing FP32 columns only to have them converted.  The same bfloat16
 * values reach the same GEMMs as before.  The parts lie in the backend's
 * bf16 buffer (hcnn_cuda_bf16_buffer). */
typedef struct bf16_parts {
    __nv_bfloat16 *w, *dy, *col; /* all NULL: FP32 or TF32 */
} bf16_parts;

static bf16_parts bf16_parts_for(const hcnn_backend *be, const hcnn_conv_desc *d, const float *w,
                                 int nb, int with_dy)
{
    bf16_parts bp = {NULL, NULL, NULL};
    if (cuda_of(be)->precision != HCNN_PRECISION_BF16)
        return bp;
    const size_t nw = (size_t)d->out_c * conv_k(d), np = (size_t)nb * conv_p(d);
    const size_t ndy = with_dy ? (size_t)d->out_c * np : 0, ncol = (size_t)conv_k(d) * np;
    bp.w = hcnn_cuda_bf16_buffer(be, hcnn_cuda_bf16_padded(nw) + hcnn_cuda_bf16_padded(ndy) + ncol);
    bp.dy = bp.w + hcnn_cuda_bf16_padded(nw);
    bp.col = bp.dy + hcnn_cuda_bf16_padded(ndy);
    if (w)
        hcnn_cuda_to_bf16(be, w, nw, bp.w);
    return bp;
}

/* C = op(A) op(B) + beta C, of the FP32 operands, or of their bf16 copies
 * (abf, bbf) where the call is in bf16 */
static void conv_gemm(const hcnn_backend *be, int ta, int tb, int m, int n, int k, const float *a,
                      const __nv_bfloat16 *abf, int lda, const float *b, const __nv_bfloat16 *bbf,
                      int ldb, float beta, float *c, int ldc)
{
    if (abf)
        hcnn_cuda_gemm_bf16(be, ta, tb, m, n, k, 1.0f, abf, lda, bbf, ldb, beta, c, ldc);
    else
        hcnn_cuda_gemm(be, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

/* the chunk's columns, then its output (ex->ws, sized by conv_workspace; NHWC:
 * the columns only) */
static float *chunk_col(const hcnn_exec *ex) { return ex->ws; }
static float *chunk_out(const hcnn_conv_desc *d, const hcnn_exec *ex, int nb)
{
    return ex->ws + (size_t)conv_k(d) * nb * conv_p(d);
}

/* the images of a chunk of the im2col ways */
static int way_chunk(const hcnn_backend *be, const hcnn_conv_desc *d, int n, hcnn_conv_way way)
{
    return way == HCNN_WAY_IM2COL_IMAGE ? 1 : chunk_images(be, d, n);
}

/* cuDNN's plan where the pass's way is one of cuDNN's (direct sums, or
 * Winograd's) and it has one for the pass within ex's workspace */
static const hcnn_cudnn_conv *way_plan(const hcnn_backend *be, const hcnn_conv_desc *d,
                                       const hcnn_exec *ex, int n, hcnn_conv_way way, int pass)
{
    const size_t limit = ex->ws_floats * sizeof(float);
    const hcnn_cudnn_conv *p =
        way == HCNN_WAY_CUDNN            ? hcnn_cudnn_conv_for(be, d, n, limit)
        : way == HCNN_WAY_WINOGRAD_CUDNN ? hcnn_cudnn_conv_winograd_for(be, d, n, limit)
                                         : NULL;
    return hcnn_cudnn_conv_has(p, pass) ? p : NULL;
}

/* y += b (b NULL: nothing), then the ReLU if relu, over n images in the
 * backend's layout: one pass, the forward's last */
static void bias_relu(const hcnn_backend *be, const hcnn_conv_desc *d, float *y, const float *b,
                      int n, int relu)
{
    const int P = conv_p(d), co = d->out_c;
    if (b && be->layout == HCNN_LAYOUT_NHWC)
        hcnn_cuda_add_row_bias_relu(be, y, b, n * P, co, relu);
    else if (b)
        hcnn_cuda_add_channel_bias_relu(be, y, b, n, co, P, relu);
    else if (relu)
        hcnn_cuda_relu_fwd(be, y, y, (size_t)n * co * P, 0.0f);
}

/* y = conv(x, w) + b (b NULL: none), then the ReLU if relu, by im2col +
 * cuBLAS over chunks of `chunk` images; acc: y += conv(x, w) instead (b
 * NULL, no ReLU: the transposed data gradient) */
static void forward_im2col(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                           const float *x, const float *w, const float *b, float *y, int n,
                           int chunk, int relu, int acc)
{
    const int K = conv_k(d), P = conv_p(d), co = d->out_c;
    const size_t in_sz = (size_t)d->g.c * d->g.h * d->g.w, out_sz = (size_t)co * P;
    const float beta = acc ? 1.0f : 0.0f;
    const bf16_parts bp = bf16_parts_for(be, d, w, chunk, 0);
    if (be->layout == HCNN_LAYOUT_NHWC) {
        for (int i0 = 0; i0 < n; i0 += chunk) {
            const int nb = n - i0 < chunk ? n - i0 : chunk;
            float *col = chunk_col(ex);
            im2col(be, d, x + (size_t)i0 * in_sz, nb, col, bp.col);
            conv_gemm(be, 0, 1, nb * P, co, K, col, bp.col, K, w, bp.w, K, beta,
                      y + (size_t)i0 * out_sz, co);
        }
        bias_relu(be, d, y, b, n, relu);
        return;
    }
    for (int i0 = 0; i0 < n; i0 += chunk) {
        const int nb = n - i0 < chunk ? n - i0 : chunk;
        float *col = chunk_col(ex), *yi = y + (size_t)i0 * out_sz;
        im2col(be, d, x + (size_t)i0 * in_sz, nb, col, bp.col);
        if (nb == 1) { /* [Cout][P] is the image's NCHW output */
            conv_gemm(be, 0, 0, co, P, K, w, bp.w, K, col, bp.col, P, beta, yi, P);
            bias_relu(be, d, yi, b, 1, relu);
            continue;
        }
        float *Y = chunk_out(d, ex, nb);
        conv_gemm(be, 0, 0, co, nb * P, K, w, bp.w, K, col, bp.col, nb * P, 0.0f, Y, nb * P);
        const unsigned total = chunk_total((size_t)nb * out_sz);
        const plane_divs v = {div_of(P), div_of(co)};
        HCNN_LAUNCH(cnp_to_nchw_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, (const float *)Y, b, v, nb, total, relu, acc, yi);
        HCNN_CUDA_LAUNCHED();
    }
}

void hcnn_cuda_conv_fwd_by(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                           const float *x, const float *w, const float *b, float *y, int n,
                           hcnn_conv_way way)
{
    const int relu = ex->relu; /* the ReLU after the convolution (backend.h, conv_relu) */
    const hcnn_cudnn_conv *dnn = way_plan(be, d, ex, n, way, HCNN_PASS_FORWARD);
    if (dnn && !hcnn_cudnn_conv_aligned(dnn, HCNN_PASS_FORWARD, y))
        dnn = NULL;
    const int nhwc = be->layout == HCNN_LAYOUT_NHWC;
    /* what cuDNN's engine added of the bias and the ReLU (the rest here);
     * a call cuDNN refuses takes the im2col path below */
    const int done = dnn ? hcnn_cudnn_conv_fwd(be, dnn, ex, x, w, b, y) : HCNN_CUDNN_REFUSED;
    if (done != HCNN_CUDNN_REFUSED) {
        bias_relu(be, d, y, done & HCNN_CUDNN_DID_BIAS ? NULL : b, n,
                  relu && !(done & HCNN_CUDNN_DID_RELU));
        if (ex->stats && nhwc) /* none gathered, as on the im2col path below */
            ex->stats->bands = 0, ex->stats->band_px = 0;
        else if (ex->stats) /* the next batch-norm's statistics (backend.h): by planes */
            hcnn_cuda_bn_gather(be, y, n, d->out_c, conv_p(d), ex->stats);
        return;
    }
    forward_im2col(be, d, ex, x, w, b, y, n, way_chunk(be, d, n, way), relu, 0);
    if (ex->stats && nhwc)
        /* No statistics gathered: bn.cu gathers them by planes, which NHWC
         * does not have; bands 0 has the batch-norm read them from y. */
        ex->stats->bands = 0, ex->stats->band_px = 0;
    else if (ex->stats) /* the next batch-norm's statistics (backend.h): by planes, after the
                         * kernels that wrote them (a pass over y the batch-norm then skips) */
        hcnn_cuda_bn_gather(be, y, n, d->out_c, conv_p(d), ex->stats);
}

/* The im2col path's backward over chunks of `chunk` images: dw += (dw not
 * NULL), dx = or += (dx not NULL). */
static void backward_im2col(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                            const float *x, const float *w, const float *dy, float *dw, float *dx,
                            int dx_acc, int n, int chunk)
{
    const int K = conv_k(d), P = conv_p(d), co = d->out_c;
    const size_t in_sz = (size_t)d->g.c * d->g.h * d->g.w, out_sz = (size_t)co * P;
    const int nhwc = be->layout == HCNN_LAYOUT_NHWC;
    const bf16_parts bp = bf16_parts_for(be, d, dx ? w : NULL, chunk, 1);
    if (nhwc) {
        for (int i0 = 0; i0 < n; i0 += chunk) {
            const int nb = n - i0 < chunk ? n - i0 : chunk;
            float *col = chunk_col(ex);
            const float *dyi = dy + (size_t)i0 * out_sz; /* [nb*P][Cout] as it is */
            if (bp.dy)
                hcnn_cuda_to_bf16(be, dyi, (size_t)nb * out_sz, bp.dy);
            if (dw) {
                im2col(be, d, x + (size_t)i0 * in_sz, nb, col, bp.col);
                conv_gemm(be, 1, 0, co, K, nb * P, dyi, bp.dy, co, col, bp.col, K, 1.0f, dw, K);
            }
            if (dx) {
                conv_gemm(be, 0, 0, nb * P, K, co, dyi, bp.dy, co, w, bp.w, K, 0.0f, col, K);
                col2im(be, d, col, nb, dx_acc, dx + (size_t)i0 * in_sz);
            }
        }
        return;
    }
    for (int i0 = 0; i0 < n; i0 += chunk) {
        const int nb = n - i0 < chunk ? n - i0 : chunk;
        float *col = chunk_col(ex);
        const float *dyi = dy + (size_t)i0 * out_sz, *g = dyi;
        if (nb > 1) { /* dY, channel-major */
            float *dY = chunk_out(d, ex, nb);
            const unsigned total = chunk_total((size_t)nb * out_sz);
            const plane_divs v = {div_of(P), div_of(co)};
            HCNN_LAUNCH(nchw_to_cnp_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                        cuda_of(be)->stream, dyi, v, nb, total, dY, bp.dy);
            HCNN_CUDA_LAUNCHED();
            g = dY;
        } else if (bp.dy) {
            hcnn_cuda_to_bf16(be, dyi, out_sz, bp.dy);
        }
        if (dw) {
            im2col(be, d, x + (size_t)i0 * in_sz, nb, col, bp.col);
            conv_gemm(be, 0, 1, co, K, nb * P, g, bp.dy, nb * P, col, bp.col, nb * P, 1.0f, dw, K);
        }
        if (dx) {
            conv_gemm(be, 1, 0, K, nb * P, co, w, bp.w, K, g, bp.dy, nb * P, 0.0f, col, nb * P);
            col2im(be, d, col, nb, dx_acc, dx + (size_t)i0 * in_sz);
        }
    }
}

/* ---- the transposed data gradient (stride 1; see the top) ---- */

int hcnn_cuda_conv_transposable(const hcnn_conv_desc *d)
{
    return d->g.sh == 1 && d->g.sw == 1 && d->g.ph < d->g.kh && d->g.pw < d->g.kw;
}

/* the convolution whose forward is d's data gradient: over dy (Cout
 * channels, oh x ow), padded by kh-1-ph and kw-1-pw, to Cin channels of h
 * x w (oh + kh-1 - 2ph = h at stride 1) */
static hcnn_conv_desc transposed_desc(const hcnn_conv_desc *d)
{
    hcnn_conv_desc t = *d;
    const hcnn_conv_geom *g = &d->g;
    t.g.c = d->out_c, t.g.h = g->oh, t.g.w = g->ow;
    t.g.ph = g->kh - 1 - g->ph, t.g.pw = g->kw - 1 - g->pw;
    t.g.oh = g->h, t.g.ow = g->w;
    t.out_c = g->c;
    t.cache = NULL;
    return t;
}

/* the flipped filters' floats, ahead of the forward's columns in the
 * workspace (rounded to 64 floats: the columns stay 256-byte aligned) */
static size_t flipped_floats(const hcnn_conv_desc *d)
{
    return ((size_t)d->out_c * conv_k(d) + 63) / 64 * 64;
}

const hcnn_cudnn_conv *hcnn_cuda_conv_transposed_plan(const hcnn_backend *be,
                                                      const hcnn_conv_desc *d, int n, size_t limit)
{
    if (!hcnn_cuda_conv_transposable(d) || cuda_of(be)->precision == HCNN_PRECISION_BF16)
        return NULL;
    const hcnn_conv_desc t = transposed_desc(d);
    const hcnn_cudnn_conv *p = hcnn_cudnn_conv_for(be, &t, n, limit);
    return hcnn_cudnn_conv_has(p, HCNN_PASS_FORWARD) ? p : NULL;
}

/* the flipped filters, then the transposed forward's columns (and NCHW's
 * output), or cuDNN's workspace for it where it has a plan and needs more
 * and the way may be taken (measured, or named by HCNN_CUDA_CONV: no plan
 * made, and no workspace kept, for a way no pass can take) */
static size_t transposed_workspace(const hcnn_backend *be, const hcnn_conv_desc *d, int n)
{
    const hcnn_cuda *cu = cuda_of(be);
    const hcnn_conv_desc t = transposed_desc(d);
    size_t rest = im2col_floats(be, &t, n);
    const int may = cu->conv_mode != HCNN_CONV_MODE_FORCED ||
                    hcnn_cuda_conv_forces(cu, HCNN_WAY_TRANSPOSED_CUDNN);
    const hcnn_cudnn_conv *p =
        may ? hcnn_cuda_conv_transposed_plan(be, d, n, HCNN_CUDNN_ANY_WORKSPACE) : NULL;
    if (p && hcnn_cudnn_conv_workspace(p) > rest)
        rest = hcnn_cudnn_conv_workspace(p);
    return flipped_floats(d) + rest;
}

/* dx = (or +=) the forward of dy by the flipped filters: by cuDNN where
 * asked (by_cudnn) and it has a plan within the workspace, else by im2col
 * in the transposed convolution's own chunks */
static void data_transposed(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                            const float *w, const float *dy, float *dx, int dx_acc, int n,
                            int by_cudnn)
{
    const hcnn_conv_desc t = transposed_desc(d);
    const unsigned total = chunk_total((size_t)d->out_c * conv_k(d));
    if (ex->ws_floats < flipped_floats(d))
        hcnn_cuda_fail("convolution", __FILE__, __LINE__,
                       "a workspace smaller than the flipped filters (conv_workspace sizes it)");
    float *wt = ex->ws;
    HCNN_LAUNCH(flip_filters_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK,
                cuda_of(be)->stream, w, d->out_c, d->g.c, d->g.kh * d->g.kw, total, wt);
    HCNN_CUDA_LAUNCHED();
    hcnn_exec et = *ex;
    et.ws = ex->ws + flipped_floats(d);
    et.ws_floats = ex->ws_floats - flipped_floats(d);
    et.stats = NULL, et.relu = 0;
    const hcnn_cudnn_conv *p =
        by_cudnn ? hcnn_cuda_conv_transposed_plan(be, d, n, et.ws_floats * sizeof(float)) : NULL;
    if (!p || hcnn_cudnn_conv_fwd_into(be, p, &et, dy, wt, dx_acc, dx) == HCNN_CUDNN_REFUSED)
        forward_im2col(be, &t, &et, dy, wt, NULL, dx, n, chunk_images(be, &t, n), 0, dx_acc);
}

void hcnn_cuda_conv_bwd_by(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                           const float *x, const float *w, const float *dy, float *dw, float *dx,
                           int dx_acc, int n, hcnn_conv_way filter, hcnn_conv_way data)
{
    const hcnn_cudnn_conv *dnn_w = dw ? way_plan(be, d, ex, n, filter, HCNN_PASS_FILTER) : NULL;
    const hcnn_cudnn_conv *dnn_x = dx ? way_plan(be, d, ex, n, data, HCNN_PASS_DATA) : NULL;
    if (dnn_x && !hcnn_cudnn_conv_aligned(dnn_x, HCNN_PASS_DATA, dx))
        dnn_x = NULL;
    /* each gradient cuDNN runs is done; one it refuses is left to the ways below */
    if (dnn_w && dnn_w == dnn_x) { /* both by one plan (in bf16, dy rounded once) */
        const int left = hcnn_cudnn_conv_bwd(be, dnn_w, ex, x, w, dy, dw, dx, dx_acc);
        if (!left)
            return;
        dw = left & HCNN_CUDNN_LEFT_FILTER ? dw : NULL;
        dx = left & HCNN_CUDNN_LEFT_DATA ? dx : NULL;
        dnn_w = dnn_x = NULL;
    }
    if (dnn_w && hcnn_cudnn_conv_bwd_filter(be, dnn_w, ex, x, dy, dw) != HCNN_CUDNN_REFUSED)
        dw = NULL;
    if (dnn_x && hcnn_cudnn_conv_bwd_data(be, dnn_x, ex, w, dy, dx, dx_acc) != HCNN_CUDNN_REFUSED)
        dx = NULL;
    if (dx && (data == HCNN_WAY_TRANSPOSED || data == HCNN_WAY_TRANSPOSED_CUDNN) &&
        hcnn_cuda_conv_transposable(d)) {
        data_transposed(be, d, ex, w, dy, dx, dx_acc, n, data == HCNN_WAY_TRANSPOSED_CUDNN);
        dx = NULL;
    }
    /* what is left by im2col: both gradients in one walk over the chunks
     * where their chunks agree (one channel-major dY for both) */
    const int cw = way_chunk(be, d, n, filter), cx = way_chunk(be, d, n, data);
    if (dw && dx && cw == cx) {
        backward_im2col(be, d, ex, x, w, dy, dw, dx, dx_acc, n, cw);
        return;
    }
    if (dw)
        backward_im2col(be, d, ex, x, NULL, dy, dw, NULL, 0, n, cw);
    if (dx)
        backward_im2col(be, d, ex, NULL, w, dy, NULL, dx, dx_acc, n, cx);
}

size_t hcnn_cuda_conv_im2col_workspace(const hcnn_backend *be, const hcnn_conv_desc *d, int n)
{
    const size_t cols = im2col_floats(be, d, n);
    /* the transposed way wherever the shape has it: a lower rank's choice
     * may give it to this rank after the sizing */
    const size_t tr = hcnn_cuda_conv_transposable(d) ? transposed_workspace(be, d, n) : 0;
    return tr > cols ? tr : cols;
}

void hcnn_cuda_conv_gemms_by(const hcnn_backend *be, const hcnn_conv_desc *d, int n, int need_dx,
                             hcnn_conv_way data, hcnn_gemm_list *gl)
{
    const int K = conv_k(d), P = conv_p(d), co = d->out_c, chunk = chunk_images(be, d, n);
    const int nhwc = be->layout == HCNN_LAYOUT_NHWC;
    /* the data gradient transposed: its forward's GEMMs instead of dcol's
     * (the reference of a cuDNN way stays the im2col path's) */
    const int transposed =
        need_dx && hcnn_cuda_conv_transposable(d) && data == HCNN_WAY_TRANSPOSED;
    for (int i0 = 0; i0 < n; i0 += chunk) {
        const int nb = n - i0 < chunk ? n - i0 : chunk;
        if (nhwc) { /* conv_fwd's and conv_backward's NHWC GEMMs */
            hcnn_gemm_push(gl, 0, 0, 1, nb * P, co, K, 0);
            hcnn_gemm_push(gl, 1, 1, 0, co, K, nb * P, 0);
            if (need_dx && !transposed)
                hcnn_gemm_push(gl, 1, 0, 0, nb * P, K, co, 0);
            continue;
        }
        hcnn_gemm_push(gl, 0, 0, 0, co, nb * P, K, 0);
        hcnn_gemm_push(gl, 1, 0, 1, co, K, nb * P, 0);
        if (need_dx && !transposed)
            hcnn_gemm_push(gl, 1, 1, 0, K, nb * P, co, 0);
    }
    if (transposed) { /* forward_im2col's over the transposed convolution's chunks */
        const hcnn_conv_desc t = transposed_desc(d);
        const int Kt = conv_k(&t), Pt = conv_p(&t), ct = t.out_c, chunk_t = chunk_images(be, &t, n);
        for (int i0 = 0; i0 < n; i0 += chunk_t) {
            const int nb = n - i0 < chunk_t ? n - i0 : chunk_t;
            if (nhwc)
                hcnn_gemm_push(gl, 1, 0, 1, nb * Pt, ct, Kt, 0);
            else
                hcnn_gemm_push(gl, 1, 0, 0, ct, nb * Pt, Kt, 0);
        }
    }
    gl->flops += 2.0 * K * co * (double)P * n * (need_dx ? 3 : 2);
}

int hcnn_cuda_conv_chunk_images(const hcnn_backend *be, const hcnn_conv_desc *d, int n)
{
    return chunk_images(be, d, n);
}

void hcnn_cuda_conv_way_describe(const hcnn_backend *be, const hcnn_conv_desc *d, int n,
                                 hcnn_conv_way way, char *buf, size_t cap)
{
    const char *nhwc = be->layout == HCNN_LAYOUT_NHWC ? ", NHWC" : "";
    const int transposed = (way == HCNN_WAY_TRANSPOSED || way == HCNN_WAY_TRANSPOSED_CUDNN) &&
                           hcnn_cuda_conv_transposable(d);
    const hcnn_cudnn_conv *tp =
        way == HCNN_WAY_TRANSPOSED_CUDNN
            ? hcnn_cuda_conv_transposed_plan(be, d, n, HCNN_CUDNN_ANY_WORKSPACE)
            : NULL;
    if (way == HCNN_WAY_IM2COL_IMAGE) {
        snprintf(buf, cap, "im2col + cuBLAS GEMM on the GPU%s, one image at a time", nhwc);
    } else if (tp) {
        char how[400];
        hcnn_cudnn_conv_describe(tp, HCNN_PASS_FORWARD, how, sizeof how);
        snprintf(buf, cap, "the transposed convolution: dy by the flipped filters in %s", how);
    } else if (transposed) {
        const hcnn_conv_desc t = transposed_desc(d);
        /* the transposed shape's plan, where cuDNN refused its forward when run */
        const hcnn_cudnn_conv *refused =
            way == HCNN_WAY_TRANSPOSED_CUDNN && cuda_of(be)->precision != HCNN_PRECISION_BF16
                ? hcnn_cudnn_conv_for(be, &t, n, HCNN_CUDNN_ANY_WORKSPACE)
                : NULL;
        const char *why = hcnn_cudnn_conv_refusal(refused, HCNN_PASS_FORWARD);
        snprintf(buf, cap,
                 "the transposed convolution: im2col of dy + cuBLAS GEMM by the flipped filters "
                 "on the GPU%s, chunks of %d images%s%s%s",
                 nhwc, chunk_images(be, &t, n), why[0] ? " (not by cuDNN: " : "", why,
                 why[0] ? ")" : "");
    } else {
        snprintf(buf, cap, "im2col + cuBLAS GEMM on the GPU%s, chunks of %d images", nhwc,
                 chunk_images(be, d, n));
    }
}
