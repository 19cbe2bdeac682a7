/* The emulated runtime's errors: the host thread's last error (CUDA keeps
 * it per thread), the texts of the error codes, the API lock, the fatal
 * message.  Below the rest of the emulation (runtime.cc: the device;
 * memory.cc, stream.cc, launch.cc, cublas.cc), which all report here. */
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

} /* extern "C" */
