/* The linked BLAS (configure --with-blas): its name and build, the kernels
 * it runs, and one thread per call.  hcnn calls the BLAS from its own
 * threads on pieces fixed by shape (src/cpu/gemm.c), so every library is
 * held to one thread here, whatever its threading build:
 *   OpenBLAS  openblas_set_num_threads(1) (the pthread build obeys it; the
 *             OpenMP build follows omp_get_max_threads() at every call, which
 *             gemm.c sets to 1 around each call outside a parallel region)
 *   BLIS      bli_thread_set_num_threads(1) (its default would follow
 *             BLIS_NUM_THREADS or OMP_NUM_THREADS)
 *   generic   whichever of mkl_set_num_threads, bli_thread_set_num_threads,
 *             openblas_set_num_threads the library has, and gemm.c's OpenMP
 *             thread count of 1 around each call (MKL's GNU OpenMP layer) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "cblas_decl.h"
#include "hcnn/common.h"
#include "internal.h"

#if defined(HCNN_BLAS_OPENBLAS) || defined(HAVE_OPENBLAS_SET_NUM_THREADS)
void openblas_set_num_threads(int n);
#endif
#if defined(HCNN_BLAS_OPENBLAS)
int openblas_get_num_threads(void);
char *openblas_get_corename(void);
char *openblas_get_config(void);
#endif
#if defined(HCNN_BLAS_BLIS) || defined(HAVE_BLI_THREAD_SET_NUM_THREADS)
/* BLIS's own API (blis.h is not included: see cblas_decl.h); dim_t is 64
 * bits in its default configuration, arch_t an enum */
void bli_thread_set_num_threads(int64_t n);
#endif
#if defined(HCNN_BLAS_BLIS)
const char *bli_info_get_version_str(void);
int bli_arch_query_id(void);
const char *bli_arch_string(int id);
void *bli_gks_query_cntx(void);
void bli_cntx_set_l3_sup_handlers(int64_t n_ops, ...); /* BLIS 0.x: (n, op, handler, ..., cntx) */
#endif
#if defined(HAVE_MKL_SET_NUM_THREADS)
void mkl_set_num_threads(int n);
#endif

#if defined(HCNN_BLAS_BLIS)
/* BLIS before 1.0 (Debian 12 ships 0.9.0): the x86-64 kernels of its
 * small/unpacked ("sup") GEMM path read past the last row of an operand
 * (flame/blis#821, fixed in 1.0 by b66b48fb0; also #635), so a GEMM whose
 * operand ends at the end of a mapping faults.  Seen in hcnn: the weight
 * gradient of a 16-channel 6x6 convolution over 11 images (m 16, n 144,
 * k 396), its dY the last floats of the workspace, killed a pipeline rank
 * in about one run in eight (tests/integration/test_seam.sh, cpu-devmem); and
 * tests/unit/test_blas_bounds.c faults at once with an operand ending at a
 * guard page.  Before 1.0, hcnn replaces the context's small-matrix
 * handler for GEMM with one that declines, so every GEMM takes BLIS's
 * packed path, whose packing reads within bounds.  Declared here, not
 * from blis.h (see cblas_decl.h), with BLIS 0.x's values: the handler's
 * seven pointer arguments, BLIS_FAILURE -2, BLIS_GEMM 0 (opid_t). */
static int blis_decline_small_path(void *alpha, void *a, void *b, void *beta, void *c,
                                   void *cntx, void *rntm)
{
    (void)alpha, (void)a, (void)b, (void)beta, (void)c, (void)cntx, (void)rntm;
    return -2; /* BLIS_FAILURE: the caller goes on with the packed path */
}

int hcnn_blas_small_path_off(void) { return strncmp(bli_info_get_version_str(), "0.", 2) == 0; }

static void blis_avoid_small_path(void)
{
    if (hcnn_blas_small_path_off())
        bli_cntx_set_l3_sup_handlers(1, 0 /* BLIS_GEMM */, (void *)blis_decline_small_path,
                                     bli_gks_query_cntx());
}
#else
int hcnn_blas_small_path_off(void) { return 0; }
#endif

void hcnn_blas_single_threaded(void)
{
#if defined(HCNN_BLAS_BLIS)
    blis_avoid_small_path();
#endif
    /* OpenBLAS's OpenMP build passes its count on to omp_set_num_threads:
     * the caller's OpenMP thread count stays as it was */
    const int omp_threads = omp_get_max_threads();
#if defined(HCNN_BLAS_OPENBLAS) || defined(HAVE_OPENBLAS_SET_NUM_THREADS)
    openblas_set_num_threads(1);
#endif
#if defined(HCNN_BLAS_BLIS) || defined(HAVE_BLI_THREAD_SET_NUM_THREADS)
    bli_thread_set_num_threads(1);
#endif
#if defined(HAVE_MKL_SET_NUM_THREADS)
    mkl_set_num_threads(1);
#endif
    omp_set_num_threads(omp_threads);
}

const char *hcnn_blas_library_name(char *buf, int cap)
{
#if defined(HCNN_BLAS_OPENBLAS)
    /* "OpenBLAS 0.3.21 DYNAMIC_ARCH ...": its first two words */
    const char *cfg = openblas_get_config();
    int len = 0, words = 0;
    while (cfg[len] && !(cfg[len] == ' ' && ++words == 2))
        len++;
    snprintf(buf, (size_t)cap, "%.*s", len, cfg);
#elif defined(HCNN_BLAS_BLIS)
    snprintf(buf, (size_t)cap, "BLIS %s%s", bli_info_get_version_str(),
             hcnn_blas_small_path_off() ? " (small-matrix path off: it reads past operands before "
                                          "1.0)"
                                        : "");
#else
    snprintf(buf, (size_t)cap, "CBLAS (%s)", HCNN_BLAS_LIBS);
#endif
    return buf;
}

const char *hcnn_blas_loaded_kernels(void)
{
#if defined(HCNN_BLAS_OPENBLAS)
    return openblas_get_corename();
#elif defined(HCNN_BLAS_BLIS)
    return bli_arch_string(bli_arch_query_id());
#else
    return "";
#endif
}

int hcnn_blas_kernels_selectable(void)
{
#if defined(HCNN_BLAS_OPENBLAS)
    return 1;
#else
    return 0;
#endif
}

const char *hcnn_blas_library_build(char *buf, int cap)
{
    Dl_info info;
    const char *file = dladdr((void *)cblas_sgemm, &info) && info.dli_fname ? info.dli_fname : "?";
    char name[128];
    hcnn_blas_library_name(name, sizeof name);
#if defined(HCNN_BLAS_OPENBLAS)
    /* its configuration string names the core loaded now: left out */
    const char *cfg = openblas_get_config(), *core = openblas_get_corename();
    char rest[256] = "";
    for (const char *p = cfg; *p;) {
        const char *e = strchr(p, ' ');
        const int len = e ? (int)(e - p) : (int)strlen(p);
        if (!(len == (int)strlen(core) && !strncmp(p, core, (size_t)len)))
            snprintf(rest + strlen(rest), sizeof rest - strlen(rest), "%s%.*s", rest[0] ? " " : "",
                     len, p);
        p += len + (e ? 1 : 0);
    }
    snprintf(buf, (size_t)cap, "%s [%s]", rest, file);
#else
    snprintf(buf, (size_t)cap, "%s [%s]", name, file);
#endif
    return buf;
}

/* How many threads may be inside OpenBLAS at once.  Each call takes one
 * buffer from a pool of NUM_BUFFERS = max(50, 2 x MAX_THREADS) for as long
 * as it runs (driver/others/memory.c; Debian builds MAX_THREADS=64: 128
 * buffers), and its OpenMP build keeps one of them for each of its own
 * threads (blas_thread_buffer; one once hcnn_blas_single_threaded has run:
 * OMP_NUM_THREADS=1024 and 128 callers overflowed by that one).  Past that, 0.3.21's overflow path is unsafe in every build:
 * in the OpenMP one it sets its "overflowed" flag before it allocates the
 * overflow table, without a lock, so a second thread reads a NULL table
 * (threads: 256 died with SIGSEGV at address 0x10 in blas_memory_alloc in
 * 6 of 6 starts here), and blas_memory_free clears slot `position` of that
 * table instead of `position - NUM_BUFFERS` (two threads then share one
 * buffer, or the heap past the table is written).  So hcnn lets at most
 * that many of its threads call the BLAS at once (hcnn_blas_gate_enter);
 * the others wait their turn.  On a node with more cores than that, the
 * GEMMs of a pass run on that many cores at a time: a correct result, not
 * a full one (an OpenBLAS built with a larger NUM_THREADS, or BLIS, lifts
 * it).  The counter is process-wide because the pool it guards is: the one
 * piece of mutable state shared by a whole process in hcnn's CPU backend. */
#if defined(HCNN_BLAS_OPENBLAS)
static struct {
    once_flag once;
    int cap;            /* 0: no limit */
    atomic_int inside;  /* callers inside the BLAS now, while gated */
} gate = {.once = ONCE_FLAG_INIT};

static void gate_init(void)
{
    const char *cfg = openblas_get_config(), *m = strstr(cfg, "MAX_THREADS=");
    const long max_threads = m ? strtol(m + strlen("MAX_THREADS="), NULL, 10) : 0;
    /* NUM_BUFFERS in OpenBLAS's common.h (MAX_PARALLEL_NUMBER is 1 unless
     * built otherwise); unknown: Debian's 128, the smallest seen */
    const int buffers = max_threads > 0 ? (2 * max_threads > 50 ? 2 * (int)max_threads : 50) : 128;
    /* less OpenBLAS's own threads' (first called after the CPU backend made
     * it single-threaded: 1; earlier, more, and a smaller cap) */
    const int own = openblas_get_num_threads();
    gate.cap = buffers - (own > 0 ? own : 1);
}
#endif

int hcnn_blas_max_callers(void)
{
#if defined(HCNN_BLAS_OPENBLAS)
    call_once(&gate.once, gate_init);
    return gate.cap;
#else
    return 0;
#endif
}

int hcnn_blas_gate_enter(void)
{
#if defined(HCNN_BLAS_OPENBLAS)
    const int cap = hcnn_blas_max_callers();
    if (!omp_in_parallel() || omp_get_num_threads() <= cap)
        return 0; /* at most cap callers in this team: no wait */
    for (;;) {
        int n = atomic_load_explicit(&gate.inside, memory_order_relaxed);
        if (n < cap && atomic_compare_exchange_weak_explicit(&gate.inside, &n, n + 1,
                                                             memory_order_acquire,
                                                             memory_order_relaxed))
            return 1;
        sched_yield(); /* an SMT sibling or another of the run's threads gets the core */
    }
#else
    return 0;
#endif
}

void hcnn_blas_gate_leave(int entered)
{
#if defined(HCNN_BLAS_OPENBLAS)
    if (entered)
        atomic_fetch_sub_explicit(&gate.inside, 1, memory_order_release);
#else
    (void)entered;
#endif
}

/* OpenBLAS 0.3.21 takes a buffer of 128 MiB (and 4 KiB) for each thread
 * the first time that thread calls it (blas_memory_alloc; the backtrace of
 * a LeNet-5 run under ulimit -v 600000 that never ended: malloc(134221824)
 * in an OpenMP worker's first cblas_sgemm), keeps it for the thread's later
 * calls, and when the allocation fails it tries again forever (a loop in
 * its memory.c; upstream behaviour).  A job under an address-space limit
 * must fail with a message instead of sitting until its time limit, and a
 * check alone is not enough: the run's own allocations between the check
 * and the first GEMM of each thread (activations, the first step's
 * workspace) can take the room.  So the buffers are taken here, before
 * anything else of the run is allocated: the room is tried first (reserved
 * PROT_NONE and given back) for the message, then every thread of the team
 * takes a buffer through OpenBLAS's own blas_memory_alloc, all of them at
 * once, and gives it back: OpenBLAS keeps freed buffers for later calls,
 * and a call takes any free one (strace: two threads calling one after the
 * other map one buffer between them; a ResNet-18 run whose warm-up was a
 * small product on each thread in turn still mapped a new buffer in its
 * first convolution, where both threads call at once, and hung there under
 * ulimit -v 1950000). */
#define OPENBLAS_BUFFER_BYTES (((size_t)128 << 20) + 4096)

#if defined(HCNN_BLAS_OPENBLAS)
/* MiB of address space in use (/proc/self/statm), 0 if unknown */
static double used_mib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1)
            pages = 0;
        fclose(f);
    }
    return (double)pages * 4096.0 / 1048576.0;
}
#endif

/* The file of the library hcnn's cblas_sgemm calls go to, NULL if unknown */
static const char *sgemm_file(Dl_info *info)
{
    void (*sgemm)(void) = (void (*)(void))cblas_sgemm;
    return dladdr(*(void **)&sgemm, info) && info->dli_fname ? info->dli_fname : NULL;
}

const char *hcnn_blas_library_file(char *buf, size_t cap)
{
    Dl_info info;
    const char *file = sgemm_file(&info);
    snprintf(buf, cap, "%s", file ? file : "unknown");
    return buf;
}

int hcnn_blas_take_buffers(int threads)
{
#if defined(HCNN_BLAS_OPENBLAS)
    threads = threads > 0 ? threads : 1;
    /* no more callers than the gate lets in at once hold a buffer */
    if (threads > hcnn_blas_max_callers())
        threads = hcnn_blas_max_callers();
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        const size_t need = (size_t)threads * OPENBLAS_BUFFER_BYTES;
        void *p = mmap(NULL, need, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            const double limit = (double)rl.rlim_cur / 1048576.0, used = used_mib();
            return hcnn_error_code(HCNN_ENOMEM,
                                   "the address-space limit (ulimit -v) is %.0f MiB, %.0f MiB of "
                                   "it in use: OpenBLAS needs %.0f MiB more for its buffers (128 "
                                   "MiB for each of %d threads) and, when it cannot have them, "
                                   "waits forever; raise the limit to at least %.0f MiB, or run "
                                   "fewer threads (docs/checkpoints.md: Faults, memory limits)",
                                   limit, used, (double)need / 1048576.0, threads,
                                   used + (double)need / 1048576.0 + 64.0);
        }
        munmap(p, need);
    }
    /* exported by OpenBLAS (common.h declares them), looked up so that a
     * build without them still links: then a small product on each thread.
     * Looked up in the library hcnn's cblas_sgemm calls go to, not the
     * process's first: inside Python, NumPy or PyTorch may have loaded an
     * OpenBLAS of their own (another threading build) before libhcnn. */
    void *(*take)(int) = NULL;
    void (*give)(void *) = NULL;
    Dl_info info;
    const char *file = sgemm_file(&info);
    void *own = file ? dlopen(file, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    *(void **)&take = dlsym(own ? own : RTLD_DEFAULT, "blas_memory_alloc");
    *(void **)&give = dlsym(own ? own : RTLD_DEFAULT, "blas_memory_free");
#pragma omp parallel num_threads(threads)
    {
        void *buffer = take && give ? take(0) : NULL;
        if (!buffer) {
            enum { N = 64 };
            static const float zero[N * N]; /* read only: a product of zeros */
            float c[N * N];
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, zero, N, zero,
                        N, 0.0f, c, N);
        }
#pragma omp barrier /* every thread holds one before any is given back */
        if (buffer)
            give(buffer);
    }
    if (own)
        dlclose(own); /* the reference RTLD_NOLOAD took */
    return HCNN_OK;
#else
    (void)threads; /* BLIS and other libraries fail an allocation with a message */
    return HCNN_OK;
#endif
}
