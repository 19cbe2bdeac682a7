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
 *     multiply-adds and there are fewer than MAX_PIECES/2 tiles, the larger
 *     dimension of the tiles is halved (to multiples of 16);
 *   - a small output (at most SPLITK_MAX_OUT) summed over a long k (a
 *     weight gradient: k = batch x pixels) is split into k chunks instead,
 *     whose partial products are added in chunk order. */
#include <stdlib.h>

#include "cblas_decl.h"
#include "cpu.h"
#include "hcnn/blas.h"

#define MAX_PIECES 64
#define TILE_MIN_MACS ((double)(1 << 22))
#define SPLITK_MAX_OUT 65536
#define SPLITK_CHUNK 4096

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

static gemm_pieces pieces_of(int m, int n, int k)
{
    gemm_pieces p = {m, n, 1};
    if ((size_t)m * n <= SPLITK_MAX_OUT && k >= 2 * SPLITK_CHUNK) {
        p.nk = k / SPLITK_CHUNK < MAX_PIECES ? k / SPLITK_CHUNK : MAX_PIECES;
        return p;
    }
    for (;;) {
        const long tiles = (long)((m + p.tm - 1) / p.tm) * ((n + p.tn - 1) / p.tn);
        if (2 * tiles > MAX_PIECES || (double)p.tm * p.tn * k < 2 * TILE_MIN_MACS)
            break;
        if (p.tn >= p.tm && p.tn >= 32)
            p.tn = halve16(p.tn);
        else if (p.tm >= 32)
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
    int lda, ldb, ldc;
    float *c, *part;
    gemm_pieces p;
} gemm_args;

/* Tile t of the output, or k chunk t into its partial product. */
static void run_piece(const gemm_args *g, int t)
{
    if (g->p.nk > 1) {
        const int k0 = (int)((long)g->k * t / g->p.nk), k1 = (int)((long)g->k * (t + 1) / g->p.nk);
        const float *as = g->ta ? g->a + (size_t)k0 * g->lda : g->a + k0;
        const float *bs = g->tb ? g->b + k0 : g->b + (size_t)k0 * g->ldb;
        sgemm(g->ta, g->tb, g->m, g->n, k1 - k0, 1.0f, as, g->lda, bs, g->ldb, 0.0f,
              g->part + (size_t)t * g->m * g->n, g->n);
        return;
    }
    const int cols = (g->n + g->p.tn - 1) / g->p.tn;
    const int i0 = t / cols * g->p.tm, j0 = t % cols * g->p.tn;
    const int h = g->m - i0 < g->p.tm ? g->m - i0 : g->p.tm;
    const int w = g->n - j0 < g->p.tn ? g->n - j0 : g->p.tn;
    const float *as = g->ta ? g->a + i0 : g->a + (size_t)i0 * g->lda;
    const float *bs = g->tb ? g->b + (size_t)j0 * g->ldb : g->b + j0;
    sgemm(g->ta, g->tb, h, w, g->k, g->alpha, as, g->lda, bs, g->ldb, g->beta,
          g->c + (size_t)i0 * g->ldc + j0, g->ldc);
}

void hcnn_cpu_gemm(const hcnn_backend *be, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc)
{
    (void)be;
    if (omp_get_level() > 0) { /* a piece of the caller's own split: one call */
        sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    gemm_args g = {ta, tb, m, n, k, alpha, beta, a, b, lda, ldb, ldc, c, NULL, pieces_of(m, n, k)};
    const int npieces = g.p.nk > 1 ? g.p.nk
                                   : ((m + g.p.tm - 1) / g.p.tm) * ((n + g.p.tn - 1) / g.p.tn);
    if (g.p.nk > 1) {
        g.part = malloc(sizeof(float) * (size_t)g.p.nk * m * n);
        if (!g.part) { /* a few MB at most: there is no other order to sum in */
            hcnn_error("cannot allocate the %d partial products of a %dx%dx%d GEMM", g.p.nk, m,
                       n, k);
            abort();
        }
    }
    if (npieces > 1 && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int t = 0; t < npieces; t++)
            run_piece(&g, t);
    } else {
        for (int t = 0; t < npieces; t++)
            run_piece(&g, t);
    }
    if (g.p.nk == 1)
        return;
    /* the partial products in chunk order */
#pragma omp parallel for schedule(static) if ((size_t)m * n >= 4096)
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float sum = 0.0f;
            for (int t = 0; t < g.p.nk; t++)
                sum += g.part[((size_t)t * m + i) * n + j];
            float *cij = c + (size_t)i * ldc + j;
            *cij = (beta == 0.0f ? 0.0f : beta * *cij) + alpha * sum;
        }
    free(g.part);
}

int hcnn_cpu_gemm_pieces(int m, int n, int k, int *partial_rows)
{
    const gemm_pieces p = pieces_of(m, n, k);
    *partial_rows = p.nk > 1 && (size_t)m * n >= 4096 ? m : p.nk > 1 ? 1 : 0;
    return p.nk > 1 ? p.nk : ((m + p.tm - 1) / p.tm) * ((n + p.tn - 1) / p.tn);
}
