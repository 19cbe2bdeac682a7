/* Batch normalisation of the CPU backend: training (batch statistics,
 * running statistics) and inference forwards with the fused addition and
 * ReLU, and the backward with the fused ReLU mask; plane sums in 16 lanes
 * added in a fixed order, so results do not depend on threads or ISA. */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"

/* sum of x[0..n) */
HCNN_MULTIVERSION
float hcnn_cpu_plane_sum(const float *x, int n)
{
    v16f acc = {0};
    int p = 0;
    for (; p + 16 <= n; p += 16) {
        v16f v;
        LOAD16(v, x + p);
        acc += v;
    }
    float tail = 0.0f;
    for (; p < n; p++)
        tail += x[p];
    return hcnn_hd_lanes_total((const float *)&acc, tail);
}

/* sum of (x - m)^2 */
HCNN_MULTIVERSION
static float plane_sum_sq_dev(const float *x, int n, float m)
{
    v16f acc = {0};
    int p = 0;
    for (; p + 16 <= n; p += 16) {
        v16f d;
        LOAD16(d, x + p);
        d -= m;
        acc += d * d;
    }
    float tail = 0.0f;
    for (; p < n; p++)
        tail += (x[p] - m) * (x[p] - m);
    return hcnn_hd_lanes_total((const float *)&acc, tail);
}

/* The batch-norm backward's g: dy, or with relu, dy where x * a + b > 0 and
 * 0 elsewhere (the gradient through the ReLU that followed the batch-norm,
 * its output recomputed from x; a select, not a branch: the mask is as
 * random as the data).  LOAD_BN_GRAD loads 16 of g and x (a macro: no
 * function takes a v16f). */
#define LOAD_BN_GRAD(g, v, dyp, xp, relu, a, b)                                                    \
    do {                                                                                           \
        LOAD16(g, dyp);                                                                            \
        LOAD16(v, xp);                                                                             \
        if (relu)                                                                                  \
            g = (v16f)((v16i)g & (v * (a) + (b) > 0.0f));                                          \
    } while (0)


/* *sdy = sum of g, *sdyx = sum of g * (x - m) * is, g as bn_grad */
HCNN_MULTIVERSION
static void plane_sum_dy_dyx(const float *x, const float *dy, int n, float m, float is, int relu,
                             float a_relu, float b_relu, float *sdy, float *sdyx)
{
    v16f a = {0}, b = {0};
    int p = 0;
    for (; p + 16 <= n; p += 16) {
        v16f g, v;
        LOAD_BN_GRAD(g, v, dy + p, x + p, relu, a_relu, b_relu);
        a += g;
        b += g * (v - m) * is;
    }
    float ta = 0.0f, tb = 0.0f;
    for (; p < n; p++) {
        const float g = hcnn_hd_bn_grad(dy[p], x[p], relu, a_relu, b_relu);
        ta += g;
        tb += g * (x[p] - m) * is;
    }
    *sdy = hcnn_hd_lanes_total((const float *)&a, ta);
    *sdyx = hcnn_hd_lanes_total((const float *)&b, tb);
}

/* dx = a * (g - mdy - (x - m) * is * mdyx), g as bn_grad (a = gamma * is
 * is also the scale of dx) */
HCNN_MULTIVERSION
static void plane_bn_dx(const float *x, const float *dy, int n, float m, float is, int relu,
                        float a, float b, float mdy, float mdyx, float *dx)
{
    int p = 0;
    for (; p + 16 <= n; p += 16) {
        v16f g, v;
        LOAD_BN_GRAD(g, v, dy + p, x + p, relu, a, b);
        const v16f o = a * (g - mdy - (v - m) * is * mdyx);
        memcpy(dx + p, &o, sizeof o);
    }
    for (; p < n; p++) {
        const float g = hcnn_hd_bn_grad(dy[p], x[p], relu, a, b);
        dx[p] = hcnn_hd_bn_dx(g, x[p], a, m, is, mdy, mdyx);
    }
}

/* One plane of y = act(x * a + b + add) (add may be NULL): the same
 * operations, in the same order, as the batch-norm, addition and ReLU
 * passes it replaces, so the same bits. */
static void bn_apply_plane(const float *xp, const float *addp, int relu, float a, float b,
                           float *yp, int np)
{
    /* four loops, so that the flags are resolved outside them */
    if (addp && relu)
        for (int p = 0; p < np; p++)
            yp[p] = hcnn_hd_bn_apply(xp[p], a, b, 1, addp[p], 1);
    else if (addp)
        for (int p = 0; p < np; p++)
            yp[p] = hcnn_hd_bn_apply(xp[p], a, b, 1, addp[p], 0);
    else if (relu)
        for (int p = 0; p < np; p++)
            yp[p] = hcnn_hd_bn_apply(xp[p], a, b, 0, 0.0f, 1);
    else
        for (int p = 0; p < np; p++)
            yp[p] = hcnn_hd_bn_apply(xp[p], a, b, 0, 0.0f, 0);
}

/* The training batch-norm passes walk blocks of channels: one channel at a
 * time reads runs of np floats c * np apart, which the prefetchers do not
 * follow when planes are small; a block of channels keeping BN_BLOCK_BYTES
 * of each tensor gives one run per image and stays in L2 between the
 * passes (ResNet-18's layer4 backward 0.80-0.91 -> 0.41-0.52 ms; see
 * docs/performance.md).  Each channel's sums still run over the images in
 * order, so the results do not depend on the blocking. */
#define BN_BLOCK_BYTES ((size_t)256 * 1024)
#define BN_MAX_BLOCK 256

static int bn_block_channels(int n, int c, int np)
{
    const size_t per_channel = (size_t)n * np * sizeof(float);
    size_t cb = per_channel >= BN_BLOCK_BYTES ? 1 : BN_BLOCK_BYTES / per_channel;
    if (cb > BN_MAX_BLOCK)
        cb = BN_MAX_BLOCK;
    return cb < (size_t)c ? (int)cb : c;
}

/* With fewer channel blocks than threads (few images or small planes:
 * ResNet-18 at 8 images has 8 blocks in layer1 and 2 in layer4, for 64
 * threads), the passes go by planes instead, n x c pieces: each plane's
 * sum into a table, then each channel's sums added over the images in
 * order, as the blocked passes add them: the same bits.  Not inside a
 * parallel region (a unit of whole-network execution is one thread's), and
 * not when the table cannot be allocated (the blocked passes then).  Twice
 * the threads instead (layer4's 2 blocks by planes on 2 threads), with
 * Winograd's 2 pieces a thread, cost ResNet-18 4% at batch 2 on 2 threads
 * (7 alternated rounds). */
typedef struct bn_planes {
    float *p1, *p2;  /* [n][c]: per-plane sums */
    double *s1, *s2; /* [c]: per-channel totals */
    float *a, *b;    /* [c]: the affine map of each channel */
    void *mem;
} bn_planes;

static int bn_by_planes(int blocks, int nt) { return blocks < nt; }

int hcnn_cpu_bn_pieces(int n, int c, int np, int nt)
{
    const int cb = bn_block_channels(n, c, np), blocks = (c + cb - 1) / cb;
    return bn_by_planes(blocks, nt) ? n * c : blocks;
}


static int bn_planes_take(bn_planes *t, int n, int c, int blocks)
{
    if (omp_in_parallel() || !bn_by_planes(blocks, omp_get_max_threads()))
        return 0;
    const size_t nc = (size_t)n * c;
    t->mem = malloc(sizeof(double) * 2 * (size_t)c + sizeof(float) * (2 * nc + 2 * (size_t)c));
    if (!t->mem)
        return 0;
    t->s1 = t->mem, t->s2 = t->s1 + c;
    t->p1 = (float *)(t->s2 + c), t->p2 = t->p1 + nc;
    t->a = t->p2 + nc, t->b = t->a + c;
    return 1;
}

/* One channel's statistics finished, as both training forwards do it: from
 * its sum and its sum of squared deviations over cnt values, save_invstd,
 * the affine map (a, b) and the running statistics (src/core/hd.h). */
static void bn_channel_finish(int ch, double sum, double ss, double cnt, float mean_f,
                              const float *gamma, const float *beta, float eps, float momentum,
                              float *running_mean, float *running_var, float *save_invstd,
                              float *a, float *b)
{
    const float invstd =
        hcnn_hd_bn_finish(sum / cnt, ss, cnt, eps, momentum, &running_mean[ch], &running_var[ch]);
    save_invstd[ch] = invstd;
    hcnn_hd_bn_affine(gamma[ch], beta[ch], mean_f, invstd, a, b);
}

static void bn_fwd_train_planes(const bn_planes *t, const float *x, int n, int c, int np,
                                const float *gamma, const float *beta, float eps, float momentum,
                                float *running_mean, float *running_var, float *save_mean,
                                float *save_invstd, const float *add, int relu, float *y)
{
    const double cnt = (double)n * np;
#pragma omp parallel
    {
#pragma omp for collapse(2) schedule(static)
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < c; ch++)
                t->p1[(size_t)i * c + ch] = hcnn_cpu_plane_sum(x + ((size_t)i * c + ch) * np, np);
#pragma omp for schedule(static)
        for (int ch = 0; ch < c; ch++) {
            double sum = 0;
            for (int i = 0; i < n; i++)
                sum += t->p1[(size_t)i * c + ch];
            t->s1[ch] = sum;
            save_mean[ch] = (float)(sum / cnt);
        }
#pragma omp for collapse(2) schedule(static)
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < c; ch++)
                t->p2[(size_t)i * c + ch] =
                    plane_sum_sq_dev(x + ((size_t)i * c + ch) * np, np, save_mean[ch]);
#pragma omp for schedule(static)
        for (int ch = 0; ch < c; ch++) {
            double ss = 0;
            for (int i = 0; i < n; i++)
                ss += t->p2[(size_t)i * c + ch];
            bn_channel_finish(ch, t->s1[ch], ss, cnt, save_mean[ch], gamma, beta, eps, momentum,
                              running_mean, running_var, save_invstd, &t->a[ch], &t->b[ch]);
        }
#pragma omp for collapse(2) schedule(static)
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < c; ch++) {
                const size_t off = ((size_t)i * c + ch) * np;
                bn_apply_plane(x + off, add ? add + off : NULL, relu, t->a[ch], t->b[ch], y + off,
                               np);
            }
    }
}

/* ---- statistics gathered by the convolution before (backend.h) ------------ */

/* The bands of output rows [oy0, oy0 + rows) of channels [c0, c1) of one
 * image (planes of np pixels, rows of ow): each band's mean and sum of
 * squared deviations into the image's table part_img ([c][bands][2]).
 * The rows start and end on bands (the last band is the plane's rest). */
void hcnn_cpu_bn_stats_rows(const hcnn_bn_stats *st, const float *y, size_t np, int ow, int c0,
                            int c1, int oy0, int rows, float *part_img)
{
    const int bands = st->bands;
    const size_t px0 = (size_t)oy0 * ow, px1 = (size_t)(oy0 + rows) * ow;
    for (int ch = c0; ch < c1; ch++)
        for (size_t p = px0; p < px1 && p < np; p += (size_t)st->band_px) {
            const int b = (int)(p / (size_t)st->band_px);
            const size_t end = b + 1 == bands ? np : p + (size_t)st->band_px;
            const int cnt = (int)(end - p);
            const float *x = y + (size_t)ch * np + p;
            const float mean = hcnn_cpu_plane_sum(x, cnt) / (float)cnt;
            float *o = part_img + ((size_t)ch * bands + b) * 2;
            o[0] = mean;
            o[1] = plane_sum_sq_dev(x, cnt, mean);
        }
}

/* The training forward from the gathered bands: each channel's statistics
 * from its bands (src/core/hd.h, hcnn_hd_bn_table_stats, as the GPU's),
 * then the apply pass by planes: one pass over x instead of three. */
static void bn_fwd_train_gathered(const hcnn_bn_stats *st, const float *x, int n, int c, int np,
                                  const float *gamma, const float *beta, float eps,
                                  float momentum, float *running_mean, float *running_var,
                                  float *save_mean, float *save_invstd, const float *add,
                                  int relu, float *y)
{
    const double cnt = (double)n * np;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int ch = 0; ch < c; ch++) {
            double mean, m2;
            hcnn_hd_bn_table_stats(st->part, n, c, ch, st->bands, st->band_px, np, &mean, &m2);
            save_mean[ch] = (float)mean;
            save_invstd[ch] = hcnn_hd_bn_finish(mean, m2, cnt, eps, momentum, &running_mean[ch],
                                                &running_var[ch]);
        }
#pragma omp for collapse(2) schedule(static)
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < c; ch++) {
                const size_t off = ((size_t)i * c + ch) * np;
                float a, b;
                hcnn_hd_bn_affine(gamma[ch], beta[ch], save_mean[ch], save_invstd[ch], &a, &b);
                bn_apply_plane(x + off, add ? add + off : NULL, relu, a, b, y + off, np);
            }
    }
}

/* y = act(gamma * (x - mean) * invstd + beta + add), statistics over (n, h, w) */
void hcnn_cpu_bn_fwd_train(const hcnn_backend *be, const float *x, int n, int c, int np, const float *gamma,
                           const float *beta, float eps, float momentum, float *running_mean,
                           float *running_var, float *save_mean, float *save_invstd,
                           const float *add, int relu, const hcnn_bn_stats *stats, float *y)
{
    (void)be;
    const double cnt = (double)n * np;
    const int cb = bn_block_channels(n, c, np), blocks = (c + cb - 1) / cb;
    if (stats && stats->bands > 0) {
        bn_fwd_train_gathered(stats, x, n, c, np, gamma, beta, eps, momentum, running_mean,
                              running_var, save_mean, save_invstd, add, relu, y);
        return;
    }
    bn_planes t;
    if (bn_planes_take(&t, n, c, blocks)) {
        bn_fwd_train_planes(&t, x, n, c, np, gamma, beta, eps, momentum, running_mean,
                            running_var, save_mean, save_invstd, add, relu, y);
        free(t.mem);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        const int c0 = blk * cb, nc = c - c0 < cb ? c - c0 : cb;
        double sum[BN_MAX_BLOCK] = {0}, ss[BN_MAX_BLOCK] = {0};
        float mean_f[BN_MAX_BLOCK], a[BN_MAX_BLOCK], b[BN_MAX_BLOCK];
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nc; k++)
                sum[k] += hcnn_cpu_plane_sum(x + ((size_t)i * c + c0 + k) * np, np);
        for (int k = 0; k < nc; k++)
            mean_f[k] = (float)(sum[k] / cnt);
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nc; k++)
                ss[k] += plane_sum_sq_dev(x + ((size_t)i * c + c0 + k) * np, np, mean_f[k]);
        for (int k = 0; k < nc; k++) {
            save_mean[c0 + k] = mean_f[k];
            bn_channel_finish(c0 + k, sum[k], ss[k], cnt, mean_f[k], gamma, beta, eps, momentum,
                              running_mean, running_var, save_invstd, &a[k], &b[k]);
        }
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nc; k++) {
                const size_t off = ((size_t)i * c + c0 + k) * np;
                bn_apply_plane(x + off, add ? add + off : NULL, relu, a[k], b[k], y + off, np);
            }
    }
}

void hcnn_cpu_bn_fwd_infer(const hcnn_backend *be, const float *x, int n, int c, int np, const float *gamma,
                           const float *beta, float eps, const float *running_mean,
                           const float *running_var, const float *add, int relu, float *y)
{
    (void)be;
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < n; i++) {
        for (int ch = 0; ch < c; ch++) {
            const float a = hcnn_hd_bn_infer_scale(gamma[ch], running_var[ch], eps);
            const float b = beta[ch] - running_mean[ch] * a;
            const size_t off = ((size_t)i * c + ch) * np;
            bn_apply_plane(x + off, add ? add + off : NULL, relu, a, b, y + off, np);
        }
    }
}

/* With xhat = (x - mean) * invstd:
 *   dbeta = sum dy,  dgamma = sum dy * xhat,
 *   dx = gamma * invstd / N * (N * dy - dbeta - xhat * dgamma)
 * With relu, dy is the gradient of the ReLU that followed (fused into the
 * forward): dy * [y > 0] replaces dy, y = x * a + b recomputed exactly as
 * bn_fwd_train wrote it, so the same bits as a ReLU backward pass before
 * this one, without that pass over three tensors. */
static void bn_bwd_planes(const bn_planes *t, const float *x, const float *dy, int n, int c,
                          int np, const float *gamma, const float *beta, const float *save_mean,
                          const float *save_invstd, int relu, float *dx, float *dgamma,
                          float *dbeta)
{
    const double cnt = (double)n * np;
    float *mdy = t->p1, *mdyx = t->p1 + c; /* after the sums are added: [c] each */
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int ch = 0; ch < c; ch++)
            hcnn_hd_bn_affine(gamma[ch], beta[ch], save_mean[ch], save_invstd[ch], &t->a[ch],
                              &t->b[ch]);
#pragma omp for collapse(2) schedule(static)
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < c; ch++) {
                const size_t k = (size_t)i * c + ch, off = k * np;
                plane_sum_dy_dyx(x + off, dy + off, np, save_mean[ch], save_invstd[ch], relu,
                                 t->a[ch], t->b[ch], &t->p1[k], &t->p2[k]);
            }
#pragma omp for schedule(static)
        for (int ch = 0; ch < c; ch++) {
            double sdy = 0, sdyx = 0;
            for (int i = 0; i < n; i++) {
                sdy += t->p1[(size_t)i * c + ch];
                sdyx += t->p2[(size_t)i * c + ch];
            }
            t->s1[ch] = sdy, t->s2[ch] = sdyx;
        }
#pragma omp for schedule(static)
        for (int ch = 0; ch < c; ch++) {
            dbeta[ch] += (float)t->s1[ch];
            dgamma[ch] += (float)t->s2[ch];
            mdy[ch] = (float)(t->s1[ch] / cnt), mdyx[ch] = (float)(t->s2[ch] / cnt);
        }
        if (dx) {
#pragma omp for collapse(2) schedule(static)
            for (int i = 0; i < n; i++)
                for (int ch = 0; ch < c; ch++) {
                    const size_t off = ((size_t)i * c + ch) * np;
                    plane_bn_dx(x + off, dy + off, np, save_mean[ch], save_invstd[ch], relu,
                                t->a[ch], t->b[ch], mdy[ch], mdyx[ch], dx + off);
                }
        }
    }
}

void hcnn_cpu_bn_bwd(const hcnn_backend *be, const float *x, const float *dy, int n, int c, int np, const float *gamma,
                     const float *beta, const float *save_mean, const float *save_invstd, int relu,
                     float *dx, float *dgamma, float *dbeta)
{
    (void)be;
    const double cnt = (double)n * np;
    const int cb = bn_block_channels(n, c, np), blocks = (c + cb - 1) / cb;
    bn_planes t;
    if (bn_planes_take(&t, n, c, blocks)) {
        bn_bwd_planes(&t, x, dy, n, c, np, gamma, beta, save_mean, save_invstd, relu, dx, dgamma,
                      dbeta);
        free(t.mem);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        const int c0 = blk * cb, nc = c - c0 < cb ? c - c0 : cb;
        double sdy[BN_MAX_BLOCK] = {0}, sdyx[BN_MAX_BLOCK] = {0};
        float a[BN_MAX_BLOCK], b[BN_MAX_BLOCK], mdy[BN_MAX_BLOCK], mdyx[BN_MAX_BLOCK];
        for (int k = 0; k < nc; k++)
            hcnn_hd_bn_affine(gamma[c0 + k], beta[c0 + k], save_mean[c0 + k], save_invstd[c0 + k],
                              &a[k], &b[k]);
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nc; k++) {
                const int ch = c0 + k;
                const size_t off = ((size_t)i * c + ch) * np;
                float s1, s2;
                plane_sum_dy_dyx(x + off, dy + off, np, save_mean[ch], save_invstd[ch], relu, a[k],
                                 b[k], &s1, &s2);
                sdy[k] += s1;
                sdyx[k] += s2;
            }
        for (int k = 0; k < nc; k++) {
            dbeta[c0 + k] += (float)sdy[k];
            dgamma[c0 + k] += (float)sdyx[k];
            mdy[k] = (float)(sdy[k] / cnt), mdyx[k] = (float)(sdyx[k] / cnt);
        }
        if (!dx)
            continue;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nc; k++) {
                const int ch = c0 + k;
                const size_t off = ((size_t)i * c + ch) * np;
                plane_bn_dx(x + off, dy + off, np, save_mean[ch], save_invstd[ch], relu, a[k], b[k],
                            mdy[k], mdyx[k], dx + off);
            }
    }
}
