/* Unit test of the CUDA emulation, src/cuda/emu/: includes the private
 * header src/cuda/compat.h (Makefile.am puts src/cuda on its include path).
 *
 * The CUDA emulation (src/cuda/emu/) against what CUDA documents: launches
 * and their built-ins, barriers and __shared__ memory, device memory, the
 * streams' queues, events, graph capture, cuBLAS.  The file is real CUDA
 * too: it compiles with nvcc (see src/cuda/emu/emu.h for both commands),
 * and the cases under HCNN_CUDA_EMULATION are the emulation's own
 * promises (NaN-filled memory, stale reads without a synchronisation,
 * fatal messages), which a GPU does not keep.
 * Output in cmocka's format, as tests/lib.sh prints it. */
#include "compat.h"
#include "cc_cases.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

/* ---- Harness ------------------------------------------------------------ */

#define CHECK_EQ_ERR(call, want)                                                                  \
    do {                                                                                          \
        cudaError_t got_ = (call);                                                                \
        if (got_ != (want)) {                                                                     \
            printf("# %s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__, #call,           \
                   cudaGetErrorName(got_), cudaGetErrorName(want));                               \
            ++case_failures;                                                                      \
        }                                                                                         \
    } while (0)

#define CHECK_CUDA(call) CHECK_EQ_ERR(call, cudaSuccess)
#define CHECK_BLAS(call) CHECK((call) == CUBLAS_STATUS_SUCCESS)

static float *dev_floats(size_t n) {
    void *p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, n * sizeof(float)));
    return static_cast<float *>(p);
}

static std::vector<float> download(const float *d, size_t n) {
    std::vector<float> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

static void upload(float *d, const std::vector<float> &h) {
    CHECK_CUDA(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static bool all_equal(const std::vector<float> &v, float want) {
    for (float x : v)
        if (bits(x) != bits(want))
            return false;
    return true;
}

/* deterministic pseudo-random numbers in [-1, 1) */
static uint64_t rng_state = 12345;
static float rnd() {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int32_t>(rng_state >> 33) % 65536) / 32768.0f;
}

/* ---- Kernels ------------------------------------------------------------ */

__device__ __forceinline__ int global_index() {
    return static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
}

__global__ void k_fill(float *p, float v, int n) {
    int i = global_index();
    if (i < n)
        p[i] = v;
}

__global__ void k_add(float *p, float v, int n) {
    int i = global_index();
    if (i < n)
        p[i] += v;
}

__global__ void k_scale(float *__restrict__ dst, const float *__restrict__ src, float a, int n) {
    int i = global_index();
    if (i < n)
        dst[i] = a * src[i];
}

__global__ void k_store(float *p) { p[global_index()] = 1.0f; }

__global__ void k_nothing() {}

/* p[i] = 1, one thread: an index out of bounds on purpose */
__global__ void k_store_at(float *p, long i) { p[i] = 1.0f; }
/* *out = p[i], one thread */
__global__ void k_load_at(const float *p, long i, float *out) { *out = p[i]; }

/* every thread counts itself and writes down its built-ins */
__global__ void k_index(unsigned int *hits, unsigned int *info) {
    unsigned int threads = blockDim.x * blockDim.y * blockDim.z;
    unsigned int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned int g = b * threads + t;
    hits[g] += 1;
    info[4 * g + 0] = threadIdx.x | threadIdx.y << 8 | threadIdx.z << 16;
    info[4 * g + 1] = blockIdx.x | blockIdx.y << 8 | blockIdx.z << 16;
    info[4 * g + 2] = blockDim.x | blockDim.y << 8 | blockDim.z << 16;
    info[4 * g + 3] = gridDim.x | gridDim.y << 8 | gridDim.z << 16;
}

/* a block-wide tree reduction in shared memory */
__global__ void k_block_sum(const float *x, float *out, int n) {
    __shared__ float s[256];
    unsigned int t = threadIdx.x;
    int i = global_index();
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half)
            s[t] += s[t + half];
        __syncthreads();
    }
    if (t == 0)
        out[blockIdx.x] = s[0];
}

/* a w x w transpose through a shared 16 x 16 tile (2-D blocks) */
__global__ void k_transpose(const float *in, float *out, int w) {
    __shared__ float tile[16][17];
    unsigned int x = blockIdx.x * 16 + threadIdx.x, y = blockIdx.y * 16 + threadIdx.y;
    tile[threadIdx.y][threadIdx.x] = in[y * w + x];
    __syncthreads();
    x = blockIdx.y * 16 + threadIdx.x;
    y = blockIdx.x * 16 + threadIdx.y;
    out[y * w + x] = tile[threadIdx.x][threadIdx.y];
}

__global__ void k_sync_plain(float *p) {
    p[threadIdx.x] = 1.0f;
    __syncthreads();
}

__global__ void k_diverge(float *p) {
    if (threadIdx.x >= 16)
        return;
    __syncthreads();
    p[threadIdx.x] = 1.0f;
}

__global__ void k_math(float *out, const float *in) {
    int i = global_index();
    float v = in[i];
    out[4 * i + 0] = rsqrtf(v);
    out[4 * i + 1] = __expf(v);
    out[4 * i + 2] = __logf(v);
    out[4 * i + 3] = fmaxf(fminf(v, 2.0f), 0.5f);
}

/* ---- Launches ----------------------------------------------------------- */

static void test_grid_3d() {
    const dim3 grids[] = {dim3(7, 5, 3), dim3(40, 9, 3)}; /* the second runs on OpenMP threads */
    const dim3 block(16, 4, 2);
    for (const dim3 &grid : grids) {
        unsigned int threads = block.x * block.y * block.z;
        unsigned int total = grid.x * grid.y * grid.z * threads;
        unsigned int *hits = nullptr, *info = nullptr;
        CHECK_CUDA(cudaMalloc(&hits, total * sizeof(unsigned int)));
        CHECK_CUDA(cudaMalloc(&info, 4 * total * sizeof(unsigned int)));
        CHECK_CUDA(cudaMemset(hits, 0, total * sizeof(unsigned int)));
        HCNN_LAUNCH(k_index, grid, block, 0, hits, info);
        CHECK_CUDA(cudaGetLastError());
        std::vector<unsigned int> h(total), in(4 * total);
        CHECK_CUDA(
            cudaMemcpy(h.data(), hits, total * sizeof(unsigned int), cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(in.data(), info, 4 * total * sizeof(unsigned int),
                              cudaMemcpyDeviceToHost));
        unsigned int bad = 0;
        for (unsigned int g = 0; g < total; ++g) {
            unsigned int t = g % threads, b = g / threads;
            unsigned int tx = t % block.x, ty = t / block.x % block.y, tz = t / (block.x * block.y);
            unsigned int bx = b % grid.x, by = b / grid.x % grid.y, bz = b / (grid.x * grid.y);
            bad += h[g] != 1 || in[4 * g] != (tx | ty << 8 | tz << 16) ||
                   in[4 * g + 1] != (bx | by << 8 | bz << 16) ||
                   in[4 * g + 2] != (block.x | block.y << 8 | block.z << 16) ||
                   in[4 * g + 3] != (grid.x | grid.y << 8 | grid.z << 16);
        }
        CHECK(bad == 0);
        CHECK_CUDA(cudaFree(hits));
        CHECK_CUDA(cudaFree(info));
    }
}

static void test_invalid_launch() {
    float *d = dev_floats(1024);
    CHECK_CUDA(cudaMemset(d, 0, 1024 * sizeof(float)));
    CHECK_CUDA(cudaGetLastError());
    const dim3 bad[][2] = {
        {dim3(1), dim3(1025)},          {dim3(1), dim3(1, 1, 65)},   {dim3(1), dim3(32, 32, 2)},
        {dim3(1, 65536), dim3(1)},      {dim3(1, 1, 65536), dim3(1)}, {dim3(0), dim3(32)},
        {dim3(1), dim3(32, 0)},
    };
    for (const auto &b : bad) {
        HCNN_LAUNCH(k_fill, b[0], b[1], 0, d, 1.0f, 1024);
        CHECK_EQ_ERR(cudaPeekAtLastError(), cudaErrorInvalidConfiguration);
        CHECK_EQ_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
        CHECK_CUDA(cudaGetLastError()); /* reset by the previous call */
    }
    CHECK(all_equal(download(d, 1024), 0.0f)); /* nothing ran */
    /* the limits themselves are valid */
    HCNN_LAUNCH(k_fill, dim3(1), dim3(1024), 0, d, 1.0f, 1024);
    HCNN_LAUNCH(k_fill, dim3(1), dim3(1, 1, 64), 0, d, 1.0f, 1024);
    HCNN_LAUNCH(k_fill, dim3(1, 65535), dim3(1), 0, d, 1.0f, 1024);
    HCNN_LAUNCH(k_nothing, 1, 1, 0);
    CHECK_CUDA(cudaGetLastError());
    CHECK(all_equal(download(d, 1024), 1.0f));
    CHECK_CUDA(cudaFree(d));
}

static void test_barrier_sum() {
    const int n = 256 * 40 - 7;
    const int blocks = (n + 255) / 256;
    std::vector<float> x(n);
    for (int i = 0; i < n; ++i)
        x[i] = static_cast<float>(i % 1000);
    float *dx = dev_floats(n), *dout = dev_floats(blocks);
    upload(dx, x);
    HCNN_LAUNCH_BARRIER(k_block_sum, blocks, 256, 0, 0, dx, dout, n);
    CHECK_CUDA(cudaGetLastError());
    std::vector<float> out = download(dout, blocks);
    for (int b = 0; b < blocks; ++b) {
        double want = 0; /* integers below 2^24: the float sum is exact */
        for (int i = b * 256; i < n && i < (b + 1) * 256; ++i)
            want += x[i];
        CHECK(out[b] == static_cast<float>(want));
    }
    CHECK_CUDA(cudaFree(dx));
    CHECK_CUDA(cudaFree(dout));
}

static void test_barrier_transpose() {
    const int w = 64;
    std::vector<float> a(w * w);
    for (int i = 0; i < w * w; ++i)
        a[i] = static_cast<float>(i);
    float *din = dev_floats(w * w), *dout = dev_floats(w * w);
    upload(din, a);
    HCNN_LAUNCH_BARRIER(k_transpose, dim3(w / 16, w / 16), dim3(16, 16), 0, 0, din, dout, w);
    CHECK_CUDA(cudaGetLastError());
    std::vector<float> t = download(dout, w * w);
    int bad = 0;
    for (int y = 0; y < w; ++y)
        for (int x = 0; x < w; ++x)
            bad += t[y * w + x] != a[x * w + y];
    CHECK(bad == 0);
    CHECK_CUDA(cudaFree(din));
    CHECK_CUDA(cudaFree(dout));
}

static void test_device_math() {
    const float in[4] = {0.25f, 1.0f, 2.0f, 4.0f};
    float *din = dev_floats(4), *dout = dev_floats(16);
    CHECK_CUDA(cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice));
    HCNN_LAUNCH(k_math, 1, 4, 0, dout, din);
    std::vector<float> o = download(dout, 16);
    for (int i = 0; i < 4; ++i) {
        CHECK(fabsf(o[4 * i] - 1.0f / sqrtf(in[i])) <= 1e-6f * o[4 * i]);
        CHECK(fabsf(o[4 * i + 1] - expf(in[i])) <= 1e-5f * o[4 * i + 1]);
        CHECK(fabsf(o[4 * i + 2] - logf(in[i])) <= 1e-5f);
        CHECK(o[4 * i + 3] == fmaxf(fminf(in[i], 2.0f), 0.5f));
    }
    CHECK_CUDA(cudaFree(din));
    CHECK_CUDA(cudaFree(dout));
}

static void test_bfloat16() {
    struct {
        float f;
        unsigned short want;
    } cases[] = {
        {1.0f, 0x3f80},
        {1.0f + 0x1p-8f, 0x3f80},          /* tie: to even */
        {1.0f + 3 * 0x1p-8f, 0x3f82},      /* tie: to even, up */
        {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81}, /* above the tie */
        {-2.5f, 0xc020},
        {-0.0f, 0x8000},
        {INFINITY, 0x7f80},
        {3.4028235e38f, 0x7f80}, /* FLT_MAX rounds up to infinity */
        {NAN, 0x7fff},
    };
    for (const auto &c : cases) {
        __nv_bfloat16 b = __float2bfloat16(c.f);
        unsigned short u;
        memcpy(&u, &b, sizeof u);
        if (u != c.want)
            printf("# %a -> 0x%04x, expected 0x%04x\n", static_cast<double>(c.f), u, c.want);
        CHECK(u == c.want);
    }
    CHECK(__bfloat162float(__float2bfloat16(-2.5f)) == -2.5f);
    CHECK(sizeof(__nv_bfloat16) == 2);
}

/* ---- Memory ------------------------------------------------------------- */

static void test_memory_basics() {
    float *d = dev_floats(1000);
    CHECK(reinterpret_cast<uintptr_t>(d) % 256 == 0);
    CHECK_CUDA(cudaMemset(d, 0, 1000 * sizeof(float)));
    CHECK(all_equal(download(d, 1000), 0.0f));
    std::vector<float> h(1000, 3.0f);
    upload(d, h);
    float *e = dev_floats(1000);
    CHECK_CUDA(cudaMemcpy(e, d, 1000 * sizeof(float), cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaMemcpy(h.data(), e, 1000 * sizeof(float), cudaMemcpyDefault));
    CHECK(all_equal(h, 3.0f));
    size_t free_bytes = 0, total = 0;
    CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total));
    CHECK(free_bytes > 0 && free_bytes <= total);
    void *null = &h;
    CHECK_CUDA(cudaMalloc(&null, 0));
    CHECK(null == nullptr);
    CHECK_CUDA(cudaFree(nullptr));
    void *pinned = nullptr;
    CHECK_CUDA(cudaMallocHost(&pinned, 4096));
    CHECK(pinned != nullptr);
    CHECK_CUDA(cudaFreeHost(pinned));
    CHECK_CUDA(cudaFree(d));
    CHECK_CUDA(cudaFree(e));
}

static void test_device_info() {
    int count = 0, dev = -1, v = 0;
    CHECK_CUDA(cudaGetDeviceCount(&count));
    CHECK(count >= 1);
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaGetDevice(&dev));
    CHECK(dev == 0);
    CHECK_EQ_ERR(cudaSetDevice(count), cudaErrorInvalidDevice);
    CHECK_EQ_ERR(cudaGetLastError(), cudaErrorInvalidDevice);
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    CHECK(prop.major >= 9 && prop.totalGlobalMem > 0 && prop.multiProcessorCount > 0);
    CHECK_CUDA(cudaRuntimeGetVersion(&v));
    CHECK(v >= 13000);
    CHECK_CUDA(cudaDriverGetVersion(&v));
    CHECK(v >= 13000);
    CHECK(strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0);
    CHECK(strcmp(cudaGetErrorName(cudaErrorInvalidConfiguration),
                 "cudaErrorInvalidConfiguration") == 0);
    CHECK(strcmp(cudaGetErrorString(cudaSuccess), "no error") == 0);
}

/* ---- Streams, events, graphs -------------------------------------------- */

static void test_blocking_stream_is_synchronised() {
    const int n = 5000;
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreate(&s)); /* blocking: the legacy stream waits for it */
    float *d = dev_floats(n);
    HCNN_LAUNCH(k_fill, (n + 255) / 256, 256, s, d, 2.0f, n);
    CHECK(all_equal(download(d, n), 2.0f));
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaFree(d));
}

static void test_pageable_upload_is_staged() {
    const int n = 1000;
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *d = dev_floats(n);
    std::vector<float> h(n, 1.0f);
    CHECK_CUDA(cudaMemcpyAsync(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    std::fill(h.begin(), h.end(), 2.0f); /* allowed: pageable memory is staged */
    CHECK_CUDA(cudaMemsetAsync(d + n / 2, 0, n / 2 * sizeof(float), s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    std::vector<float> r = download(d, n);
    CHECK(all_equal(std::vector<float>(r.begin(), r.begin() + n / 2), 1.0f));
    CHECK(all_equal(std::vector<float>(r.begin() + n / 2, r.end()), 0.0f));
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaFree(d));
}

static void test_events() {
    const int n = 1 << 16;
    cudaStream_t s;
    cudaEvent_t e0, e1, untimed, never;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreateWithFlags(&e1, cudaEventDefault));
    CHECK_CUDA(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreate(&never));
    float *d = dev_floats(n);
    CHECK_CUDA(cudaEventRecord(e0, s));
    HCNN_LAUNCH(k_fill, n / 256, 256, s, d, 1.0f, n);
    CHECK_CUDA(cudaEventRecord(e1, s));
    CHECK_CUDA(cudaEventRecord(untimed, s));
    float ms = -1.0f;
#ifdef HCNN_CUDA_EMULATION
    /* nothing has waited yet: nothing ran */
    CHECK_EQ_ERR(cudaEventElapsedTime(&ms, e0, e1), cudaErrorNotReady);
    CHECK_CUDA(cudaGetLastError());
    CHECK_EQ_ERR(cudaEventQuery(e1), cudaErrorNotReady);
#endif
    CHECK_CUDA(cudaEventSynchronize(e1));
    CHECK_CUDA(cudaEventQuery(e1));
    CHECK_CUDA(cudaEventQuery(never)); /* never recorded: complete */
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    CHECK(ms >= 0.0f);
    CHECK_CUDA(cudaEventSynchronize(untimed));
    CHECK_EQ_ERR(cudaEventElapsedTime(&ms, e0, untimed), cudaErrorInvalidResourceHandle);
    CHECK_EQ_ERR(cudaEventElapsedTime(&ms, e0, never), cudaErrorInvalidResourceHandle);
    CHECK_EQ_ERR(cudaGetLastError(), cudaErrorInvalidResourceHandle);

    /* s2 waits for s1's work through an event: synchronising s2 alone suffices */
    cudaStream_t s1 = s, s2;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    float *a = dev_floats(n), *b = dev_floats(n);
    HCNN_LAUNCH(k_fill, n / 256, 256, s1, a, 2.0f, n);
    CHECK_CUDA(cudaEventRecord(e0, s1));
    CHECK_CUDA(cudaStreamWaitEvent(s2, e0, 0));
    HCNN_LAUNCH(k_scale, n / 256, 256, s2, b, a, 3.0f, n);
    CHECK_CUDA(cudaStreamSynchronize(s2));
    CHECK(all_equal(download(b, n), 6.0f));
    CHECK_CUDA(cudaStreamSynchronize(s1));

    for (cudaEvent_t e : {e0, e1, untimed, never})
        CHECK_CUDA(cudaEventDestroy(e));
    CHECK_CUDA(cudaStreamDestroy(s1));
    CHECK_CUDA(cudaStreamDestroy(s2));
    CHECK_CUDA(cudaFree(d));
    CHECK_CUDA(cudaFree(a));
    CHECK_CUDA(cudaFree(b));
}

static void test_graph_replay() {
    const int n = 3000;
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *d1 = dev_floats(n), *d2 = dev_floats(n);
    CHECK_CUDA(cudaMemset(d1, 0, n * sizeof(float)));
    CHECK_CUDA(cudaMemset(d2, 0, n * sizeof(float)));
    float *target = d1;
    float step = 1.0f;
    cudaStreamCaptureStatus status;
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK_CUDA(cudaStreamIsCapturing(s, &status));
    CHECK(status == cudaStreamCaptureStatusActive);
    HCNN_LAUNCH(k_add, (n + 255) / 256, 256, s, target, step, n);
    CHECK_CUDA(cudaMemsetAsync(d2, 0, sizeof(float), s));
    cudaGraph_t g = nullptr;
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    CHECK(g != nullptr);
    CHECK_CUDA(cudaStreamIsCapturing(s, &status));
    CHECK(status == cudaStreamCaptureStatusNone);
    target = d2; /* the graph keeps what it captured */
    step = 100.0f;
    cudaGraphExec_t x = nullptr;
    CHECK_CUDA(cudaGraphInstantiate(&x, g, 0));
    CHECK_CUDA(cudaGraphLaunch(x, s));
    CHECK_CUDA(cudaGraphLaunch(x, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK(all_equal(download(d1, n), 2.0f));
    CHECK(all_equal(download(d2, n), 0.0f));
    CHECK_CUDA(cudaGraphExecDestroy(x));
    CHECK_CUDA(cudaGraphDestroy(g));
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaFree(d1));
    CHECK_CUDA(cudaFree(d2));
}

static void test_graph_captures_cublas() {
    cublasHandle_t h;
    CHECK_BLAS(cublasCreate(&h));
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK_BLAS(cublasSetStream(h, s));
    const float a[4] = {2, 0, 0, 2}, b[4] = {1, 1, 1, 1};
    float *da = dev_floats(4), *db = dev_floats(4), *dc = dev_floats(4);
    CHECK_CUDA(cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(dc, 0, 4 * sizeof(float)));
    float alpha = 1.0f, beta = 1.0f;
    cudaGraph_t g = nullptr;
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHECK_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, da, 2, db, 2, &beta, dc,
                           2));
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    alpha = 100.0f; /* host scalars are read when the call is made (captured) */
    cudaGraphExec_t x = nullptr;
    CHECK_CUDA(cudaGraphInstantiate(&x, g, 0));
    for (int i = 0; i < 3; ++i)
        CHECK_CUDA(cudaGraphLaunch(x, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK(all_equal(download(dc, 4), 6.0f));
    CHECK_CUDA(cudaGraphExecDestroy(x));
    CHECK_CUDA(cudaGraphDestroy(g));
    CHECK_BLAS(cublasDestroy(h));
    CHECK_CUDA(cudaStreamDestroy(s));
    for (float *p : {da, db, dc})
        CHECK_CUDA(cudaFree(p));
}

static void test_capture_refuses_sync_calls() {
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *d = dev_floats(256);
    float h[256];
    cudaStreamCaptureStatus status;
    cudaGraph_t g = nullptr;

    /* a synchronous copy during a global-mode capture */
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    HCNN_LAUNCH(k_fill, 1, 256, s, d, 1.0f, 256);
    CHECK_EQ_ERR(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost),
                 cudaErrorStreamCaptureUnsupported);
    CHECK_CUDA(cudaStreamIsCapturing(s, &status));
    CHECK(status == cudaStreamCaptureStatusInvalidated);
    CHECK_EQ_ERR(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    CHECK(g == nullptr);

    /* waiting for the capturing stream itself, even in relaxed mode */
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CHECK_EQ_ERR(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    CHECK_EQ_ERR(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);

    CHECK_EQ_ERR(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal),
                 cudaErrorStreamCaptureUnsupported);
    CHECK_EQ_ERR(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);
    (void)cudaGetLastError();
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaFree(d));
}

/* ---- cuBLAS -------------------------------------------------------------- */

/* C = alpha op(A) op(B) + beta C, column-major, in double; also sum |a||b| */
static void gemm_ref(bool ta, bool tb, int m, int n, int k, float alpha,
                     const std::vector<float> &a, int lda, const std::vector<float> &b, int ldb,
                     float beta, std::vector<double> &c, int ldc, std::vector<double> &mag) {
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
            double s = 0, sm = 0;
            for (int p = 0; p < k; ++p) {
                double x = ta ? a[i * lda + p] : a[p * lda + i];
                double y = tb ? b[p * ldb + j] : b[j * ldb + p];
                s += x * y;
                sm += fabs(x * y);
            }
            c[j * ldc + i] = alpha * s + beta * c[j * ldc + i];
            mag[j * ldc + i] = fabs(alpha) * sm + fabs(beta * c[j * ldc + i]);
        }
}

struct gemm_case {
    int m, n, k;
    bool ta, tb;
    int lda, ldb, ldc;
    std::vector<float> a, b, c;
};

static gemm_case make_case(int m, int n, int k, bool ta, bool tb, bool integers) {
    gemm_case g{m, n, k, ta, tb, (ta ? k : m) + 3, (tb ? n : k) + 2, m + 1, {}, {}, {}};
    g.a.resize(static_cast<size_t>(g.lda) * (ta ? m : k));
    g.b.resize(static_cast<size_t>(g.ldb) * (tb ? k : n));
    g.c.resize(static_cast<size_t>(g.ldc) * n);
    for (std::vector<float> *v : {&g.a, &g.b, &g.c})
        for (float &x : *v)
            x = integers ? std::round(rnd() * 4.0f) : rnd();
    return g;
}

/* runs one case through cublasSgemm (or GemmEx in bf16), returns C */
static std::vector<float> run_case(cublasHandle_t h, const gemm_case &g, float alpha, float beta,
                                   bool bf16) {
    float *da = dev_floats(g.a.size()), *db = dev_floats(g.b.size()), *dc = dev_floats(g.c.size());
    upload(dc, g.c);
    cublasOperation_t oa = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (!bf16) {
        upload(da, g.a);
        upload(db, g.b);
        CHECK_BLAS(cublasSgemm(h, oa, ob, g.m, g.n, g.k, &alpha, da, g.lda, db, g.ldb, &beta, dc,
                               g.ldc));
    } else {
        std::vector<__nv_bfloat16> a16(g.a.size()), b16(g.b.size());
        for (size_t i = 0; i < g.a.size(); ++i)
            a16[i] = __float2bfloat16(g.a[i]);
        for (size_t i = 0; i < g.b.size(); ++i)
            b16[i] = __float2bfloat16(g.b[i]);
        CHECK_CUDA(cudaMemcpy(da, a16.data(), a16.size() * 2, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(db, b16.data(), b16.size() * 2, cudaMemcpyHostToDevice));
        CHECK_BLAS(cublasGemmEx(h, oa, ob, g.m, g.n, g.k, &alpha, da, CUDA_R_16BF, g.lda, db,
                                CUDA_R_16BF, g.ldb, &beta, dc, CUDA_R_32F, g.ldc,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<float> c = download(dc, g.c.size());
    CHECK_CUDA(cudaFree(da));
    CHECK_CUDA(cudaFree(db));
    CHECK_CUDA(cudaFree(dc));
    return c;
}

/* |got - want| within float rounding of a k-term sum (tol_rel more for TF32);
 * the padding rows of C untouched */
static int compare(const gemm_case &g, const std::vector<float> &got, float alpha, float beta,
                   const std::vector<float> &a, const std::vector<float> &b, double tol_rel) {
    std::vector<double> want(g.c.begin(), g.c.end()), mag(g.c.size());
    gemm_ref(g.ta, g.tb, g.m, g.n, g.k, alpha, a, g.lda, b, g.ldb, beta, want, g.ldc, mag);
    int bad = 0;
    for (int j = 0; j < g.n; ++j)
        for (int i = 0; i < g.ldc; ++i) {
            size_t at = static_cast<size_t>(j) * g.ldc + i;
            if (i >= g.m) {
                bad += bits(got[at]) != bits(g.c[at]);
                continue;
            }
            double tol = (g.k + 2) * 0x1p-24 * mag[at] + tol_rel * mag[at];
            bad += fabs(got[at] - want[at]) > tol;
        }
    return bad;
}

static void test_sgemm_transpositions() {
    cublasHandle_t h;
    CHECK_BLAS(cublasCreate(&h));
    int version = 0;
    CHECK_BLAS(cublasGetVersion(h, &version));
    CHECK(version >= 130000);
    for (int t = 0; t < 4; ++t) {
        bool ta = t & 1, tb = t & 2;
        /* small integers: every product and sum is exact */
        gemm_case g = make_case(5, 4, 3, ta, tb, true);
        std::vector<float> c = run_case(h, g, 2.0f, -1.0f, false);
        CHECK(compare(g, c, 2.0f, -1.0f, g.a, g.b, 0.0) == 0);
        std::vector<double> want(g.c.begin(), g.c.end()), mag(g.c.size());
        gemm_ref(ta, tb, g.m, g.n, g.k, 2.0f, g.a, g.lda, g.b, g.ldb, -1.0f, want, g.ldc, mag);
        for (int j = 0; j < g.n; ++j)
            for (int i = 0; i < g.m; ++i)
                CHECK(c[j * g.ldc + i] == static_cast<float>(want[j * g.ldc + i]));
        /* random floats, beta 0 over a C full of NaN is still defined */
        gemm_case r = make_case(33, 17, 65, ta, tb, false);
        std::vector<float> cr = run_case(h, r, 0.5f, 0.25f, false);
        CHECK(compare(r, cr, 0.5f, 0.25f, r.a, r.b, 0.0) == 0);
    }
    CHECK_BLAS(cublasDestroy(h));
}

static void test_sgemm_invalid() {
    cublasHandle_t h;
    CHECK_BLAS(cublasCreate(&h));
    float *d = dev_floats(64);
    float one = 1.0f;
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 3, d, 4, &one, d, 4) ==
          CUBLAS_STATUS_INVALID_VALUE); /* lda < m */
    CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 4, 4, 5, &one, d, 4, d, 5, &one, d, 4) ==
          CUBLAS_STATUS_INVALID_VALUE); /* lda < k for A^T */
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, 4, 5, 4, &one, d, 4, d, 4, &one, d, 4) ==
          CUBLAS_STATUS_INVALID_VALUE); /* ldb < n for B^T */
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d, 4, &one, d, 3) ==
          CUBLAS_STATUS_INVALID_VALUE); /* ldc < m */
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, d, 4, d, 4, &one, d, 4) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, nullptr, d, 4, d, 4, &one, d, 4) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 4, 4, &one, d, 1, d, 4, &one, d, 1) ==
          CUBLAS_STATUS_SUCCESS); /* empty: nothing to do */
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, CUDA_R_16BF, 4, d,
                       CUDA_R_16BF, 4, &one, d, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F_FAST_TF32,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH) == CUBLAS_STATUS_SUCCESS);
    cublasMath_t mode = CUBLAS_DEFAULT_MATH;
    CHECK(cublasGetMathMode(h, &mode) == CUBLAS_STATUS_SUCCESS && mode == CUBLAS_PEDANTIC_MATH);
    CHECK_CUDA(cudaFree(d));
    CHECK_BLAS(cublasDestroy(h));
}

#ifdef HCNN_CUDA_EMULATION
static float tf32(float v) { /* round to nearest, ties away from zero */
    uint32_t u = bits(v);
    u = (u + 0x1000u) & 0xffffe000u;
    float r;
    memcpy(&r, &u, sizeof r);
    return r;
}
#endif

static void test_tf32() {
    cublasHandle_t h;
    CHECK_BLAS(cublasCreate(&h));
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK_BLAS(cublasSetStream(h, s));
    cudaStream_t got = 0;
    CHECK_BLAS(cublasGetStream(h, &got));
    CHECK(got == s);
    gemm_case g = make_case(40, 30, 200, false, true, false);
    std::vector<float> full = run_case(h, g, 1.0f, 0.0f, false);
    CHECK_BLAS(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
    std::vector<float> t = run_case(h, g, 1.0f, 0.0f, false);
    /* within TF32's rounding of both inputs (2 x 2^-11 relative) of the exact product */
    CHECK(compare(g, t, 1.0f, 0.0f, g.a, g.b, 2.0 * 0x1p-11 + 0x1p-22) == 0);
    int differ = 0;
    for (size_t i = 0; i < t.size(); ++i)
        differ += t[i] != full[i];
    CHECK(differ > 0); /* TF32 shows */
#ifdef HCNN_CUDA_EMULATION
    /* exactly: float sums of the TF32-rounded inputs */
    std::vector<float> ra(g.a), rb(g.b);
    for (float &x : ra)
        x = tf32(x);
    for (float &x : rb)
        x = tf32(x);
    CHECK(compare(g, t, 1.0f, 0.0f, ra, rb, 0.0) == 0);
    /* the compute type asks for the same thing */
    CHECK_BLAS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    float *da = dev_floats(g.a.size()), *db = dev_floats(g.b.size()), *dc = dev_floats(g.c.size());
    upload(da, g.a);
    upload(db, g.b);
    float one = 1.0f, zero = 0.0f;
    CHECK_BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, g.m, g.n, g.k, &one, da, CUDA_R_32F,
                            g.lda, db, CUDA_R_32F, g.ldb, &zero, dc, CUDA_R_32F, g.ldc,
                            CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    CHECK_CUDA(cudaStreamSynchronize(s));
    std::vector<float> x = download(dc, g.c.size());
    int same = 0;
    for (int j = 0; j < g.n; ++j)
        for (int i = 0; i < g.m; ++i)
            same += x[j * g.ldc + i] == t[j * g.ldc + i];
    CHECK(same == g.m * g.n);
    CHECK_CUDA(cudaFree(da));
    CHECK_CUDA(cudaFree(db));
    CHECK_CUDA(cudaFree(dc));
#endif
    CHECK_BLAS(cublasDestroy(h));
    CHECK_CUDA(cudaStreamDestroy(s));
}

static void test_gemmex_bf16() {
    cublasHandle_t h;
    CHECK_BLAS(cublasCreate(&h));
    for (int t = 0; t < 4; ++t) {
        gemm_case g = make_case(21, 13, 37, t & 1, t & 2, false);
        std::vector<float> c = run_case(h, g, 1.5f, 0.5f, true);
        std::vector<float> a(g.a), b(g.b); /* what the GPU multiplies: the bf16 values */
        for (float &x : a)
            x = __bfloat162float(__float2bfloat16(x));
        for (float &x : b)
            x = __bfloat162float(__float2bfloat16(x));
        CHECK(compare(g, c, 1.5f, 0.5f, a, b, 0.0) == 0);
    }
    CHECK_BLAS(cublasDestroy(h));
}

/* ---- The emulation's own promises ---------------------------------------- */

#ifdef HCNN_CUDA_EMULATION

/* Runs f in a child; true if it died of signal sig (SIGABRT: an abort)
 * with `needle` on stderr. */
template <class F> static bool dies_with(F f, const char *needle, int sig = SIGABRT) {
    fflush(stdout);
    int fd[2];
    if (pipe(fd) != 0)
        return false;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        f();
        _exit(0);
    }
    close(fd[1]);
    std::string err;
    char buf[512];
    ssize_t r;
    while ((r = read(fd[0], buf, sizeof buf)) > 0)
        err.append(buf, static_cast<size_t>(r));
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    bool ok = WIFSIGNALED(status) && WTERMSIG(status) == sig &&
              err.find(needle) != std::string::npos;
    if (!ok)
        printf("# child status %d, stderr: %s\n", status, err.c_str());
    else
        printf("# %s", err.c_str());
    return ok;
}

static void test_syncthreads_in_plain_launch_aborts() {
    float *d = dev_floats(64);
    CHECK(dies_with(
        [d] {
            HCNN_LAUNCH(k_sync_plain, 1, 64, 0, d);
            cudaDeviceSynchronize();
        },
        "k_sync_plain")); /* "...: launch it with HCNN_LAUNCH_BARRIER, at k_sync_plain" */
    CHECK(dies_with(
        [d] {
            HCNN_LAUNCH(k_sync_plain, 1, 64, 0, d);
            cudaDeviceSynchronize();
        },
        "launch it with HCNN_LAUNCH_BARRIER"));
    CHECK(dies_with(
        [d] {
            HCNN_LAUNCH_BARRIER(k_diverge, 1, 64, 0, 0, d);
            cudaDeviceSynchronize();
        },
        "returned while 16 threads of its block wait at __syncthreads()"));
    CHECK_CUDA(cudaFree(d));
}

static void test_new_memory_is_nan() {
    float *d = dev_floats(1000);
    std::vector<float> h = download(d, 1000);
    int nan = 0;
    for (float x : h)
        nan += bits(x) == 0x7fc00000u;
    CHECK(nan == 1000);
    CHECK_CUDA(cudaFree(d));
    void *p = nullptr;
    CHECK_CUDA(cudaMallocHost(&p, 64));
    CHECK(bits(*static_cast<float *>(p)) == 0x7fc00000u);
    CHECK_CUDA(cudaFreeHost(p));
}

/* Out of bounds, as compute-sanitizer's memcheck finds it on a GPU: past
 * the 256-byte rounding of a block, a read or a write faults in its guard
 * page (SIGSEGV, the block named); past its size within the rounding, or
 * below its start, a write is found at cudaFree (abort, the offset named);
 * within the block, nothing is said */
static void test_out_of_bounds() {
    float *d = dev_floats(1000), *out = dev_floats(1); /* 4000 bytes: 4096 rounded */
    HCNN_LAUNCH(k_store_at, 1, 1, 0, d, 999L);
    HCNN_LAUNCH(k_load_at, 1, 1, 0, d, 999L, out);
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK(download(out, 1)[0] == 1.0f);
    CHECK(dies_with(
        [d] {
            HCNN_LAUNCH(k_store_at, 1, 1, 0, d, 1024L);
            cudaDeviceSynchronize();
        },
        "device memory accessed out of bounds", SIGSEGV));
    CHECK(dies_with(
        [d, out] {
            HCNN_LAUNCH(k_load_at, 1, 1, 0, d, 1030L, out);
            cudaDeviceSynchronize();
        },
        "4120 bytes past the start of a block of 4000 bytes", SIGSEGV));
    CHECK(dies_with(
        [d] {
            HCNN_LAUNCH(k_store_at, 1, 1, 0, d, 1000L); /* inside the rounding */
            cudaFree(d);
        },
        "the 4 bytes at +4000 from the start of a block of 4000 bytes at"));
    float *e = dev_floats(100); /* 400 bytes: 512 at the end of a page, 3584 below */
    CHECK(dies_with(
        [e] {
            HCNN_LAUNCH(k_store_at, 1, 1, 0, e, -1L);
            cudaFree(e);
        },
        "the 4 bytes at -4 from the start of a block of 400 bytes at"));
    CHECK_CUDA(cudaFree(e));
    CHECK_CUDA(cudaFree(out));
    CHECK_CUDA(cudaFree(d));
}

static void test_memcpy_kind_checked() {
    float *d = dev_floats(16);
    float h[16] = {0};
    CHECK_EQ_ERR(cudaMemcpy(h, d, sizeof h, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    CHECK_EQ_ERR(cudaGetLastError(), cudaErrorInvalidValue);
    CHECK_EQ_ERR(cudaMemcpy(d, h, sizeof h, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    CHECK_EQ_ERR(cudaMemcpy(h, h + 8, 8 * sizeof(float), cudaMemcpyDeviceToDevice),
                 cudaErrorInvalidValue);
    CHECK_EQ_ERR(cudaMemcpy(d, d, sizeof h, cudaMemcpyHostToHost), cudaErrorInvalidValue);
    std::vector<float> big(17);
    CHECK_EQ_ERR(cudaMemcpy(big.data(), d, 17 * sizeof(float), cudaMemcpyDeviceToHost),
                 cudaErrorInvalidValue); /* past the end of the block */
    CHECK_EQ_ERR(cudaMemcpy(h, d, sizeof h, static_cast<cudaMemcpyKind>(7)),
                 cudaErrorInvalidMemcpyDirection);
    CHECK_EQ_ERR(cudaMemset(h, 0, sizeof h), cudaErrorInvalidValue);
    CHECK_EQ_ERR(cudaFree(h), cudaErrorInvalidValue);
    CHECK_EQ_ERR(cudaFreeHost(h), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CHECK_CUDA(cudaFree(d));
    CHECK_EQ_ERR(cudaFree(d), cudaErrorInvalidValue); /* twice */
    (void)cudaGetLastError();
}

static void test_stale_read_without_sync() {
    const int n = 4096;
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *d = dev_floats(n);
    HCNN_LAUNCH(k_fill, n / 256, 256, s, d, 1.0f, n);
    CHECK(all_equal(download(d, n), NAN)); /* the non-blocking stream has not run */
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK(all_equal(download(d, n), 1.0f));

    /* a download queued on the stream writes the host only when it runs */
    float *pinned = nullptr;
    CHECK_CUDA(cudaMallocHost(&pinned, n * sizeof(float)));
    HCNN_LAUNCH(k_fill, n / 256, 256, s, d, 5.0f, n);
    CHECK_CUDA(cudaMemcpyAsync(pinned, d, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(bits(pinned[0]) == 0x7fc00000u);
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK(pinned[0] == 5.0f && pinned[n - 1] == 5.0f);
    CHECK_CUDA(cudaFreeHost(pinned));
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaFree(d));
}

static void test_out_of_arena() {
    size_t free_bytes = 0, total = 0;
    CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total));
    CHECK(total == 256u << 20); /* HCNN_EMU_DEVICE_MB=256, set by main */
    CHECK(free_bytes == total); /* every case freed its memory */
    void *p = nullptr;
    CHECK_EQ_ERR(cudaMalloc(&p, total + 1), cudaErrorMemoryAllocation);
    CHECK_EQ_ERR(cudaGetLastError(), cudaErrorMemoryAllocation);
    /* three blocks; freeing two neighbours makes one free range again */
    void *a = nullptr, *b = nullptr, *c = nullptr;
    CHECK_CUDA(cudaMalloc(&a, total / 4));
    CHECK_CUDA(cudaMalloc(&b, total / 4));
    CHECK_CUDA(cudaMalloc(&c, total / 4));
    CHECK_EQ_ERR(cudaMalloc(&p, total / 2), cudaErrorMemoryAllocation);
    CHECK_CUDA(cudaFree(b));
    CHECK_CUDA(cudaFree(a));
    CHECK_CUDA(cudaMalloc(&p, total / 2));
    CHECK(p == a);
    CHECK_CUDA(cudaFree(p));
    CHECK_CUDA(cudaFree(c));
    CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total));
    CHECK(free_bytes == total);
    (void)cudaGetLastError();
}

static void test_shared_memory_limit() {
    float *d = dev_floats(256);
    HCNN_LAUNCH_BARRIER(k_block_sum, 1, 256, 48 * 1024 + 1, 0, d, d, 256);
    CHECK_EQ_ERR(cudaGetLastError(), cudaErrorInvalidValue);
    CHECK_CUDA(cudaFree(d));
}

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/* Not a check: what one emulated thread costs (printed as a comment). */
static void test_launch_cost() {
    const int n = 1 << 24;
    float *d = dev_floats(n);
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    HCNN_LAUNCH(k_store, n / 256, 256, s, d); /* first touch of the pages */
    CHECK_CUDA(cudaStreamSynchronize(s));
    double best = 1e9;
    for (int r = 0; r < 3; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        HCNN_LAUNCH(k_store, n / 256, 256, s, d);
        CHECK_CUDA(cudaStreamSynchronize(s));
        best = std::min(best, seconds_since(t0));
    }
    printf("# plain launch: %.2f ns per thread (%d threads, a store each)\n", best * 1e9 / n, n);
    const int blocks = 4096;
    auto t0 = std::chrono::steady_clock::now();
    HCNN_LAUNCH_BARRIER(k_block_sum, blocks, 256, 0, s, d, d + blocks * 256, blocks * 256);
    CHECK_CUDA(cudaStreamSynchronize(s));
    double t = seconds_since(t0);
    printf("# barrier launch: %.2f ns per thread, %.2f ns per thread and barrier (%d blocks of "
           "256, 9 barriers)\n",
           t * 1e9 / (blocks * 256.0), t * 1e9 / (blocks * 256.0 * 9), blocks);
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaFree(d));
}

#endif

/* ---- Main ---------------------------------------------------------------- */

static const test_case cases[] = {
    {"grid_3d", test_grid_3d},
    {"invalid_launch", test_invalid_launch},
    {"barrier_sum", test_barrier_sum},
    {"barrier_transpose", test_barrier_transpose},
    {"device_math", test_device_math},
    {"bfloat16", test_bfloat16},
    {"memory_basics", test_memory_basics},
    {"device_info", test_device_info},
    {"blocking_stream_is_synchronised", test_blocking_stream_is_synchronised},
    {"pageable_upload_is_staged", test_pageable_upload_is_staged},
    {"events", test_events},
    {"graph_replay", test_graph_replay},
    {"graph_captures_cublas", test_graph_captures_cublas},
    {"capture_refuses_sync_calls", test_capture_refuses_sync_calls},
    {"sgemm_transpositions", test_sgemm_transpositions},
    {"sgemm_invalid", test_sgemm_invalid},
    {"tf32", test_tf32},
    {"gemmex_bf16", test_gemmex_bf16},
#ifdef HCNN_CUDA_EMULATION
    {"syncthreads_in_plain_launch_aborts", test_syncthreads_in_plain_launch_aborts},
    {"new_memory_is_nan", test_new_memory_is_nan},
    {"out_of_bounds", test_out_of_bounds},
    {"memcpy_kind_checked", test_memcpy_kind_checked},
    {"stale_read_without_sync", test_stale_read_without_sync},
    {"shared_memory_limit", test_shared_memory_limit},
    {"out_of_arena", test_out_of_arena},
    {"launch_cost", test_launch_cost},
#endif
};

int main() {
#ifdef HCNN_CUDA_EMULATION
    setenv("HCNN_EMU_DEVICE_MB", "256", 1); /* before the first call maps the arena */
#endif
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) { /* the nvcc build on a machine without a GPU */
        printf("# no CUDA device: %s\n", cudaGetErrorString(e));
        printf("[==========] 0 test(s) run.\n[  SKIPPED ] all: no CUDA device\n");
        return 77;
    }
    return run_cases(cases, sizeof cases / sizeof *cases);
}
