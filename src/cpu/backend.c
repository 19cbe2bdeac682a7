/* The CPU backend's table (include/hcnn/backend.h): host memory, OpenMP
 * threads, and the operations of the files beside this one. */
#include "cpu.h"
#include "hcnn/blas.h"

/* Inside the region every OpenMP loop of this backend runs on the calling
 * thread alone (nested regions are inactive) and the OpenMP OpenBLAS runs
 * single-threaded. */
void hcnn_cpu_parallel(void (*fn)(void *arg, int t, int nt), void *arg)
{
#pragma omp parallel
    fn(arg, omp_get_thread_num(), omp_get_num_threads());
}

int hcnn_cpu_threads(void) { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

static void cpu_upload(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_download(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static void cpu_copy(float *dst, const float *src, size_t n) { memcpy(dst, src, n * sizeof *dst); }

static const hcnn_backend cpu_backend = {
    .name = "cpu-openblas",
    .parallel = hcnn_cpu_parallel,
    .threads = hcnn_cpu_threads,
    .host_memory = 1,
    .alloc = hcnn_alloc,
    .free = hcnn_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .fill = hcnn_cpu_fill,
    .copy = cpu_copy,
    .gemm = hcnn_cpu_gemm,
    .im2col = hcnn_cpu_im2col,
    .col2im = hcnn_cpu_col2im,
    .cnp_to_nchw = hcnn_cpu_cnp_to_nchw,
    .add_channel_bias = hcnn_cpu_add_channel_bias,
    .nchw_to_cnp = hcnn_cpu_nchw_to_cnp,
    .copy_planes = hcnn_cpu_copy_planes,
    .transpose = hcnn_cpu_transpose,
    .channel_sum_acc = hcnn_cpu_channel_sum_acc,
    .row_sum_acc = hcnn_cpu_row_sum_acc,
    .add_row_bias = hcnn_cpu_add_row_bias,
    .relu_fwd = hcnn_cpu_relu_fwd,
    .relu_bwd = hcnn_cpu_relu_bwd,
    .add = hcnn_cpu_add,
    .add_acc = hcnn_cpu_add_acc,
    .scale = hcnn_cpu_scale,
    .dropout_fwd = hcnn_cpu_dropout_fwd,
    .mul = hcnn_cpu_mul,
    .maxpool_fwd = hcnn_cpu_maxpool_fwd,
    .maxpool_bwd = hcnn_cpu_maxpool_bwd,
    .avgpool_fwd = hcnn_cpu_avgpool_fwd,
    .avgpool_bwd = hcnn_cpu_avgpool_bwd,
    .bn_fwd_train = hcnn_cpu_bn_fwd_train,
    .bn_fwd_infer = hcnn_cpu_bn_fwd_infer,
    .bn_bwd = hcnn_cpu_bn_bwd,
    .softmax_xent = hcnn_cpu_softmax_xent,
    .sgd_step = hcnn_cpu_sgd_step,
    .sum_sq = hcnn_cpu_sum_sq,
};

const hcnn_backend *hcnn_backend_cpu(void)
{
    hcnn_blas_single_threaded();
    return &cpu_backend;
}
