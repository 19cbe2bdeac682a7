/* What the CUDA kernels' files ask of the instance they run on: the end
 * of a failed call, device memory, the reductions' scratch and the bf16
 * buffer.  Apart from the table (backend.cu), which calls down into those
 * files (scripts/deps.sh: no loop between files; the CPU's instance.c). */
#include <stdio.h>

#include "cuda.h"

const char *hcnn_cublas_status(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "cuBLAS not initialised";
    case CUBLAS_STATUS_ALLOC_FAILED: return "cuBLAS could not allocate memory";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was passed to cuBLAS";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "the GPU lacks a feature cuBLAS needs";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "a cuBLAS kernel failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported by cuBLAS";
    default: return "cuBLAS error";
    }
}

void hcnn_cuda_fail(const char *call, const char *file, int line, const char *cause)
{
    hcnn_fatal_at(file, line, "%s failed: %s", call, cause);
}

/* ---- memory ------------------------------------------------------------------- */

/* Out of memory says how much was asked and how much is free. */
void *hcnn_cuda_alloc(const hcnn_backend *be, size_t bytes, const char *what)
{
    (void)be;
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaSuccess)
        return p;
    (void)cudaGetLastError(); /* the failed allocation is reported here */
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    hcnn_error("cannot allocate %.1f MB of GPU memory for %s: %.1f MB of %.1f MB free (%s)",
               (double)bytes / 1e6, what ? what : "a buffer", (double)free_b / 1e6,
               (double)total_b / 1e6, cudaGetErrorString(e));
    return NULL;
}

/* every graph forgotten: memory they use moved */
static void drop_graphs(hcnn_cuda *cu)
{
    for (int i = 0; i < HCNN_GRAPH_SLOTS; i++)
        if (cu->graphs[i]) {
            HCNN_CUDA(cudaGraphExecDestroy(cu->graphs[i]));
            cu->graphs[i] = NULL;
        }
}

double *hcnn_cuda_scratch(const hcnn_backend *be, size_t n)
{
    hcnn_cuda *cu = cuda_of(be);
    if (n > cu->scratch_doubles)
        hcnn_cuda_fail("hcnn_cuda_scratch", __FILE__, __LINE__,
                       "a reduction asked for more partial sums than the scratch holds");
    return cu->scratch;
}

__nv_bfloat16 *hcnn_cuda_bf16_buffer(const hcnn_backend *be, size_t n)
{
    hcnn_cuda *cu = cuda_of(be);
    if (n <= cu->bf16_elems)
        return cu->bf16;
    if (cu->bf16)
        HCNN_CUDA(cudaFree(cu->bf16)); /* waits for the work that used it */
    drop_graphs(cu); /* they read and write the old buffer */
    cu->bf16 = (__nv_bfloat16 *)hcnn_cuda_alloc(be, n * sizeof *cu->bf16, "bf16 GEMM inputs");
    if (!cu->bf16)
        hcnn_cuda_fail("hcnn_cuda_bf16_buffer", __FILE__, __LINE__, "out of GPU memory");
    cu->bf16_elems = n;
    return cu->bf16;
}
