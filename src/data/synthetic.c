/* Synthetic, learnable data: every class has a random prototype image
 * (pixels uniform in [0, 255]); a sample is its class prototype plus
 * Gaussian-like noise (std 40), clamped to [0, 255].  Prototypes come from
 * an RNG stream keyed on the seed only, labels and noise from streams keyed
 * on (seed, split, sample), so train and test share the prototypes but not
 * the noise, and every sample is independent of n. */
#define _POSIX_C_SOURCE 200809L
#include "hcnn/data.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "hcnn/common.h"

#define SYN_NOISE_STD 40.0f
/* stream identifiers ("prot", "labl", "nois") */
#define SYN_PROTO 0x70726f74u
#define SYN_LABEL 0x6c61626cu
#define SYN_NOISE 0x6e6f6973u

/* Approximately standard normal from one 64-bit draw: the sum of four
 * 16-bit uniforms (Irwin-Hall) has mean 2 and variance 1/3.  Cheaper than
 * Box-Muller, and the tails do not matter here. */
static float noise1(hcnn_rng *r)
{
    uint64_t v = hcnn_rng_next(r);
    float s = (float)(v & 0xffff) + (float)(v >> 16 & 0xffff) + (float)(v >> 32 & 0xffff) + (float)(v >> 48);
    return (s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

int hcnn_synthetic_make_split(hcnn_dataset *ds, int n, int c, int h, int w, int classes, uint64_t seed,
                              int split)
{
    memset(ds, 0, sizeof *ds);
    if (n < 1 || c < 1 || h < 1 || w < 1 || classes < 1 || classes > 256)
        return hcnn_error_code(HCNN_EINVAL,
                               "synthetic data set: %d samples of %dx%dx%d with %d classes "
                               "(expected positive sizes and 1..256 classes)",
                               n, c, h, w, classes);
    if ((long long)c * h * w > INT_MAX / 4 || (long long)c * h * w * n > (long long)1 << 40)
        return hcnn_error_code(HCNN_EINVAL, "synthetic data set: %d samples of %dx%dx%d is too large", n,
                               c, h, w);
    size_t chw = (size_t)c * h * w;

    uint8_t *proto = hcnn_alloc(chw * classes, "synthetic prototypes");
    uint8_t *images = proto ? hcnn_alloc(chw * n, "synthetic images") : NULL;
    uint8_t *labels = images ? hcnn_alloc((size_t)n, "synthetic labels") : NULL;
    if (!labels) {
        hcnn_free(proto);
        hcnn_free(images);
        return HCNN_ENOMEM;
    }

    hcnn_rng r;
    hcnn_rng_seed(&r, seed, SYN_PROTO);
    for (size_t i = 0; i < chw * classes; i++)
        proto[i] = (uint8_t)(hcnn_rng_next(&r) >> 56);

    for (int i = 0; i < n; i++) {
        labels[i] = (uint8_t)(hcnn_hash4(seed, (uint64_t)split, (uint64_t)i, SYN_LABEL) % (uint64_t)classes);
        const uint8_t *p = proto + chw * labels[i];
        uint8_t *x = images + chw * i;
        hcnn_rng_seed(&r, seed, hcnn_hash4((uint64_t)split, (uint64_t)i, SYN_NOISE, 0));
        for (size_t k = 0; k < chw; k++) {
            float v = (float)p[k] + SYN_NOISE_STD * noise1(&r) + 0.5f;
            x[k] = (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
        }
    }
    hcnn_free(proto);

    snprintf(ds->name, sizeof ds->name, "synthetic");
    snprintf(ds->source, sizeof ds->source, "synthetic (seed %llu, split %d)", (unsigned long long)seed,
             split);
    ds->n = n;
    ds->c = c;
    ds->h = h;
    ds->w = w;
    ds->classes = classes;
    ds->images = images;
    ds->labels = labels;
    for (int ch = 0; ch < 3; ch++) {
        ds->mean[ch] = 0.5f;
        ds->std[ch] = 0.25f;
    }
    return HCNN_OK;
}

int hcnn_synthetic_make(hcnn_dataset *ds, int n, int c, int h, int w, int classes, uint64_t seed)
{
    return hcnn_synthetic_make_split(ds, n, c, h, w, classes, seed, 0);
}
