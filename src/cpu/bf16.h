/* precision: bf16 in the CPU backend (bf16.c): bfloat16 rounding and
 * GEMMs of rounded inputs with FP32 accumulation, through oneDNN. */
#ifndef HCNN_CPU_BF16_H
#define HCNN_CPU_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "hcnn/backend.h"

/* A backend instance's bf16 state: oneDNN's engine and, for each of its
 * threads, a stream, the primitives it made and its buffers. */
typedef struct hcnn_bf16 hcnn_bf16;

/* NULL after one message (no oneDNN, or it failed) */
hcnn_bf16 *hcnn_bf16_create(int threads);
void hcnn_bf16_destroy(hcnn_bf16 *b);

/* f rounded to bfloat16 (to nearest, ties to even; NaN stays NaN), and back */
uint16_t hcnn_bf16_of(float f);
float hcnn_bf16_to_float(uint16_t h);
/* y[0..n) = x[0..n) rounded */
void hcnn_bf16_round(const float *x, size_t n, uint16_t *y);

/* One single-threaded product on the calling thread, number th of the
 * state's: C = alpha op(A) op(B) + beta C, row-major, each operand given in
 * FP32 (a, b: rounded first) or in bfloat16 (a16, b16), one of each pair. */
void hcnn_bf16_product(hcnn_bf16 *b, int th, int ta, int tb, int m, int n, int k, float alpha,
                       const float *a, const uint16_t *a16, int lda, const float *bm,
                       const uint16_t *b16, int ldb, float beta, float *c, int ldc);

/* The same product as hcnn_cpu_gemm cuts and runs it (gemm.c): one piece
 * inside a parallel region, its pieces on all threads outside one; bf NULL:
 * FP32 by the BLAS (a and b then FP32). */
void hcnn_cpu_gemm_mixed(hcnn_bf16 *bf, int ta, int tb, int m, int n, int k, float alpha,
                         const float *a, const uint16_t *a16, int lda, const float *b,
                         const uint16_t *b16, int ldb, float beta, float *c, int ldc);

/* The backend's bf16 state when it computes in bf16, else NULL (FP32;
 * also for NULL, the backend's own internal calls) */
hcnn_bf16 *hcnn_cpu_bf16_of(const hcnn_backend *be);

#endif
