/* The optimiser's element-wise update and the sum of squares, CPU backend. */
#include "cpu.h"

HCNN_MULTIVERSION
static void sgd_range(float *restrict w, const float *restrict g, float *restrict v, size_t n,
                      float lr, float mu, float wd, int nesterov)
{
    /* two loops, so that the update's branch is resolved outside them */
    if (nesterov)
        for (size_t i = 0; i < n; i++)
            hcnn_hd_sgd(&w[i], g[i], &v[i], lr, mu, wd, 1);
    else
        for (size_t i = 0; i < n; i++)
            hcnn_hd_sgd(&w[i], g[i], &v[i], lr, mu, wd, 0);
}

/* Element-wise, so any split gives the same result.  LeNet-5's 62k
 * parameters are worth two threads; the serial loop was 5% of its step. */
void hcnn_cpu_sgd_step(const hcnn_backend *be, float *w, const float *g, float *v, size_t n, float lr,
                       float mu, float wd, int nesterov)
{
    (void)be;
#pragma omp parallel if (n > 16384)
    {
        const size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
        sgd_range(w + lo, g + lo, v + lo, hi - lo, lr, mu, wd, nesterov);
    }
}

/* In blocks fixed by n (at least 65536 elements, at most 256 of them), each
 * summed in order, the blocks' sums added in block order: the same bits on
 * any number of threads (an OpenMP reduction adds the threads' partial
 * sums, whose split follows the thread count). */
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
        const size_t lo = (size_t)b * block, hi = n - lo < block ? n : lo + block;
        double s = 0.0;
        for (size_t i = lo; i < hi; i++)
            s += (double)x[i] * x[i];
        part[b] = s;
    }
    double s = 0.0;
    for (int b = 0; b < blocks; b++)
        s += part[b];
    stats[HCNN_STAT_SUMSQ] += s;
}
