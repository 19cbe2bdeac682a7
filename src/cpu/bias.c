/* Bias additions and bias-gradient sums of the CPU backend (convolution:
 * per channel of NCHW; fully connected: per column). */
#include "cpu.h"

void hcnn_cpu_add_channel_bias(const hcnn_backend *be, float *y, const float *bias, int n, int c, int np, size_t ld)
{
    (void)be;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)n * c * np > 65536)
    for (int i = 0; i < n; i++)
        for (int co = 0; co < c; co++) {
            float *d = y + ((size_t)i * c + co) * ld;
            const float b = bias[co];
#pragma omp simd
            for (int p = 0; p < np; p++)
                d[p] += b;
        }
}

/* Sum of channel ch of x [n][c][np]: per image in float, images in double,
 * always in the same order. */
static double channel_sum(const float *x, int n, int c, int np, int ch)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += hcnn_cpu_plane_sum(x + ((size_t)i * c + ch) * np, np);
    return s;
}

void hcnn_cpu_channel_sum_acc(const hcnn_backend *be, const float *dy, int n, int c, int np, float *db)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int co = 0; co < c; co++)
        db[co] += (float)channel_sum(dy, n, c, np, co);
}

void hcnn_cpu_row_sum_acc(const hcnn_backend *be, const float *dy, int n, int m, float *db)
{
    (void)be;
#pragma omp parallel for schedule(static) if (m >= 256)
    for (int j = 0; j < m; j++) {
        float s = 0.0f;
        for (int i = 0; i < n; i++)
            s += dy[(size_t)i * m + j];
        db[j] += s;
    }
}

void hcnn_cpu_add_row_bias(const hcnn_backend *be, float *y, const float *b, int n, int m)
{
    (void)be;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++)
            y[(size_t)i * m + j] += b[j];
}
