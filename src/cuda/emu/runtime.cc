/* The emulated device: one device (compute capability 9.0, an H100's
 * launch limits and SM count, so that a backend that sizes its grids by
 * them launches the same shapes as on the GPU), its properties and
 * versions (the runtime's errors: errors.cc). */
#include "emu_internal.h"

#include <cstdio>

namespace hcnn_emu {

size_t arena_total(); /* memory.cc */

} // namespace hcnn_emu

using namespace hcnn_emu;

extern "C" {

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
