/* Layout changes of the CPU backend: padded or cropped plane copies
 * (shifted-window convolutions), NCHW <-> channel-major (the batched
 * convolution's GEMM layout) and transposes (16 x 16 tiles). */
#include "cpu.h"

void hcnn_cpu_copy_planes(const hcnn_backend *be, const float *src, size_t splane, int sld, int c, int h, int w,
                          float *dst, size_t dplane, int dld, int accumulate)
{
    (void)be;
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

void hcnn_cpu_cnp_to_nchw(const hcnn_backend *be, const float *src, const float *bias, int n, int c, int np, float *y)
{
    (void)be;
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

/* Rows [r0, r1) of a (row stride lda) into the columns of t (row stride
 * ldt), in 16 x 16 tiles (a tile's rows and columns both stay in a few
 * cache lines); full tiles in registers where AVX-512 is. */
static void transpose_rows(const float *a, size_t lda, int r0, int r1, int cols, float *t,
                           size_t ldt)
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
                transpose_tile16_avx512(a + (size_t)i0 * lda + j0, lda, t + (size_t)j0 * ldt + i0,
                                        ldt);
                continue;
            }
#endif
            for (int j = j0; j < j1; j++)
                for (int i = i0; i < i1; i++)
                    t[(size_t)j * ldt + i] = a[(size_t)i * lda + j];
        }
    }
}

void hcnn_cpu_transpose(const hcnn_backend *be, const float *a, int rows, int cols, float *t)
{
    (void)be;
    if (omp_in_parallel() || (size_t)rows * cols < 65536) {
        transpose_rows(a, (size_t)cols, 0, rows, cols, t, (size_t)rows);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < rows; i0 += 16)
        transpose_rows(a, (size_t)cols, i0, i0 + 16 < rows ? i0 + 16 : rows, cols, t, (size_t)rows);
}

void hcnn_cpu_transpose_ld(const float *a, size_t lda, int rows, int cols, float *t, size_t ldt)
{
    transpose_rows(a, lda, 0, rows, cols, t, ldt);
}

void hcnn_cpu_nchw_to_cnp(const hcnn_backend *be, const float *y, int n, int c, int np, float *dst)
{
    (void)be;
#pragma omp parallel for collapse(2) schedule(static)
    for (int co = 0; co < c; co++)
        for (int i = 0; i < n; i++)
            copy_floats(dst + (size_t)co * n * np + (size_t)i * np, y + ((size_t)i * c + co) * np,
                        np);
}
