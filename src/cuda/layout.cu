/* Layout changes of the CUDA backend (include/hcnn/backend.h, hcnn_act_layout;
 * the CPU's are src/cpu/layout.c): NCHW <-> NHWC, where the network meets
 * an NHWC instance's activations (the first block's input, flatten).  One
 * thread an output element; the reads of a warp stride through the other
 * layout, which costs one pass over a tensor at the input and one over
 * flatten's (small) input per step. */
#include "cuda.h"

/* y[i][p][ch] = x[i][ch][p] (to_nhwc), or y[i][ch][p] = x[i][p][ch] */
static __global__ void nchw_nhwc_kernel(const float *x, hcnn_hd_divider cdiv, hcnn_hd_divider pdiv,
                                        size_t total, int to_nhwc, float *y)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const size_t c = cdiv.d, np = pdiv.d, img = c * np, i = k / img;
    const uint32_t r = (uint32_t)(k - i * img); /* within the image: 32 bits (HCNN_MAX_SAMPLE_FLOATS) */
    if (to_nhwc) { /* r = p * c + ch */
        const uint32_t p = hcnn_hd_div(cdiv, r), ch = r - p * cdiv.d;
        y[k] = x[i * img + (size_t)ch * np + p];
    } else { /* r = ch * np + p */
        const uint32_t ch = hcnn_hd_div(pdiv, r), p = r - ch * pdiv.d;
        y[k] = x[i * img + (size_t)p * c + ch];
    }
}

static void nchw_nhwc(const hcnn_backend *be, const float *x, float *y, int n, int c, int np,
                      int to_nhwc)
{
    const size_t total = (size_t)n * c * np;
    if (total == 0)
        return;
    HCNN_LAUNCH(nchw_nhwc_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream, x,
                hcnn_hd_divider_of((uint32_t)c), hcnn_hd_divider_of((uint32_t)np), total, to_nhwc,
                y);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_layout_from_nchw(const hcnn_backend *be, const float *x, float *y, int n, int c,
                                int np)
{
    nchw_nhwc(be, x, y, n, c, np, 1);
}

void hcnn_cuda_layout_to_nchw(const hcnn_backend *be, const float *x, float *y, int n, int c,
                              int np)
{
    nchw_nhwc(be, x, y, n, c, np, 0);
}
