/* What the emulation's files share: the streams' queues, the device arena's
 * checks, the error helpers.  Not for the backend (it sees emu.h only).
 * Every API entry point takes api_mutex() for its whole duration, so the
 * state below is touched by one host thread at a time; the queued
 * operations run under it too (a kernel's OpenMP threads never call the
 * API). */
#ifndef HCNN_CUDA_EMU_INTERNAL_H
#define HCNN_CUDA_EMU_INTERNAL_H

#include "emu.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace hcnn_emu {

/* One queued operation: a kernel grid, a copy, a memset, a GEMM, an event's
 * time stamp, a wait for another stream, a graph's operations. */
using op = std::function<void()>;

/* A capture in progress on one stream: what would have been queued. */
struct capture {
    uint64_t id;
    cudaStreamCaptureMode mode;
    std::thread::id thread;
    bool invalidated;
    std::vector<op> ops;
};

} // namespace hcnn_emu

struct CUstream_st {
    unsigned int flags; /* cudaStreamNonBlocking or cudaStreamDefault */
    bool legacy;        /* the legacy default stream, handle 0 */
    std::deque<hcnn_emu::op> queue;
    uint64_t enqueued; /* operations ever queued: the next one's position */
    uint64_t executed; /* operations run: the queue holds enqueued - executed */
    bool running;      /* one of its operations is running */
    std::unique_ptr<hcnn_emu::capture> cap;
};

struct CUgraph_st {
    std::vector<hcnn_emu::op> ops;
};

struct CUgraphExec_st {
    /* shared with the launches still queued, so that destroying the exec
     * while a launch is pending is safe, as in CUDA */
    std::shared_ptr<const std::vector<hcnn_emu::op>> ops;
};

namespace hcnn_emu {

using stream_ptr = std::shared_ptr<CUstream_st>;
using api_lock = std::lock_guard<std::recursive_mutex>;

std::recursive_mutex &api_mutex();

/* stderr "hcnn: cuda emulation: <what>, at <where>", then abort(): for
 * programming errors that a GPU turns into undefined behaviour. */
[[noreturn]] void die(const char *where, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Records a failure as the host thread's last error (cudaGetLastError) and
 * returns it; cudaSuccess and cudaErrorNotReady pass through. */
cudaError_t record(cudaError_t e);

/* The stream behind a handle (0: the legacy stream), or null when the
 * handle is not a live stream. */
stream_ptr find_stream(cudaStream_t handle);
bool is_blocking(const CUstream_st &s);

/* Queues an operation on a stream, or appends it to the stream's capture;
 * adds the waits that the legacy stream's semantics imply.  Returns the
 * error to report (not recorded). */
cudaError_t enqueue(cudaStream_t handle, op o);

/* Runs a stream's queue until `upto` operations have run. */
void drain(CUstream_st &s, uint64_t upto);
/* Every stream (cudaDeviceSynchronize, cudaFree). */
void drain_all();
/* What a synchronous call on the legacy stream waits for: the legacy
 * stream and the blocking streams, not the non-blocking ones. */
void drain_legacy();

/* A "potentially unsafe" call during a capture (cudaMalloc, cudaFree,
 * the synchronous copies, cudaDeviceSynchronize): the captures that forbid
 * it are invalidated and cudaErrorStreamCaptureUnsupported is returned. */
cudaError_t check_unsafe_during_capture();
/* A call on the legacy stream while a blocking stream captures: that
 * capture is invalidated and cudaErrorStreamCaptureImplicit returned. */
cudaError_t check_legacy_during_capture();

/* Device memory: inside the arena, and [p, p + n) inside one live block. */
bool in_arena(const void *p);
bool device_range(const void *p, size_t n);

} // namespace hcnn_emu

#endif
