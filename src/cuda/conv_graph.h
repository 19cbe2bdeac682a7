/* conv_graph.cu: one pass of a convolution shape through cuDNN's graph
 * (backend) API, for precision bf16: the inputs bfloat16 (the caller's
 * rounded copies; the filter's KRSC in an NHWC instance), FP32
 * accumulation and FP32 outputs, as the im2col path's bf16 GEMMs give
 * them; the forward with the bias added in the same engine (a pointwise
 * addition after the convolution).  The legacy API
 * cannot do this: its bf16 convolutions write bf16.  Included only where
 * the build links cuDNN (never in the emulation). */
#ifndef HCNN_CUDA_CONV_GRAPH_H
#define HCNN_CUDA_CONV_GRAPH_H

#include <cudnn.h>

#include "cuda.h"

/* a cuDNN call that must succeed: else the abort path, naming the call
 * (conv_cudnn.cu's and conv_graph.cu's) */
#define HCNN_CUDNN(call)                                                                            \
    HCNN_CALL_OK(#call, call, cudnnStatus_t, CUDNN_STATUS_SUCCESS, cudnnGetErrorString)

/* the byte alignment a graph declares for the bf16 copies and the
 * activations it writes (the bias and dw: 4) */
#define HCNN_GRAPH_ALIGN 16

typedef enum hcnn_graph_kind {
    HCNN_GRAPH_FORWARD,      /* y = conv(x, w)                 x, w bf16; y FP32 */
    HCNN_GRAPH_FORWARD_BIAS, /* y = conv(x, w) + b             b FP32, fused */
    HCNN_GRAPH_FORWARD_RELU, /* y = relu(conv(x, w))           (the ReLU layer after it) */
    HCNN_GRAPH_FORWARD_BIAS_RELU, /* y = relu(conv(x, w) + b) */
    HCNN_GRAPH_DATA,         /* dx = conv_data(dy, w)          dy, w bf16; dx FP32 */
    HCNN_GRAPH_DATA_ACC,     /* dx += conv_data(dy, w)         (in place) */
    HCNN_GRAPH_FILTER,       /* dw += conv_filter(x, dy)       x, dy bf16; dw FP32 */
    HCNN_GRAPHS
} hcnn_graph_kind;

/* One graph's execution plan: the first engine of cuDNN's heuristic ranking
 * that is deterministic, sums directly (no FFT or Winograd), reduces in
 * FP32 and fits the workspace */
typedef struct hcnn_graph_plan {
    cudnnBackendDescriptor_t plan; /* NULL: none (why says) */
    size_t workspace;              /* bytes */
    int64_t engine;                /* cuDNN's global engine index */
    int compiled;                  /* the engine compiles its kernel at set-up */
    int made;                      /* tried (plan NULL: without success) */
    int refused;                   /* cuDNN refused to run it: unused since (why says) */
    char why[480];
    /* the descriptors the plan was made from (the graph, its tensors and
     * operations, the engine configurations): kept for the plan's life */
    cudnnBackendDescriptor_t owned[56];
    int nowned;
} hcnn_graph_plan;

/* Makes gp for d over n images in the instance's layout (nhwc: x, y, dy,
 * dx [n][h][w][c]; the filter [out][in][kh][kw] in both) within limit bytes
 * of workspace: 1 made, 0 none (gp->why says which step failed). */
int hcnn_graph_plan_make(cudnnHandle_t h, const hcnn_conv_desc *d, int n, int nhwc,
                         hcnn_graph_kind kind, size_t limit, hcnn_graph_plan *gp);
void hcnn_graph_plan_free(hcnn_graph_plan *gp);
/* Runs gp on the handle's stream: CUDNN_STATUS_SUCCESS, or cuDNN's status
 * (the caller decides: conv_cudnn_call.cu takes another way for a refusal
 * before launch, ends the job for a failure).
 * Operands by kind: forward (x, w, b or NULL, y),
 * data (dy, w, NULL, dx), filter (x, dy, NULL, dw); the inputs and the
 * forward's and data gradient's output 16-byte aligned
 * (hcnn_graph_plan_aligned), the bias and dw 4. */
cudnnStatus_t hcnn_graph_plan_run(cudnnHandle_t h, const hcnn_graph_plan *gp,
                                  hcnn_graph_kind kind, const void *a, const void *b,
                                  const void *bias, void *out, void *ws, size_t ws_bytes);
/* a plan made and never refused when run */
static inline int hcnn_graph_plan_usable(const hcnn_graph_plan *gp)
{
    return gp->plan != NULL && !gp->refused;
}
/* whether the pointers of a call (as hcnn_graph_plan_run's a, b, out) are
 * aligned as the graph's tensors are declared */
int hcnn_graph_plan_aligned(hcnn_graph_kind kind, const void *a, const void *b, const void *out);
/* "cuDNN graph engine 12 (...)" */
void hcnn_graph_plan_describe(const hcnn_graph_plan *gp, char *buf, size_t cap);

#endif
