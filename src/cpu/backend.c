/* The CPU backend's table (include/hcnn/backend.h): host memory, OpenMP
 * threads, and the operations of the files beside this one (what they ask
 * of the instance, its threads and precision: instance.c). */
#include <stdio.h>

#include "bf16.h"
#include "conv_plan.h"
#include "cpu.h"
#include "hcnn/blas.h"
#include "hcnn/onednn.h"

/* Whole-network execution (src/model/pass.c): units of n / 8 samples, but
 * of 16 to 32 unless that makes more than HCNN_MAX_UNITS of them (enough
 * for a 64-core node; a unit has a gradient buffer of its own, which the
 * reduction reads once).  LeNet-5 on 2 threads, alternated medians against
 * units of n / threads: units of 8 0.92x (batch 64) and 0.93x (256): the
 * fully connected layers' GEMMs keep too few rows and 32 buffers are added;
 * of 16 0.99x (64) and 0.93x (256); of 32 at batch 256 0.99x; of 64 and 128
 * 1.00x (docs/performance.md, "Determinism").  A pass of fewer than two
 * units' samples goes block by block instead, where the convolutions split
 * images between threads.  The size depends on n only: the same bits
 * whatever the thread count. */
#define UNIT_MIN_IMAGES 16
#define UNIT_MAX_IMAGES 32

static int cpu_unit_images(const hcnn_backend *be, int n)
{
    (void)be;
    int g = n / 8;
    g = g < UNIT_MIN_IMAGES ? UNIT_MIN_IMAGES : g > UNIT_MAX_IMAGES ? UNIT_MAX_IMAGES : g;
    const int most = (n + HCNN_MAX_UNITS - 1) / HCNN_MAX_UNITS;
    g = g > most ? g : most;
    return n > 0 && (n + g - 1) / g >= 2 ? g : 0;
}

/* Memory is the host's: the copies are memcpy, the queue is empty as soon
 * as a call returns, a timer is the host clock. */
static void *cpu_alloc(const hcnn_backend *be, size_t bytes, const char *what)
{
    (void)be;
    return hcnn_alloc(bytes, what);
}
static void cpu_free(const hcnn_backend *be, void *p)
{
    (void)be;
    hcnn_free(p);
}
static void cpu_copy_bytes(const hcnn_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    memcpy(dst, src, bytes);
}
static void cpu_sync(const hcnn_backend *be) { (void)be; }
static void cpu_timer_start(const hcnn_backend *be, hcnn_timer *t)
{
    (void)be;
    t->host_s = hcnn_now();
}
static double cpu_timer_stop(const hcnn_backend *be, hcnn_timer *t)
{
    (void)be;
    return hcnn_now() - t->host_s;
}
int hcnn_cpu_precision_check(hcnn_precision p, char *why, size_t cap)
{
    if (why && cap)
        why[0] = '\0';
    switch (p) {
    case HCNN_PRECISION_FP32:
        return HCNN_OK;
    case HCNN_PRECISION_BF16: {
        /* natively (AVX512-BF16, AMX) through oneDNN, or not at all: its
         * emulation is several times slower than FP32 */
        char reason[768];
        if (!hcnn_cpu_bf16_supported(reason, sizeof reason)) {
            snprintf(why, cap, "bf16: %s", reason);
            return HCNN_EINVAL;
        }
        return HCNN_OK;
    }
    case HCNN_PRECISION_TF32:
        snprintf(why, cap, "tf32 needs device: cuda (the CPU has no TF32 arithmetic; precision: "
                           "fp32)");
        return HCNN_EINVAL;
    }
    snprintf(why, cap, "%d: not a precision (expected fp32, tf32 or bf16)", (int)p);
    return HCNN_EINVAL;
}

static int cpu_set_precision(hcnn_backend *be, hcnn_precision p)
{
    char why[1024];
    if (hcnn_cpu_precision_check(p, why, sizeof why))
        return hcnn_error("backend %s: precision: %s", be->name, why);
    hcnn_cpu_state *s = be->state;
    if (!s) /* the shared table (hcnn_backend_cpu): FP32 only */
        return p == HCNN_PRECISION_FP32
                   ? HCNN_OK
                   : hcnn_error("backend %s: precision: %s: the shared table of "
                                "hcnn_backend_cpu() computes in FP32; make an instance "
                                "(hcnn_backend_create)",
                                be->name, p == HCNN_PRECISION_BF16 ? "bf16" : "tf32");
    if (p == HCNN_PRECISION_BF16 && !s->bf16) {
        /* a slot for every thread OMP_NUM_THREADS may ask for (1..1024,
         * src/core/threads.c); each made on its first product */
        if (!(s->bf16 = hcnn_bf16_create(HCNN_BF16_MAX_THREADS)))
            return HCNN_EINVAL;
    }
    s->precision = p;
    return HCNN_OK;
}

static void cpu_describe(const hcnn_backend *be, char *buf, size_t cap)
{
    const int len = snprintf(buf, cap, "%s: host memory, %d OpenMP threads, the BLAS "
                             "single-threaded in each", be->name, omp_get_max_threads());
    hcnn_bf16 *bf = hcnn_cpu_bf16_of(be);
    char isa[64];
    if (bf && len > 0 && (size_t)len < cap)
        snprintf(buf + len, cap - (size_t)len, "; precision bf16: every GEMM's inputs rounded to "
                 "bfloat16, FP32 accumulation, multiplied by %s; oneDNN dispatches %s",
                 hcnn_bf16_engine(bf), hcnn_onednn_isa(isa, sizeof isa));
}

static void cpu_zero(const hcnn_backend *be, void *p, size_t bytes)
{
    (void)be;
    memset(p, 0, bytes);
}
static void cpu_copy(const hcnn_backend *be, float *dst, const float *src, size_t n)
{
    (void)be;
    memcpy(dst, src, n * sizeof *dst);
}

static const hcnn_backend cpu_backend = {
    .name = "cpu",
    .host_memory = 1,
    .parallel = hcnn_cpu_parallel,
    .threads = hcnn_cpu_threads,
    .unit_images = cpu_unit_images,
    .set_precision = cpu_set_precision,
    .describe = cpu_describe,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .alloc_host = cpu_alloc,
    .free_host = cpu_free,
    .upload = cpu_copy_bytes,
    .download = cpu_copy_bytes,
    .upload_async = cpu_copy_bytes,
    .download_async = cpu_copy_bytes,
    .sync = cpu_sync,
    .timer_start = cpu_timer_start,
    .timer_stop = cpu_timer_stop,
    .fill = hcnn_cpu_fill,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .gemm = hcnn_cpu_gemm,
    .conv_fwd = hcnn_cpu_conv_fwd,
    .conv_bwd = hcnn_cpu_conv_bwd,
    .conv_bwd_filter = hcnn_cpu_conv_bwd_filter,
    .conv_bwd_data = hcnn_cpu_conv_bwd_data,
    .conv_workspace = hcnn_cpu_conv_workspace,
    .conv_gemms = hcnn_cpu_conv_gemms,
    .conv_describe = hcnn_cpu_conv_describe,
    .pass_pieces = hcnn_cpu_pass_pieces,
    .row_sum_acc = hcnn_cpu_row_sum_acc,
    .add_row_bias = hcnn_cpu_add_row_bias,
    .relu_fwd = hcnn_cpu_relu_fwd,
    .relu_bwd = hcnn_cpu_relu_bwd,
    .add = hcnn_cpu_add,
    .add_acc = hcnn_cpu_add_acc,
    .scale = hcnn_cpu_scale,
    .mul = hcnn_cpu_mul,
    .dropout_fwd = hcnn_cpu_dropout_fwd,
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
    .destroy = hcnn_cpu_destroy,
};

const hcnn_backend *hcnn_backend_cpu(void)
{
    hcnn_blas_single_threaded();
    return &cpu_backend;
}

/* The instance: the table in memory of its own with its state (the
 * precision; FP32 to start), the BLAS held to one thread per call, and
 * OpenMP to one active level: the layers' regions inside a unit of
 * whole-network execution, or inside any other region, run on the thread
 * that meets them, as the plans assume (hcnn_cpu_threads is 1 there and
 * their workspace slices are one thread's).  A list in OMP_NUM_THREADS
 * ("4,4") or OMP_MAX_ACTIVE_LEVELS would otherwise make them teams of
 * their own: LeNet-5 trained another model (tests/integration/test_threads.sh). */
int hcnn_backend_cpu_create(hcnn_backend **be)
{
    hcnn_blas_single_threaded();
    omp_set_max_active_levels(1);
    *be = hcnn_alloc(sizeof **be, "CPU backend");
    if (!*be)
        return HCNN_ENOMEM;
    **be = cpu_backend;
    hcnn_cpu_state *s = hcnn_alloc(sizeof *s, "CPU backend state");
    if (!s) {
        hcnn_free(*be);
        *be = NULL;
        return HCNN_ENOMEM;
    }
    s->precision = HCNN_PRECISION_FP32;
    s->bf16 = NULL;
    (*be)->state = s;
    return HCNN_OK;
}

void hcnn_cpu_destroy(hcnn_backend *be)
{
    if (be && be->state)
        hcnn_bf16_destroy(((hcnn_cpu_state *)be->state)->bf16);
    if (be)
        hcnn_free(be->state);
    hcnn_free(be);
}
