/* The index kernels of the convolution's NHWC path (conv.cu runs its
 * chunks): im2col and col2im for activations laid out [n][h][w][c]
 * (include/hcnn/backend.h, hcnn_act_layout).  The columns are [nb*P][K],
 * one row an output pixel, K ordered (ci, ki, kj) as W's [Cout][K] rows, so
 * that the forward's GEMM cols W^T writes the chunk's NHWC output in place
 * and the backward's dy is a GEMM operand as it is.  col2im gathers like
 * conv.cu's: one thread per input element adds its taps in tap order (ki,
 * kj), the CPU's, so no atomics and the same sums every run.  The index
 * arithmetic is 32-bit within a chunk (chunk_total) by hd.h's dividers. */
#include "cuda.h"

typedef struct im2col_nhwc_divs {
    hcnn_hd_divider k, kw, kh, np, ow; /* K, kw, kh, P, ow */
} im2col_nhwc_divs;
typedef struct col2im_nhwc_divs {
    hcnn_hd_divider c, hw, w, sh, sw; /* channels, h * w, w, the strides */
} col2im_nhwc_divs;

static hcnn_hd_divider div_of(int d) { return hcnn_hd_divider_of((uint32_t)d); }

/* col[i*P + oy*ow + ox][r], r = (ci*kh + ki)*kw + kj, from x[i][iy][ix][ci] */
static __global__ void im2col_nhwc_kernel(hcnn_conv_geom g, im2col_nhwc_divs v, const float *x,
                                          unsigned total, float *col, __nv_bfloat16 *colb)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const uint32_t kk = (uint32_t)k;
    const uint32_t q = hcnn_hd_div(v.k, kk), r = kk - q * v.k.d;
    const uint32_t rk = hcnn_hd_div(v.kw, r), kj = r - rk * v.kw.d; /* rk = ci*kh + ki */
    const uint32_t ci = hcnn_hd_div(v.kh, rk), ki = rk - ci * v.kh.d;
    const uint32_t i = hcnn_hd_div(v.np, q), p = q - i * v.np.d;
    const uint32_t oy = hcnn_hd_div(v.ow, p), ox = p - oy * v.ow.d;
    const int iy = hcnn_hd_window_in((int)oy, (int)ki, g.sh, g.ph);
    const int ix = hcnn_hd_window_in((int)ox, (int)kj, g.sw, g.pw);
    const int inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
    const float val = inside ? x[(((size_t)i * g.h + iy) * g.w + ix) * g.c + ci] : 0.0f;
    if (colb)
        colb[k] = __float2bfloat16(val);
    else
        col[k] = val;
}

/* dx[i][iy][ix][ci] (+)= the columns that read it, taps in order */
static __global__ void col2im_nhwc_kernel(hcnn_conv_geom g, col2im_nhwc_divs v, const float *col,
                                          unsigned total, int acc, float *dx)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const uint32_t kk = (uint32_t)k;
    const uint32_t px = hcnn_hd_div(v.c, kk), ci = kk - px * v.c.d; /* px = i*h*w + iy*w + ix */
    const uint32_t i = hcnn_hd_div(v.hw, px), plane = px - i * v.hw.d;
    const uint32_t iyu = hcnn_hd_div(v.w, plane);
    const int iy = (int)iyu, ix = (int)(plane - iyu * v.w.d);
    const size_t K = (size_t)g.c * g.kh * g.kw, row0 = (size_t)i * g.oh * g.ow;
    float s = acc ? dx[k] : 0.0f;
    for (int ki = 0; ki < g.kh; ki++) {
        const int ty = iy + g.ph - ki; /* oy * sh */
        if (ty < 0)
            continue;
        const uint32_t oy = hcnn_hd_div(v.sh, (uint32_t)ty);
        if ((uint32_t)ty != oy * v.sh.d || oy >= (uint32_t)g.oh)
            continue;
        for (int kj = 0; kj < g.kw; kj++) {
            const int tx = ix + g.pw - kj;
            if (tx < 0)
                continue;
            const uint32_t ox = hcnn_hd_div(v.sw, (uint32_t)tx);
            if ((uint32_t)tx != ox * v.sw.d || ox >= (uint32_t)g.ow)
                continue;
            const size_t r = ((size_t)ci * g.kh + ki) * g.kw + kj;
            s += col[(row0 + (size_t)oy * g.ow + ox) * K + r];
        }
    }
    dx[k] = s;
}

/* a chunk's element count as the kernels' 32-bit total (conv.cu's chunk_images
 * keeps it below 2^32) */
static unsigned chunk_total(size_t total)
{
    if (total > 0xffffffffu)
        hcnn_cuda_fail("convolution (NHWC)", __FILE__, __LINE__,
                       "a chunk of more than 2^32 elements (chunk_images keeps them below)");
    return (unsigned)total;
}

void hcnn_cuda_im2col_nhwc(const hcnn_backend *be, const hcnn_conv_geom *g, const float *x, int nb,
                           float *col, __nv_bfloat16 *colb)
{
    const int K = g->c * g->kh * g->kw, P = g->oh * g->ow;
    const unsigned total = chunk_total((size_t)nb * P * K);
    if (total == 0)
        return;
    const im2col_nhwc_divs v = {div_of(K), div_of(g->kw), div_of(g->kh), div_of(P), div_of(g->ow)};
    HCNN_LAUNCH(im2col_nhwc_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream,
                *g, v, x, total, col, colb);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_col2im_nhwc(const hcnn_backend *be, const hcnn_conv_geom *g, const float *col,
                           int nb, int acc, float *dx)
{
    const unsigned total = chunk_total((size_t)nb * g->h * g->w * g->c);
    if (total == 0)
        return;
    const col2im_nhwc_divs v = {div_of(g->c), div_of(g->h * g->w), div_of(g->w), div_of(g->sh),
                                div_of(g->sw)};
    HCNN_LAUNCH(col2im_nhwc_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream,
                *g, v, col, total, acc, dx);
    HCNN_CUDA_LAUNCHED();
}
