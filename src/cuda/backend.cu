/* The CUDA backend's table (include/hcnn/backend.h): the instance (its
 * device, stream and cuBLAS handle), device memory, the ordering of work on
 * the stream, the timer pair, and the operations of the files beside this
 * one (what they ask of the instance, its failures, scratch and buffers:
 * instance.cu). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cuda.h"
#include "hcnn/env.h"
#if HCNN_HAVE_CUDNN && !defined(HCNN_CUDA_EMULATION)
#include <cudnn.h>
#endif

/* the reductions' partial sums: 8 MB, allocated with the instance (never
 * inside a step); larger reductions run in pieces of this size */
#define SCRATCH_DOUBLES ((size_t)1 << 20)
#define BLAS_WORKSPACE_BYTES ((size_t)32 << 20)

/* ---- memory ------------------------------------------------------------------- */

static void cuda_free(const hcnn_backend *be, void *p)
{
    (void)be;
    if (p)
        HCNN_CUDA(cudaFree(p));
}

/* pinned host memory: the loader's batches and the MPI staging buffers */
static void *cuda_alloc_host(const hcnn_backend *be, size_t bytes, const char *what)
{
    (void)be;
    void *p = NULL;
    const cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e == cudaSuccess)
        return p;
    (void)cudaGetLastError();
    hcnn_error("cannot allocate %.1f MB of pinned host memory for %s (%s)", (double)bytes / 1e6,
               what ? what : "a buffer", cudaGetErrorString(e));
    return NULL;
}

static void cuda_free_host(const hcnn_backend *be, void *p)
{
    (void)be;
    if (p)
        HCNN_CUDA(cudaFreeHost(p));
}

/* The copies and the wait may be called from another host thread than the
 * one that created the instance (the data-parallel communication thread
 * stages gradient buckets): the device is current per thread, so each sets
 * it first (cheap when it already is). */
static cudaStream_t stream_on_device(const hcnn_backend *be)
{
    HCNN_CUDA(cudaSetDevice(cuda_of(be)->device));
    return cuda_of(be)->stream;
}

/* The blocking copies run on the instance's stream, after the work queued
 * before them (a cudaMemcpy would run on the legacy default stream, which
 * does not wait for a non-blocking stream's work), and wait for it. */
static void cuda_upload(const hcnn_backend *be, void *dst, const void *src, size_t bytes)
{
    cudaStream_t s = stream_on_device(be);
    HCNN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    HCNN_CUDA(cudaStreamSynchronize(s));
}

static void cuda_download(const hcnn_backend *be, void *dst, const void *src, size_t bytes)
{
    cudaStream_t s = stream_on_device(be);
    HCNN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    HCNN_CUDA(cudaStreamSynchronize(s));
}

static void cuda_upload_async(const hcnn_backend *be, void *dst, const void *src, size_t bytes)
{
    HCNN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_on_device(be)));
}

static void cuda_download_async(const hcnn_backend *be, void *dst, const void *src, size_t bytes)
{
    HCNN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_on_device(be)));
}

static void cuda_sync(const hcnn_backend *be)
{
    HCNN_CUDA(cudaStreamSynchronize(stream_on_device(be)));
}

/* the profiler's capture range (hcnn bench's timed steps): what an nsys
 * --capture-range=cudaProfilerApi or bench/kernel_share.so records */
static void cuda_trace_region(const hcnn_backend *be, int begin)
{
    (void)be;
    if (begin)
        HCNN_CUDA(cudaProfilerStart());
    else
        HCNN_CUDA(cudaProfilerStop());
}

/* events recorded on the stream: the time the GPU spent between them */
static void cuda_timer_start(const hcnn_backend *be, hcnn_timer *t)
{
    cudaEvent_t a, b;
    HCNN_CUDA(cudaEventCreate(&a));
    HCNN_CUDA(cudaEventCreate(&b));
    HCNN_CUDA(cudaEventRecord(a, cuda_of(be)->stream));
    t->start = (void *)a, t->stop = (void *)b, t->host_s = 0.0;
}

static double cuda_timer_stop(const hcnn_backend *be, hcnn_timer *t)
{
    cudaEvent_t a = (cudaEvent_t)t->start, b = (cudaEvent_t)t->stop;
    float ms = 0.0f;
    HCNN_CUDA(cudaEventRecord(b, cuda_of(be)->stream));
    HCNN_CUDA(cudaEventSynchronize(b));
    HCNN_CUDA(cudaEventElapsedTime(&ms, a, b));
    HCNN_CUDA(cudaEventDestroy(a));
    HCNN_CUDA(cudaEventDestroy(b));
    t->start = t->stop = NULL;
    return ms * 1e-3;
}

/* ---- CUDA graphs: the captured work of a step, replayed ------------------------- */

/* Thread-local capture: another host thread (the communication thread)
 * calling CUDA meanwhile neither breaks nor joins the capture. */
static int cuda_graph_begin(const hcnn_backend *be)
{
    const cudaError_t e = cudaStreamBeginCapture(stream_on_device(be),
                                                 cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return hcnn_error_code(HCNN_EIO, "CUDA graph capture: %s", cudaGetErrorString(e));
    }
    cuda_of(be)->capturing = 1;
    return HCNN_OK;
}

static int cuda_graph_end(const hcnn_backend *be, int slot)
{
    hcnn_cuda *cu = cuda_of(be);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(stream_on_device(be), &g);
    cu->capturing = 0;
    if (cu->graphs[slot]) {
        HCNN_CUDA(cudaGraphExecDestroy(cu->graphs[slot]));
        cu->graphs[slot] = NULL;
    }
    if (e == cudaSuccess)
        e = cudaGraphInstantiate(&cu->graphs[slot], g, 0);
    if (g)
        HCNN_CUDA(cudaGraphDestroy(g));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cu->graphs[slot] = NULL;
        return hcnn_error_code(HCNN_EIO, "CUDA graph capture: %s", cudaGetErrorString(e));
    }
    return HCNN_OK;
}

static int cuda_graph_launch(const hcnn_backend *be, int slot)
{
    hcnn_cuda *cu = cuda_of(be);
    if (!cu->graphs[slot])
        return 0;
    HCNN_CUDA(cudaGraphLaunch(cu->graphs[slot], stream_on_device(be)));
    return 1;
}

static void cuda_zero(const hcnn_backend *be, void *p, size_t bytes)
{
    HCNN_CUDA(cudaMemsetAsync(p, 0, bytes, cuda_of(be)->stream));
}

static void cuda_copy(const hcnn_backend *be, float *dst, const float *src, size_t n)
{
    HCNN_CUDA(cudaMemcpyAsync(dst, src, n * sizeof *dst, cudaMemcpyDeviceToDevice,
                              cuda_of(be)->stream));
}

static const char *precision_text(hcnn_precision p)
{
    return p == HCNN_PRECISION_TF32   ? "TF32 tensor cores for FP32 GEMMs"
           : p == HCNN_PRECISION_BF16 ? "bf16 GEMM inputs, FP32 accumulation (mixed precision)"
                                      : "FP32";
}

static void cuda_describe(const hcnn_backend *be, char *buf, size_t cap)
{
    char conv[160];
    hcnn_cuda_conv_mode_text(cuda_of(be), conv, sizeof conv);
    snprintf(buf, cap, "cuda: %s; one stream, cuBLAS (%s), %s, %s activations", cuda_of(be)->name,
             precision_text(cuda_of(be)->precision), conv,
             be->layout == HCNN_LAYOUT_NHWC ? "NHWC" : "NCHW");
}

/* HCNN_CUDA_CHUNK_FLOATS (a test): the convolution's chunks, so that the
 * conformance suite's small shapes take several (conv.cu) */
static int chunk_from_env(size_t *floats)
{
    const char *env = getenv(HCNN_ENV_CUDA_CHUNK_FLOATS);
    *floats = HCNN_CUDA_CHUNK_DEFAULT;
    if (!env || !*env)
        return HCNN_OK;
    char *end = NULL;
    const unsigned long long v = strtoull(env, &end, 10);
    if (*end || env[0] == '-' || v < 1 || v > HCNN_CUDA_CHUNK_DEFAULT)
        return hcnn_error_code(HCNN_EINVAL, "HCNN_CUDA_CHUNK_FLOATS='%s': expected a whole number "
                                            "from 1 to %zu",
                               env, HCNN_CUDA_CHUNK_DEFAULT);
    *floats = (size_t)v;
    return HCNN_OK;
}

/* HCNN_CUDA_LAYOUT: auto (or unset) and nchw give NCHW; nhwc the layout
 * that cuDNN's tensor-core convolutions read without a transpose, for now
 * by choice only: every kernel of this backend runs it (conv.cu's im2col
 * path included, and so the emulation), but auto waits for the NHWC cuDNN
 * engines it is meant for, and for a GPU measurement that it is faster. */
static int layout_from_env(hcnn_act_layout *layout)
{
    const char *env = getenv(HCNN_ENV_CUDA_LAYOUT);
    *layout = HCNN_LAYOUT_NCHW;
    if (!env || !*env || strcmp(env, "auto") == 0 || strcmp(env, "nchw") == 0)
        return HCNN_OK;
    if (strcmp(env, "nhwc") == 0) {
        *layout = HCNN_LAYOUT_NHWC;
        return HCNN_OK;
    }
    return hcnn_error_code(HCNN_EINVAL, "HCNN_CUDA_LAYOUT='%s': expected auto, nchw or nhwc", env);
}

/* fp32: pedantic math, the CPU's results up to summation order; tf32: cuBLAS
 * may round FP32 GEMM inputs to TF32 on tensor cores; bf16: hcnn_cuda_gemm
 * rounds the inputs itself and runs cublasGemmEx, under the default math
 * mode (pedantic math is documented as possibly slower, and would leave
 * the bf16 GEMMs off the tensor cores they are there for) */
static int cuda_set_precision(hcnn_backend *be, hcnn_precision p)
{
    hcnn_cuda *cu = cuda_of(be);
    cu->precision = p;
    const cublasMath_t mode = p == HCNN_PRECISION_TF32   ? CUBLAS_TF32_TENSOR_OP_MATH
                              : p == HCNN_PRECISION_BF16 ? CUBLAS_DEFAULT_MATH
                                                         : CUBLAS_PEDANTIC_MATH;
    HCNN_CUBLAS(cublasSetMathMode(cu->blas, mode));
    return HCNN_OK;
}

/* ---- threads: one host thread drives the device ---------------------------------- */

static void cuda_parallel(const hcnn_backend *be, void (*fn)(void *arg, int t, int nt), void *arg)
{
    (void)be;
    fn(arg, 0, 1);
}

static int cuda_threads(const hcnn_backend *be)
{
    (void)be;
    return 1;
}

/* block by block: a GPU runs every sample of a layer at once */
static int cuda_unit_images(const hcnn_backend *be, int n)
{
    (void)be, (void)n;
    return 0;
}

/* A device runs a pass as one piece of work: it takes one host thread,
 * whatever the host's threads (hcnn plan prices host threads, and a pass
 * on a GPU divides nothing among them) */
static void cuda_pass_pieces(const hcnn_backend *be, const hcnn_op *op, const hcnn_exec *ex,
                             int n, int nt, hcnn_pieces *fwd, hcnn_pieces *bwd)
{
    (void)be, (void)op, (void)ex, (void)n, (void)nt;
    fwd->nphases = bwd->nphases = 0;
    hcnn_pieces_push(fwd, "forward kernels", 1, 1.0, 0.0, 1);
    hcnn_pieces_push(bwd, "backward kernels", 1, 1.0, 0.0, 1);
}

/* ---- the instance --------------------------------------------------------------- */

static void cuda_destroy(hcnn_backend *be)
{
    hcnn_cuda *cu = cuda_of(be);
    if (cu) {
        if (cu->stream)
            cudaStreamSynchronize(cu->stream);
        if (cu->scratch)
            cudaFree(cu->scratch);
        if (cu->lr_dev)
            cudaFree(cu->lr_dev);
        if (cu->lr_host)
            cudaFreeHost(cu->lr_host);
        if (cu->bf16)
            cudaFree(cu->bf16);
        hcnn_cudnn_destroy(cu);
        hcnn_cuda_conv_choice_destroy(cu);
        for (int i = 0; i < HCNN_GRAPH_SLOTS; i++)
            if (cu->graphs[i])
                cudaGraphExecDestroy(cu->graphs[i]);
        if (cu->blas_ws)
            cudaFree(cu->blas_ws);
        if (cu->blas)
            cublasDestroy(cu->blas);
        if (cu->stream)
            cudaStreamDestroy(cu->stream);
        hcnn_free(cu);
    }
    hcnn_free(be);
}

static const hcnn_backend cuda_backend = {
    .name = "cuda",
    .state = NULL,
    .host_memory = 0,
    .mpi_direct = 0,
#if defined(HCNN_CUDA_EMULATION)
    .emulated = 1,
#else
    .emulated = 0,
#endif
    /* the creation sets it from HCNN_CUDA_LAYOUT; named here because g++'s
     * -Wmissing-field-initializers (the emulation's build) flags a member
     * skipped between designated ones */
    .layout = HCNN_LAYOUT_NCHW,
    .conv_relu = 1, /* conv.cu: in the bias addition's kernel */
    .parallel = cuda_parallel,
    .threads = cuda_threads,
    .unit_images = cuda_unit_images,
    .set_precision = cuda_set_precision,
    .describe = cuda_describe,
    .alloc = hcnn_cuda_alloc,
    .free = cuda_free,
    .alloc_host = cuda_alloc_host,
    .free_host = cuda_free_host,
    .upload = cuda_upload,
    .download = cuda_download,
    .upload_async = cuda_upload_async,
    .download_async = cuda_download_async,
    .sync = cuda_sync,
    .timer_start = cuda_timer_start,
    .timer_stop = cuda_timer_stop,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .sgd_replay_lr = hcnn_cuda_sgd_replay_lr,
    .trace_region = cuda_trace_region,
    .fill = hcnn_cuda_fill,
    .zero = cuda_zero,
    .copy = cuda_copy,
    .gemm = hcnn_cuda_gemm,
    .conv_fwd = hcnn_cuda_conv_fwd,
    .conv_bwd = hcnn_cuda_conv_bwd,
    .conv_bwd_filter = hcnn_cuda_conv_bwd_filter,
    .conv_bwd_data = hcnn_cuda_conv_bwd_data,
    .conv_workspace = hcnn_cuda_conv_workspace,
    .conv_gemms = hcnn_cuda_conv_gemms,
    .conv_describe = hcnn_cuda_conv_describe,
    .conv_choices = hcnn_cuda_conv_choices,
    .adopt_conv_choices = hcnn_cuda_adopt_conv_choices,
    .pass_pieces = cuda_pass_pieces,
    .row_sum_acc = hcnn_cuda_row_sum_acc,
    .add_row_bias = hcnn_cuda_add_row_bias,
    .relu_fwd = hcnn_cuda_relu_fwd,
    .relu_bwd = hcnn_cuda_relu_bwd,
    .add = hcnn_cuda_add,
    .add_acc = hcnn_cuda_add_acc,
    .scale = hcnn_cuda_scale,
    .mul = hcnn_cuda_mul,
    .dropout_fwd = hcnn_cuda_dropout_fwd,
    .maxpool_fwd = hcnn_cuda_maxpool_fwd,
    .maxpool_bwd = hcnn_cuda_maxpool_bwd,
    .avgpool_fwd = hcnn_cuda_avgpool_fwd,
    .avgpool_bwd = hcnn_cuda_avgpool_bwd,
    .layout_from_nchw = hcnn_cuda_layout_from_nchw,
    .layout_to_nchw = hcnn_cuda_layout_to_nchw,
    .bn_fwd_train = hcnn_cuda_bn_fwd_train,
    .bn_fwd_infer = hcnn_cuda_bn_fwd_infer,
    .bn_bwd = hcnn_cuda_bn_bwd,
    .softmax_xent = hcnn_cuda_softmax_xent,
    .sgd_step = hcnn_cuda_sgd_step,
    .sum_sq = hcnn_cuda_sum_sq,
    .destroy = cuda_destroy,
};

/* The GPU `device` of the visible ones (modulo their count: ranks of a node
 * share its GPUs round-robin; CUDA_VISIBLE_DEVICES decides which are
 * visible), a stream that does not wait for the legacy default stream, a
 * cuBLAS handle on it, and the reductions' scratch.  A machine without a
 * usable GPU or driver is one message, not a crash. */
extern "C" int hcnn_backend_cuda_create(int device, hcnn_backend **out)
{
    *out = NULL;
    hcnn_act_layout layout;
    size_t chunk_floats;
    int lrc = layout_from_env(&layout);
    if (lrc == HCNN_OK)
        lrc = chunk_from_env(&chunk_floats);
    if (lrc != HCNN_OK)
        return lrc;
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        (void)cudaGetLastError();
        return hcnn_error_code(HCNN_EIO, "device: cuda: no usable GPU (%s); check "
                                            "nvidia-smi, the driver and CUDA_VISIBLE_DEVICES",
                               e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
    }
    hcnn_backend *be = (hcnn_backend *)hcnn_alloc(sizeof *be, "CUDA backend");
    hcnn_cuda *cu = (hcnn_cuda *)hcnn_calloc(sizeof *cu, "CUDA backend state");
    if (!be || !cu) {
        hcnn_free(be), hcnn_free(cu);
        return HCNN_ENOMEM;
    }
    *be = cuda_backend;
    be->state = cu;
    be->layout = layout;
    cu->chunk_floats = chunk_floats;
    /* backend.h: an NCHW backend has no layout changes (NULL), which tells
     * the network that its activations need none */
    if (layout != HCNN_LAYOUT_NHWC)
        be->layout_from_nchw = NULL, be->layout_to_nchw = NULL;
    cu->device = (device > 0 ? device : 0) % count;
    HCNN_CUDA(cudaSetDevice(cu->device));
    HCNN_CUDA(cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking));
    HCNN_CUBLAS(cublasCreate(&cu->blas));
    HCNN_CUBLAS(cublasSetStream(cu->blas, cu->stream));
    /* FP32 as the CPU computes it: no TF32 tensor cores unless asked */
    HCNN_CUBLAS(cublasSetMathMode(cu->blas, CUBLAS_PEDANTIC_MATH));
    cu->scratch = (double *)hcnn_cuda_alloc(be, sizeof(double) * SCRATCH_DOUBLES, "reduction scratch");
    if (!cu->scratch) {
        cuda_destroy(be);
        return HCNN_ENOMEM;
    }
    cu->scratch_doubles = SCRATCH_DOUBLES;
    /* the learning rate of a captured optimiser step (sgd_replay_lr) */
    cu->lr_dev = (float *)hcnn_cuda_alloc(be, sizeof(float), "the learning rate");
    cu->lr_host = (float *)cuda_alloc_host(be, sizeof(float), "the learning rate");
    if (!cu->lr_dev || !cu->lr_host) {
        cuda_destroy(be);
        return HCNN_ENOMEM;
    }
    /* cuBLAS's workspace given, not left to cuBLAS: it would otherwise
     * allocate inside a graph capture (32 MiB: what NVIDIA advises for
     * Hopper) */
    cu->blas_ws = hcnn_cuda_alloc(be, BLAS_WORKSPACE_BYTES, "cuBLAS workspace");
    if (!cu->blas_ws) {
        cuda_destroy(be);
        return HCNN_ENOMEM;
    }
    HCNN_CUBLAS(cublasSetWorkspace(cu->blas, cu->blas_ws, BLAS_WORKSPACE_BYTES));
    int rc = hcnn_cuda_conv_choice_create(be);
    if (rc == HCNN_OK)
        rc = hcnn_cudnn_create(be);
    if (rc != HCNN_OK) {
        cuda_destroy(be);
        return rc;
    }
    cudaDeviceProp prop;
    HCNN_CUDA(cudaGetDeviceProperties(&prop, cu->device));
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    snprintf(cu->name, sizeof cu->name,
             "GPU %d of %d: %.200s, %.1f GiB, compute capability %d.%d, driver %d.%d, runtime %d.%d",
             cu->device, count, prop.name, (double)prop.totalGlobalMem / 1073741824.0, prop.major,
             prop.minor, driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    char versions[256];
    hcnn_backend_cuda_versions(versions, sizeof versions);
    snprintf(cu->model_key, sizeof cu->model_key, "%.200s, compute capability %d.%d, %d SMs; %s",
             prop.name, prop.major, prop.minor, prop.multiProcessorCount, versions);
    *out = be;
    return HCNN_OK;
}

/* What this build was compiled with (hcnn --version). */
extern "C" const char *hcnn_backend_cuda_versions(char *buf, size_t cap)
{
#if defined(HCNN_CUDA_EMULATION)
    snprintf(buf, cap, "the emulation of the CUDA runtime and cuBLAS in src/cuda/emu/ (configure "
                       "--enable-cuda-emulation): device: cuda runs on the CPU, for tests");
#else
    char dnn[48] = "none";
#if HCNN_HAVE_CUDNN
    snprintf(dnn, sizeof dnn, "%d.%d.%d", CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
#endif
    snprintf(buf, cap, "runtime %d.%d, cuBLAS %d.%d.%d, cuDNN %s", CUDART_VERSION / 1000,
             CUDART_VERSION % 1000 / 10, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH,
             dnn);
#endif
    return buf;
}
