/* Softmax + cross-entropy of the CUDA backend: one thread per sample
 * (hcnn_hd_xent, as the CPU), its loss and correctness into the scratch,
 * then one thread adds them to the step's statistics in sample order, as
 * the CPU does: the loss never leaves the device until the trainer reads
 * the statistics once per step. */
#include "cuda.h"

static __global__ void xent_kernel(const float *logits, const int32_t *labels, int n, int k,
                                   float grad_scale, float *dlogits, double *loss, double *correct)
{
    const size_t i = HCNN_CUDA_INDEX();
    if (i >= (size_t)n)
        return;
    int ok = 0;
    loss[i] = hcnn_hd_xent(logits + i * (size_t)k, k, labels[i], grad_scale,
                           dlogits ? dlogits + i * (size_t)k : NULL, &ok);
    correct[i] = ok;
}

/* stats += the samples' sums, in order (one thread: n is a batch) */
static __global__ void xent_total_kernel(const double *loss, const double *correct, int n,
                                         double *stats)
{
    if (HCNN_CUDA_INDEX() != 0)
        return;
    double l = 0.0, c = 0.0;
    for (int i = 0; i < n; i++)
        l += loss[i], c += correct[i];
    stats[HCNN_STAT_LOSS] += l;
    stats[HCNN_STAT_CORRECT] += c;
}

void hcnn_cuda_softmax_xent(const hcnn_backend *be, const float *logits, const int32_t *labels,
                            int n, int k, float grad_scale, float *dlogits, double *stats)
{
    /* in pieces of samples whose two doubles fit the scratch */
    const int cap = (int)(cuda_of(be)->scratch_doubles / 2);
    for (int i0 = 0; i0 < n; i0 += cap) {
        const int nb = n - i0 < cap ? n - i0 : cap;
        double *loss = hcnn_cuda_scratch(be, 2 * (size_t)nb), *correct = loss + nb;
        HCNN_LAUNCH(xent_kernel, hcnn_cuda_blocks((size_t)nb), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, logits + (size_t)i0 * k, labels + i0, nb, k, grad_scale,
                    dlogits ? dlogits + (size_t)i0 * k : (float *)NULL, loss, correct);
        HCNN_CUDA_LAUNCHED();
        HCNN_LAUNCH(xent_total_kernel, 1, 1, cuda_of(be)->stream, loss, correct, nb, stats);
        HCNN_CUDA_LAUNCHED();
    }
}
