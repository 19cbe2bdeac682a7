/* What the CUDA backend's sources (the .cu files of src/cuda/) see of CUDA: the real
 * runtime and cuBLAS under nvcc, or the emulation kept in the tree
 * (src/cuda/emu/, ./configure --enable-cuda-emulation), which gives the
 * same names with the same semantics on the host, so that the backend is
 * built and tested on every commit without a GPU.
 *
 * Kernels launch only through HCNN_LAUNCH (one thread per output, no
 * barrier) or HCNN_LAUNCH_BARRIER (a kernel that uses __shared__ memory and
 * __syncthreads: the emulation runs each block's threads as fibres that
 * meet at every barrier).  Under nvcc they are <<<grid, block, shmem,
 * stream>>>; under the emulation the kernel function itself runs for every
 * block and thread the launch asks for, queued on the stream in order.
 * Kernels are static (`static __global__`): each is launched from its own
 * file only, and libhcnn.a exports hcnn_ names only (tests/integration/test_structure.sh). */
#ifndef HCNN_CUDA_COMPAT_H
#define HCNN_CUDA_COMPAT_H

#if defined(__CUDACC__)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#define HCNN_LAUNCH(kernel, grid, block, stream, ...)                                             \
    kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#define HCNN_LAUNCH_BARRIER(kernel, grid, block, shmem, stream, ...)                              \
    kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#elif defined(HCNN_CUDA_EMULATION)
#include "emu/emu.h"
#else
#error "src/cuda/ is built by nvcc (configure --with-cuda) or as the emulation (--enable-cuda-emulation)"
#endif

#endif
