/* 2-D convolution of the CUDA backend through cuDNN, where this build links
 * it (configure found cuDNN; never in the emulation, which runs conv.cu's
 * im2col + cuBLAS path): the forward, the data gradient and the filter
 * gradient as cuDNN's convolution calls on the FP32 tensors as they are
 * (the activations NCHW or, in an NHWC instance, CUDNN_TENSOR_NHWC; the
 * filter always KCRS, CUDNN_TENSOR_NCHW), with the bias and its gradient
 * by bias.cu as on the im2col path.  The NHWC descriptors are unmeasured
 * (written 2026-11-29 without a GPU): where cuDNN's heuristics offer no
 * usable algorithm for them the convolution takes conv.cu's NHWC im2col
 * path as for any shape without one, and conv_choice.cu's rule is NCHW's.
 *
 * Algorithms: for each convolution shape and batch, the first of cuDNN's
 * heuristic ranking (cudnnGet*Algorithm_v7: no timing, so the same choice on
 * every run of the same GPU and library) that sums the products directly
 * (implicit or explicit GEMM: no FFT or Winograd, see direct_sum), is
 * deterministic (no atomic additions: the same bits every run), FMA-only in
 * fp32 (no TF32 tensor cores unless precision: tf32 asks, as cuBLAS under
 * pedantic math) and within the workspace.  bf16 keeps the im2col path
 * (its GEMM inputs rounded to bfloat16 by gemm.cu).
 *
 * Which passes cuDNN runs is conv_choice.cu's: this file makes the plan
 * (descriptors and the three algorithms) that a pass by cuDNN runs, and
 * hcnn_cudnn_conv_for() answers NULL where there is none (a build without
 * cuDNN, bf16, HCNN_CUDA_CONV naming no cudnn pass, no usable algorithm). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cuda.h"
#include "hcnn/env.h"

#if HCNN_HAVE_CUDNN && !defined(HCNN_CUDA_EMULATION)
#include <cudnn.h>

#define HCNN_CUDNN(call)                                                                            \
    do {                                                                                            \
        const cudnnStatus_t s_ = (call);                                                            \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                             \
            hcnn_cuda_fail(#call, __FILE__, __LINE__, cudnnGetErrorString(s_));                     \
    } while (0)

/* the most workspace one convolution may take: 512 MiB (what a plan sized
 * with HCNN_CUDNN_ANY_WORKSPACE gets) */
#define CUDNN_WORKSPACE_BYTES ((size_t)512 << 20)
/* the shapes (convolution x batch) an instance remembers */
#define CUDNN_PLANS 128

struct hcnn_cudnn_conv {
    hcnn_conv_desc d;
    int n;
    hcnn_precision precision;
    hcnn_act_layout layout; /* the instance's (fixed at creation: no key) */
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t workspace; /* bytes: the largest of the three */
    int none;         /* 1: cuDNN has no plan for it (im2col) */
    size_t short_of;  /* > 0: no algorithm fits this many bytes or fewer (im2col) */
};

struct hcnn_cudnn {
    cudnnHandle_t handle;
    int nplans;
    hcnn_cudnn_conv plans[CUDNN_PLANS];
};

static void plan_free(hcnn_cudnn_conv *p)
{
    cudnnDestroyTensorDescriptor(p->x);
    cudnnDestroyTensorDescriptor(p->y);
    cudnnDestroyFilterDescriptor(p->w);
    cudnnDestroyConvolutionDescriptor(p->conv);
}

int hcnn_cudnn_create(hcnn_backend *be)
{
    hcnn_cuda *cu = cuda_of(be);
    if (cu->conv_mode == HCNN_CONV_MODE_FORCED && cu->conv_forced[0] != HCNN_WAY_CUDNN &&
        cu->conv_forced[1] != HCNN_WAY_CUDNN && cu->conv_forced[2] != HCNN_WAY_CUDNN)
        return HCNN_OK; /* cu->dnn stays NULL: the im2col path everywhere */
    struct hcnn_cudnn *dnn = (struct hcnn_cudnn *)hcnn_calloc(sizeof *dnn, "cuDNN plans");
    if (!dnn)
        return HCNN_ENOMEM;
    HCNN_CUDNN(cudnnCreate(&dnn->handle));
    HCNN_CUDNN(cudnnSetStream(dnn->handle, cu->stream));
    cu->dnn = dnn;
    return HCNN_OK;
}

void hcnn_cudnn_destroy(hcnn_cuda *cu)
{
    struct hcnn_cudnn *dnn = cu->dnn;
    if (!dnn)
        return;
    for (int i = 0; i < dnn->nplans; i++)
        if (!dnn->plans[i].none && !dnn->plans[i].short_of)
            plan_free(&dnn->plans[i]);
    cudnnDestroy(dnn->handle);
    hcnn_free(dnn);
    cu->dnn = NULL;
}

/* The algorithms that sum the products as a GEMM does (implicit or
 * explicit, no transform of the operands): FFT and Winograd transforms
 * round differently.  Measured on an H200 with cuDNN 9.19 and every
 * deterministic algorithm allowed, the heuristics chose FFT and Winograd
 * gradients for LeNet-5 and ResNet-18, and 20 LeNet-5 steps moved 2.6e-2
 * (max_abs_diff, a momentum buffer) from the CPU, against 2e-7 with cuBLAS:
 * far from "the CPU's results up to summation order". */
static int direct_sum(cudnnConvolutionFwdAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
}
/* ALGO_0 of both gradients adds with atomics (not deterministic): ALGO_1 */
static int direct_sum(cudnnConvolutionBwdDataAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
static int direct_sum(cudnnConvolutionBwdFilterAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
}

/* a ranking's first usable entry: a direct sum, deterministic, of the
 * allowed math, within the workspace (-1: none) */
template <typename Perf>
static int first_usable(const Perf *perf, int count, int fp32, size_t limit)
{
    for (int i = 0; i < count; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC ||
            perf[i].memory > limit || !direct_sum(perf[i].algo))
            continue;
        if (fp32 && perf[i].mathType != CUDNN_FMA_MATH && perf[i].mathType != CUDNN_DEFAULT_MATH)
            continue;
        return i;
    }
    return -1;
}

/* p's descriptors and algorithms within limit bytes of workspace; 0: cuDNN
 * has no deterministic algorithm for a pass within it (p freed) */
static int plan_make(struct hcnn_cudnn *dnn, hcnn_cudnn_conv *p, size_t limit)
{
    const hcnn_conv_geom *g = &p->d.g;
    const int n = p->n;
    HCNN_CUDNN(cudnnCreateTensorDescriptor(&p->x));
    HCNN_CUDNN(cudnnCreateTensorDescriptor(&p->y));
    HCNN_CUDNN(cudnnCreateFilterDescriptor(&p->w));
    HCNN_CUDNN(cudnnCreateConvolutionDescriptor(&p->conv));
    /* x, y in the instance's layout (the sizes are n, c, h, w in both); the
     * filter [out][in][kh][kw] in both (backend.h) */
    const cudnnTensorFormat_t act =
        p->layout == HCNN_LAYOUT_NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    HCNN_CUDNN(cudnnSetTensor4dDescriptor(p->x, act, CUDNN_DATA_FLOAT, n, g->c, g->h, g->w));
    HCNN_CUDNN(cudnnSetTensor4dDescriptor(p->y, act, CUDNN_DATA_FLOAT, n, p->d.out_c, g->oh,
                                          g->ow));
    HCNN_CUDNN(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, p->d.out_c,
                                          g->c, g->kh, g->kw));
    HCNN_CUDNN(cudnnSetConvolution2dDescriptor(p->conv, g->ph, g->pw, g->sh, g->sw, 1, 1,
                                               CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    const int fp32 = p->precision == HCNN_PRECISION_FP32;
    HCNN_CUDNN(cudnnSetConvolutionMathType(p->conv, fp32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH));
    int on, oc, oh, ow;
    HCNN_CUDNN(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &oc, &oh, &ow));
    if (on != n || oc != p->d.out_c || oh != g->oh || ow != g->ow) {
        plan_free(p);
        return 0;
    }
    cudnnConvolutionFwdAlgoPerf_t fp[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnConvolutionBwdDataAlgoPerf_t dp[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cudnnConvolutionBwdFilterAlgoPerf_t wp[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int nf = 0, nd = 0, nw = 0;
    /* a ranking refused as a whole (not supported: the NHWC activations
     * with a KCRS filter, say) is the same as one without a usable entry:
     * the im2col path, not the end of the job */
    if (cudnnGetConvolutionForwardAlgorithm_v7(dnn->handle, p->x, p->w, p->conv, p->y,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &nf,
                                               fp) != CUDNN_STATUS_SUCCESS ||
        cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn->handle, p->w, p->y, p->conv, p->x,
                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &nd,
                                                    dp) != CUDNN_STATUS_SUCCESS ||
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn->handle, p->x, p->y, p->conv, p->w,
                                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                      &nw, wp) != CUDNN_STATUS_SUCCESS) {
        plan_free(p);
        return 0;
    }
    const int f = first_usable(fp, nf, fp32, limit), dd = first_usable(dp, nd, fp32, limit),
              ww = first_usable(wp, nw, fp32, limit);
    if (f < 0 || dd < 0 || ww < 0) {
        plan_free(p);
        return 0;
    }
    p->fwd = fp[f].algo;
    p->bwd_data = dp[dd].algo;
    p->bwd_filter = wp[ww].algo;
    /* the sizes the calls themselves ask for, under the math type they run with */
    size_t a = 0, b = 0, c = 0;
    HCNN_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(dnn->handle, p->x, p->w, p->conv, p->y,
                                                       p->fwd, &a));
    HCNN_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(dnn->handle, p->w, p->y, p->conv, p->x,
                                                            p->bwd_data, &b));
    HCNN_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn->handle, p->x, p->y, p->conv,
                                                              p->w, p->bwd_filter, &c));
    p->workspace = a > b ? a : b;
    p->workspace = c > p->workspace ? c : p->workspace;
    if (p->workspace > limit) {
        plan_free(p);
        return 0;
    }
    return 1;
}

/* The plan of a convolution over n images within limit bytes of workspace:
 * descriptors and algorithms, made at its first call (the scratch's sizing,
 * before the first step), kept for the instance's life; NULL when there is
 * none: no cuDNN, bf16, no deterministic direct-sum algorithm, or none
 * within the workspace (a call over fewer images than the workspace was
 * sized for, whose algorithms may want more: the im2col path, which never
 * needs more for fewer images, and for which conv_workspace also sized
 * it). */
const hcnn_cudnn_conv *hcnn_cudnn_conv_for(const hcnn_backend *be, const hcnn_conv_desc *d, int n,
                                           size_t limit)
{
    hcnn_cuda *cu = cuda_of(be);
    struct hcnn_cudnn *dnn = cu->dnn;
    if (!dnn || n < 1 || cu->precision == HCNN_PRECISION_BF16)
        return NULL;
    limit = limit < CUDNN_WORKSPACE_BYTES ? limit : CUDNN_WORKSPACE_BYTES;
    /* the shape (every layer of it shares the plan), not the layer's cache */
    hcnn_conv_desc key;
    memset(&key, 0, sizeof key);
    key.g = d->g, key.out_c = d->out_c;
    for (int i = 0; i < dnn->nplans; i++) {
        const hcnn_cudnn_conv *p = &dnn->plans[i];
        if (p->n != n || p->precision != cu->precision || p->d.out_c != key.out_c ||
            memcmp(&p->d.g, &key.g, sizeof key.g) != 0)
            continue;
        if (p->none || (p->short_of && limit <= p->short_of))
            return NULL;
        if (!p->short_of && p->workspace <= limit)
            return p;
    }
    if (dnn->nplans == CUDNN_PLANS)
        hcnn_cuda_fail("cuDNN convolution", __FILE__, __LINE__,
                       "more convolution shapes than the backend keeps plans for (128)");
    hcnn_cudnn_conv *p = &dnn->plans[dnn->nplans++];
    memset(p, 0, sizeof *p);
    p->d = key;
    p->n = n;
    p->precision = cu->precision;
    p->layout = be->layout;
    if (plan_make(dnn, p, limit))
        return p;
    if (limit < CUDNN_WORKSPACE_BYTES)
        p->short_of = limit;
    else
        p->none = 1;
    return NULL;
}

size_t hcnn_cudnn_conv_workspace(const hcnn_cudnn_conv *p)
{
    return (p->workspace + sizeof(float) - 1) / sizeof(float);
}

/* the caller's workspace, which conv_workspace sized for this plan */
static size_t workspace_bytes(const hcnn_cudnn_conv *p, const hcnn_exec *ex)
{
    const size_t have = ex->ws_floats * sizeof(float);
    if (have < p->workspace)
        hcnn_cuda_fail("cuDNN convolution", __FILE__, __LINE__,
                       "the workspace is smaller than the algorithms chosen need");
    return have;
}

static cudnnHandle_t handle_of(const hcnn_backend *be) { return cuda_of(be)->dnn->handle; }

void hcnn_cudnn_conv_fwd(const hcnn_backend *be, const hcnn_cudnn_conv *p, const hcnn_exec *ex,
                         const float *x, const float *w, float *y)
{
    const float one = 1.0f, zero = 0.0f;
    HCNN_CUDNN(cudnnConvolutionForward(handle_of(be), &one, p->x, x, p->w, w, p->conv, p->fwd,
                                       ex->ws, workspace_bytes(p, ex), &zero, p->y, y));
}

void hcnn_cudnn_conv_bwd_filter(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                                const hcnn_exec *ex, const float *x, const float *dy, float *dw)
{
    const float one = 1.0f; /* dw += */
    HCNN_CUDNN(cudnnConvolutionBackwardFilter(handle_of(be), &one, p->x, x, p->y, dy, p->conv,
                                              p->bwd_filter, ex->ws, workspace_bytes(p, ex), &one,
                                              p->w, dw));
}

void hcnn_cudnn_conv_bwd_data(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                              const hcnn_exec *ex, const float *w, const float *dy, float *dx,
                              int dx_acc)
{
    const float one = 1.0f, beta = dx_acc ? 1.0f : 0.0f;
    HCNN_CUDNN(cudnnConvolutionBackwardData(handle_of(be), &one, p->w, w, p->y, dy, p->conv,
                                            p->bwd_data, ex->ws, workspace_bytes(p, ex), &beta,
                                            p->x, dx));
}

static const char *fwd_name(cudnnConvolutionFwdAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "implicit_gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "implicit_precomp_gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "direct";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "fft";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "fft_tiling";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "winograd";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "winograd_nonfused";
    default: return "other";
    }
}

static const char *bwd_data_name(cudnnConvolutionBwdDataAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return "algo_0";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return "algo_1";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return "fft";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return "fft_tiling";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return "winograd";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return "winograd_nonfused";
    default: return "other";
    }
}

static const char *bwd_filter_name(cudnnConvolutionBwdFilterAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return "algo_0";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return "algo_1";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return "fft";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return "algo_3";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED: return "winograd_nonfused";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING: return "fft_tiling";
    default: return "other";
    }
}

void hcnn_cudnn_conv_describe(const hcnn_cudnn_conv *p, int pass, char *buf, size_t cap)
{
    const char *math = p->precision == HCNN_PRECISION_FP32 ? "FMA math" : "TF32 allowed";
    const char *nhwc = p->layout == HCNN_LAYOUT_NHWC ? " NHWC" : "";
    const char *algo = pass == HCNN_PASS_FORWARD ? fwd_name(p->fwd)
                       : pass == HCNN_PASS_DATA  ? bwd_data_name(p->bwd_data)
                                                 : bwd_filter_name(p->bwd_filter);
    snprintf(buf, cap, "cuDNN %d.%d.%d%s %s (deterministic, %s, workspace %.1f MiB)", CUDNN_MAJOR,
             CUDNN_MINOR, CUDNN_PATCHLEVEL, nhwc, algo, math, (double)p->workspace / 1048576.0);
}

#else /* no cuDNN in this build: every convolution takes the im2col path */

int hcnn_cudnn_create(hcnn_backend *be)
{
    const hcnn_cuda *cu = cuda_of(be);
    if (cu->conv_mode == HCNN_CONV_MODE_FORCED &&
        (cu->conv_forced[0] == HCNN_WAY_CUDNN || cu->conv_forced[1] == HCNN_WAY_CUDNN ||
         cu->conv_forced[2] == HCNN_WAY_CUDNN))
        return hcnn_error_code(HCNN_EINVAL,
                               "HCNN_CUDA_CONV=%s: this build has no cuDNN (configure found "
                               "none, or --without-cudnn)",
                               getenv(HCNN_ENV_CUDA_CONV));
    return HCNN_OK;
}
void hcnn_cudnn_destroy(hcnn_cuda *cu) { (void)cu; }
const hcnn_cudnn_conv *hcnn_cudnn_conv_for(const hcnn_backend *be, const hcnn_conv_desc *d, int n,
                                           size_t limit)
{
    (void)be, (void)d, (void)n, (void)limit;
    return NULL;
}
size_t hcnn_cudnn_conv_workspace(const hcnn_cudnn_conv *p)
{
    (void)p;
    return 0;
}
void hcnn_cudnn_conv_fwd(const hcnn_backend *be, const hcnn_cudnn_conv *p, const hcnn_exec *ex,
                         const float *x, const float *w, float *y)
{
    (void)be, (void)p, (void)ex, (void)x, (void)w, (void)y;
}
void hcnn_cudnn_conv_bwd_filter(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                                const hcnn_exec *ex, const float *x, const float *dy, float *dw)
{
    (void)be, (void)p, (void)ex, (void)x, (void)dy, (void)dw;
}
void hcnn_cudnn_conv_bwd_data(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                              const hcnn_exec *ex, const float *w, const float *dy, float *dx,
                              int dx_acc)
{
    (void)be, (void)p, (void)ex, (void)w, (void)dy, (void)dx, (void)dx_acc;
}
void hcnn_cudnn_conv_describe(const hcnn_cudnn_conv *p, int pass, char *buf, size_t cap)
{
    (void)p, (void)pass;
    snprintf(buf, cap, "no cuDNN");
}
#endif
