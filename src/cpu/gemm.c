/* GEMM of the CPU backend.  Called inside a parallel region (a layer's
 * per-thread item, a whole-network unit: the caller has split the work
 * already) it is one single-threaded cblas_sgemm call.  Called outside one
 * (a batched convolution, a fully connected layer), the product is cut
 * into pieces whose shapes depend on (m, n, k) only, run on all threads.
 *
 * A BLAS gives different bits for the same product split differently:
 * OpenBLAS's Haswell kernels for any split of M or N, and its own
 * threading splits by the thread count (docs/performance.md,
 * "Determinism").  So hcnn never lets the BLAS use threads (it runs
 * single-threaded, hcnn_blas_single_threaded) and splits products itself,
 * by shape: the same product is the same bits on 1 thread or 64.
 *   - output tiles: while a tile has more than 2 * TILE_MIN_MACS
 *     multiply-adds and there are fewer tiles than the call's target, the larger
 *     dimension of the tiles is halved (to multiples of 16), down to sides
 *     of TILE_MIN_SIDE;
 *   - a small output (at most SPLITK_MAX_OUT) summed over a long k (a
 *     weight gradient: k = batch x pixels) is split into k chunks instead,
 *     whose partial products are added in chunk order. */
#include <stdlib.h>

#include "bf16.h"
#include "../blas/cblas_decl.h" /* the BLAS library src/blas/ loads */
#include "cpu.h"
#include "hcnn/blas.h"

/* up to the call's target of output tiles (hcnn_pieces_for: 256 for a
 * convolution's pass of few images, else 64) of >= 2 HCNN_PIECE_MIN_MACS
 * (cpu.h); at most SPLITK_MAX_CHUNKS k chunks, each a partial product
 * summed at the end */
#define TILE_MIN_MACS HCNN_PIECE_MIN_MACS
/* a tile's sides stay >= 64: each tile packs its own panels of A and B
 * (K x (tm + tn) floats for tm x tn x K multiply-adds); tiles of 32 x 64
 * made ResNet-18's batched layer4.0.conv1 13% slower at batch 64 on 2
 * threads than the 64-piece tiles before (docs/performance.md, "Pieces") */
#define TILE_MIN_SIDE 64
#define SPLITK_MAX_OUT 65536
#define SPLITK_CHUNK 4096
#define SPLITK_MAX_CHUNKS 64

/* One single-threaded BLAS call.  OpenBLAS's OpenMP build takes its thread
 * count from omp_get_max_threads() at every call outside a parallel region
 * (openblas_set_num_threads(1) does not stick), so the calling thread's
 * OpenMP thread count is 1 for the call.  A team larger than the callers
 * the BLAS serves at once passes its gate (hcnn_blas_gate_enter: more than
 * 128 threads in OpenBLAS 0.3.21 crashed). */
static void sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc)
{
    const int outer = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (outer > 1)
        omp_set_num_threads(1);
    const int entered = hcnn_blas_gate_enter();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, a, lda, b, ldb, beta, c, ldc);
    hcnn_blas_gate_leave(entered);
    if (outer > 1)
        omp_set_num_threads(outer);
}

/* The pieces of an m x n x k product: tiles of tm x tn, or nk k chunks. */
typedef struct gemm_pieces {
    int tm, tn, nk;
} gemm_pieces;

static int halve16(int x) { return ((x + 1) / 2 + 15) & ~15; }

static gemm_pieces pieces_of(int m, int n, int k, int max_pieces)
{
    gemm_pieces p = {m, n, 1};
    if ((size_t)m * n <= SPLITK_MAX_OUT && k >= 2 * SPLITK_CHUNK) {
        p.nk = k / SPLITK_CHUNK < SPLITK_MAX_CHUNKS ? k / SPLITK_CHUNK : SPLITK_MAX_CHUNKS;
        return p;
    }
    for (;;) {
        const long tiles = (long)((m + p.tm - 1) / p.tm) * ((n + p.tn - 1) / p.tn);
        if (tiles >= max_pieces || (double)p.tm * p.tn * k < 2 * TILE_MIN_MACS)
            break;
        if (p.tn >= p.tm && p.tn >= 2 * TILE_MIN_SIDE)
            p.tn = halve16(p.tn);
        else if (p.tm >= 2 * TILE_MIN_SIDE)
            p.tm = halve16(p.tm);
        else
            break;
    }
    return p;
}

typedef struct gemm_args {
    int ta, tb, m, n, k;
    float alpha, beta;
    const float *a, *b;
    const uint16_t *a16, *b16; /* operands already in bfloat16 (precision bf16) */
    int lda, ldb, ldc;
    float *c, *part;
    gemm_pieces p;
    hcnn_bf16 *bf; /* precision bf16: oneDNN's products (bf16.c); NULL: the BLAS's */
    int target;    /* the most output tiles (hcnn_pieces_for) */
} gemm_args;

/* The calling thread's number among all of the run's threads: a work unit
 * of whole-network execution runs its layers' parallel regions nested in
 * the units' (inactive, one thread each), where omp_get_thread_num() is 0
 * on every thread. */
static int thread_slot(void)
{
    int id = 0;
    for (int l = 1; l <= omp_get_level(); l++)
        id = id * omp_get_team_size(l) + omp_get_ancestor_thread_num(l);
    return id;
}

/* One single-threaded product of the call's kind, operands at offsets ao, bo. */
static void product(const gemm_args *g, int m, int n, int k, float alpha, size_t ao, size_t bo,
                    float beta, float *c, int ldc)
{
    if (!g->bf) {
        sgemm(g->ta, g->tb, m, n, k, alpha, g->a + ao, g->lda, g->b + bo, g->ldb, beta, c, ldc);
        return;
    }
    const int th = thread_slot();
    const float *a = g->a ? g->a + ao : NULL, *b = g->b ? g->b + bo : NULL;
    const uint16_t *a16 = g->a16 ? g->a16 + ao : NULL, *b16 = g->b16 ? g->b16 + bo : NULL;
    if (hcnn_bf16_by_onednn(g->bf, m, n, k)) {
        hcnn_bf16_product(g->bf, th, g->ta, g->tb, m, n, k, alpha, a, a16, g->lda, b, b16, g->ldb,
                          beta, c, ldc);
        return;
    }
    /* the BLAS on the rounded inputs, widened back to FP32 (packed) */
    const int ar = g->ta ? k : m, ac = g->ta ? m : k, br = g->tb ? n : k, bc = g->tb ? k : n;
    const float *aw = hcnn_bf16_widened(g->bf, th, 0, a, a16, ar, ac, g->lda);
    const float *bw = hcnn_bf16_widened(g->bf, th, 1, b, b16, br, bc, g->ldb);
    sgemm(g->ta, g->tb, m, n, k, alpha, aw, ac, bw, bc, beta, c, ldc);
}

/* Tile t of the output, or k chunk t into its partial product. */
static void run_piece(const gemm_args *g, int t)
{
    if (g->p.nk > 1) {
        const int k0 = (int)((long)g->k * t / g->p.nk), k1 = (int)((long)g->k * (t + 1) / g->p.nk);
        const size_t ao = g->ta ? (size_t)k0 * g->lda : (size_t)k0;
        const size_t bo = g->tb ? (size_t)k0 : (size_t)k0 * g->ldb;
        product(g, g->m, g->n, k1 - k0, 1.0f, ao, bo, 0.0f, g->part + (size_t)t * g->m * g->n,
                g->n);
        return;
    }
    const int cols = (g->n + g->p.tn - 1) / g->p.tn;
    const int i0 = t / cols * g->p.tm, j0 = t % cols * g->p.tn;
    const int h = g->m - i0 < g->p.tm ? g->m - i0 : g->p.tm;
    const int w = g->n - j0 < g->p.tn ? g->n - j0 : g->p.tn;
    const size_t ao = g->ta ? (size_t)i0 : (size_t)i0 * g->lda;
    const size_t bo = g->tb ? (size_t)j0 * g->ldb : (size_t)j0;
    product(g, h, w, g->k, g->alpha, ao, bo, g->beta, g->c + (size_t)i0 * g->ldc + j0, g->ldc);
}

/* The call: one product inside a parallel region (a piece of the caller's
 * own split), else its pieces on all threads and, for k chunks, their
 * partial products added in chunk order. */
static void run(gemm_args *g)
{
    const int m = g->m, n = g->n;
    if (omp_get_level() > 0) {
        product(g, m, n, g->k, g->alpha, 0, 0, g->beta, g->c, g->ldc);
        return;
    }
    g->p = pieces_of(m, n, g->k, g->target);
    const int npieces = g->p.nk > 1 ? g->p.nk
                                    : ((m + g->p.tm - 1) / g->p.tm) * ((n + g->p.tn - 1) / g->p.tn);
    if (g->p.nk > 1) {
        g->part = malloc(sizeof(float) * (size_t)g->p.nk * m * n);
        if (!g->part) /* a few MB at most: there is no other order to sum in */
            hcnn_fatal_at(__FILE__, __LINE__, "cannot allocate the %d partial products of a "
                                              "%dx%dx%d GEMM",
                          g->p.nk, m, n, g->k);
    }
    if (npieces > 1 && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int t = 0; t < npieces; t++)
            run_piece(g, t);
    } else {
        for (int t = 0; t < npieces; t++)
            run_piece(g, t);
    }
    if (g->p.nk == 1)
        return;
    const float alpha = g->alpha, beta = g->beta;
    const float *part = g->part;
    float *c = g->c;
    const int ldc = g->ldc, nk = g->p.nk;
    /* the partial products in chunk order */
#pragma omp parallel for schedule(static) if ((size_t)m * n >= 4096)
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float sum = 0.0f;
            for (int t = 0; t < nk; t++)
                sum += part[((size_t)t * m + i) * n + j];
            float *cij = c + (size_t)i * ldc + j;
            *cij = (beta == 0.0f ? 0.0f : beta * *cij) + alpha * sum;
        }
    free(g->part);
}

void hcnn_cpu_gemm(const hcnn_backend *be, int ta, int tb, int m, int n, int k, float alpha,
                   const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    gemm_args g = {ta, tb, m, n, k, alpha, beta, a, b, NULL, NULL, lda, ldb, ldc, c, NULL,
                   {0, 0, 0}, hcnn_cpu_bf16_of(be), HCNN_PIECES_MANY};
    run(&g);
}

void hcnn_cpu_gemm_mixed(hcnn_bf16 *bf, int target, int ta, int tb, int m, int n, int k,
                         float alpha, const float *a, const uint16_t *a16, int lda, const float *b,
                         const uint16_t *b16, int ldb, float beta, float *c, int ldc)
{
    gemm_args g = {ta, tb, m, n, k, alpha, beta, a, b, a16, b16, lda, ldb, ldc, c, NULL,
                   {0, 0, 0}, bf, target};
    run(&g);
}

int hcnn_cpu_gemm_pieces(int m, int n, int k, int target, int *partial_rows)
{
    const gemm_pieces p = pieces_of(m, n, k, target);
    *partial_rows = p.nk > 1 && (size_t)m * n >= 4096 ? m : p.nk > 1 ? 1 : 0;
    return p.nk > 1 ? p.nk : ((m + p.tm - 1) / p.tm) * ((n + p.tn - 1) / p.tn);
}
