/* Inside the CPU backend (src/cpu/): what its files share.  The backend
 * is GEMM through OpenBLAS (OpenMP variant) and everything else as OpenMP
 * loops, one file per group of operations, mirrored by src/cuda/.
 *
 * Threading: OpenBLAS built with USE_OPENMP shares libgomp's thread pool
 * and runs single-threaded inside an OpenMP parallel region, so BLAS calls
 * (made outside our parallel regions) use all threads and our loops use
 * all threads, never both at once: no oversubscription.
 *
 * Determinism: every reduction runs in a fixed order that does not depend
 * on the thread count (loops are parallel over independent outputs, and
 * each output is summed serially), so results are bit-for-bit repeatable. */
#ifndef HCNN_CPU_H
#define HCNN_CPU_H

#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hcnn/backend.h"
#include "hcnn/common.h"
#include "../core/hd.h" /* the element and index math shared with src/cuda/ */

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

/* Pieces.  A pass of few images (a 64-core node of a 32-node job holds 8-32
 * of them) is cut into pieces fixed by the layer's shape and the number
 * of images, never by the thread count: up to HCNN_PIECES_TARGET pieces a
 * phase (one image per thread or fewer on a 256-thread node) for a pass of
 * few images (hcnn_pieces_for), none smaller
 * than HCNN_PIECE_MIN_MACS multiply-adds where the cut decides a GEMM's
 * size (a smaller GEMM costs more in its call and packing than a thread
 * gains from it).  Who runs a piece never changes its bits.  The
 * measurements behind both are in docs/performance.md ("Pieces"). */
#define HCNN_PIECES_TARGET 256
#define HCNN_PIECE_MIN_MACS ((double)(1 << 18))
/* The pieces a phase aims at for a pass of n images: 256 while the pass
 * has fewer than HCNN_PIECES_FEW_IMAGES (a node's share of a strong-scaled
 * batch), else 64 (one a core of a 64-core node): at 64 images on 2
 * threads the 256-piece cuts cost ResNet-18 14% (0.86 of the build before,
 * 5 alternated rounds: Winograd's GEMMs of 56 tiles run at 37 GFLOP/s
 * against 57 for 224, one thread, 64 x 64 weights; docs/performance.md,
 * "Pieces for many threads"). */
#define HCNN_PIECES_FEW_IMAGES 32
#define HCNN_PIECES_MANY 64
static inline int hcnn_pieces_for(int images)
{
    return images < HCNN_PIECES_FEW_IMAGES ? HCNN_PIECES_TARGET : HCNN_PIECES_MANY;
}

/* a count of floats rounded up to a 64-byte multiple: workspace offsets */
static inline size_t hcnn_round_up16(size_t f) { return (f + 15) & ~(size_t)15; }

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HCNN_CPU_AVX512 1

/* bits [lo, hi) of 16, clamped */
static inline __mmask16 lane_range(int lo, int hi)
{
    if (lo < 0) lo = 0;
    if (hi > 16) hi = 16;
    if (hi <= lo)
        return 0;
    return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}
#endif

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

/* sum of x[0..n) in 16 lanes added pairwise (bn.c) */
float hcnn_cpu_plane_sum(const float *x, int n);

/* An instance's state (be->state, from hcnn_backend_cpu_create): the
 * precision set_precision accepted and, for bf16, oneDNN's state (bf16.c).
 * The shared table of hcnn_backend_cpu() has none and computes in FP32. */
struct hcnn_bf16;
typedef struct hcnn_cpu_state {
    hcnn_precision precision;
    struct hcnn_bf16 *bf16;
} hcnn_cpu_state;

/* be's precision: HCNN_PRECISION_FP32 for NULL or a table without state
 * (instance.c) */
hcnn_precision hcnn_cpu_precision(const hcnn_backend *be);

/* The operations of the table (backend.c), by file; each is documented
 * where include/hcnn/backend.h declares its slot.  They take the instance
 * first, as the table does; none reads its state but the precision (which
 * hcnn_cpu_precision reads; its functions are also called with NULL from
 * inside the backend). */
/* backend.c */
void hcnn_cpu_destroy(hcnn_backend *be);
/* instance.c */
void hcnn_cpu_parallel(const hcnn_backend *be, void (*fn)(void *arg, int t, int nt), void *arg);
int hcnn_cpu_threads(const hcnn_backend *be);
/* gemm.c */
void hcnn_cpu_gemm(const hcnn_backend *be, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc);
/* The pieces hcnn_cpu_gemm cuts an m x n x k product into when called
 * outside a parallel region with at most `target` tiles (hcnn_cpu_gemm:
 * HCNN_PIECES_MANY; a convolution's pass: hcnn_pieces_for): tiles of C,
 * or k chunks; and *partial_rows: the pieces of the sum of the k chunks'
 * partial products after them (0: none; 1: summed on one thread).
 * pass_pieces (pieces.c) reads it. */
int hcnn_cpu_gemm_pieces(int m, int n, int k, int target, int *partial_rows);
/* im2col.c */
void hcnn_cpu_im2col(const hcnn_backend *be, const hcnn_conv_geom *g, const float *x, int n, float *col);
void hcnn_cpu_col2im(const hcnn_backend *be, const hcnn_conv_geom *g, const float *col, int n, int accumulate,
                     float *dx);
/* layout.c */
void hcnn_cpu_copy_planes(const hcnn_backend *be, const float *src, size_t splane, int sld, int c, int h, int w,
                          float *dst, size_t dplane, int dld, int accumulate);
void hcnn_cpu_cnp_to_nchw(const hcnn_backend *be, const float *src, const float *bias, int n, int c, int np, float *y);
void hcnn_cpu_nchw_to_cnp(const hcnn_backend *be, const float *y, int n, int c, int np, float *dst);
void hcnn_cpu_transpose(const hcnn_backend *be, const float *a, int rows, int cols, float *t);
/* t[j][i] = a[i][j] for a [rows][cols] of row stride lda, t of row stride
 * ldt: a block of planes to channels-last and back (Winograd's pieces);
 * serial, for a thread's own piece */
void hcnn_cpu_transpose_ld(const float *a, size_t lda, int rows, int cols, float *t, size_t ldt);
/* bias.c */
void hcnn_cpu_add_channel_bias(const hcnn_backend *be, float *y, const float *bias, int n, int c, int np, size_t ld);
void hcnn_cpu_channel_sum_acc(const hcnn_backend *be, const float *dy, int n, int c, int np, float *db);
void hcnn_cpu_row_sum_acc(const hcnn_backend *be, const float *dy, int n, int m, float *db);
void hcnn_cpu_add_row_bias(const hcnn_backend *be, float *y, const float *b, int n, int m);
/* elementwise.c */
void hcnn_cpu_fill(const hcnn_backend *be, float *x, size_t n, float v);
void hcnn_cpu_relu_fwd(const hcnn_backend *be, const float *x, float *y, size_t n, float slope);
void hcnn_cpu_relu_bwd(const hcnn_backend *be, const float *y, const float *dy, float *dx, size_t n, float slope);
void hcnn_cpu_add(const hcnn_backend *be, const float *a, const float *b, float *y, size_t n);
void hcnn_cpu_add_acc(const hcnn_backend *be, const float *a, float *y, size_t n);
void hcnn_cpu_mul(const hcnn_backend *be, const float *a, const float *b, float *y, size_t n);
void hcnn_cpu_scale(const hcnn_backend *be, float *x, size_t n, float a);
void hcnn_cpu_dropout_fwd(const hcnn_backend *be, const float *x, float *y, float *mask, int n, size_t per_sample,
                          float p, uint64_t seed, uint64_t step, uint64_t first_sample,
                          uint64_t layer_id);
/* pool.c */
void hcnn_cpu_maxpool_fwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n, float *y,
                          int32_t *argmax);
void hcnn_cpu_maxpool_bwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy,
                          const int32_t *argmax, int n, float *dx);
void hcnn_cpu_avgpool_fwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n, float *y);
void hcnn_cpu_avgpool_bwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy, int n, float *dx);
/* bn.c */
/* the statistics a convolution gathers for the batch-norm after it
 * (backend.h, hcnn_bn_stats): rows [oy0, oy0 + rows) of channels [c0, c1)
 * of one image, into that image's table */
void hcnn_cpu_bn_stats_rows(const hcnn_bn_stats *st, const float *y, size_t np, int ow, int c0,
                            int c1, int oy0, int rows, float *part_img);
void hcnn_cpu_bn_fwd_train(const hcnn_backend *be, const float *x, int n, int c, int np, const float *gamma,
                           const float *beta, float eps, float momentum, float *running_mean,
                           float *running_var, float *save_mean, float *save_invstd,
                           const float *add, int relu, const hcnn_bn_stats *stats, float *y);
void hcnn_cpu_bn_fwd_infer(const hcnn_backend *be, const float *x, int n, int c, int np, const float *gamma,
                           const float *beta, float eps, const float *running_mean,
                           const float *running_var, const float *add, int relu, float *y);
void hcnn_cpu_bn_bwd(const hcnn_backend *be, const float *x, const float *dy, int n, int c, int np, const float *gamma,
                     const float *beta, const float *save_mean, const float *save_invstd,
                     int relu, float *dx, float *dgamma, float *dbeta);
/* the pieces a training batch-norm pass offers nt threads: blocks of
 * channels, or n x c planes when the blocks are too few (the same bits) */
int hcnn_cpu_bn_pieces(int n, int c, int np, int nt);
/* pieces.c: the table's pass_pieces */
void hcnn_cpu_pass_pieces(const hcnn_backend *be, const hcnn_op *op, const hcnn_exec *ex, int n,
                          int nt, hcnn_pieces *fwd, hcnn_pieces *bwd);
/* loss.c */
void hcnn_cpu_softmax_xent(const hcnn_backend *be, const float *logits, const int32_t *labels,
                           int n, int k, float grad_scale, float *dlogits, double *stats);
/* optim.c */
void hcnn_cpu_sgd_step(const hcnn_backend *be, float *w, float *g, float *v, size_t n, float lr, float mu,
                       float wd, int nesterov, double *stats);
void hcnn_cpu_sum_sq(const hcnn_backend *be, const float *x, size_t n, double *stats);

#endif
