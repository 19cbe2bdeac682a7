/* Softmax + cross-entropy of the CPU backend (double accumulation). */
#include <math.h>

#include "cpu.h"

void hcnn_cpu_softmax_xent(const hcnn_backend *be, const float *logits, const int32_t *labels,
                           int n, int k, float grad_scale, float *dlogits, double *stats)
{
    (void)be;
    double loss = 0.0;
    int ok = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * k;
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
        loss += logsum - z[labels[i]];
        ok += arg == labels[i];
        if (dlogits) {
            float *d = dlogits + (size_t)i * k;
            for (int j = 0; j < k; j++) {
                const double pj = exp((double)z[j] - logsum);
                d[j] = (float)(pj - (j == labels[i] ? 1.0 : 0.0)) * grad_scale;
            }
        }
    }
    stats[HCNN_STAT_LOSS] += loss;
    stats[HCNN_STAT_CORRECT] += ok;
}
