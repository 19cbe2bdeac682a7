/* The CPU backend behind device-like memory ("cpu-devmem"), the proof of
 * the backend seam: every buffer it allocates is handed out shifted by
 * DEVMEM_SHIFT, into addresses that are not canonical on x86-64 (and
 * outside every other 64-bit address space we run on), and every operation
 * shifts its tensor arguments back before calling the CPU backend's.
 * host_memory is 0, so callers must use upload, download and the MPI
 * staging; host code that reads or writes a tensor behind the backend's
 * back faults at once instead of working by accident.  The results are
 * the CPU backend's, bit for bit (tests/integration/test_seam.sh); the conformance
 * suite (tests/conformance/test_backend.c) runs on it too.  Selected with
 * HCNN_BACKEND=cpu-devmem (a test's way in; users choose `device`). */
#include <stdlib.h>
#include <string.h>

#include "conv_plan.h"
#include "cpu.h"
#include "hcnn/blas.h"

#define DEVMEM_SHIFT ((uintptr_t)1 << 62)

/* device pointer -> host pointer (NULL stays NULL) */
#define H(p) ((void *)((p) ? (uintptr_t)(p)-DEVMEM_SHIFT : 0))
#define HF(p) ((float *)H(p))
#define HD(p) ((double *)H(p))
#define HI(p) ((int32_t *)H(p))
/* the same for a pointer that is never NULL */
#define HN(p) ((void *)((uintptr_t)(p)-DEVMEM_SHIFT))

static void *dm_alloc(const hcnn_backend *be, size_t bytes, const char *what)
{
    (void)be;
    void *p = hcnn_alloc(bytes, what);
    return p ? (void *)((uintptr_t)p + DEVMEM_SHIFT) : NULL;
}
static void dm_free(const hcnn_backend *be, void *p)
{
    (void)be;
    hcnn_free(H(p));
}
static void *dm_alloc_host(const hcnn_backend *be, size_t bytes, const char *what)
{
    (void)be;
    return hcnn_alloc(bytes, what);
}
static void dm_free_host(const hcnn_backend *be, void *p)
{
    (void)be;
    hcnn_free(p);
}
static void dm_upload(const hcnn_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    memcpy(HN(dst), src, bytes);
}
static void dm_download(const hcnn_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    memcpy(dst, HN(src), bytes);
}
static void dm_sync(const hcnn_backend *be) { (void)be; }
static void dm_timer_start(const hcnn_backend *be, hcnn_timer *t)
{
    (void)be;
    t->host_s = hcnn_now();
}
static double dm_timer_stop(const hcnn_backend *be, hcnn_timer *t)
{
    (void)be;
    return hcnn_now() - t->host_s;
}
static void dm_fill(const hcnn_backend *be, float *x, size_t n, float v)
{
    hcnn_cpu_fill(be, HF(x), n, v);
}
static void dm_zero(const hcnn_backend *be, void *p, size_t bytes)
{
    (void)be;
    memset(HN(p), 0, bytes);
}
static void dm_copy(const hcnn_backend *be, float *d, const float *s, size_t n)
{
    (void)be;
    memcpy(HN(d), HN(s), n * sizeof *d);
}

static void dm_gemm(const hcnn_backend *be, int ta, int tb, int m, int n, int k, float alpha,
                    const float *a, int lda, const float *b, int ldb, float beta, float *c,
                    int ldc)
{
    hcnn_cpu_gemm(be, ta, tb, m, n, k, alpha, HF(a), lda, HF(b), ldb, beta, HF(c), ldc);
}

/* the caller's execution with the workspace's host address */
static hcnn_exec host_exec(const hcnn_exec *ex)
{
    hcnn_exec h = *ex;
    h.ws = HF(ex->ws);
    return h;
}
/* the batch-norm statistics' table at its host address (NULL: none) */
static const hcnn_bn_stats *host_stats(const hcnn_bn_stats *st, hcnn_bn_stats *h)
{
    if (!st)
        return NULL;
    *h = *st;
    h->part = HF(st->part);
    return h;
}
static int dm_conv_fwd(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                       const float *x, const float *w, const float *b, float *y, int n)
{
    hcnn_exec h = host_exec(ex);
    hcnn_bn_stats st;
    h.stats = (hcnn_bn_stats *)host_stats(ex->stats, &st);
    const int rc = hcnn_cpu_conv_fwd(be, d, &h, HF(x), HF(w), HF(b), HF(y), n);
    if (ex->stats) /* what it gathered */
        ex->stats->bands = st.bands, ex->stats->band_px = st.band_px;
    return rc;
}
static int dm_conv_bwd(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                       const float *x, const float *w, const float *dy, float *dw, float *db,
                       float *dx, int dx_acc, int n)
{
    const hcnn_exec h = host_exec(ex);
    return hcnn_cpu_conv_bwd(be, d, &h, HF(x), HF(w), HF(dy), HF(dw), HF(db), HF(dx), dx_acc, n);
}
static int dm_conv_bwd_filter(const hcnn_backend *be, const hcnn_conv_desc *d,
                              const hcnn_exec *ex, const float *x, const float *dy, float *dw,
                              float *db, int n)
{
    const hcnn_exec h = host_exec(ex);
    return hcnn_cpu_conv_bwd_filter(be, d, &h, HF(x), HF(dy), HF(dw), HF(db), n);
}
static int dm_conv_bwd_data(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                            const float *w, const float *dy, float *dx, int dx_acc, int n)
{
    const hcnn_exec h = host_exec(ex);
    return hcnn_cpu_conv_bwd_data(be, d, &h, HF(w), HF(dy), HF(dx), dx_acc, n);
}

static void dm_row_sum_acc(const hcnn_backend *be, const float *dy, int n, int m, float *db)
{
    hcnn_cpu_row_sum_acc(be, HF(dy), n, m, HF(db));
}
static void dm_add_row_bias(const hcnn_backend *be, float *y, const float *b, int n, int m)
{
    hcnn_cpu_add_row_bias(be, HF(y), HF(b), n, m);
}
static void dm_relu_fwd(const hcnn_backend *be, const float *x, float *y, size_t n, float slope)
{
    hcnn_cpu_relu_fwd(be, HF(x), HF(y), n, slope);
}
static void dm_relu_bwd(const hcnn_backend *be, const float *y, const float *dy, float *dx,
                        size_t n, float slope)
{
    hcnn_cpu_relu_bwd(be, HF(y), HF(dy), HF(dx), n, slope);
}
static void dm_add(const hcnn_backend *be, const float *a, const float *b, float *y, size_t n)
{
    hcnn_cpu_add(be, HF(a), HF(b), HF(y), n);
}
static void dm_add_acc(const hcnn_backend *be, const float *a, float *y, size_t n)
{
    hcnn_cpu_add_acc(be, HF(a), HF(y), n);
}
static void dm_scale(const hcnn_backend *be, float *x, size_t n, float a)
{
    hcnn_cpu_scale(be, HF(x), n, a);
}
static void dm_mul(const hcnn_backend *be, const float *a, const float *b, float *y, size_t n)
{
    hcnn_cpu_mul(be, HF(a), HF(b), HF(y), n);
}
static void dm_dropout_fwd(const hcnn_backend *be, const float *x, float *y, float *mask, int n,
                           size_t per_sample, float p, uint64_t seed, uint64_t step,
                           uint64_t first_sample, uint64_t layer_id)
{
    hcnn_cpu_dropout_fwd(be, HF(x), HF(y), HF(mask), n, per_sample, p, seed, step, first_sample,
                         layer_id);
}
static void dm_maxpool_fwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n,
                           float *y, int32_t *argmax)
{
    hcnn_cpu_maxpool_fwd(be, g, HF(x), n, HF(y), HI(argmax));
}
static void dm_maxpool_bwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy,
                           const int32_t *argmax, int n, float *dx)
{
    hcnn_cpu_maxpool_bwd(be, g, HF(dy), HI(argmax), n, HF(dx));
}
static void dm_avgpool_fwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n,
                           float *y)
{
    hcnn_cpu_avgpool_fwd(be, g, HF(x), n, HF(y));
}
static void dm_avgpool_bwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy, int n,
                           float *dx)
{
    hcnn_cpu_avgpool_bwd(be, g, HF(dy), n, HF(dx));
}
static void dm_bn_fwd_train(const hcnn_backend *be, const float *x, int n, int c, int np,
                            const float *gamma, const float *beta, float eps, float momentum,
                            float *rmean, float *rvar, float *smean, float *sinvstd,
                            const float *add, int relu, const hcnn_bn_stats *stats, float *y)
{
    hcnn_bn_stats st;
    hcnn_cpu_bn_fwd_train(be, HF(x), n, c, np, HF(gamma), HF(beta), eps, momentum, HF(rmean),
                          HF(rvar), HF(smean), HF(sinvstd), HF(add), relu,
                          host_stats(stats, &st), HF(y));
}
static void dm_bn_fwd_infer(const hcnn_backend *be, const float *x, int n, int c, int np,
                            const float *gamma, const float *beta, float eps, const float *rmean,
                            const float *rvar, const float *add, int relu, float *y)
{
    hcnn_cpu_bn_fwd_infer(be, HF(x), n, c, np, HF(gamma), HF(beta), eps, HF(rmean), HF(rvar),
                          HF(add), relu, HF(y));
}
static void dm_bn_bwd(const hcnn_backend *be, const float *x, const float *dy, int n, int c, int np,
                      const float *gamma, const float *beta, const float *smean,
                      const float *sinvstd, int relu, float *dx, float *dgamma, float *dbeta)
{
    hcnn_cpu_bn_bwd(be, HF(x), HF(dy), n, c, np, HF(gamma), HF(beta), HF(smean), HF(sinvstd),
                    relu, HF(dx), HF(dgamma), HF(dbeta));
}
static void dm_softmax_xent(const hcnn_backend *be, const float *logits, const int32_t *labels,
                            int n, int k, float grad_scale, float *dlogits, double *stats)
{
    hcnn_cpu_softmax_xent(be, HF(logits), HI(labels), n, k, grad_scale, HF(dlogits), HD(stats));
}
static void dm_sgd_step(const hcnn_backend *be, float *w, float *g, float *v, size_t n,
                        float lr, float mu, float wd, int nesterov, double *stats)
{
    hcnn_cpu_sgd_step(be, HF(w), HF(g), HF(v), n, lr, mu, wd, nesterov, stats ? HD(stats) : NULL);
}
static void dm_sum_sq(const hcnn_backend *be, const float *x, size_t n, double *stats)
{
    hcnn_cpu_sum_sq(be, HF(x), n, HD(stats));
}

int hcnn_backend_cpu_devmem_create(hcnn_backend **be)
{
    int rc = hcnn_backend_cpu_create(be); /* the CPU's table: threads, units, plans */
    if (rc)
        return rc;
    hcnn_backend *d = *be;
    d->name = "cpu-devmem"; /* describe names it so */
    d->host_memory = 0;
    d->alloc = dm_alloc, d->free = dm_free;
    d->alloc_host = dm_alloc_host, d->free_host = dm_free_host;
    d->upload = d->upload_async = dm_upload;
    d->download = d->download_async = dm_download;
    d->sync = dm_sync;
    d->timer_start = dm_timer_start, d->timer_stop = dm_timer_stop;
    d->fill = dm_fill, d->zero = dm_zero, d->copy = dm_copy;
    d->gemm = dm_gemm;
    d->conv_fwd = dm_conv_fwd, d->conv_bwd = dm_conv_bwd;
    d->conv_bwd_filter = dm_conv_bwd_filter, d->conv_bwd_data = dm_conv_bwd_data;
    d->row_sum_acc = dm_row_sum_acc, d->add_row_bias = dm_add_row_bias;
    d->relu_fwd = dm_relu_fwd, d->relu_bwd = dm_relu_bwd;
    d->add = dm_add, d->add_acc = dm_add_acc, d->scale = dm_scale, d->mul = dm_mul;
    d->dropout_fwd = dm_dropout_fwd;
    d->maxpool_fwd = dm_maxpool_fwd, d->maxpool_bwd = dm_maxpool_bwd;
    d->avgpool_fwd = dm_avgpool_fwd, d->avgpool_bwd = dm_avgpool_bwd;
    d->bn_fwd_train = dm_bn_fwd_train, d->bn_fwd_infer = dm_bn_fwd_infer, d->bn_bwd = dm_bn_bwd;
    d->softmax_xent = dm_softmax_xent, d->sgd_step = dm_sgd_step, d->sum_sq = dm_sum_sq;
    return HCNN_OK;
}
