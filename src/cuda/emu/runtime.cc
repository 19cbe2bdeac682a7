/* The emulated device and the runtime's errors: one device (compute
 * capability 9.0, an H100's launch limits and SM count, so that a backend
 * that sizes its grids by them launches the same shapes as on the GPU),
 * the host thread's last error, the API lock, the fatal message. */
#include "emu_internal.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace hcnn_emu {

/* State: the last error of each host thread (CUDA keeps it per thread). */
static thread_local cudaError_t last_error = cudaSuccess;

std::recursive_mutex &api_mutex() {
    static std::recursive_mutex *m = new std::recursive_mutex; /* never destroyed: atexit-safe */
    return *m;
}

void die(const char *where, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    fprintf(stderr, "hcnn: cuda emulation: %s, at %s\n", what, where);
    fflush(stderr);
    abort();
}

cudaError_t record(cudaError_t e) {
    if (e != cudaSuccess && e != cudaErrorNotReady) /* "not actually an error" */
        last_error = e;
    return e;
}

size_t arena_total(); /* memory.cc */

} // namespace hcnn_emu

using namespace hcnn_emu;

namespace {

struct error_text {
    cudaError_t code;
    const char *name, *text;
};

/* cudaGetErrorName / cudaGetErrorString, with the real runtime's texts */
const error_text errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorIllegalState, "cudaErrorIllegalState",
     "the operation cannot be performed in the present state"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {cudaErrorCapturedEvent, "cudaErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const error_text *find_error(cudaError_t e) {
    for (const error_text &t : errors)
        if (t.code == e)
            return &t;
    return nullptr;
}

} // namespace

extern "C" {

const char *cudaGetErrorString(cudaError_t error) {
    const error_text *t = find_error(error);
    return t ? t->text : "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t error) {
    const error_text *t = find_error(error);
    return t ? t->name : "unrecognized error code";
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

cudaError_t cudaGetDeviceCount(int *count) {
    if (!count)
        return record(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    return record(device == 0 ? cudaSuccess : cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int *device) {
    if (!device)
        return record(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (!prop)
        return record(cudaErrorInvalidValue);
    if (device != 0)
        return record(cudaErrorInvalidDevice);
    api_lock lock(api_mutex());
    *prop = cudaDeviceProp{};
    snprintf(prop->name, sizeof prop->name, "%s", "hcnn CUDA emulation");
    prop->totalGlobalMem = arena_total();
    prop->sharedMemPerBlock = 48 * 1024;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    prop->l2CacheSize = 50 * 1024 * 1024;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->sharedMemPerMultiprocessor = 228 * 1024;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *driverVersion) {
    if (!driverVersion)
        return record(cudaErrorInvalidValue);
    *driverVersion = 13000;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
    if (!runtimeVersion)
        return record(cudaErrorInvalidValue);
    *runtimeVersion = 13000;
    return cudaSuccess;
}

} /* extern "C" */
