/* GEMM of the CUDA backend: cuBLAS on the instance's stream.  hcnn's
 * matrices are row-major; cuBLAS's are column-major, where a row-major
 * M x N matrix is its N x M transpose: C = op(A) op(B) is computed as
 * C^T = op(B)^T op(A)^T, the operands swapped and the transpositions
 * kept.  cuBLAS's FP32 GEMM gives the same bits for the same call on the
 * same GPU (CUBLAS_PEDANTIC_MATH: no TF32 unless `precision` asks). */
#include "cuda.h"

void hcnn_cuda_gemm(const hcnn_backend *be, int ta, int tb, int m, int n, int k, float alpha,
                    const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    HCNN_CUBLAS(cublasSgemm(cuda_of(be)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                            ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a, lda, &beta,
                            c, ldc));
}
