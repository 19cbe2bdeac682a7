/* Element and index math shared by the CPU backend (src/cpu/) and the CUDA
 * kernels (src/cuda/): the one definition of each activation, dropout's
 * counter-based random numbers, the convolution's and pooling's index
 * arithmetic, batch-norm's element terms, the loss of one sample and the
 * SGD update, so that the two backends cannot drift apart.  Valid C11 and
 * CUDA C++ alike (host-and-device functions under nvcc; plain static
 * inline functions for the CPU's C and the emulation's C++).  The
 * conformance suite's references (tests/conformance/test_backend.c) do not use them:
 * an error here cannot hide in a reference. */
#ifndef HCNN_HD_H
#define HCNN_HD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define HCNN_HD static __host__ __device__ __forceinline__
#define HCNN_HD_INLINED static __host__ __device__ __forceinline__
#else
#define HCNN_HD static inline
/* inlined even into each of the CPU's ISA clones: a call from the AVX-512
 * clone into baseline code was 20x slower (docs/performance.md) */
#define HCNN_HD_INLINED static inline __attribute__((always_inline))
#endif

/* ---- counter-based random numbers (SplitMix64, mixed four words) -------- */

HCNN_HD uint64_t hcnn_hd_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* stateless mixing of four 64-bit words (hcnn_hash4) */
HCNN_HD uint64_t hcnn_hd_hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    uint64_t x = a;
    uint64_t h = hcnn_hd_splitmix64(&x);
    x = h ^ b;
    h = hcnn_hd_splitmix64(&x);
    x = h ^ c;
    h = hcnn_hd_splitmix64(&x);
    x = h ^ d;
    return hcnn_hd_splitmix64(&x);
}

/* ---- dropout: element e of sample s kept iff its 24-bit uniform >= p ---- */

HCNN_HD uint64_t hcnn_hd_dropout_threshold(float p) { return (uint64_t)((double)p * 16777216.0); }

/* the key of a sample: a function of the run's seed, the step, the layer
 * and the sample's position in the epoch, never of who computes it */
HCNN_HD uint64_t hcnn_hd_dropout_key(uint64_t seed, uint64_t step, uint64_t layer_id,
                                     uint64_t sample)
{
    return hcnn_hd_hash4(seed, step, layer_id, sample);
}

/* the mask value of element e: 0 or scale = 1 / (1 - p) */
HCNN_HD float hcnn_hd_dropout_mask(uint64_t key, uint64_t e, uint64_t threshold, float scale)
{
    const uint64_t u = hcnn_hd_hash4(key, e, 0x64726f70ull, 0) >> 40;
    return u >= threshold ? scale : 0.0f;
}

/* ---- activations ---------------------------------------------------------- */

/* ReLU: 0 (not slope * x = -0) for x <= 0 */
HCNN_HD float hcnn_hd_relu(float v) { return v > 0.0f ? v : 0.0f; }
/* its gradient from the forward's output */
HCNN_HD float hcnn_hd_relu_grad(float y, float d) { return y > 0.0f ? d : 0.0f; }
HCNN_HD float hcnn_hd_leaky(float v, float slope) { return v > 0.0f ? v : slope * v; }
HCNN_HD float hcnn_hd_leaky_grad(float y, float d, float slope) { return y > 0.0f ? d : slope * d; }

/* ---- convolution and pooling windows ---------------------------------------- */

/* The input row (or column) that output o reads at tap k: o * stride -
 * pad + k; outside [0, size) it is padding. */
HCNN_HD int hcnn_hd_window_in(int o, int k, int stride, int pad) { return o * stride - pad + k; }

/* The outputs whose window contains input i along one axis (kernel k,
 * stride, pad, out outputs): [*lo, *hi), possibly empty. */
HCNN_HD void hcnn_hd_window_outputs(int i, int k, int stride, int pad, int out, int *lo, int *hi)
{
    /* o * stride - pad <= i < o * stride - pad + k */
    const int last = i + pad, first = last - k + 1;
    int a = first <= 0 ? 0 : (first + stride - 1) / stride, b = last / stride + 1;
    if (b > out)
        b = out;
    if (a > b)
        a = b;
    *lo = a, *hi = b;
}

/* ---- division by a launch's constant --------------------------------------------- */

/* n / d for every 32-bit n, as a multiply-high, an add and a shift with
 * (m, s) worked out once from d (Granlund and Montgomery, "Division by
 * invariant integers using multiplication", PLDI 1994, fig. 4.1, with t + n
 * taken in 64 bits; PyTorch's IntDivider is the same): s = ceil(log2 d),
 * m = floor(2^32 (2^s - d) / d) + 1, n / d = (mulhi(n, m) + n) >> s.  The
 * CUDA index kernels divide each thread's index by a few of a
 * launch's constants, and a GPU's 32-bit division is a sequence of some 20
 * instructions: on an H200 (2026-11-27, bench/kernel_share.so) ResNet-18's
 * im2col, seven divisions an element, took 4.5 ms of a 24 ms step at batch
 * 128, several times what its memory traffic costs at the GPU's bandwidth. */
typedef struct hcnn_hd_divider {
    uint32_t d, m, s;
} hcnn_hd_divider;

/* d >= 1 */
HCNN_HD hcnn_hd_divider hcnn_hd_divider_of(uint32_t d)
{
    uint32_t s = 0;
    while (s < 32 && ((uint64_t)1 << s) < d)
        s++;
    /* 2^s - d < d < 2^32: the shift fits 64 bits and m fits 32 */
    const uint64_t m = ((((uint64_t)1 << s) - d) << 32) / d + 1;
    hcnn_hd_divider v = {d, (uint32_t)m, s};
    return v;
}

HCNN_HD uint32_t hcnn_hd_div(hcnn_hd_divider v, uint32_t n)
{
    const uint64_t t = ((uint64_t)n * v.m) >> 32;
    return (uint32_t)((t + n) >> v.s);
}

/* ---- batch normalisation ---------------------------------------------------------- */

/* The 16 lane sums of a vectorised channel sum and its scalar tail, added
 * pairwise (lane k + lane k + 8, then + 4, + 2, + 1), then the tail: a
 * fixed order like a running sum, but a few vector additions instead of 15
 * dependent ones (batch-norm over small planes 40% faster on the CPU).
 * The CUDA kernels total the same lanes in the same order. */
HCNN_HD_INLINED float hcnn_hd_lanes_total(const float *acc, float tail)
{
    float s[8];
    for (int k = 0; k < 8; k++)
        s[k] = acc[k] + acc[k + 8];
    for (int k = 0; k < 4; k++)
        s[k] += s[k + 4];
    for (int k = 0; k < 2; k++)
        s[k] += s[k + 2];
    return (s[0] + s[1]) + tail;
}

/* A channel's normalisation as y = x * a + b: one expression for the
 * forward and for the backward's recomputed ReLU mask, which must agree
 * bit for bit. */
HCNN_HD void hcnn_hd_bn_affine(float gamma, float beta, float mean, float invstd, float *a,
                               float *b)
{
    *a = gamma * invstd;
    *b = beta - mean * *a;
}

/* The training statistics of a channel from a table of pieces of it (the
 * planes of the images, or bands of a plane's rows: backend.h,
 * hcnn_bn_stats): piece k of image i is the pair (mean, sum of squared
 * deviations from it) at part[((i * c + ch) * bands + k) * 2], over
 * band_px values (the last band: the plane's rest).  Over images [0, n),
 * in the order (image, band), in double: *mean, then *m2, the pieces' own
 * deviations plus their means' from the channel's (Chan, Golub and
 * LeVeque's pairwise update, summed in one order).  The CPU's and the
 * GPU's batch-norms both take their statistics this way: src/cpu/bn.c by
 * hcnn_hd_bn_table_stats from the convolution's bands, src/cuda/bn_channel.cu's
 * bn_channel_stats_kernel from bn.cu's plane table or bn_nhwc.cu's row blocks
 * (the bands of one plane, its pairs [block][channel], not at
 * hcnn_hd_bn_piece_at) by the piece functions below, in this order. */
/* piece q's values: band_px, or the last band's `last` (the plane's rest) */
HCNN_HD double hcnn_hd_bn_piece_px(int q, int bands, int band_px, double last)
{
    return q % bands + 1 == bands ? last : (double)band_px;
}

/* where piece q of channel ch starts: its pair (mean, m2) */
HCNN_HD size_t hcnn_hd_bn_piece_at(int q, int c, int ch, int bands)
{
    const int i = q / bands, k = q - i * bands;
    return (((size_t)i * c + ch) * bands + k) * 2;
}

/* the two sums a piece adds, one expression each: the CUDA kernel that
 * stages the pieces (src/cuda/bn_channel.cu, bn_channel_stats_kernel) adds them
 * with these, in this order, for these bits (nvcc may fuse the multiply
 * and add where the CPU's compiler does not: the GPU's last bits may
 * differ from the CPU's, not from run to run) */
HCNN_HD void hcnn_hd_bn_add_mean(double *sum, double px, float m) { *sum += px * m; }

HCNN_HD void hcnn_hd_bn_add_dev(double *ss, double px, float m, float s2, double mu)
{
    const double d = m - mu;
    *ss += s2 + px * d * d;
}

HCNN_HD void hcnn_hd_bn_table_stats(const float *part, int n, int c, int ch, int bands, int band_px,
                                    int np, double *mean, double *m2)
{
    const double cnt = (double)n * np, last = (double)(np - (bands - 1) * band_px);
    const int pieces = n * bands;
    double sum = 0.0, ss = 0.0;
    for (int q = 0; q < pieces; q++)
        hcnn_hd_bn_add_mean(&sum, hcnn_hd_bn_piece_px(q, bands, band_px, last),
                            part[hcnn_hd_bn_piece_at(q, c, ch, bands)]);
    const double mu = sum / cnt;
    for (int q = 0; q < pieces; q++) {
        const float *o = part + hcnn_hd_bn_piece_at(q, c, ch, bands);
        hcnn_hd_bn_add_dev(&ss, hcnn_hd_bn_piece_px(q, bands, band_px, last), o[0], o[1], mu);
    }
    *mean = mu, *m2 = ss;
}

/* (cnt_a values: *mean, *m2) merged with (cnt_b: mean_b, m2_b), Chan et
 * al.'s update; with cnt_a 0, b's pair exactly (a batch in one piece gets
 * the bits of hcnn_hd_bn_table_stats over all of it) */
HCNN_HD void hcnn_hd_bn_merge(double cnt_a, double *mean, double *m2, double cnt_b, double mean_b,
                              double m2_b)
{
    if (cnt_a == 0.0) {
        *mean = mean_b, *m2 = m2_b;
        return;
    }
    const double cnt = cnt_a + cnt_b, d = mean_b - *mean;
    *mean += d * (cnt_b / cnt);
    *m2 += m2_b + d * d * (cnt_a * cnt_b / cnt);
}

/* A channel's training statistics finished from its mean and sum of
 * squared deviations m2 over cnt values: returns the inverse standard
 * deviation and moves the running statistics (PyTorch's: the unbiased
 * variance in running_var) */
HCNN_HD float hcnn_hd_bn_finish(double mean, double m2, double cnt, float eps, float momentum,
                                float *running_mean, float *running_var)
{
    const double var = m2 / cnt;
    const double unbiased = cnt > 1.0 ? var * cnt / (cnt - 1.0) : var;
    *running_mean = (float)((1.0 - momentum) * *running_mean + momentum * mean);
    *running_var = (float)((1.0 - momentum) * *running_var + momentum * unbiased);
    return (float)(1.0 / sqrt(var + eps));
}

/* The inference scale from the running variance */
HCNN_HD float hcnn_hd_bn_infer_scale(float gamma, float running_var, float eps)
{
    return gamma / sqrtf(running_var + eps);
}

/* y = act(x * a + b + add): the same operations, in the same order, as the
 * batch-norm, addition and ReLU passes it replaces (has_add: add is used) */
HCNN_HD float hcnn_hd_bn_apply(float x, float a, float b, int has_add, float add, int relu)
{
    float v = x * a + b;
    if (has_add)
        v = v + add;
    return relu ? hcnn_hd_relu(v) : v;
}

/* The backward's g: dy, or with relu, dy where x * a + b > 0 and 0
 * elsewhere (the gradient through the ReLU fused into the forward) */
HCNN_HD float hcnn_hd_bn_grad(float dy, float x, int relu, float a, float b)
{
    return relu && !(x * a + b > 0.0f) ? 0.0f : dy;
}

/* dx = a * (g - mean(g) - (x - m) * is * mean(g * xhat)) */
HCNN_HD float hcnn_hd_bn_dx(float g, float x, float a, float m, float is, float mdy, float mdyx)
{
    return a * (g - mdy - (x - m) * is * mdyx);
}

/* ---- softmax + cross-entropy of one sample ---------------------------------------- */

/* Logits z[0..k) of a sample labelled `label`: returns its loss (double),
 * sets *correct to whether the first largest logit is the label, and
 * writes dz = (softmax - onehot) * grad_scale when dz is not NULL. */
HCNN_HD double hcnn_hd_xent(const float *z, int k, int label, float grad_scale, float *dz,
                            int *correct)
{
    int arg = 0;
    float zmax = z[0];
    for (int j = 1; j < k; j++)
        if (z[j] > zmax) {
            zmax = z[j];
            arg = j;
        }
    double sum = 0.0;
    for (int j = 0; j < k; j++)
        sum += exp((double)(z[j] - zmax));
    const double logsum = log(sum) + zmax;
    *correct = arg == label;
    if (dz)
        for (int j = 0; j < k; j++) {
            const double pj = exp((double)z[j] - logsum);
            dz[j] = (float)(pj - (j == label ? 1.0 : 0.0)) * grad_scale;
        }
    return logsum - z[label];
}

/* ---- the optimiser ------------------------------------------------------------------ */

/* SGD with momentum, PyTorch's: g' = g + wd * w; v = mu * v + g';
 * w -= lr * (nesterov ? g' + mu * v : v).  On lvalues w and v of type T:
 * a float, or on the CPU a vector of floats (GCC's vector extension: the
 * same operations in the same order, element by element, so the same
 * bits; the CPU sweeps 16 at a time to sum their squares on the way). */
#define HCNN_HD_SGD(T, w, g, v, lr, mu, wd, nesterov)                                          \
    do {                                                                                        \
        const T gi_ = (g) + (wd) * (w);                                                         \
        const T vi_ = (mu) * (v) + gi_;                                                         \
        (v) = vi_;                                                                              \
        (w) = (w) - (lr) * ((nesterov) ? gi_ + (mu) * vi_ : vi_);                               \
    } while (0)

HCNN_HD void hcnn_hd_sgd(float *w, float g, float *v, float lr, float mu, float wd, int nesterov)
{
    HCNN_HD_SGD(float, *w, g, *v, lr, mu, wd, nesterov);
}

#endif
