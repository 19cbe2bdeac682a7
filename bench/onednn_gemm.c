/* oneDNN's matmul against the BLAS's sgemm, one thread, on the GEMM shapes
 * hcnn's CPU plans issue (issue 38: "use oneDNN where it wins and OpenBLAS
 * where it does not ... measure oneDNN's FP32 against OpenBLAS too"):
 *
 *   OPENBLAS_CORETYPE=SkylakeX bench/onednn_gemm [--rounds N] [--only NAME]
 *
 * For each shape (row-major, C = op(A) op(B), op a transpose where ta / tb
 * say): the BLAS's cblas_sgemm, oneDNN's f32 matmul, and where this CPU runs
 * bf16 natively (hcnn_cpu_bf16_supported) oneDNN's bf16 x bf16 -> f32 matmul
 * on the same inputs rounded; each timed alternately in the same process,
 * N rounds (default 9), each round a call repeated for >= ~2 ms, the best
 * round kept.  oneDNN runs with one OpenMP thread, the BLAS held to one
 * (as hcnn calls both: pieces on each thread).  Prints one line a shape:
 *   gemm name=resnet18_l1_fwd m=64 n=1024 k=576 ta=0 tb=0 sgemm_gflops=G
 *     onednn_f32_gflops=G f32_vs_sgemm=R onednn_bf16_gflops=G bf16_vs_sgemm=R
 *     bf16_relerr=E impl_f32=NAME impl_bf16=NAME
 * (bf16 fields "-" where the CPU has no bf16 instructions).  The BLAS's
 * kernels are the environment's: OPENBLAS_CORETYPE, else OpenBLAS's own
 * choice (hcnn's blas_kernels: auto does not apply here).  Exit status: 0,
 * 1 when oneDNN failed, 2 bad command line. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hcnn/blas.h"
#include "hcnn/onednn.h"

#include "../src/blas/cblas_decl.h"

#ifdef HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>

typedef struct shape {
    const char *name;
    int m, n, k, ta, tb;
} shape;

/* ResNet-18 at batch 64 on hcnn's plans (per-thread items of one image,
 * batched chunks of 16, Winograd GEMMs of 16 images' tiles), LeNet-5's */
static const shape shapes[] = {
    {"resnet18_l1_fwd", 64, 1024, 576, 0, 0},        /* layer1, one image's columns */
    {"resnet18_l2_fwd", 128, 256, 1152, 0, 0},       /* layer2 */
    {"resnet18_l3_fwd", 256, 64, 2304, 0, 0},        /* layer3 */
    {"resnet18_l4_fwd_16", 512, 256, 4608, 0, 0},    /* layer4, 16 images batched */
    {"resnet18_l1_dw_16", 64, 576, 16384, 0, 1},     /* dW = dY cols^T, 16 images */
    {"resnet18_l1_dx_16", 576, 16384, 64, 1, 0},     /* dcols = W^T dY, 16 images */
    {"resnet18_l3_dx_cols", 2304, 64, 256, 1, 0},    /* layer3, one image */
    {"wino_f4_l1_fwd_16", 1024, 64, 64, 0, 1},       /* M = V U^T: 16 x 64 tiles */
    {"wino_f4_l3_fwd_16", 64, 256, 256, 0, 1},       /* 16 x 4 tiles */
    {"wino_f4_l3_dw_16", 256, 256, 64, 1, 0},        /* dU = dM^T V */
    {"lenet_conv1", 6, 576, 25, 0, 0},
    {"lenet_conv2", 16, 64, 150, 0, 0},
    {"lenet_fc1_b64", 64, 120, 400, 0, 1},
};
#define NSHAPES (int)(sizeof shapes / sizeof *shapes)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* one oneDNN matmul of the shape in data type dt (f32 or bf16) into f32 C */
typedef struct prim {
    dnnl_primitive_t p;
    dnnl_memory_t a, b, c;
    char impl[64];
} prim;

static int prim_make(prim *q, dnnl_engine_t eng, const shape *s, dnnl_data_type_t dt, void *a,
                     void *b, float *c)
{
    dnnl_memory_desc_t ma, mb, mc;
    dnnl_dims_t da = {s->m, s->k}, db = {s->k, s->n}, dc = {s->m, s->n};
    dnnl_dims_t sa = {s->ta ? 1 : s->k, s->ta ? s->m : 1};
    dnnl_dims_t sb = {s->tb ? 1 : s->n, s->tb ? s->k : 1}, sc = {s->n, 1};
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    const char *impl = "?";
    if (dnnl_memory_desc_init_by_strides(&ma, 2, da, dt, sa) ||
        dnnl_memory_desc_init_by_strides(&mb, 2, db, dt, sb) ||
        dnnl_memory_desc_init_by_strides(&mc, 2, dc, dnnl_f32, sc) ||
        dnnl_matmul_desc_init(&md, &ma, &mb, NULL, &mc) ||
        dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL))
        return 0;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    snprintf(q->impl, sizeof q->impl, "%s", impl);
    const int ok = !dnnl_primitive_create(&q->p, pd) && !dnnl_memory_create(&q->a, &ma, eng, a) &&
                   !dnnl_memory_create(&q->b, &mb, eng, b) &&
                   !dnnl_memory_create(&q->c, &mc, eng, c);
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

static int prim_run(const prim *q, dnnl_stream_t st)
{
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, q->a}, {DNNL_ARG_WEIGHTS, q->b}, {DNNL_ARG_DST, q->c}};
    return !dnnl_primitive_execute(q->p, st, 3, args) && !dnnl_stream_wait(st);
}

static void prim_free(prim *q)
{
    dnnl_primitive_destroy(q->p);
    dnnl_memory_destroy(q->a), dnnl_memory_destroy(q->b), dnnl_memory_destroy(q->c);
}

static double relerr(const float *x, const float *ref, size_t n)
{
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++)
        e += ((double)x[i] - ref[i]) * ((double)x[i] - ref[i]), r += (double)ref[i] * ref[i];
    return sqrt(e / (r > 0 ? r : 1));
}

static int bench_shape(const shape *s, int rounds, int bf16, dnnl_engine_t eng, dnnl_stream_t st)
{
    const size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n, nc = (size_t)s->m * s->n;
    float *a = malloc(4 * na), *b = malloc(4 * nb), *c = malloc(4 * nc), *cf = malloc(4 * nc);
    float *cb = malloc(4 * nc);
    uint16_t *a16 = malloc(2 * na), *b16 = malloc(2 * nb);
    if (!a || !b || !c || !cf || !cb || !a16 || !b16) {
        fprintf(stderr, "bench/onednn_gemm: out of memory for %s\n", s->name);
        exit(1);
    }
    srand(1);
    for (size_t i = 0; i < na; i++)
        a[i] = (float)rand() / (float)RAND_MAX - 0.5f, a16[i] = to_bf16(a[i]);
    for (size_t i = 0; i < nb; i++)
        b[i] = (float)rand() / (float)RAND_MAX - 0.5f, b16[i] = to_bf16(b[i]);
    prim pf, pb;
    if (!prim_make(&pf, eng, s, dnnl_f32, a, b, cf) ||
        (bf16 && !prim_make(&pb, eng, s, dnnl_bf16, a16, b16, cb))) {
        fprintf(stderr, "bench/onednn_gemm: oneDNN could not make the %s matmul\n", s->name);
        return 0;
    }
    const double flops = 2.0 * s->m * s->n * s->k;
    const int reps = flops >= 4e7 ? 1 : (int)(4e7 / flops) + 1; /* >= ~2 ms at 20 GF/s */
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < rounds; r++)
        for (int which = 0; which < 3; which++) {
            const int w = (which + r) % 3; /* the order rotates from round to round */
            if (w == 2 && !bf16)
                continue;
            const double t0 = now();
            for (int i = 0; i < reps; i++)
                if (w == 0)
                    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                                s->tb ? CblasTrans : CblasNoTrans, s->m, s->n, s->k, 1.0f, a,
                                s->ta ? s->m : s->k, b, s->tb ? s->k : s->n, 0.0f, c, s->n);
                else if (!prim_run(w == 1 ? &pf : &pb, st)) {
                    fprintf(stderr, "bench/onednn_gemm: oneDNN's %s matmul failed\n", s->name);
                    return 0;
                }
            const double t = (now() - t0) / reps;
            best[w] = t < best[w] ? t : best[w];
        }
    const double g0 = flops / best[0] / 1e9, g1 = flops / best[1] / 1e9;
    printf("gemm name=%s m=%d n=%d k=%d ta=%d tb=%d sgemm_gflops=%.1f onednn_f32_gflops=%.1f "
           "f32_vs_sgemm=%.2f f32_relerr=%.1e",
           s->name, s->m, s->n, s->k, s->ta, s->tb, g0, g1, g1 / g0, relerr(cf, c, nc));
    if (bf16) {
        const double g2 = flops / best[2] / 1e9;
        printf(" onednn_bf16_gflops=%.1f bf16_vs_sgemm=%.2f bf16_relerr=%.1e impl_f32=%s "
               "impl_bf16=%s\n",
               g2, g2 / g0, relerr(cb, c, nc), pf.impl, pb.impl);
        prim_free(&pb);
    } else {
        printf(" onednn_bf16_gflops=- bf16_vs_sgemm=- bf16_relerr=- impl_f32=%s impl_bf16=-\n",
               pf.impl);
    }
    prim_free(&pf);
    free(a), free(b), free(c), free(cf), free(cb), free(a16), free(b16);
    return 1;
}

int main(int argc, char **argv)
{
    int rounds = 9;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc && atoi(argv[i + 1]) > 0)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: bench/onednn_gemm [--rounds N] [--only NAME]\n");
            return 2;
        }
    }
    hcnn_blas_single_threaded();
    omp_set_num_threads(1);
    char ver[128], isa[64], why[512];
    const int bf16 = hcnn_cpu_bf16_supported(why, sizeof why);
    const char *core = getenv("OPENBLAS_CORETYPE");
    printf("# %s, dispatching %s; bf16: %s; OPENBLAS_CORETYPE=%s; 1 thread, best of %d rounds\n",
           hcnn_onednn_version(ver, sizeof ver), hcnn_onednn_isa(isa, sizeof isa),
           bf16 ? "native" : why, core ? core : "(unset: OpenBLAS's own choice)", rounds);
    dnnl_engine_t eng;
    dnnl_stream_t st;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) ||
        dnnl_stream_create(&st, eng, dnnl_stream_default_flags)) {
        fprintf(stderr, "bench/onednn_gemm: oneDNN's CPU engine could not be made\n");
        return 1;
    }
    int found = 0;
    for (int i = 0; i < NSHAPES; i++)
        if (!only || !strcmp(only, shapes[i].name)) {
            found = 1;
            if (!bench_shape(&shapes[i], rounds, bf16, eng, st))
                return 1;
        }
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    if (!found) {
        fprintf(stderr, "bench/onednn_gemm: no shape named '%s'\n", only);
        return 2;
    }
    return 0;
}

#else

int main(void)
{
    fprintf(stderr, "bench/onednn_gemm: hcnn was built without oneDNN (./configure --with-onednn)\n");
    return 1;
}

#endif
