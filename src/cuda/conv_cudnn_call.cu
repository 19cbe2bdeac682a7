/* The CUDA backend's convolution passes run by cuDNN's plans (made by
 * conv_cudnn.cu: the legacy API's algorithms in FP32 and TF32, the graphs
 * of conv_graph.cu in bf16, whose operands are rounded here), and a call
 * cuDNN refuses when it runs: that pass of the shape then goes to
 * conv.cu's im2col + GEMM (refused, below).  Without cuDNN (a build
 * without it, the emulation) no plan exists and these are never reached. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "conv_cudnn.h"
#include "cuda.h"

#if HCNN_HAVE_CUDNN && !defined(HCNN_CUDA_EMULATION)

/* cuDNN's part of the caller's workspace, which conv_workspace sized for
 * this plan: all of it but the KRSC filter copies at its start (p->krsc_bytes:
 * FP32 and TF32 in NHWC), its bytes and where it starts */
static size_t workspace_bytes(const hcnn_cudnn_conv *p, const hcnn_exec *ex)
{
    const size_t have = ex->ws_floats * sizeof(float);
    if (have < p->workspace)
        hcnn_cuda_fail("cuDNN convolution", __FILE__, __LINE__,
                       "the workspace is smaller than the algorithms chosen need");
    return have - 2 * p->krsc_bytes;
}
static void *workspace_of(const hcnn_cudnn_conv *p, const hcnn_exec *ex)
{
    return (char *)ex->ws + 2 * p->krsc_bytes;
}

static cudnnHandle_t handle_of(const hcnn_backend *be) { return cuda_of(be)->dnn->handle; }

/* out[k][t][c] = w[k][c][t] (t: the kh*kw taps), as it is or rounded to
 * bfloat16: the filter KRSC, as an NHWC plan reads it (conv_graph.cu's
 * graphs; the legacy API's NHWC filter descriptor, conv_cudnn.cu) */
static __device__ void krsc_store(float *out, float v) { *out = v; }
static __device__ void krsc_store(__nv_bfloat16 *out, float v) { *out = __float2bfloat16(v); }
template <typename T>
static __global__ void to_krsc_kernel(const float *w, unsigned total, int c, int taps, T *out)
{
    const unsigned i = (unsigned)HCNN_CUDA_INDEX();
    if (i >= total)
        return;
    const unsigned ci = i % (unsigned)c, t = i / (unsigned)c % (unsigned)taps;
    const unsigned k = i / ((unsigned)c * (unsigned)taps);
    krsc_store(&out[i], w[((size_t)k * c + ci) * taps + t]);
}

/* dw[k][c][t] += g[k][t][c]: a filter gradient cuDNN computed KRSC, added
 * to the caller's KCRS one (as its beta = 1 would have added it there) */
static __global__ void add_krsc_kernel(const float *g, unsigned total, int c, int taps, float *dw)
{
    const unsigned i = (unsigned)HCNN_CUDA_INDEX();
    if (i >= total)
        return;
    const unsigned t = i % (unsigned)taps, ci = i / (unsigned)taps % (unsigned)c;
    const unsigned k = i / ((unsigned)c * (unsigned)taps);
    dw[i] += g[((size_t)k * taps + t) * c + ci];
}

/* bf16: ab = a's n floats rounded to bfloat16; a the filter when filter
 * (KRSC in an NHWC plan) */
static void bf16_operand(const hcnn_backend *be, const hcnn_cudnn_conv *p, const float *a,
                         size_t n, int filter, __nv_bfloat16 *ab)
{
    if (filter && p->layout == HCNN_LAYOUT_NHWC && n > 0) {
        const int taps = p->d.g.kh * p->d.g.kw;
        HCNN_LAUNCH(to_krsc_kernel<__nv_bfloat16>, hcnn_cuda_blocks(n), HCNN_CUDA_BLOCK,
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

/* FP32 and TF32: the filter as p's descriptor reads it: w itself (KCRS),
 * or in NHWC its KRSC copy, written to the workspace's first part */
static const float *filter_of(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                              const hcnn_exec *ex, const float *w)
{
    if (!p->krsc_bytes)
        return w;
    float *wk = ex->ws;
    const size_t n = w_floats(p);
    HCNN_LAUNCH(to_krsc_kernel<float>, hcnn_cuda_blocks(n), HCNN_CUDA_BLOCK, cuda_of(be)->stream,
                w, (unsigned)n, p->d.g.c, p->d.g.kh * p->d.g.kw, wk);
    HCNN_CUDA_LAUNCHED();
    return wk;
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
    const size_t ws_bytes = workspace_bytes(p, ex);
    const cudnnStatus_t s =
        hcnn_graph_plan_run(handle_of(be), gp, k, a, b, bias, out, workspace_of(p, ex), ws_bytes);
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
    const size_t ws_bytes = workspace_bytes(p, ex);
    const cudnnStatus_t s = cudnnConvolutionForward(
        handle_of(be), &one, p->x, x, p->w, filter_of(be, p, ex, w), p->conv[HCNN_PASS_FORWARD],
        p->fwd, workspace_of(p, ex), ws_bytes, &zero, p->y, y);
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
    const size_t ws_bytes = workspace_bytes(p, ex);
    const cudnnStatus_t s = cudnnConvolutionForward(
        handle_of(be), &one, p->x, x, p->w, filter_of(be, p, ex, w), p->conv[HCNN_PASS_FORWARD],
        p->fwd, workspace_of(p, ex), ws_bytes, &beta, p->y, y);
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
    /* dw += the gradient (KCRS: beta 1); in NHWC the gradient KRSC written
     * to the workspace's second copy (beta 0), then added to dw */
    const float one = 1.0f, zero = 0.0f;
    const size_t ws_bytes = workspace_bytes(p, ex);
    float *gk = p->krsc_bytes ? (float *)((char *)ex->ws + p->krsc_bytes) : dw;
    const cudnnStatus_t s = cudnnConvolutionBackwardFilter(
        handle_of(be), &one, p->x, x, p->y, dy, p->conv[HCNN_PASS_FILTER], p->bwd_filter,
        workspace_of(p, ex), ws_bytes, p->krsc_bytes ? &zero : &one, p->w, gk);
    if (s == CUDNN_STATUS_SUCCESS && p->krsc_bytes) {
        const size_t n = w_floats(p);
        HCNN_LAUNCH(add_krsc_kernel, hcnn_cuda_blocks(n), HCNN_CUDA_BLOCK, cuda_of(be)->stream, gk,
                    (unsigned)n, p->d.g.c, p->d.g.kh * p->d.g.kw, dw);
        HCNN_CUDA_LAUNCHED();
    }
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
    const size_t ws_bytes = workspace_bytes(p, ex);
    const cudnnStatus_t s = cudnnConvolutionBackwardData(
        handle_of(be), &one, p->w, filter_of(be, p, ex, w), p->y, dy, p->conv[HCNN_PASS_DATA],
        p->bwd_data, workspace_of(p, ex), ws_bytes, &beta, p->x, dx);
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

#else /* no cuDNN in this build: no plan is ever made */

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
#endif
