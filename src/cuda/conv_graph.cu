/* A convolution pass as a cuDNN operation graph (the backend API), for
 * precision bf16 (contract in conv_graph.h).  Each graph is:
 *   forward:      X, W (bf16) --conv--> T --identity--> Y (FP32)
 *   forward+bias: X, W (bf16) --conv--> T --add B (FP32)--> Y (FP32)
 *   forward+relu: X, W (bf16) --conv--> T --relu--> Y (FP32)
 *   both:         X, W (bf16) --conv--> T --add B--> T2 --relu--> Y (FP32)
 *   data:         DY, W (bf16) --conv_data--> T --identity--> DX (FP32)
 *   data, dx +=:  DY, W (bf16) --conv_data--> T --add DX (FP32)--> DX (in place)
 *   filter:       X, DY (bf16) --conv_filter--> DW (FP32), beta 1 (+=)
 * with T and T2 virtual and FP32, compute FP32.  The pointwise operation after the
 * convolution is what makes the output FP32: cuDNN's single-operation
 * engines follow the legacy API's configurations, whose bf16 convolutions
 * write bf16, while the runtime-fusion engines take a convolution into a
 * virtual FP32 tensor and an epilogue to any output type (NVIDIA's int8
 * sample widens its output the same way, with an identity).  The filter
 * gradient has no such form (runtime fusion puts pointwise operations
 * before a filter gradient, not after it): its graph is the single
 * operation, which may find no engine.
 *
 * A tensor's dimensions are always n, c, h, w; its strides give the layout:
 * NCHW or NHWC for the activations, and for the bf16 copy of the filter
 * KCRS or, in NHWC, KRSC (the layout NHWC engines read; conv_cudnn_call.cu
 * writes the copy so); the FP32 filter gradient stays KCRS, as backend.h
 * keeps the weights.  Alignment: the bf16 copies and the activations (Y, DX,
 * net.c rounds each to 64 bytes) are declared 16-byte aligned, checked at
 * each call (hcnn_graph_plan_aligned); the bias and DW, packed among the
 * parameters, 4.
 *
 * Engines: cuDNN's heuristic ranking (mode A, else the fallback ranking: no
 * timing, so the same engine on every run of the same GPU and library), the
 * first whose numerical notes allow hcnn's determinism and precision (not
 * NONDETERMINISTIC, no FFT or Winograd transform, no reduction below FP32,
 * no inputs converted down) and whose plan finalises within the workspace.
 * At most GRAPH_TRIES engines of a ranking are tried, and of those at most
 * one runtime-compiled engine: it compiles its kernel when its plan is
 * finalised (NVRTC: of the order of a second, not measured here), once per
 * shape and instance, whether the plan is then kept or refused (over the
 * workspace), so that a ranking of compiled engines the workspace refuses
 * costs one compilation, not eight (two a graph at most: mode A's ranking,
 * then the fallback's).  A count, not a time limit: the same engines on
 * every run and rank.
 *
 * Unmeasured: written 2026-11-29 without a GPU.  Everything that can fail
 * before a plan exists (an engine refusing the layout, the data types or
 * the workspace) leaves the pass without one, said in the describe line,
 * and the pass takes the im2col path; an execution cuDNN refuses is
 * returned to conv_cudnn_call.cu, which drops the graph and takes the next way
 * (its `refused`). */
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config.h"

#if HCNN_HAVE_CUDNN && !defined(HCNN_CUDA_EMULATION)
#include "conv_graph.h"

#if CUDNN_MAJOR >= 9 /* cudnnGetLastErrorString, the 9.x status names */

/* the engines of the ranking tried per graph */
#define GRAPH_TRIES 8
/* the tensors' unique ids (a graph's variant pack names them by these) */
enum { ID_X = 1, ID_W, ID_Y, ID_B, ID_T, ID_T2 };

/* a failed step of the making: recorded in gp->why, 0 returned */
#define TRY(call, step)                                                                             \
    do {                                                                                            \
        const cudnnStatus_t s_ = (call);                                                            \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                             \
            return failed(gp, step, s_);                                                            \
    } while (0)

static int failed(hcnn_graph_plan *gp, const char *step, cudnnStatus_t s)
{
    char detail[120] = "";
    cudnnGetLastErrorString(detail, sizeof detail);
    snprintf(gp->why, sizeof gp->why, "%s: %s%s%.100s", step, cudnnGetErrorString(s),
             detail[0] ? ": " : "", detail);
    return 0;
}

/* a descriptor of the plan's making (gp->owned: destroyed with the plan,
 * or at once when no plan is made) */
static cudnnStatus_t create(hcnn_graph_plan *gp, cudnnBackendDescriptorType_t type,
                            cudnnBackendDescriptor_t *out)
{
    *out = NULL;
    if (gp->nowned == (int)(sizeof gp->owned / sizeof gp->owned[0]))
        return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    const cudnnStatus_t s = cudnnBackendCreateDescriptor(type, out);
    if (s == CUDNN_STATUS_SUCCESS)
        gp->owned[gp->nowned++] = *out;
    return s;
}

static void destroy_all(hcnn_graph_plan *gp)
{
    for (int i = gp->nowned - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(gp->owned[i]);
    gp->nowned = 0;
}

static cudnnStatus_t set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                         cudnnBackendAttributeType_t type, int64_t count, const void *v)
{
    return cudnnBackendSetAttribute(d, name, type, count, v);
}

/* a 4-d tensor: dims n, c, h, w; strides by layout (nhwc: c innermost) */
/* the tensor's byte alignment: 16, or 4 for FP32 parameters and their
 * gradients (packed without padding) */
enum { ALIGNED = HCNN_GRAPH_ALIGN, PACKED = 4, VIRTUAL = 0 };

/* a 4-d tensor: dims n, c, h, w; strides by layout (nhwc: c innermost);
 * align VIRTUAL: a virtual tensor (no memory) */
static int tensor(hcnn_graph_plan *gp, int64_t id, cudnnDataType_t type,
                  const int64_t dims[4], int nhwc, int align_bytes,
                  cudnnBackendDescriptor_t *out)
{
    const int64_t c = dims[1], h = dims[2], w = dims[3];
    const int64_t nchw[4] = {c * h * w, h * w, w, 1}, cl[4] = {h * w * c, 1, w * c, c};
    const int64_t align = align_bytes == VIRTUAL ? ALIGNED : align_bytes;
    const bool virt = align_bytes == VIRTUAL;
    TRY(create(gp, CUDNN_BACKEND_TENSOR_DESCRIPTOR, out), "tensor descriptor");
    TRY(set(*out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type), "tensor type");
    TRY(set(*out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims), "tensor dimensions");
    TRY(set(*out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, nhwc ? cl : nchw),
        "tensor strides");
    TRY(set(*out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id), "tensor id");
    TRY(set(*out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align),
        "tensor alignment");
    TRY(set(*out, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt), "tensor virtual");
    TRY(cudnnBackendFinalize(*out), "tensor finalize");
    return 1;
}

static int conv_descriptor(hcnn_graph_plan *gp, const hcnn_conv_geom *g,
                           cudnnBackendDescriptor_t *out)
{
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t dims = 2, dil[2] = {1, 1}, str[2] = {g->sh, g->sw}, pad[2] = {g->ph, g->pw};
    TRY(create(gp, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, out), "convolution descriptor");
    TRY(set(*out, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp),
        "convolution compute type");
    TRY(set(*out, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode),
        "convolution mode");
    TRY(set(*out, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims),
        "convolution dimensions");
    TRY(set(*out, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil), "dilations");
    TRY(set(*out, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str), "strides");
    TRY(set(*out, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad), "paddings");
    TRY(set(*out, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad), "paddings");
    TRY(cudnnBackendFinalize(*out), "convolution finalize");
    return 1;
}

/* the convolution operation of kind: its three tensors (x, w, y in the
 * forward's roles), alpha 1 and beta (1 for the filter gradient: dw +=;
 * the others write a virtual tensor) */
static int conv_operation(hcnn_graph_plan *gp, hcnn_graph_kind kind,
                          cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t x,
                          cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y,
                          cudnnBackendDescriptor_t *out)
{
    const float alpha = 1.0f;
    const float beta = kind == HCNN_GRAPH_FILTER ? 1.0f : 0.0f;
    const int fwd = kind <= HCNN_GRAPH_FORWARD_BIAS_RELU;
    const int data = kind == HCNN_GRAPH_DATA || kind == HCNN_GRAPH_DATA_ACC;
    const cudnnBackendDescriptorType_t type =
        fwd ? CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR
        : data ? CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
               : CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
    /* the attribute names: alpha, beta, conv, x, w, y of each operation */
    static const cudnnBackendAttributeName_t names[3][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY}};
    const cudnnBackendAttributeName_t *a = names[fwd ? 0 : data ? 1 : 2];
    TRY(create(gp, type, out), "convolution operation");
    TRY(set(*out, a[0], CUDNN_TYPE_FLOAT, 1, &alpha), "convolution alpha");
    TRY(set(*out, a[1], CUDNN_TYPE_FLOAT, 1, &beta), "convolution beta");
    TRY(set(*out, a[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv),
        "convolution operation's descriptor");
    TRY(set(*out, a[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x), "convolution operation's x");
    TRY(set(*out, a[4], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w), "convolution operation's w");
    TRY(set(*out, a[5], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y), "convolution operation's y");
    TRY(cudnnBackendFinalize(*out), "convolution operation finalize");
    return 1;
}

/* y = mode(t) (an identity: the conversion to y's type; a ReLU) or y = t
 * + b (mode ADD, b broadcast where its dimensions are 1); FP32 */
static int pointwise(hcnn_graph_plan *gp, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t t,
                     cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y,
                     cudnnBackendDescriptor_t *out)
{
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t pw;
    TRY(create(gp, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw), "pointwise descriptor");
    TRY(set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode), "pointwise mode");
    TRY(set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec),
        "pointwise precision");
    if (mode == CUDNN_POINTWISE_RELU_FWD) {
        /* hcnn's ReLU (src/core/hd.h): max(x, 0), no slope; set as
         * cudnn-frontend sets them (its upper clip a float's largest in FP32
         * math), not left to the library's defaults */
        const double lower = 0.0, upper = FLT_MAX, slope = 0.0;
        TRY(set(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &lower),
            "ReLU lower clip");
        TRY(set(pw, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, 1, &upper),
            "ReLU upper clip");
        TRY(set(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, CUDNN_TYPE_DOUBLE, 1, &slope),
            "ReLU slope");
    }
    TRY(cudnnBackendFinalize(pw), "pointwise finalize");
    TRY(create(gp, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, out), "pointwise operation");
    TRY(set(*out, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &pw),
        "pointwise operation's descriptor");
    TRY(set(*out, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t),
        "pointwise operation's x");
    if (b)
        TRY(set(*out, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b),
            "pointwise operation's b");
    TRY(set(*out, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y),
        "pointwise operation's y");
    TRY(cudnnBackendFinalize(*out), "pointwise operation finalize");
    return 1;
}

/* why engines of a ranking were passed over, counted for the describe
 * line (a GPU session reads which rule refused them without a rerun) */
enum { NOTE_OK, NOTE_NONDETERMINISTIC, NOTE_TRANSFORM, NOTE_PRECISION, NOTE_OTHER, NOTE_KINDS };

/* whether an engine's numerical notes keep hcnn's results: deterministic,
 * a direct sum (as conv_cudnn.cu's direct_sum), FP32 reductions; else the
 * first note that refuses it (NOTE_*) */
static int notes_allowed(cudnnBackendDescriptor_t engine)
{
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t count = 0;
    if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                 CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count,
                                 notes) != CUDNN_STATUS_SUCCESS)
        return NOTE_OTHER;
    for (int64_t i = 0; i < count; i++)
        switch (notes[i]) {
        case CUDNN_NUMERICAL_NOTE_TENSOR_CORE: /* what bf16 is for */
        case CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP: break;
        case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: return NOTE_NONDETERMINISTIC;
        case CUDNN_NUMERICAL_NOTE_FFT:
        case CUDNN_NUMERICAL_NOTE_WINOGRAD:
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: return NOTE_TRANSFORM;
        case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
        case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: return NOTE_PRECISION;
        default: return NOTE_OTHER;
        }
    return NOTE_OK;
}

static int compiles(cudnnBackendDescriptor_t engine)
{
    cudnnBackendBehaviorNote_t notes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    int64_t count = 0;
    if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &count,
                                 notes) != CUDNN_STATUS_SUCCESS)
        return 0;
    for (int64_t i = 0; i < count; i++)
        if (notes[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION)
            return 1;
    return 0;
}

/* the first engine configuration of a ranking whose plan is usable:
 * gp->plan, or 0 (gp->why) */
static int pick_engine(hcnn_graph_plan *gp, cudnnHandle_t h, cudnnBackendDescriptor_t graph,
                       cudnnBackendHeurMode_t mode, size_t limit)
{
    cudnnBackendDescriptor_t heur;
    TRY(create(gp, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur), "heuristics descriptor");
    TRY(set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph),
        "heuristics graph");
    TRY(set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode), "heuristics mode");
    TRY(cudnnBackendFinalize(heur), "heuristics finalize");
    int64_t count = 0;
    TRY(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 0, &count, NULL),
        "heuristics count");
    if (count > GRAPH_TRIES)
        count = GRAPH_TRIES;
    if (count < 1) {
        snprintf(gp->why, sizeof gp->why, "heuristics %s: no engine",
                 mode == CUDNN_HEUR_MODE_A ? "A" : "fallback");
        return 0;
    }
    cudnnBackendDescriptor_t cfgs[GRAPH_TRIES];
    for (int64_t i = 0; i < count; i++)
        TRY(create(gp, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]), "engine configuration");
    int64_t got = 0;
    TRY(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 count, &got, cfgs),
        "heuristics results");
    if (got < 1) {
        /* cuDNN 9.19 on an H200 (2026-11-30): every bf16 graph of LeNet-5
         * and a tiny ResNet in NCHW, and in NHWC some of LeNet-5's (the
         * one-channel conv1's fused forwards and data gradient, both
         * filter gradients): mode A ranked 8, the fallback 3-6, and none
         * of them was returned */
        snprintf(gp->why, sizeof gp->why,
                 "heuristics %s: no engine configuration returned (%d ranked)",
                 mode == CUDNN_HEUR_MODE_A ? "A" : "fallback", (int)count);
        return 0;
    }
    int refused[NOTE_KINDS] = {0}, too_big = 0, compiled = 0, second_compiled = 0, no_plan = 0;
    char first_refusal[128] = ""; /* the first plan's refusal, cuDNN's words */
    for (int64_t i = 0; i < got && i < count; i++) {
        cudnnBackendDescriptor_t engine;
        int64_t one = 0;
        TRY(create(gp, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine), "engine descriptor");
        TRY(cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &one, &engine),
            "engine of a configuration");
        const int note = notes_allowed(engine);
        if (note != NOTE_OK) {
            refused[note]++;
            continue;
        }
        const int compiles_here = compiles(engine);
        if (compiles_here && compiled++) {
            second_compiled++;
            continue;
        }
        cudnnBackendDescriptor_t plan = NULL;
        int64_t ws = 0;
        cudnnStatus_t st =
            cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
        if (st == CUDNN_STATUS_SUCCESS)
            st = set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
        if (st == CUDNN_STATUS_SUCCESS)
            st = set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                     1, &cfgs[i]);
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnnBackendFinalize(plan);
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                          CUDNN_TYPE_INT64, 1, &one, &ws);
        if (st != CUDNN_STATUS_SUCCESS || ws < 0 || (size_t)ws > limit) {
            if (st == CUDNN_STATUS_SUCCESS && ws > 0 && (size_t)ws > limit) {
                too_big++;
            } else {
                if (!no_plan++ && st != CUDNN_STATUS_SUCCESS) {
                    char detail[80] = "";
                    cudnnGetLastErrorString(detail, sizeof detail);
                    snprintf(first_refusal, sizeof first_refusal, " (first: %s%s%.60s)",
                             cudnnGetErrorString(st), detail[0] ? ": " : "", detail);
                }
            }
            if (plan)
                cudnnBackendDestroyDescriptor(plan);
            continue;
        }
        gp->plan = plan;
        gp->workspace = (size_t)ws;
        gp->compiled = compiles_here;
        if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                     &one, &gp->engine) != CUDNN_STATUS_SUCCESS)
            gp->engine = -1;
        return 1;
    }
    snprintf(gp->why, sizeof gp->why,
             "heuristics %s, %d engines: %d nondeterministic, %d FFT/Winograd, %d reduced "
             "precision, %d other notes, %d 2nd compiled, %d over workspace, %d no plan%s",
             mode == CUDNN_HEUR_MODE_A ? "A" : "fallback", (int)(got < count ? got : count),
             refused[NOTE_NONDETERMINISTIC], refused[NOTE_TRANSFORM], refused[NOTE_PRECISION],
             refused[NOTE_OTHER], second_compiled, too_big, no_plan, first_refusal);
    return 0;
}

static int make(cudnnHandle_t h, const hcnn_conv_desc *d, int n, int nhwc, hcnn_graph_kind kind,
                size_t limit, hcnn_graph_plan *gp)
{
    const hcnn_conv_geom *g = &d->g;
    const int64_t xd[4] = {n, g->c, g->h, g->w}, yd[4] = {n, d->out_c, g->oh, g->ow};
    const int64_t wd[4] = {d->out_c, g->c, g->kh, g->kw}, bd[4] = {1, d->out_c, 1, 1};
    const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    const cudnnPointwiseMode_t add = CUDNN_POINTWISE_ADD, same = CUDNN_POINTWISE_IDENTITY;
    const int bias = kind == HCNN_GRAPH_FORWARD_BIAS || kind == HCNN_GRAPH_FORWARD_BIAS_RELU;
    const int relu = kind == HCNN_GRAPH_FORWARD_RELU || kind == HCNN_GRAPH_FORWARD_BIAS_RELU;
    cudnnBackendDescriptor_t conv, op[3], x, w, y, t, t2, out, b = NULL;
    if (!conv_descriptor(gp, g, &conv))
        return 0;
    int nops = 2;
    switch (kind) {
    case HCNN_GRAPH_FORWARD:
    case HCNN_GRAPH_FORWARD_BIAS:
    case HCNN_GRAPH_FORWARD_RELU:
    case HCNN_GRAPH_FORWARD_BIAS_RELU: /* conv(x, w) -> t [-> + b] [-> relu] -> y */
        if (!tensor(gp, ID_X, bf, xd, nhwc, ALIGNED, &x) ||
            !tensor(gp, ID_W, bf, wd, nhwc, ALIGNED, &w) ||
            !tensor(gp, ID_T, f32, yd, nhwc, VIRTUAL, &t) ||
            !tensor(gp, ID_Y, f32, yd, nhwc, ALIGNED, &out) ||
            (bias && !tensor(gp, ID_B, f32, bd, nhwc, PACKED, &b)) ||
            !conv_operation(gp, kind, conv, x, w, t, &op[0]))
            return 0;
        if (bias && relu) { /* t -> + b -> t2 -> relu -> y */
            if (!tensor(gp, ID_T2, f32, yd, nhwc, VIRTUAL, &t2) ||
                !pointwise(gp, add, t, b, t2, &op[1]) ||
                !pointwise(gp, CUDNN_POINTWISE_RELU_FWD, t2, NULL, out, &op[2]))
                return 0;
            nops = 3;
        } else if (!pointwise(gp, bias ? add : relu ? CUDNN_POINTWISE_RELU_FWD : same, t, b, out,
                              &op[1])) {
            return 0;
        }
        break;
    case HCNN_GRAPH_DATA:
    case HCNN_GRAPH_DATA_ACC: /* conv_data(dy, w) -> t -> dx (dx += : t + the dx before) */
        if (!tensor(gp, ID_Y, bf, yd, nhwc, ALIGNED, &y) ||
            !tensor(gp, ID_W, bf, wd, nhwc, ALIGNED, &w) ||
            !tensor(gp, ID_T, f32, xd, nhwc, VIRTUAL, &t) ||
            !tensor(gp, ID_X, f32, xd, nhwc, ALIGNED, &out) ||
            (kind == HCNN_GRAPH_DATA_ACC && !tensor(gp, ID_B, f32, xd, nhwc, ALIGNED, &b)) ||
            !conv_operation(gp, kind, conv, t, w, y, &op[0]) ||
            !pointwise(gp, b ? add : same, t, b, out, &op[1]))
            return 0;
        break;
    default: /* the filter gradient: dw += conv_filter(x, dy), dw FP32 KCRS */
        if (!tensor(gp, ID_X, bf, xd, nhwc, ALIGNED, &x) ||
            !tensor(gp, ID_Y, bf, yd, nhwc, ALIGNED, &y) ||
            !tensor(gp, ID_W, f32, wd, 0, PACKED, &w) ||
            !conv_operation(gp, kind, conv, x, w, y, &op[0]))
            return 0;
        nops = 1;
    }
    cudnnBackendDescriptor_t graph;
    TRY(create(gp, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph), "operation graph");
    TRY(set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h), "graph handle");
    TRY(set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, op),
        "graph operations");
    TRY(cudnnBackendFinalize(graph), "graph finalize");
    /* the fallback ranking where mode A's has nothing usable (its engines
     * cover more configurations, more slowly) */
    if (pick_engine(gp, h, graph, CUDNN_HEUR_MODE_A, limit))
        return 1;
    char first[sizeof gp->why];
    memcpy(first, gp->why, sizeof first);
    if (pick_engine(gp, h, graph, CUDNN_HEUR_MODE_FALLBACK, limit))
        return 1;
    char second[sizeof gp->why];
    memcpy(second, gp->why, sizeof second);
    snprintf(gp->why, sizeof gp->why, "%.230s; %.230s", first, second); /* both, cut to fit */
    return 0;
}

int hcnn_graph_plan_make(cudnnHandle_t h, const hcnn_conv_desc *d, int n, int nhwc,
                         hcnn_graph_kind kind, size_t limit, hcnn_graph_plan *gp)
{
    memset(gp, 0, sizeof *gp);
    gp->made = 1;
    if (make(h, d, n, nhwc, kind, limit, gp))
        return 1;
    destroy_all(gp);
    return 0;
}

void hcnn_graph_plan_free(hcnn_graph_plan *gp)
{
    if (gp->plan)
        cudnnBackendDestroyDescriptor(gp->plan);
    gp->plan = NULL;
    destroy_all(gp);
}


cudnnStatus_t hcnn_graph_plan_run(cudnnHandle_t h, const hcnn_graph_plan *gp, hcnn_graph_kind kind,
                         const void *a, const void *b, const void *bias, void *out, void *ws,
                         size_t ws_bytes)
{
    if (ws_bytes < gp->workspace)
        hcnn_cuda_fail("cuDNN graph", __FILE__, __LINE__,
                       "the workspace is smaller than the engine chosen needs");
    /* the roles: forward x, w -> y (+ b); data dy (as Y), w -> dx (as X; dx +=:
     * the dx before as B); filter x, dy (as Y) -> dw (as W) */
    const int fwd = kind <= HCNN_GRAPH_FORWARD_BIAS_RELU;
    const int data = kind == HCNN_GRAPH_DATA || kind == HCNN_GRAPH_DATA_ACC;
    const int has_b = kind == HCNN_GRAPH_FORWARD_BIAS || kind == HCNN_GRAPH_FORWARD_BIAS_RELU ||
                      kind == HCNN_GRAPH_DATA_ACC; /* a fourth tensor, B */
    int64_t ids[4] = {ID_X, ID_W, ID_Y, ID_B};
    void *ptrs[4];
    if (fwd)
        ptrs[0] = (void *)a, ptrs[1] = (void *)b, ptrs[2] = out, ptrs[3] = (void *)bias;
    else if (data)
        ptrs[0] = out, ptrs[1] = (void *)b, ptrs[2] = (void *)a, ptrs[3] = out;
    else
        ptrs[0] = (void *)a, ptrs[1] = out, ptrs[2] = (void *)b, ptrs[3] = NULL;
    const int64_t count = has_b ? 4 : 3;
    if (!hcnn_graph_plan_aligned(kind, a, b, out))
        hcnn_cuda_fail("cuDNN graph", __FILE__, __LINE__,
                       "a tensor is not 16-byte aligned, as its descriptor says");
    /* what cuDNN refuses here goes back to the caller (conv_cudnn_call.cu:
     * the pass by im2col from then on); the pack is destroyed either way */
    cudnnBackendDescriptor_t pack;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    if ((s = set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, ids)) ==
            CUDNN_STATUS_SUCCESS &&
        (s = set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count, ptrs)) ==
            CUDNN_STATUS_SUCCESS &&
        (s = set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws)) ==
            CUDNN_STATUS_SUCCESS &&
        (s = cudnnBackendFinalize(pack)) == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendExecute(h, gp->plan, pack);
    cudnnBackendDestroyDescriptor(pack);
    return s;
}

int hcnn_graph_plan_aligned(hcnn_graph_kind kind, const void *a, const void *b, const void *out)
{
    const int filter = kind == HCNN_GRAPH_FILTER; /* its output, dw: PACKED */
    return (uintptr_t)a % ALIGNED == 0 && (uintptr_t)b % ALIGNED == 0 &&
           (filter || (uintptr_t)out % ALIGNED == 0);
}

#else /* cuDNN 8: no bf16 graphs (the im2col way) */

int hcnn_graph_plan_make(cudnnHandle_t h, const hcnn_conv_desc *d, int n, int nhwc,
                         hcnn_graph_kind kind, size_t limit, hcnn_graph_plan *gp)
{
    (void)h, (void)d, (void)n, (void)nhwc, (void)kind, (void)limit;
    memset(gp, 0, sizeof *gp);
    gp->made = 1;
    snprintf(gp->why, sizeof gp->why,
             "bf16 through cuDNN's graphs needs cuDNN 9 (this build: %d.%d)", CUDNN_MAJOR,
             CUDNN_MINOR);
    return 0;
}
void hcnn_graph_plan_free(hcnn_graph_plan *gp) { (void)gp; }
cudnnStatus_t hcnn_graph_plan_run(cudnnHandle_t h, const hcnn_graph_plan *gp,
                                  hcnn_graph_kind kind, const void *a, const void *b,
                                  const void *bias, void *out, void *ws, size_t ws_bytes)
{
    (void)h, (void)gp, (void)kind, (void)a, (void)b, (void)bias, (void)out, (void)ws;
    (void)ws_bytes;
    return CUDNN_STATUS_NOT_SUPPORTED; /* never made: no plan to run */
}
int hcnn_graph_plan_aligned(hcnn_graph_kind kind, const void *a, const void *b, const void *out)
{
    (void)kind, (void)a, (void)b, (void)out;
    return 1;
}
#endif

void hcnn_graph_plan_describe(const hcnn_graph_plan *gp, char *buf, size_t cap)
{
    if (!hcnn_graph_plan_usable(gp))
        snprintf(buf, cap, "no cuDNN graph plan (%s)", gp->why);
    else
        snprintf(buf, cap,
                 "cuDNN %d.%d.%d graph engine %lld (bf16 inputs, FP32 accumulation and output, "
                 "deterministic%s, workspace %.1f MiB)",
                 CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL, (long long)gp->engine,
                 gp->compiled ? ", compiled at set-up" : "", (double)gp->workspace / 1048576.0);
}

#endif
