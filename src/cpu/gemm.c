/* GEMM of the CPU backend: OpenBLAS's cblas_sgemm (OpenMP build), with the
 * reduction dimension split over threads where OpenBLAS would run one. */
#include <cblas.h>
#include <stdlib.h>

#include "cpu.h"

static void sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* OpenBLAS parallelises a GEMM over its output, so a weight gradient (a
 * small m x n output summed over a long k = batch x pixels) runs on one
 * thread.  Split k instead: each thread computes a partial product of its
 * slice of k, and the partials are added in thread order (the same order
 * for a given thread count, so results stay repeatable). */
#define SPLITK_MAX_OUT 65536
#define SPLITK_MIN_K 4096
void hcnn_cpu_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
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
