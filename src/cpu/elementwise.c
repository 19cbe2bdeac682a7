/* Element-wise operations of the CPU backend: fill, ReLU (and leaky ReLU)
 * both ways, sums, products, scaling, and dropout with counter-based masks
 * (the same mask whatever thread or rank draws it). */
#include "cpu.h"

static void fill_range(float *x, size_t n, float v)
{
    if (v == 0.0f) {
        memset(x, 0, n * sizeof *x);
        return;
    }
    for (size_t i = 0; i < n; i++)
        x[i] = v;
}

/* Zeroing ResNet-18's 45 MB of gradients every step is bandwidth-bound: one
 * memset per thread, 2.3-2.5 -> 1.3-1.5 ms on 2 threads. */
void hcnn_cpu_fill(const hcnn_backend *be, float *x, size_t n, float v)
{
    (void)be;
    ELEMENTWISE(n, fill_range(x + lo, len, v));
}

HCNN_MULTIVERSION
static void relu_fwd_range(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        y[i] = hcnn_hd_relu(x[i]);
    }
}

HCNN_MULTIVERSION
static void relu_bwd_range(const float *y, const float *dy, float *dx, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const float d = dy[i]; /* loaded unconditionally: a select, not a branch */
        dx[i] = hcnn_hd_relu_grad(y[i], d);
    }
}

/* The leaky ReLU (slope > 0): a separate loop, so that the ReLU's own stays
 * exactly as it was (0, not slope * x = -0, for negative x). */
HCNN_MULTIVERSION
static void leaky_fwd_range(const float *x, float *y, size_t n, float slope)
{
    for (size_t i = 0; i < n; i++) {
        y[i] = hcnn_hd_leaky(x[i], slope);
    }
}

HCNN_MULTIVERSION
static void leaky_bwd_range(const float *y, const float *dy, float *dx, size_t n, float slope)
{
    for (size_t i = 0; i < n; i++) {
        const float d = dy[i];
        dx[i] = hcnn_hd_leaky_grad(y[i], d, slope);
    }
}

HCNN_MULTIVERSION
static void add_range(const float *a, const float *b, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

HCNN_MULTIVERSION
static void mul_range(const float *a, const float *b, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}

void hcnn_cpu_relu_fwd(const hcnn_backend *be, const float *x, float *y, size_t n, float slope)
{
    (void)be;
    if (slope == 0.0f)
        ELEMENTWISE(n, relu_fwd_range(x + lo, y + lo, len));
    else
        ELEMENTWISE(n, leaky_fwd_range(x + lo, y + lo, len, slope));
}

void hcnn_cpu_relu_bwd(const hcnn_backend *be, const float *y, const float *dy, float *dx, size_t n, float slope)
{
    (void)be;
    if (slope == 0.0f)
        ELEMENTWISE(n, relu_bwd_range(y + lo, dy + lo, dx + lo, len));
    else
        ELEMENTWISE(n, leaky_bwd_range(y + lo, dy + lo, dx + lo, len, slope));
}

void hcnn_cpu_add(const hcnn_backend *be, const float *a, const float *b, float *y, size_t n)
{
    (void)be;
    ELEMENTWISE(n, add_range(a + lo, b + lo, y + lo, len));
}

void hcnn_cpu_add_acc(const hcnn_backend *be, const float *a, float *y, size_t n)
{
    (void)be;
    ELEMENTWISE(n, add_range(y + lo, a + lo, y + lo, len));
}

void hcnn_cpu_mul(const hcnn_backend *be, const float *a, const float *b, float *y, size_t n)
{
    (void)be;
    ELEMENTWISE(n, mul_range(a + lo, b + lo, y + lo, len));
}

static void scale_range(float *x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= a;
}

void hcnn_cpu_scale(const hcnn_backend *be, float *x, size_t n, float a)
{
    (void)be;
    ELEMENTWISE(n, scale_range(x + lo, len, a));
}

void hcnn_cpu_dropout_fwd(const hcnn_backend *be, const float *x, float *y, float *mask, int n,
                          size_t per_sample, float p, uint64_t seed, uint64_t step, uint64_t first_sample,
                          uint64_t layer_id)
{
    (void)be;
    const float scale = 1.0f / (1.0f - p);
    const uint64_t threshold = hcnn_hd_dropout_threshold(p);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const uint64_t key = hcnn_hd_dropout_key(seed, step, layer_id, first_sample + (uint64_t)i);
        const size_t base = (size_t)i * per_sample;
        for (size_t e = 0; e < per_sample; e++) {
            const float m = hcnn_hd_dropout_mask(key, e, threshold, scale);
            mask[base + e] = m;
            y[base + e] = x[base + e] * m;
        }
    }
}
