/* im2col and col2im of the CPU backend (Caffe's layout: col is
 * [c*kh*kw][n*oh*ow]), with AVX-512 kernels for strides 1 and 2 that give
 * the portable loops' results bit for bit. */
#include "cpu.h"

/* col[(ci*kh + ki)*kw + kj][i*P + oy*ow + ox] = x[i][ci][oy*sh - ph + ki][ox*sw - pw + kj] */
/* Row (ci, ki, kj) of one image's columns, from that image's plane ci:
 * d[oy*ow + ox] = xp[oy*sh - ph + ki][ox*sw - pw + kj], 0 outside. */
HCNN_MULTIVERSION
static void im2col_tap(const hcnn_conv_geom *g, const float *xp, int ki, int kj, float *d)
{
    /* output columns [lo, hi) read inside the image (stride 1) */
    int lo = g->pw - kj, hi = g->w + g->pw - kj;
    if (lo < 0) lo = 0;
    if (lo > g->ow) lo = g->ow;
    if (hi > g->ow) hi = g->ow;
    if (hi < lo) hi = lo;
    for (int oy = 0; oy < g->oh; oy++, d += g->ow) {
        const int iy = hcnn_hd_window_in(oy, ki, g->sh, g->ph);
        if (iy < 0 || iy >= g->h) {
            zero_floats(d, g->ow);
            continue;
        }
        const float *row = xp + (size_t)iy * g->w;
        if (g->sw == 1) {
            zero_floats(d, lo);
            copy_floats(d + lo, row + lo - g->pw + kj, hi - lo);
            zero_floats(d + hi, g->ow - hi);
        } else {
            for (int ox = 0; ox < g->ow; ox++) {
                const int ix = hcnn_hd_window_in(ox, kj, g->sw, g->pw);
                d[ox] = (ix >= 0 && ix < g->w) ? row[ix] : 0.0f;
            }
        }
    }
}

/* The adjoint: xp += the row's contributions. */
static void col2im_tap(const hcnn_conv_geom *g, const float *s, int ki, int kj, float *xp)
{
    for (int oy = 0; oy < g->oh; oy++, s += g->ow) {
        const int iy = hcnn_hd_window_in(oy, ki, g->sh, g->ph);
        if (iy < 0 || iy >= g->h)
            continue;
        float *row = xp + (size_t)iy * g->w;
        if (g->sw == 1) {
            int lo = g->pw - kj, hi = g->w + g->pw - kj;
            if (lo < 0) lo = 0;
            if (hi > g->ow) hi = g->ow;
            float *r0 = row - g->pw + kj;
            for (int ox = lo; ox < hi; ox++)
                r0[ox] += s[ox];
        } else {
            for (int ox = 0; ox < g->ow; ox++) {
                const int ix = hcnn_hd_window_in(ox, kj, g->sw, g->pw);
                if (ix >= 0 && ix < g->w)
                    row[ix] += s[ox];
            }
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* AVX-512 versions of im2col and col2im for strides 1 and 2 (every
 * convolution of LeNet-5 and ResNet-18).  Image rows are short (4-32
 * floats), so the loops above spend more on loop control and scalar tails
 * than on moving data; here one masked load and one masked store move up to
 * 16 floats, the masks doing the zero padding (masked-off lanes are not
 * read, so nothing outside the image is touched).  Same arithmetic as
 * above, hence the same results bit for bit. */

#define HCNN_COL2IM_MAX_KW 16 /* widest kernel of the gathering col2im */

__attribute__((target("avx512f")))
static void im2col_tap_s1_avx512(const hcnn_conv_geom *g, const float *xp, int ki, int kj,
                                 float *d)
{
    /* locals: the compiler cannot tell that the masked stores leave *g alone */
    const int oh = g->oh, ow = g->ow, h = g->h, w = g->w, sh = g->sh;
    const int shift = kj - g->pw; /* input column of output column ox: ox + shift */
    const int iy0 = ki - g->ph;   /* input row of output row 0 */
    for (int ox = 0; ox < ow; ox += 16) {
        const __mmask16 out = lane_range(0, ow - ox);
        const __mmask16 in = out & lane_range(-shift - ox, w - shift - ox);
        const float *src = xp + shift + ox;
        float *dst = d + ox;
        for (int oy = 0, iy = iy0; oy < oh; oy++, iy += sh, dst += ow) {
            const __mmask16 m = (iy >= 0 && iy < h) ? in : 0;
            _mm512_mask_storeu_ps(dst, out, _mm512_maskz_loadu_ps(m, src + (ptrdiff_t)iy * w));
        }
    }
}

/* Stride 2 (ResNet's down-sampling convolutions): output lane l reads input
 * column 2(ox + l) + shift; two masked loads bring 32 consecutive columns
 * and one permutation keeps the even ones. */
__attribute__((target("avx512f")))
static void im2col_tap_s2_avx512(const hcnn_conv_geom *g, const float *xp, int ki, int kj,
                                 float *d)
{
    const int oh = g->oh, ow = g->ow, h = g->h, w = g->w, sh = g->sh;
    const int shift = kj - g->pw, iy0 = ki - g->ph;
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    for (int ox = 0; ox < ow; ox += 16) {
        const int c0 = 2 * ox + shift; /* input column of lane 0 */
        const __mmask16 out = lane_range(0, ow - ox);
        const __mmask16 lo = lane_range(-c0, w - c0), hi = lane_range(-c0 - 16, w - c0 - 16);
        const float *src = xp + c0;
        float *dst = d + ox;
        for (int oy = 0, iy = iy0; oy < oh; oy++, iy += sh, dst += ow) {
            const int inside = iy >= 0 && iy < h;
            const float *row = src + (ptrdiff_t)iy * w;
            const __m512 a = _mm512_maskz_loadu_ps(inside ? lo : 0, row);
            const __m512 b = _mm512_maskz_loadu_ps(inside ? hi : 0, row + 16);
            _mm512_mask_storeu_ps(dst, out, _mm512_permutex2var_ps(a, even, b));
        }
    }
}

/* One plane of dx, for stride st = 1 or 2 both ways, gathered rather than
 * scattered: each 16-float piece of an input row sums its kh*kw column rows
 * in a register (starting from its value in dx if acc) and is stored once
 * (adding into memory tap by tap would make every masked load wait for the
 * previous masked store, which the CPU does not forward).  Taps are added
 * in the same (ki, kj) order as col2im_tap.  Input column ix takes output
 * column (ix + pw - kj) / st when that is whole: for st = 1 a masked load,
 * for st = 2 every other lane, from
 * consecutive column values (an expanding load).  Inlined once per stride,
 * so that st is a constant and the stride test leaves the inner loop (it
 * cost 15-40% there). */
__attribute__((target("avx512f"), always_inline))
static inline void col2im_plane_st(const hcnn_conv_geom *g, const float *s, size_t ldc, int acc,
                                   float *xp, const int st)
{
    const int h = g->h, w = g->w, kh = g->kh, kw = g->kw, oh = g->oh, ow = g->ow;
    const int ph = g->ph, pw = g->pw;
    /* a piece's mask and column offset for each kj do not depend on the row:
     * computed once per piece (small planes spent most of the time on them) */
    __mmask16 mask[HCNN_COL2IM_MAX_KW];
    int off[HCNN_COL2IM_MAX_KW];
    for (int ix = 0; ix < w; ix += 16) {
        const __mmask16 row = lane_range(0, w - ix);
        for (int kj = 0; kj < kw; kj++) {
            const int t0 = ix + pw - kj; /* st * output column of lane 0 */
            if (st == 1) {
                mask[kj] = row & lane_range(-t0, ow - t0);
                off[kj] = t0;
            } else {
                /* lanes of even t0 + l with 0 <= (t0 + l) / 2 < ow */
                const int l0 = ((t0 % 2) + 2) % 2;
                mask[kj] = row & lane_range(-t0, 2 * ow - t0) & (__mmask16)(0x5555u << l0);
                off[kj] = mask[kj] ? (t0 + __builtin_ctz(mask[kj])) / 2 : 0;
            }
        }
        for (int iy = 0; iy < h; iy++) {
            float *dst = xp + (size_t)iy * w + ix;
            __m512 sum = acc ? _mm512_maskz_loadu_ps(row, dst) : _mm512_setzero_ps();
            for (int ki = 0; ki < kh; ki++) {
                const int ty = iy + ph - ki; /* st * output row */
                if (ty < 0 || ty % st || ty / st >= oh)
                    continue;
                const float *base = s + (size_t)ki * kw * ldc + (size_t)(ty / st) * ow;
                for (int kj = 0; kj < kw; kj++) {
                    const float *src = base + (size_t)kj * ldc + off[kj];
                    if (st == 1)
                        sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(mask[kj], src));
                    else if (mask[kj])
                        sum = _mm512_add_ps(sum, _mm512_maskz_expandloadu_ps(mask[kj], src));
                }
            }
            _mm512_mask_storeu_ps(dst, row, sum);
        }
    }
}

__attribute__((target("avx512f")))
static void col2im_plane_avx512(const hcnn_conv_geom *g, const float *s, size_t ldc, int acc,
                                float *xp)
{
    if (g->sw == 1)
        col2im_plane_st(g, s, ldc, acc, xp, 1);
    else
        col2im_plane_st(g, s, ldc, acc, xp, 2);
}

/* 1 or 2: the horizontal stride of the AVX-512 kernels to use; 0: none */
static int avx512_stride(const hcnn_conv_geom *g)
{
    return (g->sw == 1 || g->sw == 2) && __builtin_cpu_supports("avx512f") ? g->sw : 0;
}
#else
static int avx512_stride(const hcnn_conv_geom *g) { (void)g; return 0; }
#define im2col_tap_s1_avx512 im2col_tap
#define im2col_tap_s2_avx512 im2col_tap
#define col2im_plane_avx512(g, s, ldc, acc, xp) ((void)0)
#endif

/* Parallel over (channel, image): each task writes the kh*kw rows of its
 * channel for its image. */
void hcnn_cpu_im2col(const hcnn_backend *be, const hcnn_conv_geom *g, const float *x, int n, float *col)
{
    (void)be;
    const size_t P = (size_t)g->oh * g->ow, hw = (size_t)g->h * g->w;
    const size_t ldc = (size_t)n * P;
    const int vs = avx512_stride(g);
    void (*tap)(const hcnn_conv_geom *, const float *, int, int, float *) =
        vs == 1 ? im2col_tap_s1_avx512 : vs == 2 ? im2col_tap_s2_avx512 : im2col_tap;
#pragma omp parallel for collapse(2) schedule(static)
    for (int ci = 0; ci < g->c; ci++)
        for (int i = 0; i < n; i++) {
            const float *xp = x + ((size_t)i * g->c + ci) * hw;
            float *d = col + (size_t)ci * g->kh * g->kw * ldc + (size_t)i * P;
            for (int ki = 0; ki < g->kh; ki++)
                for (int kj = 0; kj < g->kw; kj++, d += ldc)
                    tap(g, xp, ki, kj, d);
        }
}

/* Adjoint of im2col.  Parallel over (image, channel) planes: each thread
 * owns whole planes of dx, so there are no races and the summation order
 * is fixed. */
void hcnn_cpu_col2im(const hcnn_backend *be, const hcnn_conv_geom *g, const float *col, int n, int accumulate,
                     float *dx)
{
    (void)be;
    const size_t P = (size_t)g->oh * g->ow, hw = (size_t)g->h * g->w;
    const size_t ldc = (size_t)n * P;
    /* the gathering kernel needs the same stride both ways */
    const int gather = avx512_stride(g) && g->sh == g->sw && g->kw <= HCNN_COL2IM_MAX_KW;
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < n; i++)
        for (int ci = 0; ci < g->c; ci++) {
            float *xp = dx + ((size_t)i * g->c + ci) * hw;
            const float *s = col + (size_t)ci * g->kh * g->kw * ldc + (size_t)i * P;
            if (gather) {
                col2im_plane_avx512(g, s, ldc, accumulate, xp);
                continue;
            }
            if (!accumulate)
                zero_floats(xp, (int)hw);
            for (int ki = 0; ki < g->kh; ki++)
                for (int kj = 0; kj < g->kw; kj++, s += ldc)
                    col2im_tap(g, s, ki, kj, xp);
        }
}

