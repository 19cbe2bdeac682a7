/* precision: bf16 in the CPU backend (bf16.c): bfloat16 rounding and
 * GEMMs of rounded inputs with FP32 accumulation, through oneDNN. */
#ifndef HCNN_CPU_BF16_H
#define HCNN_CPU_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "hcnn/backend.h"
#include "hcnn/config.h"

/* A backend instance's bf16 state: oneDNN's engine and, for each of its
 * threads, a stream, the primitives it made and its buffers. */
typedef struct hcnn_bf16 hcnn_bf16;

/* the most threads a state serves: as many as a run may have */
#define HCNN_BF16_MAX_THREADS HCNN_MAX_THREADS

/* NULL after one message (no oneDNN, or it failed) */
hcnn_bf16 *hcnn_bf16_create(int threads);
void hcnn_bf16_destroy(hcnn_bf16 *b);

/* f rounded to bfloat16 (to nearest, ties to even; NaN stays NaN), and back */
uint16_t hcnn_bf16_of(float f);
float hcnn_bf16_to_float(uint16_t h);
/* y[0..n) = x[0..n) rounded */
void hcnn_bf16_round(const float *x, size_t n, uint16_t *y);

/* y[0..n) = x[0..n) rounded, as FP32 values */
void hcnn_bf16_widen(const float *x, size_t n, float *y);

/* Whether oneDNN's matmul runs an m x n x k product here (bf16.c: by the
 * instruction set, the CPU's maker and the shape, from measurements);
 * else the BLAS's FP32 GEMM multiplies the rounded inputs (the same
 * arithmetic: products of bfloat16 values are exact in FP32). */
int hcnn_bf16_by_onednn(const hcnn_bf16 *b, int m, int n, int k);
/* one line for the run header: which engine multiplies here */
const char *hcnn_bf16_engine(const hcnn_bf16 *b);
/* rows x cols of x (FP32, row stride ld; or x16, bfloat16) rounded and
 * widened to FP32, packed (row stride cols), in thread th's buffer
 * `which` (0 or 1: a product's two operands) */
const float *hcnn_bf16_widened(hcnn_bf16 *b, int th, int which, const float *x,
                               const uint16_t *x16, int rows, int cols, int ld);

/* One single-threaded product on the calling thread, number th of the
 * state's: C = alpha op(A) op(B) + beta C, row-major, each operand given in
 * FP32 (a, b: rounded first) or in bfloat16 (a16, b16), one of each pair. */
void hcnn_bf16_product(hcnn_bf16 *b, int th, int ta, int tb, int m, int n, int k, float alpha,
                       const float *a, const uint16_t *a16, int lda, const float *bm,
                       const uint16_t *b16, int ldb, float beta, float *c, int ldc);

/* The same product as hcnn_cpu_gemm cuts and runs it (gemm.c): one piece
 * inside a parallel region, its pieces on all threads outside one (at
 * most `target` tiles: hcnn_pieces_for); bf NULL: FP32 by the BLAS (a and
 * b then FP32). */
void hcnn_cpu_gemm_mixed(hcnn_bf16 *bf, int target, int ta, int tb, int m, int n, int k,
                         float alpha, const float *a, const uint16_t *a16, int lda, const float *b,
                         const uint16_t *b16, int ldb, float beta, float *c, int ldc);

/* The backend's bf16 state when it computes in bf16, else NULL (FP32;
 * also for NULL, the backend's own internal calls; instance.c) */
hcnn_bf16 *hcnn_cpu_bf16_of(const hcnn_backend *be);

#endif
