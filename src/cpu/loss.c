/* Softmax + cross-entropy of the CPU backend: the samples' losses
 * (hcnn_hd_xent, double) summed in sample order. */
#include "cpu.h"

void hcnn_cpu_softmax_xent(const hcnn_backend *be, const float *logits, const int32_t *labels,
                           int n, int k, float grad_scale, float *dlogits, double *stats)
{
    (void)be;
    double loss = 0.0;
    int ok = 0;
    for (int i = 0; i < n; i++) {
        int correct;
        loss += hcnn_hd_xent(logits + (size_t)i * k, k, labels[i], grad_scale,
                             dlogits ? dlogits + (size_t)i * k : NULL, &correct);
        ok += correct;
    }
    stats[HCNN_STAT_LOSS] += loss;
    stats[HCNN_STAT_CORRECT] += ok;
}
