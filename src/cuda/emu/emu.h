/* The CUDA emulation: the subset of the CUDA runtime, of cuBLAS (v2 API)
 * and of the kernel language that the .cu files of src/cuda/ use, under
 * the real names, types and documented semantics, run on the host.  src/cuda/compat.h
 * includes this header when HCNN_CUDA_EMULATION is defined, so that the
 * backend is built and tested on every commit without a GPU; under nvcc it
 * includes the real headers instead, and the same sources must compile
 * there unchanged: define nothing here that CUDA lacks (emulation-only
 * helpers live in namespace hcnn_emu and are reached only through the
 * launch macros).
 *
 * Build (the emulation's own test; from the top of the tree):
 *   g++ -std=c++17 -O2 -Wall -Wextra -Werror -DHCNN_CUDA_EMULATION -Isrc/cuda -Iinclude \
 *       tests/unit/test_cuda_emu.cc src/cuda/emu/cublas.cc src/cuda/emu/launch.cc \
 *       src/cuda/emu/memory.cc src/cuda/emu/errors.cc src/cuda/emu/runtime.cc src/cuda/emu/stream.cc \
 *       -L/usr/lib/x86_64-linux-gnu/openblas-openmp \
 *       -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -fopenmp \
 *       -o /tmp/test_cuda_emu && /tmp/test_cuda_emu
 * The same test source is real CUDA (it compiles, nothing runs without a GPU):
 *   /usr/local/cuda/bin/nvcc -arch=sm_90 -std=c++17 -Isrc/cuda -x cu \
 *       -c tests/unit/test_cuda_emu.cc -o /tmp/test_cuda_emu.o
 * -DHCNN_EMU_UCONTEXT builds the barrier fibres on ucontext instead of the
 * x86-64 context switch (the only choice on other machines and under
 * AddressSanitizer, which follows swapcontext but not a hand-made switch).
 *
 * What runs where:
 * - Kernels.  HCNN_LAUNCH(kernel, grid, block, stream, args...) evaluates
 *   the arguments at the launch, as CUDA does, keeps their values with a
 *   lambda that calls kernel(args...), and queues that on the stream.  When
 *   the queue runs it, the lambda runs once for every (blockIdx, threadIdx)
 *   of grid x block, with the built-ins set: each block's threads one after
 *   another, x fastest; blocks may run on several OpenMP threads (a kernel
 *   written for the backend never lets two threads write one address, so
 *   the result does not depend on it).  HCNN_LAUNCH_BARRIER runs each
 *   block's threads as fibres that meet at every __syncthreads(); __shared__
 *   variables are thread_local, so one per block running at once.
 * - Device memory is one host arena (mmap, HCNN_EMU_DEVICE_MB MiB, default
 *   4096): cudaMalloc's blocks are 256-byte aligned and filled with NaN
 *   (0x7fc00000), on cudaMalloc and again on cudaFree, so that a read of
 *   what no kernel wrote shows.  A copy's kind is checked against where its
 *   pointers are (device: inside the arena), and its device side must lie
 *   inside the size a live cudaMalloc asked for: cudaErrorInvalidValue.
 *   Each block ends against a PROT_NONE guard page (an access past its
 *   256-byte rounding faults there, named), and the bytes below it and past
 *   its size stay NaN, checked at cudaFree (a write there aborts, named).
 *   cudaMallocHost memory (host memory, tracked) is filled with NaN too.
 * - Streams are queues that run only when something waits for them, in
 *   order, on the waiting thread: cudaStreamSynchronize (of stream 0: as a
 *   synchronous call), cudaEventSynchronize (up to the event),
 *   cudaDeviceSynchronize, cudaFree, cudaFreeHost, cublasDestroy (every
 *   stream), and the synchronous cudaMemcpy/cudaMemset, which run the
 *   legacy default stream and the blocking streams but not the
 *   non-blocking ones, as CUDA's legacy stream semantics allow: a download
 *   that forgets to synchronise a non-blocking stream reads stale memory.
 *   Queued work on the legacy stream waits for the blocking streams' earlier
 *   work and theirs for its earlier work; cudaStreamWaitEvent(s, e) makes
 *   s's later work wait for e's record.
 * - Events are stamped with the host clock when their record runs.
 * - Graph capture records the queued operations, with the values their
 *   lambdas captured, and a graph launch queues them again.  During a
 *   capture the "potentially unsafe" calls (cudaMalloc, cudaFree,
 *   cudaMallocHost, cudaFreeHost, cudaMemcpy, cudaMemset,
 *   cudaDeviceSynchronize) fail with cudaErrorStreamCaptureUnsupported
 *   unless every capture is in relaxed mode (or thread-local in another
 *   thread), synchronising the capturing stream fails in any mode, and the
 *   failure invalidates the capture, as in CUDA.
 * - cuBLAS runs on the host's CBLAS (cblas_sgemm, one call per product,
 *   threaded as the BLAS itself decides), queued on the handle's stream
 *   with alpha and beta read at the call (host pointer mode); TF32 math
 *   rounds A and B to TF32 first (nearest, ties away from zero, as
 *   cvt.rna.tf32.f32).
 *
 * Approximations (CUDA's behaviour that is not reproduced):
 * - Dynamic shared memory (extern __shared__) does not compile here: use a
 *   fixed-size __shared__ array.  The launch's shmem is only checked
 *   against 48 KiB.  Static __shared__ memory is not limited and not reset
 *   between blocks (CUDA leaves it undefined).
 * - __expf/__logf are expf/logf, rsqrtf is 1/sqrtf: the GPU's fast
 *   intrinsics differ in the last bits, and so does any float sum whose
 *   order cuBLAS and CBLAS choose differently: compare with a tolerance.
 * - No memory is checked inside kernels (no cudaErrorIllegalAddress); the
 *   device side of copies, memsets and cuBLAS operands must lie inside a
 *   live allocation.
 * - cudaEventQuery on a pending event returns cudaErrorNotReady and runs the
 *   queues up to the event, so that a polling loop ends as on a GPU.
 * - cudaMemcpyAsync from pageable host memory takes the source at the call
 *   (CUDA stages it before returning); every other asynchronous copy reads
 *   and writes host memory only when it runs, including a download into
 *   pageable memory, which CUDA may finish before returning: the
 *   emulation takes the strict reading.
 * - Capture follows one stream: an event recorded in a capture is usable
 *   only by cudaStreamWaitEvent on the capturing stream (a no-op there);
 *   joining another stream to a capture through an event stops the program.
 *
 * State: the arena, the streams, events and graphs, and the last error
 * (per host thread) live in the emulation's files, and the built-ins and
 * the fibres of the block being run are thread_local: the one exception to
 * the project's rule against global mutable state, since the CUDA API is
 * made of global functions.  A recursive mutex serialises the API calls. */
#ifndef HCNN_CUDA_EMU_H
#define HCNN_CUDA_EMU_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <utility>
#include <vector>

/* ---- Kernel language ---------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
/* One copy per OS thread: the fibres of a block share it, blocks that run
 * at once on different OpenMP threads do not (`extern __shared__` is a
 * compile error, see above).  g++ knows __restrict__ itself. */
#define __shared__ static thread_local

struct uint3 {
    unsigned int x, y, z;
};

/* CUDA's vector type (vector_types.h: four floats, 16-byte aligned) */
struct alignas(16) float4 {
    float x, y, z, w;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

namespace hcnn_emu {
/* The built-ins of the thread being run, set by the launcher (constant
 * initialisation, so an access is one TLS load, no wrapper call). */
inline thread_local uint3 thread_idx{0, 0, 0};
inline thread_local uint3 block_idx{0, 0, 0};
inline thread_local dim3 block_dim{1, 1, 1};
inline thread_local dim3 grid_dim{1, 1, 1};
} // namespace hcnn_emu

/* Read-only in kernels, as in CUDA. */
#define threadIdx (static_cast<const uint3 &>(::hcnn_emu::thread_idx))
#define blockIdx (static_cast<const uint3 &>(::hcnn_emu::block_idx))
#define blockDim (static_cast<const dim3 &>(::hcnn_emu::block_dim))
#define gridDim (static_cast<const dim3 &>(::hcnn_emu::grid_dim))

/* Waits until every thread of the block has called it; only in kernels
 * launched with HCNN_LAUNCH_BARRIER (elsewhere it stops the program). */
void __syncthreads(void);

/* Device math that <cmath> lacks.  Macros: glibc declares (and does not
 * export) __expf and __logf, and C23 C libraries declare rsqrtf. */
#define rsqrtf(x) (1.0f / sqrtf(x))
#define __expf(x) expf(x)
#define __logf(x) logf(x)

/* bfloat16: the upper half of a float.  Only the two conversions below
 * (CUDA's operators and implicit conversions are not emulated). */
struct __nv_bfloat16 {
    __nv_bfloat16() = default;

  private:
    unsigned short bits_;
    friend __nv_bfloat16 __float2bfloat16(float f);
    friend float __bfloat162float(__nv_bfloat16 b);
};

/* Round to nearest even, NaN to the canonical 0x7fff (cuda_bf16.hpp). */
inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    __nv_bfloat16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        b.bits_ = 0x7fffu;
        return b;
    }
    uint32_t rest = u << 16;
    uint32_t hi = u >> 16;
    if (rest > 0x80000000u || (rest == 0x80000000u && (hi & 1u)))
        ++hi;
    b.bits_ = static_cast<unsigned short>(hi);
    return b;
}

inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = static_cast<uint32_t>(b.bits_) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- Runtime: types ----------------------------------------------------- */

extern "C" {

enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureIsolation = 905,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorCapturedEvent = 907,
    cudaErrorStreamCaptureWrongThread = 908,
    cudaErrorUnknown = 999
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
};

enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2
};

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;

/* The fields a backend reads, under their real names (the real struct has
 * many more). */
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int major;
    int minor;
    int multiProcessorCount;
    int l2CacheSize;
    int maxThreadsPerMultiProcessor;
    size_t sharedMemPerMultiprocessor;
};

/* ---- Runtime: functions ------------------------------------------------- */

const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaDriverGetVersion(int *driverVersion);
cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaDeviceSynchronize(void);
/* a profiler's capture range: nothing to mark here */
cudaError_t cudaProfilerStart(void);
cudaError_t cudaProfilerStop(void);

cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream = 0);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream = 0);

cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags = 0);

cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                  enum cudaStreamCaptureStatus *pCaptureStatus);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

/* ---- cuBLAS (v2 API) ---------------------------------------------------- */

#define CUBLAS_VER_MAJOR 13
#define CUBLAS_VER_MINOR 1
#define CUBLAS_VER_PATCH 0
#define CUBLAS_VERSION (CUBLAS_VER_MAJOR * 10000 + CUBLAS_VER_MINOR * 100 + CUBLAS_VER_PATCH)

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
    CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3
} cublasMath_t;

typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef enum cudaDataType_t cudaDataType;

typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;

typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

typedef struct cublasContext *cublasHandle_t;

/* cublas_v2.h's names for the v2 entry points */
#define cublasCreate cublasCreate_v2
#define cublasDestroy cublasDestroy_v2
#define cublasGetVersion cublasGetVersion_v2
#define cublasSetStream cublasSetStream_v2
#define cublasGetStream cublasGetStream_v2
#define cublasSetWorkspace cublasSetWorkspace_v2
#define cublasSgemm cublasSgemm_v2

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId);
cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *streamId);
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t bytes);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode);
cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float *alpha,
                              const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo);

} /* extern "C" */

/* cuda_runtime.h's C++ overloads: cudaMalloc(&float_pointer, bytes). */
template <class T> inline cudaError_t cudaMalloc(T **devPtr, size_t size) {
    return ::cudaMalloc(reinterpret_cast<void **>(devPtr), size);
}
template <class T> inline cudaError_t cudaMallocHost(T **ptr, size_t size) {
    return ::cudaMallocHost(reinterpret_cast<void **>(ptr), size);
}

/* ---- The launch --------------------------------------------------------- */

namespace hcnn_emu {

/* Runs every thread of one block (plain launch) or one thread (a fibre of
 * a barrier launch), the kernel call given as an opaque pointer. */
using block_fn = void (*)(const void *call, dim3 block);
using thread_fn = void (*)(const void *call);

struct kernel_launch {
    const char *name; /* the kernel, for messages */
    dim3 grid, block;
    size_t shmem;
    bool barrier;
};

/* Checks the launch as CUDA does (an invalid one runs nothing and sets
 * cudaGetLastError) and queues `run` on the stream. */
void launch_enqueue(const kernel_launch &k, cudaStream_t stream, std::function<void()> run);

/* Emulation-only, for tests that count a backend call's launches (what
 * nsys would show on a GPU): from now on the name of every kernel launch
 * queued is appended to *names; nullptr stops it. */
void record_launches(std::vector<const char *> *names);

/* Runs the grid now (called by the queued operation). */
void run_grid(const kernel_launch &k, const void *call, block_fn plain, thread_fn one);

template <class Call> void run_block(const void *call, dim3 block) {
    const Call &f = *static_cast<const Call *>(call);
    uint3 &t = thread_idx;
    for (unsigned int z = 0; z < block.z; ++z) {
        t.z = z;
        for (unsigned int y = 0; y < block.y; ++y) {
            t.y = y;
            for (unsigned int x = 0; x < block.x; ++x) {
                t.x = x;
                f();
            }
        }
    }
}

template <class Call> void run_thread(const void *call) { (*static_cast<const Call *>(call))(); }

/* The arguments are evaluated here, once, and kept by value in the call:
 * a graph replays them as captured. */
template <class Kernel, class... Args>
void launch(const char *name, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
            bool barrier, Kernel kernel, Args &&...args) {
    auto call = [kernel, a = std::make_tuple(std::forward<Args>(args)...)]() {
        std::apply(kernel, a);
    };
    using Call = decltype(call);
    kernel_launch k{name, grid, block, shmem, barrier};
    launch_enqueue(k, stream,
                   [k, call]() { run_grid(k, &call, run_block<Call>, run_thread<Call>); });
}

} // namespace hcnn_emu

#define HCNN_LAUNCH(kernel, grid, block, stream, ...)                                             \
    ::hcnn_emu::launch(                                                                           \
        #kernel, (grid), (block), 0, (stream), false,                                             \
        [](const auto &...hcnn_emu_arg) { kernel(hcnn_emu_arg...); }, ##__VA_ARGS__)
#define HCNN_LAUNCH_BARRIER(kernel, grid, block, shmem, stream, ...)                              \
    ::hcnn_emu::launch(                                                                           \
        #kernel, (grid), (block), (shmem), (stream), true,                                        \
        [](const auto &...hcnn_emu_arg) { kernel(hcnn_emu_arg...); }, ##__VA_ARGS__)

#endif
