/* The optimiser's element-wise update and the sum of squares, CPU backend. */
#include "cpu.h"

/* The update of w[0, n), g zeroed, and the sums of squares of the new w
 * and v, 16 elements at a time in vector registers (the same operations as the
 * GPU's, hd.h), the squares summed in 16 lanes (cpu.h: the same sums on
 * every ISA clone) on the way: they cost no memory traffic.  (Summed in a
 * second loop over pieces still in L1, the sweep of ResNet-18's 11.17 M
 * parameters took 13% longer on 2 threads of a Zen 5; this way 2-4%.) */
HCNN_MULTIVERSION
static void sgd_range(float *restrict w, float *restrict g, float *restrict v, size_t n,
                      float lr, float mu, float wd, int nesterov, double *wsq, double *vsq)
{
    v16f sw = {0}, sv = {0};
    const v16f zero = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f wi, gi, vi;
        LOAD16(wi, w + i);
        LOAD16(gi, g + i);
        LOAD16(vi, v + i);
        HCNN_HD_SGD(v16f, wi, gi, vi, lr, mu, wd, nesterov);
        memcpy(w + i, &wi, sizeof wi);
        memcpy(v + i, &vi, sizeof vi);
        memcpy(g + i, &zero, sizeof zero);
        sw += wi * wi;
        sv += vi * vi;
    }
    double tw = 0.0, tv = 0.0;
    for (; i < n; i++) {
        hcnn_hd_sgd(&w[i], g[i], &v[i], lr, mu, wd, nesterov);
        g[i] = 0.0f;
        tw += (double)w[i] * w[i], tv += (double)v[i] * v[i];
    }
    for (int k = 0; k < 16; k++)
        tw += sw[k], tv += sv[k];
    *wsq = tw, *vsq = tv;
}

/* Element-wise, so any split gives the same update; the sums of squares
 * are taken over blocks fixed by n (at least SGD_MIN_BLOCK elements, at
 * most SGD_MAX_BLOCKS of them) and added in block order, so that they are
 * the same on any thread count and on every rank (the trainer decides from
 * them whether to keep the state before the next update: train.c).
 * LeNet-5's 62k parameters are worth two threads; the serial loop was 5% of
 * its step. */
#define SGD_MIN_BLOCK 8192
#define SGD_MAX_BLOCKS 256

void hcnn_cpu_sgd_step(const hcnn_backend *be, float *w, float *g, float *v, size_t n, float lr,
                       float mu, float wd, int nesterov, double *stats)
{
    (void)be;
    size_t block = (n + SGD_MAX_BLOCKS - 1) / SGD_MAX_BLOCKS;
    block = block < SGD_MIN_BLOCK ? SGD_MIN_BLOCK : block;
    const int blocks = (int)((n + block - 1) / block);
    double wsq[SGD_MAX_BLOCKS], vsq[SGD_MAX_BLOCKS];
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int b = 0; b < blocks; b++) {
        const size_t lo = (size_t)b * block, len = n - lo < block ? n - lo : block;
        sgd_range(w + lo, g + lo, v + lo, len, lr, mu, wd, nesterov, &wsq[b], &vsq[b]);
    }
    if (!stats)
        return;
    for (int b = 0; b < blocks; b++)
        stats[HCNN_STAT_WSQ] += wsq[b], stats[HCNN_STAT_VSQ] += vsq[b];
}

/* sum of x[i]^2 over [0, n), in 16 double lanes (lane k takes elements
 * k, k + 16, ...) added in lane order: vectorised, and the same on every ISA
 * clone (a float's square is exact in double, so contracting into an FMA
 * cannot change it).  One running double made each add wait for the one
 * before: the gradients' sum of ResNet-18's 11.17 M parameters took 3.1-3.4
 * ms a step on 2 threads of a Zen 5, 0.5 ms this way, memory-bound
 * (docs/performance.md, "The rest of the CPU backend"). */
typedef double v8d __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));

HCNN_MULTIVERSION
static double sum_sq_range(const float *x, size_t n)
{
    v8d a0 = {0}, a1 = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v8f lo, hi;
        memcpy(&lo, x + i, sizeof lo);
        memcpy(&hi, x + i + 8, sizeof hi);
        const v8d dlo = __builtin_convertvector(lo, v8d), dhi = __builtin_convertvector(hi, v8d);
        a0 += dlo * dlo;
        a1 += dhi * dhi;
    }
    double lanes[16], t = 0.0;
    memcpy(lanes, &a0, sizeof a0);
    memcpy(lanes + 8, &a1, sizeof a1);
    for (; i < n; i++)
        t += (double)x[i] * x[i];
    for (int k = 0; k < 16; k++)
        t += lanes[k];
    return t;
}

/* In blocks fixed by n (at least 65536 elements, at most 256 of them), each
 * summed by sum_sq_range, the blocks' sums added in block order: the same
 * bits on any number of threads (an OpenMP reduction adds the threads'
 * partial sums, whose split follows the thread count). */
#define SUM_SQ_MIN_BLOCK 65536
#define SUM_SQ_MAX_BLOCKS 256

void hcnn_cpu_sum_sq(const hcnn_backend *be, const float *x, size_t n, double *stats)
{
    (void)be;
    size_t block = (n + SUM_SQ_MAX_BLOCKS - 1) / SUM_SQ_MAX_BLOCKS;
    block = block < SUM_SQ_MIN_BLOCK ? SUM_SQ_MIN_BLOCK : block;
    const int blocks = (int)((n + block - 1) / block);
    double part[SUM_SQ_MAX_BLOCKS];
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int b = 0; b < blocks; b++) {
        const size_t lo = (size_t)b * block, len = n - lo < block ? n - lo : block;
        part[b] = sum_sq_range(x + lo, len);
    }
    double s = 0.0;
    for (int b = 0; b < blocks; b++)
        s += part[b];
    stats[HCNN_STAT_SUMSQ] += s;
}
