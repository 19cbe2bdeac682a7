/* precision: bf16 on the CPU: GEMMs whose inputs are rounded to bfloat16
 * (round to nearest, ties to even), multiplied by oneDNN's matmul with
 * FP32 accumulation and output (AVX512-BF16 or AMX tiles; hcnn refuses
 * bf16 where oneDNN would emulate them: src/blas/onednn.c).
 *
 * Each GEMM runs single-threaded on the calling thread, as the BLAS does
 * (gemm.c): inside a parallel region it is one piece of the caller's cut,
 * outside one it is cut by shape into pieces run by all threads, so the
 * result depends on the shape and the instruction set only, never on the
 * thread count.  A primitive is made for one thread (OpenMP's thread count
 * set to 1 around its creation and execution: oneDNN sizes its work split
 * by it) and kept per thread and shape, with the thread's stream and a
 * scratchpad of its own (scratchpad mode user: oneDNN's default one is
 * shared by all threads).  Inputs given in FP32 are rounded into the
 * thread's buffers first; a caller that keeps its operand in bfloat16
 * (the weights, rounded once per call) passes it as it is. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "cpu.h"

uint16_t hcnn_bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN (quiet) */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float hcnn_bf16_to_float(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* y[i] = x[i] rounded, a loop GCC vectorises (the NaN test is a select):
 * 0.34 ns an element from L2 on the Xeon (family 6 model 207) */
HCNN_MULTIVERSION
static void round_loop(const float *x, size_t n, uint16_t *y)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        const uint32_t q = (u >> 16) | 0x40u;
        y[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
    }
}

HCNN_MULTIVERSION
static void widen_loop(const float *x, size_t n, float *y)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        const uint32_t q = (u & 0xffff0000u) | 0x400000u;
        const uint32_t v = (u & 0x7fffffffu) > 0x7f800000u ? q : r;
        memcpy(&y[i], &v, sizeof v);
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 10
#include <immintrin.h>
#define HCNN_BF16_INSN 1
/* The same by the AVX512-BF16 instruction (vcvtne2ps2bf16: to nearest
 * even, NaN quieted; subnormal inputs flushed to zero, which the loop
 * above keeps: a difference under 2^-126 in absolute value): 0.08 ns an
 * element, 4x the loop, on the Xeon (precision bf16 runs only on CPUs that
 * have it: src/blas/onednn.c). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
static void round_insn(const float *x, size_t n, uint16_t *y)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
        _mm512_storeu_si512((void *)(y + i), (__m512i)r);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = (__mmask16)(n - i >= 16 ? 0xffffu : (1u << (n - i)) - 1u);
        const __m256bh r = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
        _mm256_mask_storeu_epi16((void *)(y + i), m, (__m256i)r);
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
static void widen_insn(const float *x, size_t n, float *y)
{
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = (__mmask16)(n - i >= 16 ? 0xffffu : (1u << (n - i)) - 1u);
        const __m256bh r = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
        const __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)r), 16);
        _mm512_mask_storeu_ps(y + i, m, _mm512_castsi512_ps(w));
    }
}
#endif

void hcnn_bf16_round(const float *x, size_t n, uint16_t *y)
{
#ifdef HCNN_BF16_INSN
    if (__builtin_cpu_supports("avx512bf16")) {
        round_insn(x, n, y);
        return;
    }
#endif
    round_loop(x, n, y);
}

/* y[i] = x[i] rounded to bfloat16, as an FP32 value (exact) */
void hcnn_bf16_widen(const float *x, size_t n, float *y)
{
#ifdef HCNN_BF16_INSN
    if (__builtin_cpu_supports("avx512bf16")) {
        widen_insn(x, n, y);
        return;
    }
#endif
    widen_loop(x, n, y);
}

#ifdef HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>

/* rows x cols of x (row stride ld) rounded into y, packed (row stride cols) */
static void round_rows(const float *x, int rows, int cols, int ld, uint16_t *y)
{
    for (int r = 0; r < rows; r++)
        hcnn_bf16_round(x + (size_t)r * ld, (size_t)cols, y + (size_t)r * cols);
}

/* One shape's primitive on one thread. */
typedef struct bf16_prim {
    int ta, tb, m, n, k, lda, ldb, ldc;
    float alpha, beta;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
    size_t scratch_bytes;
} bf16_prim;

/* A thread's stream, primitives, scratchpad and rounding buffers. */
typedef struct bf16_thread {
    dnnl_stream_t stream;
    bf16_prim *prims;
    int nprims, cap;
    void *scratch;
    size_t scratch_bytes;
    dnnl_memory_t scratch_mem;
    uint16_t *buf;
    size_t buf_elems;
    float *wide[2]; /* operands rounded and widened back to FP32 (the BLAS's products) */
    size_t wide_elems[2];
} bf16_thread;

struct hcnn_bf16 {
    dnnl_engine_t engine;
    bf16_thread *t;
    int nt;
    int onednn; /* 1: oneDNN's matmul wins here (bf16_engine) */
};

#define DNNL_OK(call) ((call) == dnnl_success)

/* Which engine multiplies bf16 here: oneDNN's matmul where it is faster
 * than the BLAS's FP32 GEMM on the same (rounded) inputs, else the BLAS.
 * One thread, ResNet-18's and LeNet-5's im2col GEMM shapes, oneDNN 2.6.3
 * bf16 x bf16 -> f32 against OpenBLAS 0.3.21 sgemm (SkylakeX kernels):
 * AMX tiles (avx512_core_amx, Xeon Emerald Rapids) 2.0-5.7x for products of
 * >= 64 x 64 x 64, 0.5-0.9x below 16 rows or a k of 25 (docs/performance.md,
 * "bf16 on the CPU"); AVX512-BF16 without AMX on the same Xeon (oneDNN
 * capped: ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16) 0.52-1.08x: Intel's
 * vdpbf16ps does no more multiply-adds a cycle than its FP32 FMAs; on AMD
 * Zen 4 (avx512_core_bf16) 2.0-2.5x (toolchain notes, 2026-11-27). */
static int bf16_engine(void)
{
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    const unsigned amx = (unsigned)dnnl_cpu_isa_avx512_core_amx;
    if (((unsigned)isa & amx) == amx)
        return 1;
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    int amd = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "vendor_id", 9)) {
            amd = strstr(line, "AuthenticAMD") != NULL;
            break;
        }
    if (f)
        fclose(f);
    return amd;
}

int hcnn_bf16_by_onednn(const hcnn_bf16 *b, int m, int n, int k)
{
    return b->onednn && m >= 16 && n >= 16 && k >= 32 && (double)m * n * k >= 65536.0;
}

const char *hcnn_bf16_engine(const hcnn_bf16 *b)
{
    return b->onednn ? "oneDNN's matmul (products of >= 16 x 16 x 32; smaller ones the BLAS's)"
                     : "the BLAS's FP32 GEMM on the rounded inputs (oneDNN's bf16 matmul is "
                       "slower on this CPU)";
}

const float *hcnn_bf16_widened(hcnn_bf16 *b, int th, int which, const float *x,
                               const uint16_t *x16, int rows, int cols, int ld)
{
    bf16_thread *t = &b->t[th];
    const size_t elems = (size_t)rows * cols;
    if (elems > t->wide_elems[which]) {
        void *p = NULL;
        if (posix_memalign(&p, 64, elems * sizeof(float)))
            hcnn_fatal_at(__FILE__, __LINE__, "cannot allocate a thread's bf16 buffer of %zu "
                                              "values",
                          elems);
        free(t->wide[which]);
        t->wide[which] = p, t->wide_elems[which] = elems;
    }
    float *w = t->wide[which];
    for (int r = 0; r < rows; r++)
        if (x16)
            for (int c = 0; c < cols; c++)
                w[(size_t)r * cols + c] = hcnn_bf16_to_float(x16[(size_t)r * ld + c]);
        else
            hcnn_bf16_widen(x + (size_t)r * ld, (size_t)cols, w + (size_t)r * cols);
    return w;
}

hcnn_bf16 *hcnn_bf16_create(int threads)
{
    hcnn_bf16 *b = hcnn_calloc(sizeof *b, "the bf16 GEMMs' state");
    if (!b)
        return NULL;
    b->onednn = bf16_engine();
    b->nt = threads > 0 ? threads : 1;
    b->t = hcnn_calloc(sizeof *b->t * (size_t)b->nt, "the bf16 GEMMs' threads");
    if (!b->t || !DNNL_OK(dnnl_engine_create(&b->engine, dnnl_cpu, 0))) {
        hcnn_error("oneDNN: cannot create its CPU engine (precision: bf16)");
        hcnn_free(b->t);
        hcnn_free(b);
        return NULL;
    }
    return b;
}

void hcnn_bf16_destroy(hcnn_bf16 *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->nt; i++) {
        bf16_thread *t = &b->t[i];
        for (int k = 0; k < t->nprims; k++) {
            dnnl_primitive_destroy(t->prims[k].prim);
            dnnl_memory_destroy(t->prims[k].a);
            dnnl_memory_destroy(t->prims[k].b);
            dnnl_memory_destroy(t->prims[k].c);
        }
        if (t->scratch_mem)
            dnnl_memory_destroy(t->scratch_mem);
        if (t->stream)
            dnnl_stream_destroy(t->stream);
        free(t->prims);
        free(t->scratch);
        free(t->buf);
        free(t->wide[0]);
        free(t->wide[1]);
    }
    hcnn_free(b->t);
    dnnl_engine_destroy(b->engine);
    hcnn_free(b);
}

/* the matrix [rows][cols] as a GEMM operand: row-major with stride ld, or
 * (transposed) its transpose stored row-major */
static int desc_of(dnnl_memory_desc_t *d, int rows, int cols, int ld, int transposed,
                   dnnl_data_type_t type)
{
    const dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {ld, 1};
    if (transposed)
        strides[0] = 1, strides[1] = ld;
    return DNNL_OK(dnnl_memory_desc_init_by_strides(d, 2, dims, type, strides));
}

/* The thread's primitive for this shape, made on first use. */
static bf16_prim *prim_for(hcnn_bf16 *b, bf16_thread *t, int ta, int tb, int m, int n, int k,
                           float alpha, int lda, int ldb, float beta, int ldc)
{
    for (int i = 0; i < t->nprims; i++) {
        bf16_prim *p = &t->prims[i];
        if (p->ta == ta && p->tb == tb && p->m == m && p->n == n && p->k == k && p->lda == lda &&
            p->ldb == ldb && p->ldc == ldc && p->alpha == alpha && p->beta == beta)
            return p;
    }
    if (t->nprims == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 16;
        bf16_prim *np = realloc(t->prims, sizeof *np * (size_t)cap);
        if (!np)
            return NULL;
        t->prims = np, t->cap = cap;
    }
    if (!t->stream && !DNNL_OK(dnnl_stream_create(&t->stream, b->engine,
                                                  dnnl_stream_default_flags)))
        return NULL;
    dnnl_memory_desc_t da, db, dc;
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    bf16_prim p = {ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, NULL, NULL, NULL, NULL, 0};
    int ok = desc_of(&da, m, k, lda, ta, dnnl_bf16) && desc_of(&db, k, n, ldb, tb, dnnl_bf16) &&
             desc_of(&dc, m, n, ldc, 0, dnnl_f32) &&
             DNNL_OK(dnnl_matmul_desc_init(&md, &da, &db, NULL, &dc)) &&
             DNNL_OK(dnnl_primitive_attr_create(&attr)) &&
             DNNL_OK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (ok && alpha != 1.0f)
        ok = DNNL_OK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha));
    if (ok && beta != 0.0f)
        ok = DNNL_OK(dnnl_post_ops_create(&ops)) && DNNL_OK(dnnl_post_ops_append_sum(ops, beta)) &&
             DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, ops));
    if (ok)
        ok = DNNL_OK(dnnl_primitive_desc_create(&pd, &md, attr, b->engine, NULL));
    if (ok) {
        const dnnl_memory_desc_t *sd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        p.scratch_bytes = sd ? dnnl_memory_desc_get_size(sd) : 0;
        ok = DNNL_OK(dnnl_primitive_create(&p.prim, pd)) &&
             DNNL_OK(dnnl_memory_create(&p.a, &da, b->engine, DNNL_MEMORY_NONE)) &&
             DNNL_OK(dnnl_memory_create(&p.b, &db, b->engine, DNNL_MEMORY_NONE)) &&
             DNNL_OK(dnnl_memory_create(&p.c, &dc, b->engine, DNNL_MEMORY_NONE));
    }
    if (ok && p.scratch_bytes > t->scratch_bytes) { /* the thread's scratchpad grows */
        void *s = NULL;
        ok = posix_memalign(&s, 64, p.scratch_bytes) == 0;
        if (ok) {
            free(t->scratch);
            t->scratch = s, t->scratch_bytes = p.scratch_bytes;
            if (t->scratch_mem)
                dnnl_memory_destroy(t->scratch_mem);
            t->scratch_mem = NULL;
            const dnnl_dims_t sz = {(dnnl_dim_t)p.scratch_bytes};
            dnnl_memory_desc_t smd;
            ok = DNNL_OK(dnnl_memory_desc_init_by_tag(&smd, 1, sz, dnnl_u8, dnnl_a)) &&
                 DNNL_OK(dnnl_memory_create(&t->scratch_mem, &smd, b->engine, t->scratch));
        }
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (ops)
        dnnl_post_ops_destroy(ops);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (!ok) {
        hcnn_error("oneDNN: cannot make a bf16 matmul of %dx%dx%d (transposed %d, %d)", m, n, k,
                   ta, tb);
        if (p.prim)
            dnnl_primitive_destroy(p.prim);
        if (p.a)
            dnnl_memory_destroy(p.a);
        if (p.b)
            dnnl_memory_destroy(p.b);
        if (p.c)
            dnnl_memory_destroy(p.c);
        return NULL;
    }
    t->prims[t->nprims] = p;
    return &t->prims[t->nprims++];
}

/* the thread's rounding buffer, at least `elems` bfloat16 */
static uint16_t *thread_buffer(bf16_thread *t, size_t elems)
{
    if (elems > t->buf_elems) {
        void *p = NULL;
        if (posix_memalign(&p, 64, elems * sizeof(uint16_t)))
            return NULL;
        free(t->buf);
        t->buf = p, t->buf_elems = elems;
    }
    return t->buf;
}

/* One single-threaded product on thread `th`; an FP32 operand is rounded
 * into the thread's buffer first (packed: ld = its row length). */
void hcnn_bf16_product(hcnn_bf16 *b, int th, int ta, int tb, int m, int n, int k, float alpha,
                       const float *a, const uint16_t *a16, int lda, const float *bm,
                       const uint16_t *b16, int ldb, float beta, float *c, int ldc)
{
    if (th < 0 || th >= b->nt)
        hcnn_fatal_at(__FILE__, __LINE__, "precision bf16: thread %d of a state for %d", th,
                      b->nt);
    bf16_thread *t = &b->t[th];
    const int arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
    const size_t asz = a16 ? 0 : (size_t)arows * acols, bsz = b16 ? 0 : (size_t)brows * bcols;
    uint16_t *buf = asz + bsz ? thread_buffer(t, asz + bsz) : NULL;
    if (asz + bsz && !buf)
        hcnn_fatal_at(__FILE__, __LINE__, "cannot allocate a thread's bf16 rounding buffer of %zu "
                                          "values",
                      asz + bsz);
    if (!a16)
        round_rows(a, arows, acols, lda, buf), a16 = buf, lda = acols;
    if (!b16)
        round_rows(bm, brows, bcols, ldb, buf + asz), b16 = buf + asz, ldb = bcols;
    const int outer = omp_get_max_threads();
    if (outer > 1) /* oneDNN splits its work by it: one thread, one order */
        omp_set_num_threads(1);
    bf16_prim *p = prim_for(b, t, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc);
    if (!p)
        hcnn_fatal_at(__FILE__, __LINE__, "precision bf16: no oneDNN matmul for %dx%dx%d", m, n,
                      k);
    dnnl_memory_set_data_handle(p->a, (void *)(uintptr_t)a16);
    dnnl_memory_set_data_handle(p->b, (void *)(uintptr_t)b16);
    dnnl_memory_set_data_handle(p->c, c);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c},
                               {DNNL_ARG_SCRATCHPAD, t->scratch_mem}};
    const int nargs = p->scratch_bytes ? 4 : 3;
    if (!DNNL_OK(dnnl_primitive_execute(p->prim, t->stream, nargs, args)) ||
        !DNNL_OK(dnnl_stream_wait(t->stream)))
        hcnn_fatal_at(__FILE__, __LINE__, "precision bf16: oneDNN's matmul of %dx%dx%d failed", m,
                      n, k);
    if (outer > 1)
        omp_set_num_threads(outer);
}

#else /* no oneDNN: precision bf16 is refused at start (src/blas/onednn.c) */

struct hcnn_bf16 {
    int unused;
};
hcnn_bf16 *hcnn_bf16_create(int threads)
{
    (void)threads;
    hcnn_error("precision: bf16: hcnn was built without oneDNN");
    return NULL;
}
void hcnn_bf16_destroy(hcnn_bf16 *b) { (void)b; }
int hcnn_bf16_by_onednn(const hcnn_bf16 *b, int m, int n, int k)
{
    (void)b, (void)m, (void)n, (void)k;
    return 0;
}
const char *hcnn_bf16_engine(const hcnn_bf16 *b)
{
    (void)b;
    return "none (built without oneDNN)";
}
const float *hcnn_bf16_widened(hcnn_bf16 *b, int th, int which, const float *x,
                               const uint16_t *x16, int rows, int cols, int ld)
{
    (void)b, (void)th, (void)which, (void)x, (void)x16, (void)rows, (void)cols, (void)ld;
    hcnn_fatal_at(__FILE__, __LINE__, "precision bf16 in a build without oneDNN");
}
void hcnn_bf16_product(hcnn_bf16 *b, int th, int ta, int tb, int m, int n, int k, float alpha,
                       const float *a, const uint16_t *a16, int lda, const float *bm,
                       const uint16_t *b16, int ldb, float beta, float *c, int ldc)
{
    (void)b, (void)th, (void)ta, (void)tb, (void)alpha, (void)a, (void)a16, (void)lda, (void)bm;
    (void)b16, (void)ldb, (void)beta, (void)c, (void)ldc;
    hcnn_fatal_at(__FILE__, __LINE__, "precision bf16: a %dx%dx%d GEMM in a build without oneDNN",
                  m, n, k);
}
#endif
