/* GEMM of the CUDA backend: cuBLAS on the instance's stream.  hcnn's
 * matrices are row-major; cuBLAS's are column-major, where a row-major
 * M x N matrix is its N x M transpose: C = op(A) op(B) is computed as
 * C^T = op(B)^T op(A)^T, the operands swapped and the transpositions
 * kept.  cuBLAS's FP32 GEMM gives the same bits for the same call on the
 * same GPU (CUBLAS_PEDANTIC_MATH: no TF32 unless `precision` asks). */
#include "cuda.h"

/* total floats of an operand (its rows with their leading dimension)
 * rounded to bfloat16, in the same layout */
static __global__ void to_bf16_kernel(const float *x, size_t total, __nv_bfloat16 *y)
{
    const size_t i = HCNN_CUDA_INDEX();
    if (i < total)
        y[i] = __float2bfloat16(x[i]);
}

/* The elements a row-major operand of `rows` rows spans with leading
 * dimension ld (the last row: only its `cols` columns) */
static size_t span(int rows, int cols, int ld) { return (size_t)(rows - 1) * ld + (size_t)cols; }

void hcnn_cuda_to_bf16(const hcnn_backend *be, const float *x, size_t n, __nv_bfloat16 *y)
{
    if (n == 0)
        return;
    HCNN_LAUNCH(to_bf16_kernel, hcnn_cuda_blocks(n), HCNN_CUDA_BLOCK, cuda_of(be)->stream, x, n, y);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_gemm_bf16(const hcnn_backend *be, int ta, int tb, int m, int n, int k, float alpha,
                         const __nv_bfloat16 *a, int lda, const __nv_bfloat16 *b, int ldb,
                         float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    HCNN_CUBLAS(cublasGemmEx(cuda_of(be)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                             ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_16BF, ldb, a,
                             CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
}

void hcnn_cuda_gemm(const hcnn_backend *be, int ta, int tb, int m, int n, int k, float alpha,
                    const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    const hcnn_cuda *cu = cuda_of(be);
    if (cu->precision != HCNN_PRECISION_BF16 || k <= 0) {
        HCNN_CUBLAS(cublasSgemm(cu->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a, lda,
                                &beta, c, ldc));
        return;
    }
    /* mixed precision: both inputs rounded to bfloat16, FP32 accumulation and output */
    const size_t sa = ta ? span(k, m, lda) : span(m, k, lda);
    const size_t sb = tb ? span(n, k, ldb) : span(k, n, ldb);
    __nv_bfloat16 *abf = hcnn_cuda_bf16_buffer(be, hcnn_cuda_bf16_padded(sa) + sb);
    __nv_bfloat16 *bbf = abf + hcnn_cuda_bf16_padded(sa);
    hcnn_cuda_to_bf16(be, a, sa, abf);
    hcnn_cuda_to_bf16(be, b, sb, bbf);
    hcnn_cuda_gemm_bf16(be, ta, tb, m, n, k, alpha, abf, lda, bbf, ldb, beta, c, ldc);
}
