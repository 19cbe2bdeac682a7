/* 2-D convolution of the CUDA backend through cuDNN, where this build links
 * it (configure found cuDNN; never in the emulation, which runs conv.cu's
 * im2col + cuBLAS path): the forward, the data gradient and the filter
 * gradient (and the forward of the transposed data gradient, conv.cu) as
 * cuDNN's convolution calls on the FP32 tensors as they are
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
 * pedantic math) and within the workspace.
 *
 * bf16: the legacy API's bf16 convolutions write bf16, where hcnn's bf16
 * keeps FP32 outputs (backend.h), so a bf16 plan is made of cuDNN graphs
 * instead (conv_graph.cu): the inputs rounded to bfloat16 here (x, w, dy:
 * copies in the backend's bf16 buffer, as the im2col path rounds its
 * columns), FP32 accumulation and outputs, the forward's bias and the ReLU
 * after it (hcnn_exec.relu) in the same engine.  A pass whose graph has no
 * usable engine has no plan (hcnn_cudnn_conv_has), the others keep theirs.
 *
 * Winograd (HCNN_WAY_WINOGRAD_CUDNN): a second plan of the same shape
 * made of cuDNN's Winograd algorithms alone (deterministic, as every
 * algorithm here), each pass that has one, offered only where the CPU's
 * conv_algo: auto takes Winograd itself (3x3, stride 1, padding up to 2,
 * at least 32 input and output channels: hcnn_cudnn_winograd_shape).  Its
 * transforms round more than a direct sum, as the CPU's do; on other shapes
 * (LeNet-5's 5x5 layers of 6 and 16 channels) cuDNN's Winograd and FFT
 * gradients moved 20 steps 2.6e-2 from the CPU (above), which is why no
 * ranking below takes them.  Unmeasured on a GPU (written 2026-11-29):
 * the measurement (conv_choice.cu) takes it where it is the faster.
 *
 * Which passes cuDNN runs is conv_choice.cu's: this file makes the plan
 * (descriptors and the three algorithms) that a pass by cuDNN runs, and
 * hcnn_cudnn_conv_for() answers NULL where there is none (a build without
 * cuDNN, HCNN_CUDA_CONV naming no cudnn pass, no usable algorithm). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cuda.h"
#include "hcnn/env.h"

int hcnn_cudnn_winograd_shape(const hcnn_conv_desc *d)
{
    const int channels = d->g.c < d->out_c ? d->g.c : d->out_c;
    return d->g.kh == 3 && d->g.kw == 3 && d->g.sh == 1 && d->g.sw == 1 && d->g.ph <= 2 &&
           d->g.pw <= 2 && channels >= 32;
}

/* whether HCNN_CUDA_CONV names a way of this file for some pass */
static int forced_cudnn(const hcnn_cuda *cu)
{
    return hcnn_cuda_conv_forces(cu, HCNN_WAY_CUDNN) ||
           hcnn_cuda_conv_forces(cu, HCNN_WAY_TRANSPOSED_CUDNN) ||
           hcnn_cuda_conv_forces(cu, HCNN_WAY_WINOGRAD_CUDNN);
}

#if HCNN_HAVE_CUDNN && !defined(HCNN_CUDA_EMULATION)
#include <cudnn.h>

#include "conv_graph.h"

/* the most workspace one convolution may take: 512 MiB (what a plan sized
 * with HCNN_CUDNN_ANY_WORKSPACE gets) */
#define CUDNN_WORKSPACE_BYTES ((size_t)512 << 20)
/* the plans (convolution shape x batch x direct or Winograd, and the
 * transposed data gradients' shapes) an instance remembers: ResNet-18's
 * 11 shapes at the training and the last and evaluation batches take
 * about 100 */
#define CUDNN_PLANS 256

struct hcnn_cudnn_conv {
    hcnn_conv_desc d;
    int n;
    hcnn_precision precision;
    hcnn_act_layout layout; /* the instance's (fixed at creation: no key) */
    int winograd;           /* 1: Winograd's algorithms alone (HCNN_WAY_WINOGRAD_CUDNN) */
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    /* a pass's own: its algorithm's math type set on it (TF32: the
     * ranking's entry's, as cuDNN's legacy API asks; FP32: FMA) */
    cudnnConvolutionDescriptor_t conv[HCNN_PASSES];
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t workspace; /* bytes: the largest of the three */
    int none;         /* 1: cuDNN has no plan for it (im2col) */
    size_t short_of;  /* > 0: no algorithm fits this many bytes or fewer (im2col) */
    int has[HCNN_PASSES];                 /* the passes it runs */
    char refusal[HCNN_PASSES][320];       /* a pass cuDNN refused to run: the call and why */
    hcnn_graph_plan graph[HCNN_GRAPHS];   /* bf16: the graphs (the rest unused) */
};

struct hcnn_cudnn {
    cudnnHandle_t handle;
    int nplans;
    int full_said; /* the warning that the table is full, given once */
    hcnn_cudnn_conv plans[CUDNN_PLANS];
};

/* the descriptors made so far (p zeroed before its making) */
static void plan_free(hcnn_cudnn_conv *p)
{
    if (p->precision == HCNN_PRECISION_BF16) {
        for (int k = 0; k < HCNN_GRAPHS; k++)
            hcnn_graph_plan_free(&p->graph[k]);
        return;
    }
    if (p->x)
        cudnnDestroyTensorDescriptor(p->x);
    if (p->y)
        cudnnDestroyTensorDescriptor(p->y);
    if (p->w)
        cudnnDestroyFilterDescriptor(p->w);
    for (int pass = 0; pass < HCNN_PASSES; pass++)
        if (p->conv[pass])
            cudnnDestroyConvolutionDescriptor(p->conv[pass]);
    p->x = p->y = NULL, p->w = NULL;
    memset(p->conv, 0, sizeof p->conv);
}

int hcnn_cudnn_create(hcnn_backend *be)
{
    hcnn_cuda *cu = cuda_of(be);
    if (cu->conv_mode == HCNN_CONV_MODE_FORCED && !forced_cudnn(cu))
        return HCNN_OK; /* cu->dnn stays NULL: conv.cu's ways everywhere */
    struct hcnn_cudnn *dnn = (struct hcnn_cudnn *)hcnn_calloc(sizeof *dnn, "cuDNN plans");
    if (!dnn)
        return HCNN_ENOMEM;
    if (cu->conv_mode == HCNN_CONV_MODE_FORCED) { /* HCNN_CUDA_CONV asks for cuDNN: it must start */
        HCNN_CUDNN(cudnnCreate(&dnn->handle));
        HCNN_CUDNN(cudnnSetStream(dnn->handle, cu->stream));
        cu->dnn = dnn;
        return HCNN_OK;
    }
    /* a cuDNN that does not start (a library or driver it does not match,
     * a sub-library that does not load) leaves the job to conv.cu's ways */
    cudnnStatus_t s = cudnnCreate(&dnn->handle);
    if (s == CUDNN_STATUS_SUCCESS && (s = cudnnSetStream(dnn->handle, cu->stream)) !=
                                         CUDNN_STATUS_SUCCESS)
        cudnnDestroy(dnn->handle);
    if (s != CUDNN_STATUS_SUCCESS) {
        hcnn_warn("cuDNN %d.%d.%d does not start (%s): every convolution runs by im2col + GEMM",
                  CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL, cudnnGetErrorString(s));
        hcnn_free(dnn);
        return HCNN_OK;
    }
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
/* the Winograd plan's algorithms (the filter gradient has only the nonfused one) */
static int winograd(cudnnConvolutionFwdAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
static int winograd(cudnnConvolutionBwdDataAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
static int winograd(cudnnConvolutionBwdFilterAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

/* a ranking's first usable entry: a direct sum (Winograd's for a
 * Winograd plan), deterministic, of the allowed math (FP32: no tensor
 * cores; never FP32 data rounded to FP16, TENSOR_OP_MATH_ALLOW_CONVERSION,
 * which TF32 is not), within the workspace (-1: none) */
template <typename Perf>
static int first_usable(const Perf *perf, int count, int fp32, size_t limit, int wino)
{
    for (int i = 0; i < count; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC ||
            perf[i].memory > limit || !(wino ? winograd(perf[i].algo) : direct_sum(perf[i].algo)))
            continue;
        if (fp32 && perf[i].mathType != CUDNN_FMA_MATH && perf[i].mathType != CUDNN_DEFAULT_MATH)
            continue;
        if (perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
            continue;
        return i;
    }
    return -1;
}

/* p's descriptors and algorithms within limit bytes of workspace; 0: cuDNN
 * has no deterministic algorithm for a pass within it (p freed).  A
 * Winograd plan keeps the passes that have one (0: none has) */
static int plan_make(struct hcnn_cudnn *dnn, hcnn_cudnn_conv *p, size_t limit)
{
    const hcnn_conv_geom *g = &p->d.g;
    const int n = p->n;
    /* a descriptor cuDNN refuses (a tensor past its 32-bit element counts,
     * say) is a shape without a plan, as a ranking without a usable entry */
#define MAKE(call)                                                                                 \
    do {                                                                                           \
        if ((call) != CUDNN_STATUS_SUCCESS) {                                                      \
            plan_free(p);                                                                          \
            return 0;                                                                              \
        }                                                                                          \
    } while (0)
    MAKE(cudnnCreateTensorDescriptor(&p->x));
    MAKE(cudnnCreateTensorDescriptor(&p->y));
    MAKE(cudnnCreateFilterDescriptor(&p->w));
    for (int pass = 0; pass < HCNN_PASSES; pass++)
        MAKE(cudnnCreateConvolutionDescriptor(&p->conv[pass]));
    /* x, y in the instance's layout (the sizes are n, c, h, w in both); the
     * filter [out][in][kh][kw] in both (backend.h) */
    const cudnnTensorFormat_t act =
        p->layout == HCNN_LAYOUT_NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    MAKE(cudnnSetTensor4dDescriptor(p->x, act, CUDNN_DATA_FLOAT, n, g->c, g->h, g->w));
    MAKE(cudnnSetTensor4dDescriptor(p->y, act, CUDNN_DATA_FLOAT, n, p->d.out_c, g->oh, g->ow));
    MAKE(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, p->d.out_c, g->c,
                                    g->kh, g->kw));
    const int fp32 = p->precision == HCNN_PRECISION_FP32;
    for (int pass = 0; pass < HCNN_PASSES; pass++) {
        MAKE(cudnnSetConvolution2dDescriptor(p->conv[pass], g->ph, g->pw, g->sh, g->sw, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        MAKE(cudnnSetConvolutionMathType(p->conv[pass],
                                         fp32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH));
    }
#undef MAKE
    cudnnConvolutionDescriptor_t cf = p->conv[HCNN_PASS_FORWARD], cd = p->conv[HCNN_PASS_DATA],
                                 cw = p->conv[HCNN_PASS_FILTER];
    int on = 0, oc = 0, oh = 0, ow = 0;
    if (cudnnGetConvolution2dForwardOutputDim(cf, p->x, p->w, &on, &oc, &oh, &ow) !=
        CUDNN_STATUS_SUCCESS)
        on = -1; /* refused below */
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
    if (cudnnGetConvolutionForwardAlgorithm_v7(dnn->handle, p->x, p->w, cf, p->y,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &nf,
                                               fp) != CUDNN_STATUS_SUCCESS ||
        cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn->handle, p->w, p->y, cd, p->x,
                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &nd,
                                                    dp) != CUDNN_STATUS_SUCCESS ||
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn->handle, p->x, p->y, cw, p->w,
                                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                      &nw, wp) != CUDNN_STATUS_SUCCESS) {
        plan_free(p);
        return 0;
    }
    const int wino = p->winograd;
    const int f = first_usable(fp, nf, fp32, limit, wino),
              dd = first_usable(dp, nd, fp32, limit, wino),
              ww = first_usable(wp, nw, fp32, limit, wino);
    if (!wino && (f < 0 || dd < 0 || ww < 0)) {
        plan_free(p);
        return 0;
    }
    /* each pass's descriptor under its algorithm's math type (TF32: the
     * entry's, DEFAULT or TENSOR_OP; FP32 stays FMA), then the sizes the
     * calls themselves ask for under it; a size cuDNN will not give (not
     * supported, say) is a pass without an algorithm, as a ranking without
     * a usable entry is (below: the plan dropped, the im2col path), not the
     * end of the job */
    const cudnnStatus_t ok = CUDNN_STATUS_SUCCESS;
    int found[HCNN_PASSES] = {f >= 0, dd >= 0, ww >= 0};
    size_t need[HCNN_PASSES] = {0, 0, 0};
    if (f >= 0) {
        p->fwd = fp[f].algo;
        found[HCNN_PASS_FORWARD] =
            (fp32 || cudnnSetConvolutionMathType(cf, fp[f].mathType) == ok) &&
            cudnnGetConvolutionForwardWorkspaceSize(dnn->handle, p->x, p->w, cf, p->y, p->fwd,
                                                    &need[HCNN_PASS_FORWARD]) == ok;
    }
    if (dd >= 0) {
        p->bwd_data = dp[dd].algo;
        found[HCNN_PASS_DATA] =
            (fp32 || cudnnSetConvolutionMathType(cd, dp[dd].mathType) == ok) &&
            cudnnGetConvolutionBackwardDataWorkspaceSize(dnn->handle, p->w, p->y, cd, p->x,
                                                         p->bwd_data, &need[HCNN_PASS_DATA]) == ok;
    }
    if (ww >= 0) {
        p->bwd_filter = wp[ww].algo;
        found[HCNN_PASS_FILTER] =
            (fp32 || cudnnSetConvolutionMathType(cw, wp[ww].mathType) == ok) &&
            cudnnGetConvolutionBackwardFilterWorkspaceSize(
                dnn->handle, p->x, p->y, cw, p->w, p->bwd_filter, &need[HCNN_PASS_FILTER]) == ok;
    }
    p->workspace = 0;
    for (int pass = 0; pass < HCNN_PASSES; pass++) {
        p->has[pass] = found[pass] && need[pass] <= limit;
        if (p->has[pass] && need[pass] > p->workspace)
            p->workspace = need[pass];
    }
    if (p->has[0] + p->has[1] + p->has[2] < (wino ? 1 : HCNN_PASSES)) {
        plan_free(p);
        return 0;
    }
    return 1;
}

/* bf16: p's graphs within limit bytes of workspace (the forward with the
 * bias or the ReLU in its engine is made at its first call, graph_fused).  Kept when no pass has one,
 * so that the describe line can say why (has[] all 0); 0 only when that
 * may be the workspace's doing (limit below cuDNN's: p freed, short_of). */
static int plan_make_graphs(struct hcnn_cudnn *dnn, hcnn_cudnn_conv *p, size_t limit)
{
    static const hcnn_graph_kind kinds[] = {HCNN_GRAPH_FORWARD, HCNN_GRAPH_DATA,
                                            HCNN_GRAPH_DATA_ACC, HCNN_GRAPH_FILTER};
    const int nhwc = p->layout == HCNN_LAYOUT_NHWC;
    p->workspace = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        hcnn_graph_plan *gp = &p->graph[kinds[k]];
        if (hcnn_graph_plan_make(dnn->handle, &p->d, p->n, nhwc, kinds[k], limit, gp) &&
            gp->workspace > p->workspace)
            p->workspace = gp->workspace;
    }
    p->has[HCNN_PASS_FORWARD] = p->graph[HCNN_GRAPH_FORWARD].plan != NULL; /* none run yet */
    /* dx = and dx += both, so that a call of either runs the pass's way */
    p->has[HCNN_PASS_DATA] =
        p->graph[HCNN_GRAPH_DATA].plan != NULL && p->graph[HCNN_GRAPH_DATA_ACC].plan != NULL;
    p->has[HCNN_PASS_FILTER] = p->graph[HCNN_GRAPH_FILTER].plan != NULL;
    if (p->has[0] || p->has[1] || p->has[2] || limit >= CUDNN_WORKSPACE_BYTES)
        return 1;
    plan_free(p);
    return 0;
}

/* The plan of a convolution over n images within limit bytes of workspace:
 * descriptors and algorithms, made at its first call (the scratch's sizing,
 * before the first step), kept for the instance's life; NULL when there is
 * none: no cuDNN, bf16, no deterministic direct-sum algorithm, or none
 * within the workspace (a call over fewer images than the workspace was
 * sized for, whose algorithms may want more: the im2col path, which never
 * needs more for fewer images, and for which conv_workspace also sized
 * it). */
static const hcnn_cudnn_conv *plan_for(const hcnn_backend *be, const hcnn_conv_desc *d, int n,
                                       size_t limit, int wino)
{
    hcnn_cuda *cu = cuda_of(be);
    struct hcnn_cudnn *dnn = cu->dnn;
    if (!dnn || n < 1)
        return NULL;
    /* bf16 graphs only where asked (HCNN_CUDA_CONV=cudnn or measure), not
     * in auto: every process makes its plans again (the workspace is sized
     * for any way), up to 7 graphs a shape and image count, each of whose
     * engines may compile its kernel (NVRTC: of the order of a second,
     * conv_graph.cu's estimate): ResNet-18's 11 shapes at 3 image counts
     * could take minutes before the first step, a cost no GPU has measured
     * yet (gpu_check.sh's cudnn runs print it, # setup_ms) */
    if (cu->precision == HCNN_PRECISION_BF16 && cu->conv_mode == HCNN_CONV_MODE_AUTO)
        return NULL;
    limit = limit < CUDNN_WORKSPACE_BYTES ? limit : CUDNN_WORKSPACE_BYTES;
    /* the shape (every layer of it shares the plan), not the layer's cache */
    hcnn_conv_desc key;
    memset(&key, 0, sizeof key);
    key.g = d->g, key.out_c = d->out_c;
    for (int i = 0; i < dnn->nplans; i++) {
        const hcnn_cudnn_conv *p = &dnn->plans[i];
        if (p->n != n || p->precision != cu->precision || p->winograd != wino ||
            p->d.out_c != key.out_c || memcmp(&p->d.g, &key.g, sizeof key.g) != 0)
            continue;
        if (p->none || (p->short_of && limit <= p->short_of))
            return NULL;
        if (!p->short_of && p->workspace <= limit)
            return p;
    }
    if (dnn->nplans == CUDNN_PLANS) {
        /* the shapes planned keep their plans; a new one runs by im2col, the
         * way that needs none (it ended the job before: a run is never lost
         * for a table's size) */
        if (!dnn->full_said)
            hcnn_warn("cuDNN convolutions: more plans (shape, image count, algorithm family) "
                      "than the backend keeps (%d): convolutions beyond those run by im2col + "
                      "GEMM",
                      CUDNN_PLANS);
        dnn->full_said = 1;
        return NULL;
    }
    hcnn_cudnn_conv *p = &dnn->plans[dnn->nplans++];
    memset(p, 0, sizeof *p);
    p->d = key;
    p->n = n;
    p->precision = cu->precision;
    p->layout = be->layout;
    p->winograd = wino;
    if (p->precision == HCNN_PRECISION_BF16 ? plan_make_graphs(dnn, p, limit)
                                            : plan_make(dnn, p, limit))
        return p;
    if (limit < CUDNN_WORKSPACE_BYTES)
        p->short_of = limit ? limit : 1; /* > 0: the entry is not a live plan */
    else
        p->none = 1;
    return NULL;
}

const hcnn_cudnn_conv *hcnn_cudnn_conv_for(const hcnn_backend *be, const hcnn_conv_desc *d, int n,
                                           size_t limit)
{
    return plan_for(be, d, n, limit, 0);
}

/* FP32 and TF32 only: bf16's graphs keep to direct sums (conv_graph.cu) */
const hcnn_cudnn_conv *hcnn_cudnn_conv_winograd_for(const hcnn_backend *be,
                                                    const hcnn_conv_desc *d, int n, size_t limit)
{
    const hcnn_cuda *cu = cuda_of(be);
    if (cu->conv_direct || cu->precision == HCNN_PRECISION_BF16 || !hcnn_cudnn_winograd_shape(d))
        return NULL;
    return plan_for(be, d, n, limit, 1);
}

size_t hcnn_cudnn_conv_workspace(const hcnn_cudnn_conv *p)
{
    return (p->workspace + sizeof(float) - 1) / sizeof(float);
}

int hcnn_cudnn_conv_has(const hcnn_cudnn_conv *p, int pass) { return p && p->has[pass]; }

const char *hcnn_cudnn_conv_refusal(const hcnn_cudnn_conv *p, int pass)
{
    return p ? p->refusal[pass] : "";
}

/* bf16: a graph's output is declared 16-byte aligned (conv_graph.cu): the
 * forward's y, the data gradient's dx (dw: 4) */
int hcnn_cudnn_conv_aligned(const hcnn_cudnn_conv *p, int pass, const void *out)
{
    return p->precision != HCNN_PRECISION_BF16 || pass == HCNN_PASS_FILTER ||
           (uintptr_t)out % HCNN_GRAPH_ALIGN == 0;
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

/* wb[k][t][c] = w[k][c][t] rounded to bfloat16 (t: the kh*kw taps): the
 * filter KRSC, as an NHWC graph reads it (conv_graph.cu) */
static __global__ void to_bf16_krsc_kernel(const float *w, unsigned total, int c, int taps,
                                           __nv_bfloat16 *wb)
{
    const unsigned i = (unsigned)HCNN_CUDA_INDEX();
    if (i >= total)
        return;
    const unsigned ci = i % (unsigned)c, t = i / (unsigned)c % (unsigned)taps;
    const unsigned k = i / ((unsigned)c * (unsigned)taps);
    wb[i] = __float2bfloat16(w[((size_t)k * c + ci) * taps + t]);
}

/* bf16: ab = a's n floats rounded to bfloat16; a the filter when filter
 * (KRSC in an NHWC plan) */
static void bf16_operand(const hcnn_backend *be, const hcnn_cudnn_conv *p, const float *a,
                         size_t n, int filter, __nv_bfloat16 *ab)
{
    if (filter && p->layout == HCNN_LAYOUT_NHWC && n > 0) {
        const int taps = p->d.g.kh * p->d.g.kw;
        HCNN_LAUNCH(to_bf16_krsc_kernel, hcnn_cuda_blocks(n), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, a, (unsigned)n, p->d.g.c, taps, ab);
        HCNN_CUDA_LAUNCHED();
    } else {
        hcnn_cuda_to_bf16(be, a, n, ab);
    }
}

/* bf16: rounded copies of two operands of na and nb floats in the backend's
 * bf16 buffer (each part 256-byte aligned, as the graphs' tensors say); a
 * the filter when filter_a */
static void bf16_pair(const hcnn_backend *be, const hcnn_cudnn_conv *p, const float *a, size_t na,
                      int filter_a, const float *b, size_t nb, __nv_bfloat16 **ab,
                      __nv_bfloat16 **bb)
{
    *ab = hcnn_cuda_bf16_buffer(be, hcnn_cuda_bf16_padded(na) + nb);
    *bb = *ab + hcnn_cuda_bf16_padded(na);
    bf16_operand(be, p, a, na, filter_a, *ab);
    bf16_operand(be, p, b, nb, 0, *bb);
}

static size_t in_floats(const hcnn_cudnn_conv *p)
{
    return (size_t)p->n * p->d.g.c * p->d.g.h * p->d.g.w;
}
static size_t out_floats(const hcnn_cudnn_conv *p)
{
    return (size_t)p->n * p->d.out_c * p->d.g.oh * p->d.g.ow;
}
static size_t w_floats(const hcnn_cudnn_conv *p)
{
    return (size_t)p->d.out_c * p->d.g.c * p->d.g.kh * p->d.g.kw;
}

/* ---- the calls -------------------------------------------------------------- */

static const char *const pass_names[HCNN_PASSES] = {"forward", "data gradient",
                                                    "filter gradient"};

/* A call cuDNN refuses when it runs: an algorithm of the ranking, or a
 * graph's engine, whose set-up and workspace query succeeded and which then
 * will not run the call.  Only a refusal of its parameters or of support
 * (the BAD_PARAM and NOT_SUPPORTED families, which cuDNN gives when it
 * checks a call, before it launches anything; not NOT_SUPPORTED_BAD_LAUNCH_
 * PARAM or _SHARED_MEMORY_INSUFFICIENT, a kernel's launch refused, maybe
 * after others of the call ran),
 * with no CUDA error pending, and not inside a CUDA graph's capture: the
 * plan's pass is then dropped (every call of the shape after it takes the
 * im2col path, whose workspace each call also has: conv_choice.cu,
 * workspace_floats), one warning names it, the describe line says it, and
 * the caller runs this call by im2col + GEMM.  Anything else (an execution
 * that failed: the output may be half written, and a call that adds to it
 * cannot be run again) ends the job as before.  cuDNN is never the only
 * path, at its first run no less than at its planning (every shape's first
 * run is outside a capture: capture starts at a step's second sighting).
 * This rank may so take another way than the others for the shape: its
 * results then differ from theirs by summation order, as the warning says. */
/* detail: cuDNN's words for s, read here unless the caller has them (cuDNN
 * clears them when read) */
static void refusal_or_fail(const hcnn_backend *be, const char *call, cudnnStatus_t s,
                            char *detail, size_t cap)
{
#if CUDNN_MAJOR >= 9
    if (!detail[0])
        cudnnGetLastErrorString(detail, cap);
    const int category = CUDNN_STATUS_CATEGORY(s);
    const int before_launch =
        (category == CUDNN_STATUS_BAD_PARAM || category == CUDNN_STATUS_NOT_SUPPORTED) &&
        s != CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM &&
        s != CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT;
#else
    (void)cap;
    const int before_launch = s == CUDNN_STATUS_BAD_PARAM || s == CUDNN_STATUS_NOT_SUPPORTED;
#endif
    /* an error of the CUDA runtime pending (hcnn's, or one cuDNN's calls
     * left there): not a refusal; the job ends, naming it */
    const cudaError_t pending = cudaGetLastError();
    if (before_launch && pending == cudaSuccess && !cuda_of(be)->capturing)
        return;
    char why[480];
    snprintf(why, sizeof why, "%s returned %s%s%.200s%s%s%s", call, cudnnGetErrorString(s),
             detail[0] ? ": " : "", detail, pending != cudaSuccess ? "; CUDA: " : "",
             pending != cudaSuccess ? cudaGetErrorString(pending) : "",
             cuda_of(be)->capturing ? " (inside a CUDA graph's capture)" : "");
    hcnn_cuda_fail("cuDNN convolution", __FILE__, __LINE__, why);
}

/* known: cuDNN's words for s if the caller read them already, else NULL */
static int refused(const hcnn_backend *be, const hcnn_cudnn_conv *p, int pass, const char *call,
                   cudnnStatus_t s, const char *known)
{
    char detail[200];
    snprintf(detail, sizeof detail, "%s", known ? known : "");
    refusal_or_fail(be, call, s, detail, sizeof detail);
    hcnn_cudnn_conv *q = (hcnn_cudnn_conv *)p; /* an entry of the instance's table */
    const int was = q->has[pass];
    q->has[pass] = 0;
    snprintf(q->refusal[pass], sizeof q->refusal[pass], "%s refused it (%s%s%.120s)", call,
             cudnnGetErrorString(s), detail[0] ? ": " : "", detail);
    if (was) {
        const hcnn_conv_geom *g = &p->d.g;
        hcnn_warn("cuDNN convolution %dx%dx%d -> %d channels (kernel %dx%d, stride %d, %d "
                  "images, %s): %s returned %s%s%.200s: its %s runs by im2col + GEMM from now "
                  "on (this rank's bits may differ from ranks whose cuDNN runs it)",
                  g->c, g->h, g->w, p->d.out_c, g->kh, g->kw, g->sh, p->n,
                  p->precision == HCNN_PRECISION_BF16 ? "bf16 graph" : "legacy API", call,
                  cudnnGetErrorString(s), detail[0] ? ": " : "", detail, pass_names[pass]);
    }
    return HCNN_CUDNN_REFUSED;
}

/* 0 when cuDNN ran the call (status s), else its refusal (above) */
static int call_result(const hcnn_backend *be, const hcnn_cudnn_conv *p, int pass,
                       const char *call, cudnnStatus_t s)
{
    return s == CUDNN_STATUS_SUCCESS ? 0 : refused(be, p, pass, call, s, NULL);
}

/* bf16: runs graph k of p; a graph cuDNN refuses (refusal_or_fail: else
 * the end of the job) is not run again; detail: cuDNN's words for a
 * refusal (cap bytes) */
static cudnnStatus_t graph_run(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                               hcnn_graph_kind k, const void *a, const void *b, const float *bias,
                               float *out, const hcnn_exec *ex, char *detail, size_t cap)
{
    hcnn_graph_plan *gp = (hcnn_graph_plan *)&p->graph[k];
    const cudnnStatus_t s = hcnn_graph_plan_run(handle_of(be), gp, k, a, b, bias, out, ex->ws,
                                                workspace_bytes(p, ex));
    detail[0] = '\0';
    if (s != CUDNN_STATUS_SUCCESS) {
        refusal_or_fail(be, "cudnnBackendExecute", s, detail, cap);
        gp->refused = 1;
        snprintf(gp->why, sizeof gp->why, "refused when run: %s%s%.200s", cudnnGetErrorString(s),
                 detail[0] ? ": " : "", detail);
    }
    return s;
}

/* bf16: the forward's graph with what HCNN_CUDNN_DID_* `did` names (the
 * bias, the ReLU after it) in the same engine, made at its first call
 * within the plan's workspace (never inside a graph capture, where nothing
 * may be made: then the plain forward, the rest by conv.cu); NULL: none */
static const hcnn_graph_plan *graph_fused(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                                          int did)
{
    const hcnn_graph_kind k = (hcnn_graph_kind)(HCNN_GRAPH_FORWARD + (did & HCNN_CUDNN_DID_BIAS) +
                                                (did & HCNN_CUDNN_DID_RELU)); /* 1, 2, 3 */
    hcnn_graph_plan *gp = (hcnn_graph_plan *)&p->graph[k];
    if (!gp->made && !cuda_of(be)->capturing)
        hcnn_graph_plan_make(handle_of(be), &p->d, p->n, p->layout == HCNN_LAYOUT_NHWC, k,
                             p->workspace, gp);
    return hcnn_graph_plan_usable(gp) ? gp : NULL;
}

int hcnn_cudnn_conv_fwd(const hcnn_backend *be, const hcnn_cudnn_conv *p, const hcnn_exec *ex,
                        const float *x, const float *w, const float *b, float *y)
{
    if (p->precision == HCNN_PRECISION_BF16) {
        __nv_bfloat16 *wb, *xb;
        bf16_pair(be, p, w, w_floats(p), 1, x, in_floats(p), &wb, &xb);
        /* the most of the bias and the ReLU a graph takes: both, the bias,
         * none; a fused graph cuDNN refuses to run, the next of them */
        const int full = (b ? HCNN_CUDNN_DID_BIAS : 0) | (ex->relu ? HCNN_CUDNN_DID_RELU : 0);
        const int tries[3] = {full, b && ex->relu ? HCNN_CUDNN_DID_BIAS : 0, 0};
        cudnnStatus_t s = CUDNN_STATUS_NOT_SUPPORTED;
        char detail[200] = "";
        for (int t = 0; t < 3; t++) {
            const int did = tries[t];
            if (t > 0 && did == tries[t - 1])
                continue;
            if (did && !graph_fused(be, p, did))
                continue;
            s = graph_run(be, p, (hcnn_graph_kind)(HCNN_GRAPH_FORWARD + did), xb, wb,
                          did & HCNN_CUDNN_DID_BIAS ? b : NULL, y, ex, detail, sizeof detail);
            if (s == CUDNN_STATUS_SUCCESS)
                return did;
        }
        return refused(be, p, HCNN_PASS_FORWARD, "cudnnBackendExecute (forward)", s, detail);
    }
    const float one = 1.0f, zero = 0.0f;
    const cudnnStatus_t s = cudnnConvolutionForward(
        handle_of(be), &one, p->x, x, p->w, w, p->conv[HCNN_PASS_FORWARD], p->fwd, ex->ws,
        workspace_bytes(p, ex), &zero, p->y, y);
    return call_result(be, p, HCNN_PASS_FORWARD, "cudnnConvolutionForward", s);
}

int hcnn_cudnn_conv_fwd_into(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                             const hcnn_exec *ex, const float *x, const float *w, int acc,
                             float *y)
{
    if (p->precision == HCNN_PRECISION_BF16)
        hcnn_cuda_fail("cuDNN convolution", __FILE__, __LINE__,
                       "y += conv(x, w) asked of a bf16 plan (its graphs write y)");
    const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
    const cudnnStatus_t s = cudnnConvolutionForward(
        handle_of(be), &one, p->x, x, p->w, w, p->conv[HCNN_PASS_FORWARD], p->fwd, ex->ws,
        workspace_bytes(p, ex), &beta, p->y, y);
    return call_result(be, p, HCNN_PASS_FORWARD, "cudnnConvolutionForward (transposed)", s);
}

/* bf16: dw += the filter gradient's graph of the rounded x and dy */
static int filter_graph(const hcnn_backend *be, const hcnn_cudnn_conv *p, const hcnn_exec *ex,
                        const __nv_bfloat16 *xb, const __nv_bfloat16 *dyb, float *dw)
{
    char detail[200];
    const cudnnStatus_t s =
        graph_run(be, p, HCNN_GRAPH_FILTER, xb, dyb, NULL, dw, ex, detail, sizeof detail);
    return s == CUDNN_STATUS_SUCCESS
               ? 0
               : refused(be, p, HCNN_PASS_FILTER, "cudnnBackendExecute (filter gradient)", s,
                         detail);
}

/* bf16: dx = (or +=, dx_acc) the data gradient's graph of the rounded dy and w */
static int data_graph(const hcnn_backend *be, const hcnn_cudnn_conv *p, const hcnn_exec *ex,
                      const __nv_bfloat16 *dyb, const __nv_bfloat16 *wb, float *dx, int dx_acc)
{
    const hcnn_graph_kind k = dx_acc ? HCNN_GRAPH_DATA_ACC : HCNN_GRAPH_DATA;
    char detail[200];
    const cudnnStatus_t s = graph_run(be, p, k, dyb, wb, NULL, dx, ex, detail, sizeof detail);
    return s == CUDNN_STATUS_SUCCESS
               ? 0
               : refused(be, p, HCNN_PASS_DATA, "cudnnBackendExecute (data gradient)", s, detail);
}

int hcnn_cudnn_conv_bwd_filter(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                               const hcnn_exec *ex, const float *x, const float *dy, float *dw)
{
    if (p->precision == HCNN_PRECISION_BF16) {
        __nv_bfloat16 *xb, *dyb;
        bf16_pair(be, p, x, in_floats(p), 0, dy, out_floats(p), &xb, &dyb);
        return filter_graph(be, p, ex, xb, dyb, dw);
    }
    const float one = 1.0f; /* dw += */
    const cudnnStatus_t s = cudnnConvolutionBackwardFilter(
        handle_of(be), &one, p->x, x, p->y, dy, p->conv[HCNN_PASS_FILTER], p->bwd_filter, ex->ws,
        workspace_bytes(p, ex), &one, p->w, dw);
    return call_result(be, p, HCNN_PASS_FILTER, "cudnnConvolutionBackwardFilter", s);
}

int hcnn_cudnn_conv_bwd_data(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                             const hcnn_exec *ex, const float *w, const float *dy, float *dx,
                             int dx_acc)
{
    if (p->precision == HCNN_PRECISION_BF16) {
        __nv_bfloat16 *wb, *dyb;
        bf16_pair(be, p, w, w_floats(p), 1, dy, out_floats(p), &wb, &dyb);
        return data_graph(be, p, ex, dyb, wb, dx, dx_acc);
    }
    const float one = 1.0f, beta = dx_acc ? 1.0f : 0.0f;
    const cudnnStatus_t s = cudnnConvolutionBackwardData(
        handle_of(be), &one, p->w, w, p->y, dy, p->conv[HCNN_PASS_DATA], p->bwd_data, ex->ws,
        workspace_bytes(p, ex), &beta, p->x, dx);
    return call_result(be, p, HCNN_PASS_DATA, "cudnnConvolutionBackwardData", s);
}

int hcnn_cudnn_conv_bwd(const hcnn_backend *be, const hcnn_cudnn_conv *p, const hcnn_exec *ex,
                        const float *x, const float *w, const float *dy, float *dw, float *dx,
                        int dx_acc)
{
    if (p->precision != HCNN_PRECISION_BF16) { /* the filter's first, then the data's */
        const int left = hcnn_cudnn_conv_bwd_filter(be, p, ex, x, dy, dw) ? HCNN_CUDNN_LEFT_FILTER
                                                                          : 0;
        return left | (hcnn_cudnn_conv_bwd_data(be, p, ex, w, dy, dx, dx_acc) ? HCNN_CUDNN_LEFT_DATA
                                                                              : 0);
    }
    /* dy, x and w in one buffer, dy rounded once: each conversion reads 4
     * and writes 2 bytes a value, and dy is the size of the layer's output
     * (ResNet-18 at batch 128: about 70 million values over its
     * convolutions, 0.4 GB a step no longer moved twice) */
    const size_t ny = out_floats(p), nx = in_floats(p);
    __nv_bfloat16 *dyb = hcnn_cuda_bf16_buffer(
        be, hcnn_cuda_bf16_padded(ny) + hcnn_cuda_bf16_padded(nx) + w_floats(p));
    __nv_bfloat16 *xb = dyb + hcnn_cuda_bf16_padded(ny), *wb = xb + hcnn_cuda_bf16_padded(nx);
    bf16_operand(be, p, dy, ny, 0, dyb);
    bf16_operand(be, p, x, nx, 0, xb);
    bf16_operand(be, p, w, w_floats(p), 1, wb);
    const int left = filter_graph(be, p, ex, xb, dyb, dw) ? HCNN_CUDNN_LEFT_FILTER : 0;
    return left | (data_graph(be, p, ex, dyb, wb, dx, dx_acc) ? HCNN_CUDNN_LEFT_DATA : 0);
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
    if (p->refusal[pass][0]) { /* refused when run: by im2col since */
        snprintf(buf, cap, "%s: by im2col + GEMM since", p->refusal[pass]);
        return;
    }
    if (p->precision == HCNN_PRECISION_BF16) {
        /* the data gradient's pass needs both its graphs: the missing one's why */
        const int acc_missing = hcnn_graph_plan_usable(&p->graph[HCNN_GRAPH_DATA]) &&
                                !hcnn_graph_plan_usable(&p->graph[HCNN_GRAPH_DATA_ACC]);
        const hcnn_graph_kind k = pass == HCNN_PASS_FORWARD ? HCNN_GRAPH_FORWARD
                                  : pass == HCNN_PASS_FILTER ? HCNN_GRAPH_FILTER
                                  : acc_missing              ? HCNN_GRAPH_DATA_ACC
                                                             : HCNN_GRAPH_DATA;
        char how[600];
        hcnn_graph_plan_describe(&p->graph[k], how, sizeof how);
        if (k == HCNN_GRAPH_DATA_ACC) {
            snprintf(buf, cap, "dx +=: %s", how);
            return;
        }
        size_t len = (size_t)snprintf(buf, cap, "%s", how);
        /* the forward's fused graphs made so far: in the engine, or why not */
        static const char *const with[] = {"the bias", "the ReLU", "the bias and the ReLU"};
        for (int f = 1; pass == HCNN_PASS_FORWARD && f <= 3; f++) {
            const hcnn_graph_plan *gp = &p->graph[HCNN_GRAPH_FORWARD + f];
            if (gp->made && len < cap)
                len += (size_t)snprintf(buf + len, cap - len, "; with %s: %s", with[f - 1],
                                        hcnn_graph_plan_usable(gp) ? "fused" : gp->why);
        }
        return;
    }
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
    if (forced_cudnn(cuda_of(be)))
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
const hcnn_cudnn_conv *hcnn_cudnn_conv_winograd_for(const hcnn_backend *be,
                                                    const hcnn_conv_desc *d, int n, size_t limit)
{
    (void)be, (void)d, (void)n, (void)limit;
    return NULL;
}
size_t hcnn_cudnn_conv_workspace(const hcnn_cudnn_conv *p)
{
    (void)p;
    return 0;
}
int hcnn_cudnn_conv_has(const hcnn_cudnn_conv *p, int pass)
{
    (void)p, (void)pass;
    return 0;
}
const char *hcnn_cudnn_conv_refusal(const hcnn_cudnn_conv *p, int pass)
{
    (void)p, (void)pass;
    return "";
}
int hcnn_cudnn_conv_aligned(const hcnn_cudnn_conv *p, int pass, const void *out)
{
    (void)p, (void)pass, (void)out;
    return 1;
}
int hcnn_cudnn_conv_fwd(const hcnn_backend *be, const hcnn_cudnn_conv *p, const hcnn_exec *ex,
                        const float *x, const float *w, const float *b, float *y)
{
    (void)be, (void)p, (void)ex, (void)x, (void)w, (void)b, (void)y;
    return HCNN_CUDNN_REFUSED; /* no plan is ever made: the caller's im2col, should it ask */
}
int hcnn_cudnn_conv_fwd_into(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                             const hcnn_exec *ex, const float *x, const float *w, int acc,
                             float *y)
{
    (void)be, (void)p, (void)ex, (void)x, (void)w, (void)acc, (void)y;
    return HCNN_CUDNN_REFUSED;
}
int hcnn_cudnn_conv_bwd_filter(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                               const hcnn_exec *ex, const float *x, const float *dy, float *dw)
{
    (void)be, (void)p, (void)ex, (void)x, (void)dy, (void)dw;
    return HCNN_CUDNN_REFUSED;
}
int hcnn_cudnn_conv_bwd_data(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                             const hcnn_exec *ex, const float *w, const float *dy, float *dx,
                             int dx_acc)
{
    (void)be, (void)p, (void)ex, (void)w, (void)dy, (void)dx, (void)dx_acc;
    return HCNN_CUDNN_REFUSED;
}
int hcnn_cudnn_conv_bwd(const hcnn_backend *be, const hcnn_cudnn_conv *p, const hcnn_exec *ex,
                        const float *x, const float *w, const float *dy, float *dw, float *dx,
                        int dx_acc)
{
    (void)be, (void)p, (void)ex, (void)x, (void)w, (void)dy, (void)dw, (void)dx, (void)dx_acc;
    return HCNN_CUDNN_LEFT_FILTER | HCNN_CUDNN_LEFT_DATA;
}
void hcnn_cudnn_conv_describe(const hcnn_cudnn_conv *p, int pass, char *buf, size_t cap)
{
    (void)p, (void)pass;
    snprintf(buf, cap, "no cuDNN");
}
#endif
