/* Batch normalisation of the CUDA backend: training (batch statistics,
 * running statistics) and inference forwards with the fused addition and
 * ReLU, and the backward with the fused ReLU mask.
 *
 * The sums follow the CPU's order (src/cpu/bn.c): a plane of np values is
 * summed in 16 lanes (lane l takes elements l, l + 16, ... of the whole
 * blocks of 16) plus a tail, the lanes added pairwise; a channel adds its
 * planes in double, images in order.  Here 17 threads a plane compute the
 * lanes and the tail (the 16 lanes read neighbouring elements), one thread
 * a plane totals them, and one thread a channel adds the planes' totals up:
 * statistics computed without atomics, in a fixed order, and with the CPU's
 * additions.  The element terms are src/core/hd.h's.
 *
 * Measured on an H200 (ResNet-18, batch 256): with the lanes totalled by
 * the channel's thread, every batch-norm took 0.23-0.29 ms forward and
 * backward whatever its size, a sixth of the step: 64-512 threads each
 * walking 256 images x 17 partial sums in a chain of dependent loads. */
#include <math.h>

#include "cuda.h"

#define LANES 16
#define SLOTS (LANES + 1) /* the lanes and the tail of a plane */

/* Slot l of plane q: lane l's sum of f(x) over the whole blocks of 16, or
 * (l == LANES) the tail's, in order; f is x (mode 0) or (x - m)^2 with m
 * the channel's mean[ch] (mode 1) or the plane's own mean[2 q] (mode 2: a
 * gathered statistics' table). */
static __global__ void plane_slots_kernel(const float *x, size_t planes, int c, int np, int mode,
                                          const float *mean, float *part)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= planes * SLOTS)
        return;
    const size_t q = k / SLOTS;
    const int l = (int)(k % SLOTS), whole = np / LANES * LANES;
    const float *p = x + q * (size_t)np;
    const float m = mode == 1 ? mean[q % (size_t)c] : mode == 2 ? mean[2 * q] : 0.0f;
    float s = 0.0f;
    if (l < LANES) {
        for (int i = l; i < whole; i += LANES) {
            const float v = mode ? (p[i] - m) * (p[i] - m) : p[i];
            s += v;
        }
    } else {
        for (int i = whole; i < np; i++) {
            const float v = mode ? (p[i] - m) * (p[i] - m) : p[i];
            s += v;
        }
    }
    part[k] = s;
}

/* tot[q] = plane q's lanes and tail added up in the CPU's order */
static __global__ void plane_total_kernel(const float *part, size_t planes, float *tot)
{
    const size_t q = HCNN_CUDA_INDEX();
    if (q >= planes)
        return;
    const float *sl = part + q * SLOTS;
    tot[q] = hcnn_hd_lanes_total(sl, sl[LANES]);
}

/* acc[ch] += the totals of the channel's planes in a piece of nb images,
 * images in order (continuing the previous pieces' sum) */
static __global__ void channel_acc_kernel(const float *tot, int nb, int c, double *acc)
{
    const size_t ch = HCNN_CUDA_INDEX();
    if (ch >= (size_t)c)
        return;
    double s = acc[ch];
    for (int i = 0; i < nb; i++)
        s += tot[(size_t)i * c + ch]; /* the CPU's order */
    acc[ch] = s;
}

/* mean (as a float, what the deviations and the backward use) */
static __global__ void bn_mean_kernel(const double *sum, int c, double cnt, float *save_mean)
{
    const size_t ch = HCNN_CUDA_INDEX();
    if (ch < (size_t)c)
        save_mean[ch] = (float)(sum[ch] / cnt);
}

/* variance, inverse std, running statistics (PyTorch's: the unbiased
 * variance in running_var) */
static __global__ void bn_var_kernel(const double *sum, const double *ss, int c, double cnt,
                                     float eps, float momentum, float *save_invstd,
                                     float *running_mean, float *running_var)
{
    const size_t ch = HCNN_CUDA_INDEX();
    if (ch >= (size_t)c)
        return;
    const double mean = sum[ch] / cnt, var = ss[ch] / cnt;
    save_invstd[ch] = (float)(1.0 / sqrt(var + eps));
    const double unbiased = cnt > 1.0 ? var * cnt / (cnt - 1.0) : var;
    running_mean[ch] = (float)((1.0 - momentum) * running_mean[ch] + momentum * mean);
    running_var[ch] = (float)((1.0 - momentum) * running_var[ch] + momentum * unbiased);
}

/* y = act(x * a + b + add), a, b from the saved statistics (training) */
static __global__ void bn_apply_kernel(const float *x, size_t total, int c, int np,
                                       const float *gamma, const float *beta, const float *mean,
                                       const float *invstd, const float *add, int relu, float *y)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const int ch = (int)(k / (size_t)np % (size_t)c);
    float a, b;
    hcnn_hd_bn_affine(gamma[ch], beta[ch], mean[ch], invstd[ch], &a, &b);
    y[k] = hcnn_hd_bn_apply(x[k], a, b, add != NULL, add ? add[k] : 0.0f, relu);
}

/* the same from the running statistics (inference) */
static __global__ void bn_infer_kernel(const float *x, size_t total, int c, int np,
                                       const float *gamma, const float *beta, float eps,
                                       const float *rmean, const float *rvar, const float *add,
                                       int relu, float *y)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const int ch = (int)(k / (size_t)np % (size_t)c);
    const float a = hcnn_hd_bn_infer_scale(gamma[ch], rvar[ch], eps);
    const float b = beta[ch] - rmean[ch] * a;
    y[k] = hcnn_hd_bn_apply(x[k], a, b, add != NULL, add ? add[k] : 0.0f, relu);
}

/* The backward's two sums per slot: g and g * (x - m) * is, g through the
 * fused ReLU's mask */
static __global__ void bwd_slots_kernel(const float *x, const float *dy, size_t planes, int c,
                                        int np, const float *gamma, const float *beta,
                                        const float *mean, const float *invstd, int relu,
                                        float *part)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= planes * SLOTS)
        return;
    const size_t q = k / SLOTS;
    const int l = (int)(k % SLOTS), whole = np / LANES * LANES, ch = (int)(q % (size_t)c);
    const float *xp = x + q * (size_t)np, *dp = dy + q * (size_t)np;
    const float m = mean[ch], is = invstd[ch];
    float a, b;
    hcnn_hd_bn_affine(gamma[ch], beta[ch], m, is, &a, &b);
    const int lo = l < LANES ? l : whole, hi = l < LANES ? whole : np, step = l < LANES ? LANES : 1;
    float s1 = 0.0f, s2 = 0.0f;
    for (int i = lo; i < hi; i += step) {
        const float g = hcnn_hd_bn_grad(dp[i], xp[i], relu, a, b);
        s1 += g;
        s2 += g * (xp[i] - m) * is;
    }
    part[k] = s1;
    part[planes * SLOTS + k] = s2;
}

/* dbeta, dgamma accumulated; the means of the two sums for dx */
static __global__ void bwd_channel_kernel(const double *sdy, const double *sdyx, int c, double cnt,
                                          float *dgamma, float *dbeta, float *mdy, float *mdyx)
{
    const size_t ch = HCNN_CUDA_INDEX();
    if (ch >= (size_t)c)
        return;
    dbeta[ch] += (float)sdy[ch];
    dgamma[ch] += (float)sdyx[ch];
    mdy[ch] = (float)(sdy[ch] / cnt);
    mdyx[ch] = (float)(sdyx[ch] / cnt);
}

static __global__ void bwd_dx_kernel(const float *x, const float *dy, size_t total, int c, int np,
                                     const float *gamma, const float *beta, const float *mean,
                                     const float *invstd, int relu, const float *mdy,
                                     const float *mdyx, float *dx)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const int ch = (int)(k / (size_t)np % (size_t)c);
    float a, b;
    hcnn_hd_bn_affine(gamma[ch], beta[ch], mean[ch], invstd[ch], &a, &b);
    const float g = hcnn_hd_bn_grad(dy[k], x[k], relu, a, b);
    dx[k] = hcnn_hd_bn_dx(g, x[k], a, mean[ch], invstd[ch], mdy[ch], mdyx[ch]);
}

/* The scratch of a batch-norm call: per channel `per` doubles (sums,
 * means), then the slots of as many images as fit, `sets` slot arrays of
 * SLOTS floats a plane each, then `sets` arrays of one total a plane.
 * Returns the images a piece may hold. */
static int scratch_layout(const hcnn_backend *be, int n, int c, int sets, int per, double **ch,
                          float **slots, float **totals)
{
    const size_t cap = cuda_of(be)->scratch_doubles, fixed = (size_t)per * c;
    const size_t per_image = ((size_t)c * (SLOTS + 1) * sets + 1) / 2 + 1;
    if (fixed + per_image > cap)
        hcnn_cuda_fail("batch-norm", __FILE__, __LINE__,
                       "one image's channels need more partial sums than the reduction scratch "
                       "holds");
    const size_t fit = (cap - fixed) / per_image;
    const int piece = fit < (size_t)n ? (int)fit : n;
    double *s = hcnn_cuda_scratch(be, cap);
    *ch = s;
    *slots = (float *)(s + fixed);
    *totals = *slots + (size_t)piece * c * SLOTS * sets;
    return piece;
}

/* the slots of a piece's planes totalled, then added to the channels' sums */
static void piece_acc(const hcnn_backend *be, const float *slots, size_t planes, int nb, int c,
                      float *tot, double *acc)
{
    cudaStream_t st = cuda_of(be)->stream;
    HCNN_LAUNCH(plane_total_kernel, hcnn_cuda_blocks(planes), HCNN_CUDA_BLOCK, st, slots, planes,
                tot);
    HCNN_CUDA_LAUNCHED();
    HCNN_LAUNCH(channel_acc_kernel, hcnn_cuda_blocks((size_t)c), HCNN_CUDA_BLOCK, st,
                (const float *)tot, nb, c, acc);
    HCNN_CUDA_LAUNCHED();
}

/* acc (c doubles, zeroed first) = the channels' sums of f over the batch:
 * the slots of a piece of images, then their totals, piece after piece */
static void channel_sums(const hcnn_backend *be, const float *x, int n, int c, int np, int mode,
                         const float *mean, int piece, float *slots, float *tot, double *acc)
{
    cudaStream_t st = cuda_of(be)->stream;
    HCNN_CUDA(cudaMemsetAsync(acc, 0, sizeof(double) * (size_t)c, st));
    for (int i0 = 0; i0 < n; i0 += piece) {
        const int nb = n - i0 < piece ? n - i0 : piece;
        const size_t planes = (size_t)nb * c;
        HCNN_LAUNCH(plane_slots_kernel, hcnn_cuda_blocks(planes * SLOTS), HCNN_CUDA_BLOCK, st,
                    x + (size_t)i0 * c * np, planes, c, np, mode, mean, slots);
        HCNN_CUDA_LAUNCHED();
        piece_acc(be, slots, planes, nb, c, tot, acc);
    }
}

/* ---- the statistics gathered for the batch-norm after a convolution ---- */

/* table[2 q + at] = plane q's total (at 1: its sum of squared deviations),
 * or (at 0) its mean: the total over np as a float (the CPU's division) */
static __global__ void plane_stat_kernel(const float *tot, size_t planes, int np, int at,
                                         float *table)
{
    const size_t q = HCNN_CUDA_INDEX();
    if (q < planes)
        table[2 * q + (size_t)at] = at ? tot[q] : tot[q] / (float)np;
}

/* Each plane of y [n][c][np] as one band (backend.h, hcnn_bn_stats): its
 * mean and sum of squared deviations from it, with the CPU's additions
 * (src/cpu/bn.c, hcnn_cpu_bn_stats_rows): the lanes, then their total. */
void hcnn_cuda_bn_gather(const hcnn_backend *be, const float *y, int n, int c, int np,
                         hcnn_bn_stats *stats)
{
    stats->bands = 0, stats->band_px = 0;
    if (n <= 0 || c <= 0 || (size_t)n * c * 2 > stats->cap)
        return;
    cudaStream_t st = cuda_of(be)->stream;
    double *unused;
    float *slots, *tot;
    const int piece = scratch_layout(be, n, c, 1, 0, &unused, &slots, &tot);
    for (int i0 = 0; i0 < n; i0 += piece) {
        const int nb = n - i0 < piece ? n - i0 : piece;
        const size_t planes = (size_t)nb * c;
        const float *x = y + (size_t)i0 * c * np;
        float *table = stats->part + (size_t)i0 * c * 2;
        for (int at = 0; at < 2; at++) {
            HCNN_LAUNCH(plane_slots_kernel, hcnn_cuda_blocks(planes * SLOTS), HCNN_CUDA_BLOCK, st,
                        x, planes, c, np, at ? 2 : 0, (const float *)table, slots);
            HCNN_CUDA_LAUNCHED();
            HCNN_LAUNCH(plane_total_kernel, hcnn_cuda_blocks(planes), HCNN_CUDA_BLOCK, st,
                        (const float *)slots, planes, tot);
            HCNN_CUDA_LAUNCHED();
            HCNN_LAUNCH(plane_stat_kernel, hcnn_cuda_blocks(planes), HCNN_CUDA_BLOCK, st,
                        (const float *)tot, planes, np, at, table);
            HCNN_CUDA_LAUNCHED();
        }
    }
    stats->bands = 1, stats->band_px = np;
}

/* A channel's statistics from the gathered bands, in the CPU's order and
 * arithmetic (src/cpu/bn.c, bn_fwd_train_gathered and bn_channel_finish) */
static __global__ void bn_gathered_kernel(const float *part, int n, int c, int np, int bands,
                                          int band_px, float eps, float momentum, float *save_mean,
                                          float *save_invstd, float *running_mean,
                                          float *running_var)
{
    const size_t ch = HCNN_CUDA_INDEX();
    if (ch >= (size_t)c)
        return;
    const double cnt = (double)n * np, last = (double)(np - (bands - 1) * band_px);
    double sum = 0.0, ss = 0.0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < bands; k++)
            sum += (k + 1 == bands ? last : (double)band_px) *
                   part[(((size_t)i * c + ch) * bands + k) * 2];
    const double mean = sum / cnt;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < bands; k++) {
            const float *o = part + (((size_t)i * c + ch) * bands + k) * 2;
            const double d = o[0] - mean;
            ss += o[1] + (k + 1 == bands ? last : (double)band_px) * d * d;
        }
    save_mean[ch] = (float)mean;
    const double var = ss / cnt;
    save_invstd[ch] = (float)(1.0 / sqrt(var + eps));
    const double unbiased = cnt > 1.0 ? var * cnt / (cnt - 1.0) : var;
    running_mean[ch] = (float)((1.0 - momentum) * running_mean[ch] + momentum * mean);
    running_var[ch] = (float)((1.0 - momentum) * running_var[ch] + momentum * unbiased);
}

static __global__ void channel_add_kernel(const double *acc, int c, float *db)
{
    const size_t ch = HCNN_CUDA_INDEX();
    if (ch < (size_t)c)
        db[ch] += (float)acc[ch];
}

/* The convolution's bias gradient (bias.cu's other sums are per column):
 * db[ch] += the sum of channel ch of dy [n][c][np], by the channel sums
 * above, as the CPU's (src/cpu/bias.c: each plane in the 16-lane order,
 * planes added in double, images in order): the same bits.  It was one
 * thread a plane walking its np values in a chain, the warp's threads np
 * floats apart: on the H200 (2026-11-27) 40 us a call on average over
 * LeNet-5's two convolutions at batch 256 (conv1: 1536 planes of 784),
 * 0.08 ms of its step. */
void hcnn_cuda_channel_sum_acc(const hcnn_backend *be, const float *dy, int n, int c, int np,
                               float *db)
{
    if (n <= 0 || c <= 0)
        return;
    double *sum;
    float *slots, *tot;
    const int piece = scratch_layout(be, n, c, 1, 1, &sum, &slots, &tot);
    channel_sums(be, dy, n, c, np, 0, NULL, piece, slots, tot, sum);
    HCNN_LAUNCH(channel_add_kernel, hcnn_cuda_blocks((size_t)c), HCNN_CUDA_BLOCK,
                cuda_of(be)->stream, (const double *)sum, c, db);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_bn_fwd_train(const hcnn_backend *be, const float *x, int n, int c, int np,
                            const float *gamma, const float *beta, float eps, float momentum,
                            float *running_mean, float *running_var, float *save_mean,
                            float *save_invstd, const float *add, int relu,
                            const hcnn_bn_stats *stats, float *y)
{
    const size_t total = (size_t)n * c * np;
    if (total == 0)
        return;
    cudaStream_t st = cuda_of(be)->stream;
    if (stats && stats->bands > 0) { /* gathered by the convolution (conv.cu) */
        HCNN_LAUNCH(bn_gathered_kernel, hcnn_cuda_blocks((size_t)c), HCNN_CUDA_BLOCK, st,
                    (const float *)stats->part, n, c, np, stats->bands, stats->band_px, eps,
                    momentum, save_mean, save_invstd, running_mean, running_var);
        HCNN_CUDA_LAUNCHED();
        HCNN_LAUNCH(bn_apply_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, st, x, total, c,
                    np, gamma, beta, (const float *)save_mean, (const float *)save_invstd, add,
                    relu, y);
        HCNN_CUDA_LAUNCHED();
        return;
    }
    double *sums;
    float *slots, *tot;
    const int piece = scratch_layout(be, n, c, 1, 2, &sums, &slots, &tot);
    double *sum = sums, *ss = sums + c;
    const double cnt = (double)n * np;
    channel_sums(be, x, n, c, np, 0, NULL, piece, slots, tot, sum);
    HCNN_LAUNCH(bn_mean_kernel, hcnn_cuda_blocks((size_t)c), HCNN_CUDA_BLOCK, st,
                (const double *)sum, c, cnt, save_mean);
    HCNN_CUDA_LAUNCHED();
    channel_sums(be, x, n, c, np, 1, save_mean, piece, slots, tot, ss);
    HCNN_LAUNCH(bn_var_kernel, hcnn_cuda_blocks((size_t)c), HCNN_CUDA_BLOCK, st,
                (const double *)sum, (const double *)ss, c, cnt, eps, momentum, save_invstd,
                running_mean, running_var);
    HCNN_CUDA_LAUNCHED();
    HCNN_LAUNCH(bn_apply_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, st, x, total, c, np,
                gamma, beta, (const float *)save_mean, (const float *)save_invstd, add, relu, y);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_bn_fwd_infer(const hcnn_backend *be, const float *x, int n, int c, int np,
                            const float *gamma, const float *beta, float eps,
                            const float *running_mean, const float *running_var, const float *add,
                            int relu, float *y)
{
    const size_t total = (size_t)n * c * np;
    if (total == 0)
        return;
    HCNN_LAUNCH(bn_infer_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream, x,
                total, c, np, gamma, beta, eps, running_mean, running_var, add, relu, y);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_bn_bwd(const hcnn_backend *be, const float *x, const float *dy, int n, int c,
                      int np, const float *gamma, const float *beta, const float *save_mean,
                      const float *save_invstd, int relu, float *dx, float *dgamma, float *dbeta)
{
    const size_t total = (size_t)n * c * np;
    if (total == 0)
        return;
    cudaStream_t st = cuda_of(be)->stream;
    double *sums;
    float *slots, *tot;
    const int piece = scratch_layout(be, n, c, 2, 3, &sums, &slots, &tot);
    double *sdy = sums, *sdyx = sums + c;
    float *mdy = (float *)(sums + 2 * (size_t)c), *mdyx = mdy + c;
    HCNN_CUDA(cudaMemsetAsync(sums, 0, sizeof(double) * 2 * (size_t)c, st));
    for (int i0 = 0; i0 < n; i0 += piece) {
        const int nb = n - i0 < piece ? n - i0 : piece;
        const size_t planes = (size_t)nb * c, off = (size_t)i0 * c * np;
        HCNN_LAUNCH(bwd_slots_kernel, hcnn_cuda_blocks(planes * SLOTS), HCNN_CUDA_BLOCK, st,
                    x + off, dy + off, planes, c, np, gamma, beta, save_mean, save_invstd, relu,
                    slots);
        HCNN_CUDA_LAUNCHED();
        piece_acc(be, slots, planes, nb, c, tot, sdy);
        piece_acc(be, slots + planes * SLOTS, planes, nb, c, tot + planes, sdyx);
    }
    HCNN_LAUNCH(bwd_channel_kernel, hcnn_cuda_blocks((size_t)c), HCNN_CUDA_BLOCK, st,
                (const double *)sdy, (const double *)sdyx, c, (double)n * np, dgamma, dbeta, mdy,
                mdyx);
    HCNN_CUDA_LAUNCHED();
    if (!dx)
        return;
    HCNN_LAUNCH(bwd_dx_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, st, x, dy, total, c, np,
                gamma, beta, save_mean, save_invstd, relu, (const float *)mdy,
                (const float *)mdyx, dx);
    HCNN_CUDA_LAUNCHED();
}
