/* cuBLAS (v2 API): a handle's stream and math mode, cublasSgemm and
 * cublasGemmEx (A and B float or bfloat16, C float, float compute).
 *
 * A product is checked as cuBLAS documents it when called, with alpha and
 * beta read then (host pointer mode), and queued on the handle's stream like
 * a kernel; it runs as one call of the host's cblas_sgemm (column-major, as
 * cuBLAS).  TF32 math (CUBLAS_TF32_TENSOR_OP_MATH on the handle, or
 * CUBLAS_COMPUTE_32F_FAST_TF32) first rounds A and B to TF32: 10 explicit
 * mantissa bits, to nearest with ties away from zero as the GPU's
 * cvt.rna.tf32.f32, so that TF32 shows in the emulation as on tensor cores
 * (the sums stay float, in CBLAS's order, not the tensor cores').  bfloat16
 * inputs are widened to float, which is exact. */
#include "emu_internal.h"

#include <algorithm>
#include <vector>

/* CBLAS, declared here (MKL ships no cblas.h); LP64 integers. */
extern "C" {
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
                 int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc);
}

struct cublasContext {
    cudaStream_t stream;
    cublasMath_t math;
};

namespace {

using namespace hcnn_emu;

/* A or B as the product reads it: rows x cols, column-major, leading
 * dimension ld. */
struct operand {
    const void *p;
    cudaDataType type;
    int rows, cols, ld;
};

struct gemm_job {
    bool trans_a, trans_b;
    int m, n, k;
    float alpha, beta;
    operand a, b;
    float *c;
    int ldc;
    bool tf32;
};

float tf32_round(float v) {
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u) { /* Inf and NaN stay */
        u += 0x1000u;
        u &= 0xffffe000u;
    }
    std::memcpy(&v, &u, sizeof v);
    return v;
}

float element(const operand &o, size_t i) {
    if (o.type == CUDA_R_16BF)
        return __bfloat162float(static_cast<const __nv_bfloat16 *>(o.p)[i]);
    return static_cast<const float *>(o.p)[i];
}

/* The operand as floats CBLAS can read: itself, or a packed converted copy. */
const float *as_floats(const operand &o, bool tf32, std::vector<float> &copy, int &ld) {
    if (o.type == CUDA_R_32F && !tf32) {
        ld = o.ld;
        return static_cast<const float *>(o.p);
    }
    copy.resize(static_cast<size_t>(o.rows) * o.cols);
    for (int j = 0; j < o.cols; ++j)
        for (int i = 0; i < o.rows; ++i) {
            float v = element(o, static_cast<size_t>(j) * o.ld + i);
            copy[static_cast<size_t>(j) * o.rows + i] = tf32 ? tf32_round(v) : v;
        }
    ld = std::max(1, o.rows);
    return copy.data();
}

void run_gemm(const gemm_job &g) {
    std::vector<float> copy_a, copy_b;
    int lda, ldb;
    const float *a = as_floats(g.a, g.tf32, copy_a, lda);
    const float *b = as_floats(g.b, g.tf32, copy_b, ldb);
    cblas_sgemm(CblasColMajor, g.trans_a ? CblasTrans : CblasNoTrans,
                g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, g.alpha, a, lda, b, ldb,
                g.beta, g.c, g.ldc);
}

bool valid_op(cublasOperation_t op) {
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

/* cuBLAS's documented CUBLAS_STATUS_INVALID_VALUE cases for gemm. */
cublasStatus_t check_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                          const void *alpha, int lda, int ldb, const void *beta, int ldc) {
    if (m < 0 || n < 0 || k < 0 || !valid_op(ta) || !valid_op(tb))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k) ||
        ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

size_t type_size(cudaDataType t) { return t == CUDA_R_16BF ? 2 : 4; }

/* An operand or C that is not device memory would fault on a GPU. */
void check_device(const char *where, const char *name, const void *p, int rows, int cols, int ld,
                  size_t elt) {
    if (rows == 0 || cols == 0)
        return;
    size_t bytes = ((static_cast<size_t>(cols) - 1) * ld + rows) * elt;
    if (!device_range(p, bytes))
        die(where, "%s (%d x %d, leading dimension %d) is not inside one cudaMalloc block", name,
            rows, cols, ld);
}

cublasStatus_t enqueue_gemm(cublasHandle_t h, const char *where, const gemm_job &g) {
    check_device(where, "A", g.a.p, g.a.rows, g.a.cols, g.a.ld, type_size(g.a.type));
    check_device(where, "B", g.b.p, g.b.rows, g.b.cols, g.b.ld, type_size(g.b.type));
    check_device(where, "C", g.c, g.m, g.n, g.ldc, sizeof(float));
    cudaError_t e = enqueue(h->stream, [g] { run_gemm(g); });
    return record(e) == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

gemm_job make_job(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                  const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt, int ldb,
                  float beta, float *C, int ldc, bool tf32) {
    bool trans_a = ta != CUBLAS_OP_N, trans_b = tb != CUBLAS_OP_N;
    operand a{A, at, trans_a ? k : m, trans_a ? m : k, lda};
    operand b{B, bt, trans_b ? n : k, trans_b ? k : n, ldb};
    return gemm_job{trans_a, trans_b, m, n, k, alpha, beta, a, b, C, ldc, tf32};
}

} // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH};
    return CUBLAS_STATUS_SUCCESS;
}

/* Synchronises the device first, as cublasDestroy does. */
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    {
        api_lock lock(api_mutex());
        drain_all();
    }
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t, int *version) {
    if (!version)
        return CUBLAS_STATUS_INVALID_VALUE;
    *version = CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
}

/* cuBLAS's workspace: the CBLAS needs none; the call is checked as cuBLAS
 * checks it (a handle, and memory where bytes > 0) */
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t bytes) {
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes > 0 && !workspace)
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = streamId;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *streamId) {
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!streamId)
        return CUBLAS_STATUS_INVALID_VALUE;
    *streamId = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_DEFAULT_MATH && mode != CUBLAS_PEDANTIC_MATH &&
        mode != CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->math;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float *alpha,
                              const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t st = check_gemm(transa, transb, m, n, k, alpha, lda, ldb, beta, ldc);
    if (st != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0)
        return st;
    api_lock lock(api_mutex());
    bool tf32 = handle->math == CUBLAS_TF32_TENSOR_OP_MATH;
    return enqueue_gemm(handle, "cublasSgemm",
                        make_job(transa, transb, m, n, k, *alpha, A, CUDA_R_32F, lda, B,
                                 CUDA_R_32F, ldb, *beta, C, ldc, tf32));
}

/* Supported: A and B both CUDA_R_32F or both CUDA_R_16BF, C CUDA_R_32F,
 * CUBLAS_COMPUTE_32F (TF32 if the handle's math mode says so, for float
 * inputs), or CUBLAS_COMPUTE_32F_FAST_TF32 with float inputs (cuBLAS's
 * table); CUBLAS_GEMM_DEFAULT. */
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    bool types = Atype == Btype && (Atype == CUDA_R_32F || Atype == CUDA_R_16BF) &&
                 Ctype == CUDA_R_32F &&
                 (computeType == CUBLAS_COMPUTE_32F ||
                  (computeType == CUBLAS_COMPUTE_32F_FAST_TF32 && Atype == CUDA_R_32F));
    if (!types || algo != CUBLAS_GEMM_DEFAULT)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    cublasStatus_t st = check_gemm(transa, transb, m, n, k, alpha, lda, ldb, beta, ldc);
    if (st != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0)
        return st;
    api_lock lock(api_mutex());
    bool tf32 = Atype == CUDA_R_32F && (computeType == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                                        handle->math == CUBLAS_TF32_TENSOR_OP_MATH);
    return enqueue_gemm(handle, "cublasGemmEx",
                        make_job(transa, transb, m, n, k, *static_cast<const float *>(alpha), A,
                                 Atype, lda, B, Btype, ldb, *static_cast<const float *>(beta),
                                 static_cast<float *>(C), ldc, tf32));
}

} /* extern "C" */
