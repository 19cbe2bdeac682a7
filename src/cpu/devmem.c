/* The CPU backend behind device-like memory ("cpu-devmem"), the proof of
 * the backend seam: every buffer it allocates is handed out shifted by
 * DEVMEM_SHIFT, into addresses that are not canonical on x86-64 (and
 * outside every other 64-bit address space we run on), and every operation
 * shifts its tensor arguments back before calling the CPU backend's.
 * host_memory is 0, so callers must use upload, download and the MPI
 * staging; host code that reads or writes a tensor behind the backend's
 * back faults at once instead of working by accident.  The results are
 * the CPU backend's, bit for bit (tests/test_seam.sh).  Selected with
 * HCNN_BACKEND=cpu-devmem (include/hcnn/backend.h). */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "hcnn/blas.h"

#define DEVMEM_SHIFT ((uintptr_t)1 << 62)

/* device pointer -> host pointer (NULL stays NULL) */
#define H(p) ((void *)((p) ? (uintptr_t)(p)-DEVMEM_SHIFT : 0))
#define HF(p) ((float *)H(p))
#define HI(p) ((int32_t *)H(p))
/* the same for a pointer that is never NULL */
#define HN(p) ((void *)((uintptr_t)(p)-DEVMEM_SHIFT))

static void *dm_alloc(size_t bytes, const char *what)
{
    void *p = hcnn_alloc(bytes, what);
    return p ? (void *)((uintptr_t)p + DEVMEM_SHIFT) : NULL;
}
static void dm_free(void *p) { hcnn_free(H(p)); }
static void dm_upload(void *dst, const void *src, size_t bytes) { memcpy(HN(dst), src, bytes); }
static void dm_download(void *dst, const void *src, size_t bytes) { memcpy(dst, HN(src), bytes); }
static void dm_fill(float *x, size_t n, float v) { hcnn_cpu_fill(HF(x), n, v); }
static void dm_copy(float *d, const float *s, size_t n) { memcpy(HN(d), HN(s), n * sizeof *d); }

static void dm_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                    const float *b, int ldb, float beta, float *c, int ldc)
{
    hcnn_cpu_gemm(ta, tb, m, n, k, alpha, HF(a), lda, HF(b), ldb, beta, HF(c), ldc);
}
static void dm_im2col(const hcnn_conv_geom *g, const float *x, int n, float *col)
{
    hcnn_cpu_im2col(g, HF(x), n, HF(col));
}
static void dm_col2im(const hcnn_conv_geom *g, const float *col, int n, int acc, float *dx)
{
    hcnn_cpu_col2im(g, HF(col), n, acc, HF(dx));
}
static void dm_cnp_to_nchw(const float *src, const float *bias, int n, int c, int np, float *y)
{
    hcnn_cpu_cnp_to_nchw(HF(src), HF(bias), n, c, np, HF(y));
}
static void dm_add_channel_bias(float *y, const float *bias, int n, int c, int np, size_t ld)
{
    hcnn_cpu_add_channel_bias(HF(y), HF(bias), n, c, np, ld);
}
static void dm_nchw_to_cnp(const float *y, int n, int c, int np, float *dst)
{
    hcnn_cpu_nchw_to_cnp(HF(y), n, c, np, HF(dst));
}
static void dm_copy_planes(const float *src, size_t splane, int sld, int c, int h, int w,
                           float *dst, size_t dplane, int dld, int acc)
{
    hcnn_cpu_copy_planes(HF(src), splane, sld, c, h, w, HF(dst), dplane, dld, acc);
}
static void dm_transpose(const float *a, int rows, int cols, float *t)
{
    hcnn_cpu_transpose(HF(a), rows, cols, HF(t));
}
static void dm_channel_sum_acc(const float *dy, int n, int c, int np, float *db)
{
    hcnn_cpu_channel_sum_acc(HF(dy), n, c, np, HF(db));
}
static void dm_row_sum_acc(const float *dy, int n, int m, float *db)
{
    hcnn_cpu_row_sum_acc(HF(dy), n, m, HF(db));
}
static void dm_add_row_bias(float *y, const float *b, int n, int m)
{
    hcnn_cpu_add_row_bias(HF(y), HF(b), n, m);
}
static void dm_relu_fwd(const float *x, float *y, size_t n, float slope)
{
    hcnn_cpu_relu_fwd(HF(x), HF(y), n, slope);
}
static void dm_relu_bwd(const float *y, const float *dy, float *dx, size_t n, float slope)
{
    hcnn_cpu_relu_bwd(HF(y), HF(dy), HF(dx), n, slope);
}
static void dm_add(const float *a, const float *b, float *y, size_t n)
{
    hcnn_cpu_add(HF(a), HF(b), HF(y), n);
}
static void dm_add_acc(const float *a, float *y, size_t n) { hcnn_cpu_add_acc(HF(a), HF(y), n); }
static void dm_scale(float *x, size_t n, float a) { hcnn_cpu_scale(HF(x), n, a); }
static void dm_mul(const float *a, const float *b, float *y, size_t n)
{
    hcnn_cpu_mul(HF(a), HF(b), HF(y), n);
}
static void dm_dropout_fwd(const float *x, float *y, float *mask, int n, size_t per_sample, float p,
                           uint64_t seed, uint64_t step, uint64_t first_sample, uint64_t layer_id)
{
    hcnn_cpu_dropout_fwd(HF(x), HF(y), HF(mask), n, per_sample, p, seed, step, first_sample,
                         layer_id);
}
static void dm_maxpool_fwd(const hcnn_pool_geom *g, const float *x, int n, float *y,
                           int32_t *argmax)
{
    hcnn_cpu_maxpool_fwd(g, HF(x), n, HF(y), HI(argmax));
}
static void dm_maxpool_bwd(const hcnn_pool_geom *g, const float *dy, const int32_t *argmax, int n,
                           float *dx)
{
    hcnn_cpu_maxpool_bwd(g, HF(dy), HI(argmax), n, HF(dx));
}
static void dm_avgpool_fwd(const hcnn_pool_geom *g, const float *x, int n, float *y)
{
    hcnn_cpu_avgpool_fwd(g, HF(x), n, HF(y));
}
static void dm_avgpool_bwd(const hcnn_pool_geom *g, const float *dy, int n, float *dx)
{
    hcnn_cpu_avgpool_bwd(g, HF(dy), n, HF(dx));
}
static void dm_bn_fwd_train(const float *x, int n, int c, int np, const float *gamma,
                            const float *beta, float eps, float momentum, float *rmean, float *rvar,
                            float *smean, float *sinvstd, const float *add, int relu, float *y)
{
    hcnn_cpu_bn_fwd_train(HF(x), n, c, np, HF(gamma), HF(beta), eps, momentum, HF(rmean), HF(rvar),
                          HF(smean), HF(sinvstd), HF(add), relu, HF(y));
}
static void dm_bn_fwd_infer(const float *x, int n, int c, int np, const float *gamma,
                            const float *beta, float eps, const float *rmean, const float *rvar,
                            const float *add, int relu, float *y)
{
    hcnn_cpu_bn_fwd_infer(HF(x), n, c, np, HF(gamma), HF(beta), eps, HF(rmean), HF(rvar), HF(add),
                          relu, HF(y));
}
static void dm_bn_bwd(const float *x, const float *dy, int n, int c, int np, const float *gamma,
                      const float *beta, const float *smean, const float *sinvstd, int relu,
                      float *dx, float *dgamma, float *dbeta)
{
    hcnn_cpu_bn_bwd(HF(x), HF(dy), n, c, np, HF(gamma), HF(beta), HF(smean), HF(sinvstd), relu,
                    HF(dx), HF(dgamma), HF(dbeta));
}
static double dm_softmax_xent(const float *logits, const int32_t *labels, int n, int k,
                              float grad_scale, float *dlogits, int *correct)
{
    return hcnn_cpu_softmax_xent(HF(logits), HI(labels), n, k, grad_scale, HF(dlogits), correct);
}
static void dm_sgd_step(float *w, const float *g, float *v, size_t n, float lr, float mu, float wd,
                        int nesterov)
{
    hcnn_cpu_sgd_step(HF(w), HF(g), HF(v), n, lr, mu, wd, nesterov);
}
static double dm_sum_sq(const float *x, size_t n) { return hcnn_cpu_sum_sq(HF(x), n); }

/* the CPU backend's threads and parallel regions, its operations behind
 * the shifted pointers */
static const hcnn_backend devmem_backend = {
    .name = "cpu-devmem",
    .parallel = hcnn_cpu_parallel,
    .threads = hcnn_cpu_threads,
    .host_memory = 0,
    .alloc = dm_alloc,
    .free = dm_free,
    .upload = dm_upload,
    .download = dm_download,
    .fill = dm_fill,
    .copy = dm_copy,
    .gemm = dm_gemm,
    .im2col = dm_im2col,
    .col2im = dm_col2im,
    .cnp_to_nchw = dm_cnp_to_nchw,
    .add_channel_bias = dm_add_channel_bias,
    .nchw_to_cnp = dm_nchw_to_cnp,
    .copy_planes = dm_copy_planes,
    .transpose = dm_transpose,
    .channel_sum_acc = dm_channel_sum_acc,
    .row_sum_acc = dm_row_sum_acc,
    .add_row_bias = dm_add_row_bias,
    .relu_fwd = dm_relu_fwd,
    .relu_bwd = dm_relu_bwd,
    .add = dm_add,
    .add_acc = dm_add_acc,
    .scale = dm_scale,
    .dropout_fwd = dm_dropout_fwd,
    .mul = dm_mul,
    .maxpool_fwd = dm_maxpool_fwd,
    .maxpool_bwd = dm_maxpool_bwd,
    .avgpool_fwd = dm_avgpool_fwd,
    .avgpool_bwd = dm_avgpool_bwd,
    .bn_fwd_train = dm_bn_fwd_train,
    .bn_fwd_infer = dm_bn_fwd_infer,
    .bn_bwd = dm_bn_bwd,
    .softmax_xent = dm_softmax_xent,
    .sgd_step = dm_sgd_step,
    .sum_sq = dm_sum_sq,
};

const hcnn_backend *hcnn_backend_cpu_devmem(void)
{
    hcnn_blas_single_threaded();
    return &devmem_backend;
}
