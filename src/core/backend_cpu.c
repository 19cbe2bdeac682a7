/* CPU backend: GEMM through OpenBLAS (OpenMP variant), everything else as
 * OpenMP loops.
 *
 * Threading: OpenBLAS built with USE_OPENMP shares libgomp's thread pool
 * and runs single-threaded inside an OpenMP parallel region, so BLAS calls
 * (made outside our parallel regions) use all threads and our loops use
 * all threads, never both at once: no oversubscription.
 *
 * Determinism: every reduction runs in a fixed order that does not depend
 * on the thread count (loops are parallel over independent outputs, and
 * each output is summed serially), so results are bit-for-bit repeatable. */
#include <cblas.h>
#include <omp.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/backend.h"
#include "hcnn/common.h"

/* Image rows here are 4-32 floats: a memcpy/memset call per row costs more
 * than the copy (LeNet-5 spent a quarter of its step in them).  Keep GCC
 * from turning the explicit loops below back into library calls. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif

static inline void copy_floats(float *restrict d, const float *restrict s, int n)
{
    for (int i = 0; i < n; i++)
        d[i] = s[i];
}

static inline void zero_floats(float *d, int n)
{
    for (int i = 0; i < n; i++)
        d[i] = 0.0f;
}

/* Inside the region every OpenMP loop of this backend runs on the calling
 * thread alone (nested regions are inactive) and the OpenMP OpenBLAS runs
 * single-threaded. */
static void cpu_parallel(void (*fn)(void *arg, int t, int nt), void *arg)
{
#pragma omp parallel
    fn(arg, omp_get_thread_num(), omp_get_num_threads());
}

static int cpu_threads(void) { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

static void cpu_upload(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_download(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static void cpu_copy(float *dst, const float *src, size_t n) { memcpy(dst, src, n * sizeof *dst); }

static void sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
                n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* OpenBLAS parallelises a GEMM over its output, so a weight gradient (a
 * small m x n output summed over a long k = batch x pixels) runs on one
 * thread.  Split k instead: each thread computes a partial product of its
 * slice of k, and the partials are added in thread order (the same order
 * for a given thread count, so results stay repeatable). */
#define SPLITK_MAX_OUT 65536
#define SPLITK_MIN_K 4096
static void cpu_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc)
{
    const int nt = omp_get_max_threads();
    float *part = NULL;
    if (nt > 1 && !omp_in_parallel() && (size_t)m * n <= SPLITK_MAX_OUT && k >= SPLITK_MIN_K * nt)
        part = malloc(sizeof(float) * (size_t)nt * m * n);
    if (!part) {
        sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num();
        const int k0 = (int)((long)k * t / nt), k1 = (int)((long)k * (t + 1) / nt);
        const float *as = ta ? a + (size_t)k0 * lda : a + k0;
        const float *bs = tb ? b + k0 : b + (size_t)k0 * ldb;
        /* inside a parallel region the OpenMP OpenBLAS runs single-threaded */
        sgemm(ta, tb, m, n, k1 - k0, 1.0f, as, lda, bs, ldb, 0.0f, part + (size_t)t * m * n, n);
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float sum = 0.0f;
            for (int t = 0; t < nt; t++)
                sum += part[((size_t)t * m + i) * n + j];
            float *cij = c + (size_t)i * ldc + j;
            *cij = (beta == 0.0f ? 0.0f : beta * *cij) + alpha * sum;
        }
    free(part);
}

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
        const int iy = oy * g->sh - g->ph + ki;
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
                const int ix = ox * g->sw - g->pw + kj;
                d[ox] = (ix >= 0 && ix < g->w) ? row[ix] : 0.0f;
            }
        }
    }
}

/* The adjoint: xp += the row's contributions. */
static void col2im_tap(const hcnn_conv_geom *g, const float *s, int ki, int kj, float *xp)
{
    for (int oy = 0; oy < g->oh; oy++, s += g->ow) {
        const int iy = oy * g->sh - g->ph + ki;
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
                const int ix = ox * g->sw - g->pw + kj;
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
#include <immintrin.h>

#define HCNN_COL2IM_MAX_KW 16 /* widest kernel of the gathering col2im */

/* bits [lo, hi) of 16, clamped */
static inline __mmask16 lane_range(int lo, int hi)
{
    if (lo < 0) lo = 0;
    if (hi > 16) hi = 16;
    if (hi <= lo)
        return 0;
    return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

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
static void cpu_im2col(const hcnn_conv_geom *g, const float *x, int n, float *col)
{
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
static void cpu_col2im(const hcnn_conv_geom *g, const float *col, int n, int accumulate,
                       float *dx)
{
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

static void cpu_copy_planes(const float *src, size_t splane, int sld, int c, int h, int w,
                            float *dst, size_t dplane, int dld, int accumulate)
{
#pragma omp parallel for schedule(static) if ((size_t)c * h * w > 65536)
    for (int i = 0; i < c; i++)
        for (int y = 0; y < h; y++) {
            float *d = dst + i * dplane + (size_t)y * dld;
            const float *s = src + i * splane + (size_t)y * sld;
            if (accumulate)
                for (int x = 0; x < w; x++)
                    d[x] += s[x];
            else
                copy_floats(d, s, w);
        }
}

static void cpu_cnp_to_nchw(const float *src, const float *bias, int n, int c, int np, float *y)
{
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < n; i++) {
        for (int co = 0; co < c; co++) {
            const float *s = src + (size_t)co * n * np + (size_t)i * np;
            float *d = y + ((size_t)i * c + co) * np;
            if (bias) {
                const float b = bias[co];
                for (int p = 0; p < np; p++)
                    d[p] = s[p] + b;
            } else {
                copy_floats(d, s, np);
            }
        }
    }
}

static void cpu_add_channel_bias(float *y, const float *bias, int n, int c, int np)
{
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)n * c * np > 65536)
    for (int i = 0; i < n; i++)
        for (int co = 0; co < c; co++) {
            float *d = y + ((size_t)i * c + co) * np;
            const float b = bias[co];
#pragma omp simd
            for (int p = 0; p < np; p++)
                d[p] += b;
        }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* One full 16 x 16 tile in registers: 16 loads, 64 shuffles, 16 stores. */
__attribute__((target("avx512f")))
static void transpose_tile16_avx512(const float *a, size_t lda, float *t, size_t ldt)
{
    __m512 r[16], u[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_ps(a + (size_t)i * lda);
    /* interleave pairs of rows, then pairs of pairs, then 128-bit lanes */
    for (int i = 0; i < 16; i += 2) {
        u[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        u[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        const __m512d p0 = _mm512_castps_pd(u[i]), p2 = _mm512_castps_pd(u[i + 2]);
        const __m512d p1 = _mm512_castps_pd(u[i + 1]), p3 = _mm512_castps_pd(u[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(p0, p2));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(p0, p2));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(p1, p3));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(p1, p3));
    }
    /* r[4q + k] holds, in 128-bit lane L, column 4L + k of rows 4q..4q+3 */
    for (int k = 0; k < 4; k++) {
        const __m512 a0 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);      /* lanes 0,2 | 0,2 */
        const __m512 a1 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);      /* lanes 1,3 | 1,3 */
        const __m512 b0 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
        const __m512 b1 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
        u[k] = _mm512_shuffle_f32x4(a0, b0, 0x88);      /* column k */
        u[8 + k] = _mm512_shuffle_f32x4(a0, b0, 0xdd);  /* column 8 + k */
        u[4 + k] = _mm512_shuffle_f32x4(a1, b1, 0x88);  /* column 4 + k */
        u[12 + k] = _mm512_shuffle_f32x4(a1, b1, 0xdd); /* column 12 + k */
    }
    for (int j = 0; j < 16; j++)
        _mm512_storeu_ps(t + (size_t)j * ldt, u[j]);
}
#endif

/* Rows [r0, r1) of a, in 16 x 16 tiles (a tile's rows and columns both
 * stay in a few cache lines); full tiles in registers where AVX-512 is. */
static void transpose_rows(const float *a, int r0, int r1, int cols, int rows, float *t)
{
#if defined(__x86_64__) && defined(__GNUC__)
    const int vec = __builtin_cpu_supports("avx512f");
#endif
    for (int i0 = r0; i0 < r1; i0 += 16) {
        const int i1 = i0 + 16 < r1 ? i0 + 16 : r1;
        for (int j0 = 0; j0 < cols; j0 += 16) {
            const int j1 = j0 + 16 < cols ? j0 + 16 : cols;
#if defined(__x86_64__) && defined(__GNUC__)
            if (vec && i1 - i0 == 16 && j1 - j0 == 16) {
                transpose_tile16_avx512(a + (size_t)i0 * cols + j0, (size_t)cols,
                                        t + (size_t)j0 * rows + i0, (size_t)rows);
                continue;
            }
#endif
            for (int j = j0; j < j1; j++)
                for (int i = i0; i < i1; i++)
                    t[(size_t)j * rows + i] = a[(size_t)i * cols + j];
        }
    }
}

static void cpu_transpose(const float *a, int rows, int cols, float *t)
{
    if (omp_in_parallel() || (size_t)rows * cols < 65536) {
        transpose_rows(a, 0, rows, cols, rows, t);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < rows; i0 += 16)
        transpose_rows(a, i0, i0 + 16 < rows ? i0 + 16 : rows, cols, rows, t);
}

static void cpu_nchw_to_cnp(const float *y, int n, int c, int np, float *dst)
{
#pragma omp parallel for collapse(2) schedule(static)
    for (int co = 0; co < c; co++)
        for (int i = 0; i < n; i++)
            copy_floats(dst + (size_t)co * n * np + (size_t)i * np, y + ((size_t)i * c + co) * np,
                        np);
}

/* Plane reductions for bias gradients and batch-norm.  A float sum in one
 * running variable cannot be vectorised (each add waits for the previous
 * one, and reordering would change the result), so these keep 16
 * independent partial sums in a vector, lane k taking elements k, k+16,
 * ..., and add the lanes in a fixed order: vectorised (GCC lowers the
 * 16-float vector to whatever the clone's ISA has), and still the same
 * result for every thread count and every ISA clone (-std=c11 does not
 * contract a*b+c into an FMA). */
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

/* (no function takes or returns a v16f: that ABI differs between clones) */
#define LOAD16(v, p) memcpy(&(v), (p), sizeof(v16f))

/* The 16 lanes added pairwise (lane k + lane k + 8, then + 4, + 2, + 1): a
 * fixed order like a running sum, but a few vector additions instead of 15
 * dependent ones, which dominated the batch-norm passes over small planes
 * (ResNet-18's layer4, one vector a plane: forward 0.42-0.44 -> 0.25-0.27
 * ms, backward 0.41-0.42 -> 0.26-0.28 ms).  Inlined, so that each ISA clone
 * has its own (a call from an AVX-512 clone into baseline SSE code stalled
 * on the transition: 20x slower). */
static inline __attribute__((always_inline)) float lanes_total(const float *acc, float tail)
{
    float s[8];
    for (int k = 0; k < 8; k++)
        s[k] = acc[k] + acc[k + 8];
    for (int k = 0; k < 4; k++)
        s[k] += s[k + 4];
    for (int k = 0; k < 2; k++)
        s[k] += s[k + 2];
    return (s[0] + s[1]) + tail;
}

/* sum of x[0..n) */
HCNN_MULTIVERSION
static float plane_sum(const float *x, int n)
{
    v16f acc = {0};
    int p = 0;
    for (; p + 16 <= n; p += 16) {
        v16f v;
        LOAD16(v, x + p);
        acc += v;
    }
    float tail = 0.0f;
    for (; p < n; p++)
        tail += x[p];
    return lanes_total((const float *)&acc, tail);
}

/* sum of (x - m)^2 */
HCNN_MULTIVERSION
static float plane_sum_sq_dev(const float *x, int n, float m)
{
    v16f acc = {0};
    int p = 0;
    for (; p + 16 <= n; p += 16) {
        v16f d;
        LOAD16(d, x + p);
        d -= m;
        acc += d * d;
    }
    float tail = 0.0f;
    for (; p < n; p++)
        tail += (x[p] - m) * (x[p] - m);
    return lanes_total((const float *)&acc, tail);
}

/* The batch-norm backward's g: dy, or with relu, dy where x * a + b > 0 and
 * 0 elsewhere (the gradient through the ReLU that followed the batch-norm,
 * its output recomputed from x; a select, not a branch: the mask is as
 * random as the data).  LOAD_BN_GRAD loads 16 of g and x (a macro: no
 * function takes a v16f). */
#define LOAD_BN_GRAD(g, v, dyp, xp, relu, a, b)                                                 \
    do {                                                                                        \
        LOAD16(g, dyp);                                                                         \
        LOAD16(v, xp);                                                                          \
        if (relu)                                                                               \
            g = (v16f)((v16i)g & (v * (a) + (b) > 0.0f));                                       \
    } while (0)

static inline float bn_grad(float dy, float x, int relu, float a, float b)
{
    return relu && !(x * a + b > 0.0f) ? 0.0f : dy;
}

/* *sdy = sum of g, *sdyx = sum of g * (x - m) * is, g as bn_grad */
HCNN_MULTIVERSION
static void plane_sum_dy_dyx(const float *x, const float *dy, int n, float m, float is, int relu,
                             float a_relu, float b_relu, float *sdy, float *sdyx)
{
    v16f a = {0}, b = {0};
    int p = 0;
    for (; p + 16 <= n; p += 16) {
        v16f g, v;
        LOAD_BN_GRAD(g, v, dy + p, x + p, relu, a_relu, b_relu);
        a += g;
        b += g * (v - m) * is;
    }
    float ta = 0.0f, tb = 0.0f;
    for (; p < n; p++) {
        const float g = bn_grad(dy[p], x[p], relu, a_relu, b_relu);
        ta += g;
        tb += g * (x[p] - m) * is;
    }
    *sdy = lanes_total((const float *)&a, ta);
    *sdyx = lanes_total((const float *)&b, tb);
}

/* dx = a * (g - mdy - (x - m) * is * mdyx), g as bn_grad (a = gamma * is
 * is also the scale of dx) */
HCNN_MULTIVERSION
static void plane_bn_dx(const float *x, const float *dy, int n, float m, float is, int relu,
                        float a, float b, float mdy, float mdyx, float *dx)
{
    int p = 0;
    for (; p + 16 <= n; p += 16) {
        v16f g, v;
        LOAD_BN_GRAD(g, v, dy + p, x + p, relu, a, b);
        const v16f o = a * (g - mdy - (v - m) * is * mdyx);
        memcpy(dx + p, &o, sizeof o);
    }
    for (; p < n; p++) {
        const float g = bn_grad(dy[p], x[p], relu, a, b);
        dx[p] = a * (g - mdy - (x[p] - m) * is * mdyx);
    }
}

/* Sum of channel ch of x [n][c][np]: per image in float, images in double,
 * always in the same order. */
static double channel_sum(const float *x, int n, int c, int np, int ch)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += plane_sum(x + ((size_t)i * c + ch) * np, np);
    return s;
}

static void cpu_channel_sum_acc(const float *dy, int n, int c, int np, float *db)
{
#pragma omp parallel for schedule(static)
    for (int co = 0; co < c; co++)
        db[co] += (float)channel_sum(dy, n, c, np, co);
}

static void cpu_row_sum_acc(const float *dy, int n, int m, float *db)
{
#pragma omp parallel for schedule(static) if (m >= 256)
    for (int j = 0; j < m; j++) {
        float s = 0.0f;
        for (int i = 0; i < n; i++)
            s += dy[(size_t)i * m + j];
        db[j] += s;
    }
}

static void cpu_add_row_bias(float *y, const float *b, int n, int m)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++)
            y[(size_t)i * m + j] += b[j];
}

/* Element-wise operations: a vectorised loop over a range (with AVX2 and
 * AVX-512 clones; branch-free, since a branch on the sign mispredicts half
 * the time), run on slices by all threads when the array is large.  (An
 * "omp parallel for simd if (...)" loop is compiled a second time for the
 * serial case, without simd: ReLU on 50k floats took 3x as long as on
 * 80k.)  The loops may run in place (y == x): each element only reads its
 * own index. */
#define ELEMENTWISE(n, range_call)                                                              \
    do {                                                                                        \
        if ((n) > 65536 && !omp_in_parallel()) {                                                \
            _Pragma("omp parallel")                                                             \
            {                                                                                   \
                const size_t t_ = (size_t)omp_get_thread_num();                                 \
                const size_t nt_ = (size_t)omp_get_num_threads();                               \
                const size_t lo = (n) * t_ / nt_, len = (n) * (t_ + 1) / nt_ - lo;              \
                range_call;                                                                     \
            }                                                                                   \
        } else {                                                                                \
            const size_t lo = 0, len = (n);                                                     \
            range_call;                                                                         \
        }                                                                                       \
    } while (0)

static void fill_range(float *x, size_t n, float v)
{
    if (v == 0.0f) {
        memset(x, 0, n * sizeof *x);
        return;
    }
    for (size_t i = 0; i < n; i++)
        x[i] = v;
}

/* Zeroing ResNet-18's 45 MB of gradients every step is bandwidth-bound: one
 * memset per thread, 2.3-2.5 -> 1.3-1.5 ms on 2 threads. */
static void cpu_fill(float *x, size_t n, float v)
{
    ELEMENTWISE(n, fill_range(x + lo, len, v));
}

HCNN_MULTIVERSION
static void relu_fwd_range(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

HCNN_MULTIVERSION
static void relu_bwd_range(const float *y, const float *dy, float *dx, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const float d = dy[i]; /* loaded unconditionally: a select, not a branch */
        dx[i] = y[i] > 0.0f ? d : 0.0f;
    }
}

HCNN_MULTIVERSION
static void add_range(const float *a, const float *b, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

HCNN_MULTIVERSION
static void mul_range(const float *a, const float *b, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}

static void cpu_relu_fwd(const float *x, float *y, size_t n)
{
    ELEMENTWISE(n, relu_fwd_range(x + lo, y + lo, len));
}

static void cpu_relu_bwd(const float *y, const float *dy, float *dx, size_t n)
{
    ELEMENTWISE(n, relu_bwd_range(y + lo, dy + lo, dx + lo, len));
}

static void cpu_add(const float *a, const float *b, float *y, size_t n)
{
    ELEMENTWISE(n, add_range(a + lo, b + lo, y + lo, len));
}

static void cpu_add_acc(const float *a, float *y, size_t n)
{
    ELEMENTWISE(n, add_range(y + lo, a + lo, y + lo, len));
}

static void cpu_mul(const float *a, const float *b, float *y, size_t n)
{
    ELEMENTWISE(n, mul_range(a + lo, b + lo, y + lo, len));
}

static void cpu_dropout_fwd(const float *x, float *y, float *mask, int n, size_t per_sample,
                            float p, uint64_t seed, uint64_t step, uint64_t first_sample,
                            uint64_t layer_id)
{
    const float scale = 1.0f / (1.0f - p);
    /* keep iff the element's 24-bit uniform >= p */
    const uint64_t threshold = (uint64_t)((double)p * 16777216.0);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const uint64_t key = hcnn_hash4(seed, step, layer_id, first_sample + (uint64_t)i);
        const size_t base = (size_t)i * per_sample;
        for (size_t e = 0; e < per_sample; e++) {
            const uint64_t u = hcnn_hash4(key, e, 0x64726f70ull, 0) >> 40;
            const float m = u >= threshold ? scale : 0.0f;
            mask[base + e] = m;
            y[base + e] = x[base + e] * m;
        }
    }
}

/* The common 2x2, stride 2, unpadded window: branch-free selects. */
static void maxpool2x2_plane(const float *xp, int w, int oh, int ow, float *yp, int32_t *ap)
{
    for (int oy = 0; oy < oh; oy++) {
        const float *r0 = xp + (size_t)(2 * oy) * w, *r1 = r0 + w;
        for (int ox = 0; ox < ow; ox++) {
            const int c0 = 2 * ox;
            float best = r0[c0];
            int32_t arg = 2 * oy * w + c0;
            const float v1 = r0[c0 + 1], v2 = r1[c0], v3 = r1[c0 + 1];
            arg = v1 > best ? arg + 1 : arg, best = v1 > best ? v1 : best;
            arg = v2 > best ? (2 * oy + 1) * w + c0 : arg, best = v2 > best ? v2 : best;
            arg = v3 > best ? (2 * oy + 1) * w + c0 + 1 : arg, best = v3 > best ? v3 : best;
            yp[oy * ow + ox] = best;
            ap[oy * ow + ox] = arg;
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same selects 16 windows at a time: two loads bring 32 columns of a
 * row, two permutations split them into the windows' left and right
 * values, and masked moves keep the first strict maximum in the order
 * above (the same result, NaNs included, bit for bit). */
__attribute__((target("avx512f")))
static void maxpool2x2_plane_avx512(const float *xp, int w, int oh, int ow, float *yp,
                                    int32_t *ap)
{
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int oy = 0; oy < oh; oy++) {
        const float *r0 = xp + (size_t)(2 * oy) * w, *r1 = r0 + w;
        for (int ox = 0; ox < ow; ox += 16) {
            const int c0 = 2 * ox;
            const __mmask16 out = lane_range(0, ow - ox);
            const __mmask16 lo = lane_range(0, 2 * (ow - ox));
            const __mmask16 hi = lane_range(0, 2 * (ow - ox) - 16);
            const __m512 a0 = _mm512_maskz_loadu_ps(lo, r0 + c0);
            const __m512 a1 = _mm512_maskz_loadu_ps(hi, r0 + c0 + 16);
            const __m512 b0 = _mm512_maskz_loadu_ps(lo, r1 + c0);
            const __m512 b1 = _mm512_maskz_loadu_ps(hi, r1 + c0 + 16);
            const __m512 v1 = _mm512_permutex2var_ps(a0, odd, a1);
            const __m512 v2 = _mm512_permutex2var_ps(b0, even, b1);
            const __m512 v3 = _mm512_permutex2var_ps(b0, odd, b1);
            /* input index of each window's top-left value */
            const __m512i top = _mm512_add_epi32(_mm512_set1_epi32(2 * oy * w + c0), even);
            const __m512i bottom = _mm512_add_epi32(top, _mm512_set1_epi32(w));
            const __m512i one = _mm512_set1_epi32(1);
            __m512 best = _mm512_permutex2var_ps(a0, even, a1);
            __m512i arg = top;
            __mmask16 m = _mm512_cmp_ps_mask(v1, best, _CMP_GT_OQ);
            best = _mm512_mask_mov_ps(best, m, v1);
            arg = _mm512_mask_add_epi32(arg, m, top, one);
            m = _mm512_cmp_ps_mask(v2, best, _CMP_GT_OQ);
            best = _mm512_mask_mov_ps(best, m, v2);
            arg = _mm512_mask_mov_epi32(arg, m, bottom);
            m = _mm512_cmp_ps_mask(v3, best, _CMP_GT_OQ);
            best = _mm512_mask_mov_ps(best, m, v3);
            arg = _mm512_mask_add_epi32(arg, m, bottom, one);
            _mm512_mask_storeu_ps(yp + (size_t)oy * ow + ox, out, best);
            _mm512_mask_storeu_epi32(ap + (size_t)oy * ow + ox, out, arg);
        }
    }
}

/* Backward of the same window: every input value of a window gets dy or 0
 * by its position against the argmax, written row by row (the windows do
 * not overlap, so there is nothing to add); a last odd row or column, in
 * no window, is zeroed. */
__attribute__((target("avx512f")))
static void maxpool2x2_bwd_plane_avx512(const float *dyp, const int32_t *ap, int h, int w, int oh,
                                        int ow, float *dxp)
{
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    /* interleave two 16-lane vectors into 32: lanes 0..15 and 16..31 */
    const __m512i ilo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i ihi = _mm512_add_epi32(ilo, _mm512_set1_epi32(8));
    const __m512 zero = _mm512_setzero_ps();
    for (int oy = 0; oy < oh; oy++) {
        float *r0 = dxp + (size_t)(2 * oy) * w, *r1 = r0 + w;
        for (int ox = 0; ox < ow; ox += 16) {
            const int c0 = 2 * ox;
            const __mmask16 out = lane_range(0, ow - ox);
            const __mmask16 lo = lane_range(0, 2 * (ow - ox));
            const __mmask16 hi = lane_range(0, 2 * (ow - ox) - 16);
            const __m512 g = _mm512_maskz_loadu_ps(out, dyp + (size_t)oy * ow + ox);
            const __m512i arg = _mm512_maskz_loadu_epi32(out, ap + (size_t)oy * ow + ox);
            const __m512i tl = _mm512_add_epi32(_mm512_set1_epi32(2 * oy * w + c0), even);
            const __m512i bl = _mm512_add_epi32(tl, _mm512_set1_epi32(w));
            const __m512i one = _mm512_set1_epi32(1);
            const __m512i tr = _mm512_add_epi32(tl, one), br = _mm512_add_epi32(bl, one);
            const __m512 e0 = _mm512_mask_mov_ps(zero, _mm512_cmpeq_epi32_mask(arg, tl), g);
            const __m512 o0 = _mm512_mask_mov_ps(zero, _mm512_cmpeq_epi32_mask(arg, tr), g);
            const __m512 e1 = _mm512_mask_mov_ps(zero, _mm512_cmpeq_epi32_mask(arg, bl), g);
            const __m512 o1 = _mm512_mask_mov_ps(zero, _mm512_cmpeq_epi32_mask(arg, br), g);
            _mm512_mask_storeu_ps(r0 + c0, lo, _mm512_permutex2var_ps(e0, ilo, o0));
            _mm512_mask_storeu_ps(r0 + c0 + 16, hi, _mm512_permutex2var_ps(e0, ihi, o0));
            _mm512_mask_storeu_ps(r1 + c0, lo, _mm512_permutex2var_ps(e1, ilo, o1));
            _mm512_mask_storeu_ps(r1 + c0 + 16, hi, _mm512_permutex2var_ps(e1, ihi, o1));
        }
        if (w > 2 * ow)
            r0[w - 1] = r1[w - 1] = 0.0f;
    }
    if (h > 2 * oh)
        memset(dxp + (size_t)(h - 1) * w, 0, (size_t)w * sizeof *dxp);
}
#endif

static int maxpool2x2(const hcnn_pool_geom *g)
{
    return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0;
}

static void cpu_maxpool_fwd(const hcnn_pool_geom *g, const float *x, int n, float *y,
                            int32_t *argmax)
{
    if (maxpool2x2(g)) {
        void (*plane_fn)(const float *, int, int, int, float *, int32_t *) = maxpool2x2_plane;
#if defined(__x86_64__) && defined(__GNUC__)
        if (__builtin_cpu_supports("avx512f"))
            plane_fn = maxpool2x2_plane_avx512;
#endif
#pragma omp parallel for schedule(static)
        for (long plane = 0; plane < (long)n * g->c; plane++)
            plane_fn(x + (size_t)plane * g->h * g->w, g->w, g->oh, g->ow,
                     y + (size_t)plane * g->oh * g->ow, argmax + (size_t)plane * g->oh * g->ow);
        return;
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < n; i++) {
        for (int c = 0; c < g->c; c++) {
            const size_t plane = (size_t)i * g->c + c;
            const float *xp = x + plane * g->h * g->w;
            float *yp = y + plane * g->oh * g->ow;
            int32_t *ap = argmax + plane * g->oh * g->ow;
            for (int oy = 0; oy < g->oh; oy++) {
                for (int ox = 0; ox < g->ow; ox++) {
                    float best = -INFINITY;
                    int32_t arg = -1;
                    for (int ki = 0; ki < g->kh; ki++) {
                        const int iy = oy * g->sh - g->ph + ki;
                        if (iy < 0 || iy >= g->h)
                            continue;
                        for (int kj = 0; kj < g->kw; kj++) {
                            const int ix = ox * g->sw - g->pw + kj;
                            if (ix < 0 || ix >= g->w)
                                continue;
                            const float v = xp[iy * g->w + ix];
                            if (v > best || arg < 0) {
                                best = v;
                                arg = iy * g->w + ix;
                            }
                        }
                    }
                    yp[oy * g->ow + ox] = best;
                    ap[oy * g->ow + ox] = arg;
                }
            }
        }
    }
}

static void cpu_maxpool_bwd(const hcnn_pool_geom *g, const float *dy, const int32_t *argmax,
                            int n, float *dx)
{
#if defined(__x86_64__) && defined(__GNUC__)
    /* (narrower planes, such as LeNet's 10x10 -> 5x5, were faster scalar) */
    if (maxpool2x2(g) && g->ow >= 8 && __builtin_cpu_supports("avx512f")) {
#pragma omp parallel for schedule(static)
        for (long plane = 0; plane < (long)n * g->c; plane++)
            maxpool2x2_bwd_plane_avx512(dy + (size_t)plane * g->oh * g->ow,
                                        argmax + (size_t)plane * g->oh * g->ow, g->h, g->w,
                                        g->oh, g->ow, dx + (size_t)plane * g->h * g->w);
        return;
    }
#endif
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < n; i++) {
        for (int c = 0; c < g->c; c++) {
            const size_t plane = (size_t)i * g->c + c;
            float *dxp = dx + plane * g->h * g->w;
            const float *dyp = dy + plane * g->oh * g->ow;
            const int32_t *ap = argmax + plane * g->oh * g->ow;
            memset(dxp, 0, (size_t)g->h * g->w * sizeof *dxp);
            for (int o = 0; o < g->oh * g->ow; o++)
                if (ap[o] >= 0)
                    dxp[ap[o]] += dyp[o];
        }
    }
}

/* A global average pool (one window covering the whole plane) takes one
 * pass per plane without the generic loops' per-window bounds tests, with
 * the same values: the forward sums in their order, the backward broadcasts
 * 0 + dy / np.  ResNet-18's head, batch 64, 2 threads: forward 0.29-0.49 ->
 * 0.10-0.14 ms, backward 1.19 -> 0.12-0.16 ms. */
static int global_pool(const hcnn_pool_geom *g)
{
    return g->oh == 1 && g->ow == 1 && g->kh == g->h && g->kw == g->w && g->ph == 0 &&
           g->pw == 0;
}

static void cpu_avgpool_fwd(const hcnn_pool_geom *g, const float *x, int n, float *y)
{
    const float inv = 1.0f / (float)(g->kh * g->kw);
    if (global_pool(g)) { /* the generic loop's sum, in its order */
        const size_t planes = (size_t)n * g->c, np = (size_t)g->h * g->w;
#pragma omp parallel for schedule(static)
        for (size_t pl = 0; pl < planes; pl++) {
            float s = 0.0f;
            for (size_t p = 0; p < np; p++)
                s += x[pl * np + p];
            y[pl] = s * inv;
        }
        return;
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < n; i++) {
        for (int c = 0; c < g->c; c++) {
            const size_t plane = (size_t)i * g->c + c;
            const float *xp = x + plane * g->h * g->w;
            float *yp = y + plane * g->oh * g->ow;
            for (int oy = 0; oy < g->oh; oy++) {
                for (int ox = 0; ox < g->ow; ox++) {
                    float s = 0.0f;
                    for (int ki = 0; ki < g->kh; ki++) {
                        const int iy = oy * g->sh - g->ph + ki;
                        if (iy < 0 || iy >= g->h)
                            continue;
                        for (int kj = 0; kj < g->kw; kj++) {
                            const int ix = ox * g->sw - g->pw + kj;
                            if (ix >= 0 && ix < g->w)
                                s += xp[iy * g->w + ix];
                        }
                    }
                    yp[oy * g->ow + ox] = s * inv;
                }
            }
        }
    }
}

static void cpu_avgpool_bwd(const hcnn_pool_geom *g, const float *dy, int n, float *dx)
{
    const float inv = 1.0f / (float)(g->kh * g->kw);
    if (global_pool(g)) {
        const size_t planes = (size_t)n * g->c, np = (size_t)g->h * g->w;
#pragma omp parallel for schedule(static)
        for (size_t pl = 0; pl < planes; pl++) {
            const float d = 0.0f + dy[pl] * inv;
            for (size_t p = 0; p < np; p++)
                dx[pl * np + p] = d;
        }
        return;
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < n; i++) {
        for (int c = 0; c < g->c; c++) {
            const size_t plane = (size_t)i * g->c + c;
            float *dxp = dx + plane * g->h * g->w;
            const float *dyp = dy + plane * g->oh * g->ow;
            memset(dxp, 0, (size_t)g->h * g->w * sizeof *dxp);
            for (int oy = 0; oy < g->oh; oy++) {
                for (int ox = 0; ox < g->ow; ox++) {
                    const float d = dyp[oy * g->ow + ox] * inv;
                    for (int ki = 0; ki < g->kh; ki++) {
                        const int iy = oy * g->sh - g->ph + ki;
                        if (iy < 0 || iy >= g->h)
                            continue;
                        for (int kj = 0; kj < g->kw; kj++) {
                            const int ix = ox * g->sw - g->pw + kj;
                            if (ix >= 0 && ix < g->w)
                                dxp[iy * g->w + ix] += d;
                        }
                    }
                }
            }
        }
    }
}

/* One plane of y = act(x * a + b + add) (add may be NULL): the same
 * operations, in the same order, as the batch-norm, addition and ReLU
 * passes it replaces, so the same bits. */
static void bn_apply_plane(const float *xp, const float *addp, int relu, float a, float b,
                           float *yp, int np)
{
    if (addp && relu)
        for (int p = 0; p < np; p++) {
            const float v = (xp[p] * a + b) + addp[p];
            yp[p] = v > 0.0f ? v : 0.0f;
        }
    else if (addp)
        for (int p = 0; p < np; p++)
            yp[p] = (xp[p] * a + b) + addp[p];
    else if (relu)
        for (int p = 0; p < np; p++) {
            const float v = xp[p] * a + b;
            yp[p] = v > 0.0f ? v : 0.0f;
        }
    else
        for (int p = 0; p < np; p++)
            yp[p] = xp[p] * a + b;
}

/* The training batch-norm passes walk blocks of channels: a channel's
 * planes are np floats in each of the n images, c * np apart, so one
 * channel at a time reads runs of np floats with long strides, which the
 * hardware prefetchers do not follow when planes are small (ResNet-18's
 * layer4: 64 bytes).  A block takes as many consecutive channels as keep
 * BN_BLOCK_BYTES of each tensor, so that every image contributes one run of
 * cb * np floats and the block stays in L2 between the passes; each
 * channel's sums still run over the images in order, so the results do not
 * depend on the blocking.  Backward at batch 64, 2 threads, medians of 31:
 * 512 channels of 4 x 4 (layer4) 0.80-0.91 -> 0.41-0.52 ms, 256 of 8 x 8
 * 0.64-0.66 -> 0.43-0.49 ms; 64 channels of 32 x 32 take one at a time. */
#define BN_BLOCK_BYTES ((size_t)256 * 1024)
#define BN_MAX_BLOCK 256

/* A channel's normalisation as y = x * a + b: one expression for the
 * forward and for the backward's recomputed ReLU mask, which must agree bit
 * for bit. */
static inline void bn_affine(float gamma, float beta, float mean, float invstd, float *a,
                             float *b)
{
    *a = gamma * invstd;
    *b = beta - mean * *a;
}

static int bn_block_channels(int n, int c, int np)
{
    const size_t per_channel = (size_t)n * np * sizeof(float);
    size_t cb = per_channel >= BN_BLOCK_BYTES ? 1 : BN_BLOCK_BYTES / per_channel;
    if (cb > BN_MAX_BLOCK)
        cb = BN_MAX_BLOCK;
    return cb < (size_t)c ? (int)cb : c;
}

/* y = act(gamma * (x - mean) * invstd + beta + add), statistics over (n, h, w) */
static void cpu_bn_fwd_train(const float *x, int n, int c, int np, const float *gamma,
                             const float *beta, float eps, float momentum, float *running_mean,
                             float *running_var, float *save_mean, float *save_invstd,
                             const float *add, int relu, float *y)
{
    const double cnt = (double)n * np;
    const int cb = bn_block_channels(n, c, np), blocks = (c + cb - 1) / cb;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        const int c0 = blk * cb, nc = c - c0 < cb ? c - c0 : cb;
        double sum[BN_MAX_BLOCK] = {0}, ss[BN_MAX_BLOCK] = {0};
        float mean_f[BN_MAX_BLOCK], a[BN_MAX_BLOCK], b[BN_MAX_BLOCK];
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nc; k++)
                sum[k] += plane_sum(x + ((size_t)i * c + c0 + k) * np, np);
        for (int k = 0; k < nc; k++)
            mean_f[k] = (float)(sum[k] / cnt);
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nc; k++)
                ss[k] += plane_sum_sq_dev(x + ((size_t)i * c + c0 + k) * np, np, mean_f[k]);
        for (int k = 0; k < nc; k++) {
            const int ch = c0 + k;
            const double mean = sum[k] / cnt, var = ss[k] / cnt;
            const float invstd = (float)(1.0 / sqrt(var + eps));
            save_mean[ch] = mean_f[k];
            save_invstd[ch] = invstd;
            bn_affine(gamma[ch], beta[ch], mean_f[k], invstd, &a[k], &b[k]);
            const double unbiased = cnt > 1.0 ? var * cnt / (cnt - 1.0) : var;
            running_mean[ch] = (float)((1.0 - momentum) * running_mean[ch] + momentum * mean);
            running_var[ch] = (float)((1.0 - momentum) * running_var[ch] + momentum * unbiased);
        }
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nc; k++) {
                const size_t off = ((size_t)i * c + c0 + k) * np;
                bn_apply_plane(x + off, add ? add + off : NULL, relu, a[k], b[k], y + off, np);
            }
    }
}

static void cpu_bn_fwd_infer(const float *x, int n, int c, int np, const float *gamma,
                             const float *beta, float eps, const float *running_mean,
                             const float *running_var, const float *add, int relu, float *y)
{
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < n; i++) {
        for (int ch = 0; ch < c; ch++) {
            const float a = gamma[ch] / sqrtf(running_var[ch] + eps);
            const float b = beta[ch] - running_mean[ch] * a;
            const size_t off = ((size_t)i * c + ch) * np;
            bn_apply_plane(x + off, add ? add + off : NULL, relu, a, b, y + off, np);
        }
    }
}

/* With xhat = (x - mean) * invstd:
 *   dbeta = sum dy,  dgamma = sum dy * xhat,
 *   dx = gamma * invstd / N * (N * dy - dbeta - xhat * dgamma)
 * With relu, dy is the gradient of the ReLU that followed (fused into the
 * forward): dy * [y > 0] replaces dy, y = x * a + b recomputed exactly as
 * bn_fwd_train wrote it, so the same bits as a ReLU backward pass before
 * this one, without that pass over three tensors. */
static void cpu_bn_bwd(const float *x, const float *dy, int n, int c, int np, const float *gamma,
                       const float *beta, const float *save_mean, const float *save_invstd,
                       int relu, float *dx, float *dgamma, float *dbeta)
{
    const double cnt = (double)n * np;
    const int cb = bn_block_channels(n, c, np), blocks = (c + cb - 1) / cb;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        const int c0 = blk * cb, nc = c - c0 < cb ? c - c0 : cb;
        double sdy[BN_MAX_BLOCK] = {0}, sdyx[BN_MAX_BLOCK] = {0};
        float a[BN_MAX_BLOCK], b[BN_MAX_BLOCK], mdy[BN_MAX_BLOCK], mdyx[BN_MAX_BLOCK];
        for (int k = 0; k < nc; k++)
            bn_affine(gamma[c0 + k], beta[c0 + k], save_mean[c0 + k], save_invstd[c0 + k], &a[k],
                      &b[k]);
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nc; k++) {
                const int ch = c0 + k;
                const size_t off = ((size_t)i * c + ch) * np;
                float s1, s2;
                plane_sum_dy_dyx(x + off, dy + off, np, save_mean[ch], save_invstd[ch], relu, a[k],
                                 b[k], &s1, &s2);
                sdy[k] += s1;
                sdyx[k] += s2;
            }
        for (int k = 0; k < nc; k++) {
            dbeta[c0 + k] += (float)sdy[k];
            dgamma[c0 + k] += (float)sdyx[k];
            mdy[k] = (float)(sdy[k] / cnt), mdyx[k] = (float)(sdyx[k] / cnt);
        }
        if (!dx)
            continue;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nc; k++) {
                const int ch = c0 + k;
                const size_t off = ((size_t)i * c + ch) * np;
                plane_bn_dx(x + off, dy + off, np, save_mean[ch], save_invstd[ch], relu, a[k],
                            b[k], mdy[k], mdyx[k], dx + off);
            }
    }
}

static double cpu_softmax_xent(const float *logits, const int32_t *labels, int n, int k,
                               float grad_scale, float *dlogits, int *correct)
{
    double loss = 0.0;
    int ok = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * k;
        int arg = 0;
        float zmax = z[0];
        for (int j = 1; j < k; j++)
            if (z[j] > zmax) {
                zmax = z[j];
                arg = j;
            }
        double sum = 0.0;
        for (int j = 0; j < k; j++)
            sum += exp((double)(z[j] - zmax));
        const double logsum = log(sum) + zmax;
        loss += logsum - z[labels[i]];
        ok += arg == labels[i];
        if (dlogits) {
            float *d = dlogits + (size_t)i * k;
            for (int j = 0; j < k; j++) {
                const double pj = exp((double)z[j] - logsum);
                d[j] = (float)(pj - (j == labels[i] ? 1.0 : 0.0)) * grad_scale;
            }
        }
    }
    if (correct)
        *correct = ok;
    return loss;
}

HCNN_MULTIVERSION
static void sgd_range(float *restrict w, const float *restrict g, float *restrict v, size_t n,
                      float lr, float mu, float wd, int nesterov)
{
    if (nesterov) {
        for (size_t i = 0; i < n; i++) {
            const float gi = g[i] + wd * w[i];
            const float vi = mu * v[i] + gi;
            v[i] = vi;
            w[i] -= lr * (gi + mu * vi);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            const float gi = g[i] + wd * w[i];
            const float vi = mu * v[i] + gi;
            v[i] = vi;
            w[i] -= lr * vi;
        }
    }
}

/* Element-wise, so any split gives the same result.  LeNet-5's 62k
 * parameters are worth two threads; the serial loop was 5% of its step. */
static void cpu_sgd_step(float *w, const float *g, float *v, size_t n, float lr, float mu,
                         float wd, int nesterov)
{
#pragma omp parallel if (n > 16384)
    {
        const size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
        sgd_range(w + lo, g + lo, v + lo, hi - lo, lr, mu, wd, nesterov);
    }
}

static double cpu_sum_sq(const float *x, size_t n)
{
    double s = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : s) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

static const hcnn_backend cpu_backend = {
    .name = "cpu-openblas",
    .parallel = cpu_parallel,
    .threads = cpu_threads,
    .alloc = hcnn_alloc,
    .free = hcnn_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .fill = cpu_fill,
    .copy = cpu_copy,
    .gemm = cpu_gemm,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .cnp_to_nchw = cpu_cnp_to_nchw,
    .add_channel_bias = cpu_add_channel_bias,
    .nchw_to_cnp = cpu_nchw_to_cnp,
    .copy_planes = cpu_copy_planes,
    .transpose = cpu_transpose,
    .channel_sum_acc = cpu_channel_sum_acc,
    .row_sum_acc = cpu_row_sum_acc,
    .add_row_bias = cpu_add_row_bias,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .add = cpu_add,
    .add_acc = cpu_add_acc,
    .dropout_fwd = cpu_dropout_fwd,
    .mul = cpu_mul,
    .maxpool_fwd = cpu_maxpool_fwd,
    .maxpool_bwd = cpu_maxpool_bwd,
    .avgpool_fwd = cpu_avgpool_fwd,
    .avgpool_bwd = cpu_avgpool_bwd,
    .bn_fwd_train = cpu_bn_fwd_train,
    .bn_fwd_infer = cpu_bn_fwd_infer,
    .bn_bwd = cpu_bn_bwd,
    .softmax_xent = cpu_softmax_xent,
    .sgd_step = cpu_sgd_step,
    .sum_sq = cpu_sum_sq,
};

const hcnn_backend *hcnn_backend_cpu(void) { return &cpu_backend; }
