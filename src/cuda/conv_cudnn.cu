/* 2-D convolution of the CUDA backend through cuDNN, where this build links
 * it (configure found cuDNN; never in the emulation, which runs conv.cu's
 * im2col + cuBLAS path): the forward, the data gradient and the filter
 * gradient (and the forward of the transposed data gradient, conv.cu) as
 * cuDNN's convolution calls on the FP32 tensors as they are
 * (the activations NCHW or, in an NHWC instance, CUDNN_TENSOR_NHWC), with
 * the bias and its gradient by bias.cu as on the im2col path.  The filter
 * is KCRS in NCHW; in NHWC it is a KRSC copy (CUDNN_TENSOR_NHWC: every
 * tensor of the call in one format, the one cuDNN's TF32 tensor-core
 * kernels read, ..._nhwckrsc_nhwc_..., and PyTorch's channels_last gives
 * them; tensors in another cuDNN transposes itself, 16% of the kernel time
 * of hcnn's TF32 step by cuDNN in NCHW on the H200 of 2026-11-27,
 * docs/gpu-nodes.md; 2026-12-01, in place of a KCRS filter beside NHWC
 * activations), which
 * conv_cudnn_call.cu writes in the workspace's first part at each call
 * (and the filter gradient, computed KRSC, adds back to the KCRS one).
 * The NHWC descriptors are unmeasured (written 2026-11-29 and 2026-12-01
 * without a GPU): a pass for which cuDNN's heuristics offer no usable
 * algorithm takes conv.cu's NHWC im2col path as for any shape without one
 * (the plan's other passes keep cuDNN; the # plan line says why), and
 * conv_choice.cu's rule is NCHW's.
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
 * instead (conv_graph.cu): the inputs rounded to bfloat16 by conv_cudnn_call.cu (x, w, dy:
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
 * cuDNN, HCNN_CUDA_CONV naming no cudnn pass, no usable algorithm);
 * conv_cudnn_call.cu runs the plans (the private layout they share:
 * conv_cudnn.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "conv_cudnn.h"
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

/* p's descriptors and algorithms within limit bytes of workspace; 0: no
 * pass has a deterministic algorithm within it, or a descriptor cuDNN
 * refused (p freed).  A plan keeps the passes that have one, the others
 * running by im2col (conv_choice.cu offers cuDNN per pass; before
 * 2026-12-02 a direct-sum plan lacking one pass was dropped whole, which
 * would have sent an NHWC shape whose filter gradient cuDNN has no
 * deterministic algorithm for to im2col in all three, unsaid), with the
 * reason for the # plan line (lack); below cuDNN's most workspace a
 * direct-sum plan lacking a pass is dropped (short_of, as one lacking all:
 * a call with more makes it again, the missing pass perhaps the
 * workspace's doing) */
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
    /* x, y and the filter in the instance's layout (the sizes are n, c, h,
     * w in both; the filter KCRS, or in NHWC its KRSC copy: krsc_bytes) */
    const cudnnTensorFormat_t act =
        p->layout == HCNN_LAYOUT_NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    MAKE(cudnnSetTensor4dDescriptor(p->x, act, CUDNN_DATA_FLOAT, n, g->c, g->h, g->w));
    MAKE(cudnnSetTensor4dDescriptor(p->y, act, CUDNN_DATA_FLOAT, n, p->d.out_c, g->oh, g->ow));
    MAKE(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, act, p->d.out_c, g->c, g->kh, g->kw));
    if (p->layout == HCNN_LAYOUT_NHWC) {
        const size_t w_bytes = sizeof(float) * p->d.out_c * g->c * g->kh * g->kw;
        p->krsc_bytes = (w_bytes + 255) / 256 * 256;
    }
    /* the two copies come out of the caller's workspace first */
    const int most = limit >= CUDNN_WORKSPACE_BYTES;
    if (limit < 2 * p->krsc_bytes) {
        plan_free(p);
        return 0;
    }
    limit -= 2 * p->krsc_bytes;
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
    /* a pass's ranking refused as a whole (not supported: a format or shape
     * it has no algorithm for, say) is the same as one without a usable
     * entry: that pass's im2col path, not the end of the job */
    if (cudnnGetConvolutionForwardAlgorithm_v7(dnn->handle, p->x, p->w, cf, p->y,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &nf,
                                               fp) != CUDNN_STATUS_SUCCESS)
        nf = 0;
    if (cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn->handle, p->w, p->y, cd, p->x,
                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &nd,
                                                    dp) != CUDNN_STATUS_SUCCESS)
        nd = 0;
    if (cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn->handle, p->x, p->y, cw, p->w,
                                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                      &nw, wp) != CUDNN_STATUS_SUCCESS)
        nw = 0;
    const int wino = p->winograd;
    const int f = first_usable(fp, nf, fp32, limit, wino),
              dd = first_usable(dp, nd, fp32, limit, wino),
              ww = first_usable(wp, nw, fp32, limit, wino);
    /* each pass's descriptor under its algorithm's math type (TF32: the
     * entry's, DEFAULT or TENSOR_OP; FP32 stays FMA), then the sizes the
     * calls themselves ask for under it; a size cuDNN will not give (not
     * supported, say) is a pass without an algorithm, as a ranking without
     * a usable entry is (below: that pass on the im2col path, the plan
     * dropped where no pass or, below cuDNN's most workspace, not every
     * pass has one), not the end of the job */
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
    const int ranked[HCNN_PASSES] = {f >= 0, dd >= 0, ww >= 0};
    p->workspace = 0;
    p->limit = limit;
    for (int pass = 0; pass < HCNN_PASSES; pass++) {
        p->has[pass] = found[pass] && need[pass] <= limit;
        p->need[pass] = need[pass];
        p->lack[pass] = p->has[pass]  ? CUDNN_RUNS_IT
                        : !ranked[pass] ? CUDNN_NO_ALGORITHM
                        : !found[pass]  ? CUDNN_NO_SIZE
                                        : CUDNN_OVER_WORKSPACE;
        if (p->has[pass] && need[pass] > p->workspace)
            p->workspace = need[pass];
    }
    const int passes = p->has[0] + p->has[1] + p->has[2];
    if (!passes || (passes < HCNN_PASSES && !wino && !most)) {
        plan_free(p);
        return 0;
    }
    p->workspace += 2 * p->krsc_bytes;
    return 1;
}

/* bf16: p's graphs within limit bytes of workspace (the forward with the
 * bias or the ReLU in its engine is made at its first call, conv_cudnn_call.cu's graph_fused).  Kept when no pass has one,
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
 * none: no cuDNN, bf16 in auto, no deterministic algorithm (direct sums,
 * or Winograd's) for any pass, or not for every pass within a workspace
 * below cuDNN's most (a call over fewer images than the workspace was
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
    /* a live plan that fits wins over an entry saying none fits a limit
     * this small (short_of), whichever was made first: the same plan
     * whatever the order of the calls */
    int short_of = 0;
    for (int i = 0; i < dnn->nplans; i++) {
        const hcnn_cudnn_conv *p = &dnn->plans[i];
        if (p->n != n || p->precision != cu->precision || p->winograd != wino ||
            p->d.out_c != key.out_c || memcmp(&p->d.g, &key.g, sizeof key.g) != 0)
            continue;
        if (p->none)
            return NULL;
        if (p->short_of && limit <= p->short_of)
            short_of = 1;
        else if (!p->short_of && p->workspace <= limit)
            return p;
    }
    if (short_of)
        return NULL;
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
    const char *nhwc = p->layout == HCNN_LAYOUT_NHWC ? " NHWC (KRSC filter copy)" : "";
    const int len = snprintf(buf, cap, "cuDNN %d.%d.%d%s", CUDNN_MAJOR, CUDNN_MINOR,
                             CUDNN_PATCHLEVEL, nhwc);
    if (len < 0 || (size_t)len >= cap)
        return;
    buf += len, cap -= (size_t)len; /* the rest after the version */
    if (!p->has[pass]) { /* the plan runs the other passes */
        const char *family = p->winograd ? "Winograd" : "direct-sum";
        const double mib = 1.0 / 1048576.0;
        if (p->lack[pass] == CUDNN_OVER_WORKSPACE)
            snprintf(buf, cap,
                     ": its %s algorithm for this pass asks %.1f MiB of workspace, beyond the "
                     "%.1f MiB the plan has",
                     family, (double)p->need[pass] * mib, (double)p->limit * mib);
        else if (p->lack[pass] == CUDNN_NO_SIZE)
            snprintf(buf, cap,
                     " refused its %s algorithm's math type or workspace size for this pass",
                     family);
        else
            snprintf(buf, cap,
                     ": its heuristics rank no deterministic %s algorithm of %s for this pass "
                     "within %.1f MiB",
                     family, math, (double)p->limit * mib);
        return;
    }
    const char *algo = pass == HCNN_PASS_FORWARD ? fwd_name(p->fwd)
                       : pass == HCNN_PASS_DATA  ? bwd_data_name(p->bwd_data)
                                                 : bwd_filter_name(p->bwd_filter);
    snprintf(buf, cap, " %s (deterministic, %s, workspace %.1f MiB)", algo, math,
             (double)p->workspace / 1048576.0);
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
void hcnn_cudnn_conv_describe(const hcnn_cudnn_conv *p, int pass, char *buf, size_t cap)
{
    (void)p, (void)pass;
    snprintf(buf, cap, "no cuDNN");
}
#endif
