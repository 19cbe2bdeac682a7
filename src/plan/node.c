/* hcnn plan's node (include/hcnn/node.h): datasheet presets, a node file's
 * loader, and the microbenchmarks that describe this machine ("here"): the
 * FP32 FMA throughput and the STREAM triad bandwidth, with the last-level
 * cache from sysfs. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hcnn/blas.h"
#include "hcnn/common.h"
#include "hcnn/files.h"
#include "hcnn/node.h"
#include "hcnn/threads.h"

/* ---- presets ---------------------------------------------------------------- */

/* Datasheet figures (assumed = 1).  Peak: cores x base clock x FP32 FLOP per
 * cycle and core; Zen 3 and Zen 4 both retire 2 x 256-bit FMA a cycle (Zen 4
 * runs AVX-512 as two 256-bit halves), 2 x 8 lanes x 2 FLOP = 32.  The base
 * clock, not the boost, because every core runs vector code at once.
 * Bandwidth: channels x MT/s x 8 bytes, of which 80% is taken as what a
 * STREAM triad reaches.  One core alone: no datasheet gives it; the figures
 * are assumptions, of the order one Zen core draws in a 1-thread triad.
 *   epyc-9554  AMD EPYC 9554, Zen 4, 64 cores, base 3.1 GHz:
 *              64 x 3.1 x 32 = 6348.8 GFLOP/s; 12 channels DDR5-4800 =
 *              460.8 GB/s, 80%: 368.6 GB/s; one core 40 GB/s (assumption);
 *              L3 256 MiB (8 CCDs x 32 MiB).  The default: the documented
 *              cluster has 64-core nodes but does not name the CPU, so this
 *              choice is itself an assumption.
 *   epyc-7763  AMD EPYC 7763, Zen 3, 64 cores, base 2.45 GHz:
 *              64 x 2.45 x 32 = 5017.6 GFLOP/s; 8 channels DDR4-3200 =
 *              204.8 GB/s, 80%: 163.8 GB/s; one core 25 GB/s (assumption);
 *              L3 256 MiB (8 CCDs x 32 MiB).
 * Barrier: a parallel region's fork and join on the 64 cores, 5 us on both
 * (an assumption, of the order 64 arrivals at libgomp's one shared counter
 * cost when each moves its cache line between CCDs at ~80 ns; measured on
 * the 2-core development VM: 1.0 us on 2 threads, 0.3 on 1, best of 7
 * means of 2000 regions under load, 2026-11-28). */
#define PRESET_BARRIER_US 5.0
static const hcnn_node PRESETS[] = {
    {"epyc-9554", 64, 6348.8, 368.6, 40.0, 256.0, PRESET_BARRIER_US, 1,
     "AMD EPYC 9554 datasheet: 64 Zen 4 cores x 3.1 GHz x 32 FP32 FLOP/cycle; "
     "12 ch DDR5-4800 = 460.8 GB/s, 80% as triad; 1 core 40 GB/s, barrier 5 us assumed; "
     "L3 256 MiB"},
    {"epyc-7763", 64, 5017.6, 163.8, 25.0, 256.0, PRESET_BARRIER_US, 1,
     "AMD EPYC 7763 datasheet: 64 Zen 3 cores x 2.45 GHz x 32 FP32 FLOP/cycle; "
     "8 ch DDR4-3200 = 204.8 GB/s, 80% as triad; 1 core 25 GB/s, barrier 5 us assumed; "
     "L3 256 MiB"},
};
#define NPRESETS (sizeof PRESETS / sizeof PRESETS[0])

const char *hcnn_node_preset_names(void)
{
    return "epyc-9554, epyc-7763"; /* PRESETS' names, in order */
}

/* ---- the node file ----------------------------------------------------------- */

#define NODE_KEYS "name, cores, peak_gflops, bandwidth_gbs, core_bandwidth_gbs, llc_mib, " \
                  "barrier_us, assumed, source"

/* val as a finite number, > 0 (or >= 0 with zero_ok); 0 when it is not one */
static int parse_number(const char *val, int zero_ok, double *out)
{
    char *end;
    errno = 0;
    const double v = strtod(val, &end);
    if (end == val || *end || errno == ERANGE || !isfinite(v) || v < 0 || (!zero_ok && v == 0))
        return 0;
    *out = v;
    return 1;
}

/* The file's fields into node; 1 for each of cores, peak and bandwidth seen
 * in have[0..2]. */
static int node_file(const char *path, FILE *f, hcnn_node *node, int have[3], int *core_bw_set)
{
    char line[512];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f))
            return hcnn_error("%s:%d: line longer than %d characters", path, lineno,
                              (int)sizeof line - 2);
        char *p = line + strspn(line, " \t");
        size_t len = strlen(p);
        while (len && strchr(" \t\r\n", p[len - 1]))
            p[--len] = '\0';
        if (*p == '#' || *p == '\0')
            continue;
        const size_t klen = strspn(p, "abcdefghijklmnopqrstuvwxyz_0123456789");
        char *q = p + klen;
        q += strspn(q, " \t");
        if (klen == 0 || klen > 63 || *q != '=')
            return hcnn_error("%s:%d: expected 'key = value', got '%.60s'", path, lineno, p);
        char key[64];
        memcpy(key, p, klen);
        key[klen] = '\0';
        char *val = q + 1 + strspn(q + 1, " \t");
        /* source is free text, '#' included; elsewhere '#' starts a comment */
        if (strcmp(key, "source")) {
            val[strcspn(val, "#")] = '\0';
            len = strlen(val);
            while (len && strchr(" \t", val[len - 1]))
                val[--len] = '\0';
        }
        const int known = !strcmp(key, "name") || !strcmp(key, "cores") ||
                          !strcmp(key, "peak_gflops") || !strcmp(key, "bandwidth_gbs") ||
                          !strcmp(key, "core_bandwidth_gbs") || !strcmp(key, "llc_mib") ||
                          !strcmp(key, "barrier_us") || !strcmp(key, "assumed") ||
                          !strcmp(key, "source");
        if (!known)
            return hcnn_error("%s:%d: unknown key '%s' (" NODE_KEYS ")", path, lineno, key);
        if (!*val)
            return hcnn_error("%s:%d: %s: expected a value after '='", path, lineno, key);
        if (!strcmp(key, "name")) {
            snprintf(node->name, sizeof node->name, "%.63s", val);
        } else if (!strcmp(key, "source")) {
            snprintf(node->source, sizeof node->source, "%.199s", val);
        } else if (!strcmp(key, "cores")) {
            char *end;
            errno = 0;
            const long v = strtol(val, &end, 10);
            if (end == val || *end || errno == ERANGE || v < 1 || v > 1L << 20)
                return hcnn_error("%s:%d: cores: expected a positive whole number (at most "
                                  "%ld), got '%s'",
                                  path, lineno, 1L << 20, val);
            node->cores = (int)v;
            have[0] = 1;
        } else if (!strcmp(key, "assumed")) {
            if (strcmp(val, "0") && strcmp(val, "1"))
                return hcnn_error("%s:%d: assumed: expected 0 (measured) or 1 (datasheet), "
                                  "got '%s'",
                                  path, lineno, val);
            node->assumed = val[0] == '1';
        } else {
            const int llc = !strcmp(key, "llc_mib"), barrier = !strcmp(key, "barrier_us");
            double v;
            if (!parse_number(val, llc || barrier, &v))
                return hcnn_error("%s:%d: %s: expected a %s number, got '%s'", path, lineno, key,
                                  llc       ? "non-negative (0: unknown)"
                                  : barrier ? "non-negative"
                                            : "positive",
                                  val);
            if (llc)
                node->llc_mib = v;
            else if (barrier)
                node->barrier_us = v;
            else if (!strcmp(key, "peak_gflops"))
                node->peak_gflops = v, have[1] = 1;
            else if (!strcmp(key, "bandwidth_gbs"))
                node->bandwidth_gbs = v, have[2] = 1;
            else
                node->core_bandwidth_gbs = v, *core_bw_set = 1;
        }
    }
    if (ferror(f))
        return hcnn_error_code(HCNN_EIO, "%s: cannot read after line %d (%s)", path, lineno,
                               strerror(errno));
    return HCNN_OK;
}

int hcnn_node_load(const char *spec, hcnn_node *node)
{
    if (!spec || !*spec)
        return hcnn_error("--node: expected a preset (%s), 'here' or a file",
                          hcnn_node_preset_names());
    for (size_t i = 0; i < NPRESETS; i++)
        if (!strcmp(spec, PRESETS[i].name)) {
            *node = PRESETS[i];
            return HCNN_OK;
        }
    if (!strcmp(spec, "here"))
        return hcnn_node_measure(node);
    struct stat st;
    if (stat(spec, &st) != 0)
        return hcnn_error_code(HCNN_EIO, "--node '%s': neither a preset (%s), 'here', nor a "
                                         "readable file (%s)",
                               spec, hcnn_node_preset_names(), strerror(errno));
    FILE *f; /* a FIFO named here blocked hcnn plan in fopen */
    int frc = hcnn_fopen_regular(spec, "--node file", HCNN_EIO, &f);
    if (frc)
        return frc;
    memset(node, 0, sizeof *node);
    snprintf(node->name, sizeof node->name, "%.63s", spec);
    snprintf(node->source, sizeof node->source, "file %.190s", spec);
    node->assumed = 1;
    node->barrier_us = PRESET_BARRIER_US;
    int have[3] = {0, 0, 0}, core_bw_set = 0;
    const int rc = node_file(spec, f, node, have, &core_bw_set);
    fclose(f);
    if (rc)
        return rc;
    if (!have[0] || !have[1] || !have[2]) {
        static const char *const required[3] = {"cores", "peak_gflops", "bandwidth_gbs"};
        char missing[64] = "";
        for (int i = 0; i < 3; i++)
            if (!have[i])
                snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s",
                         missing[0] ? ", " : "", required[i]);
        return hcnn_error("%s: missing %s (a node file needs cores, peak_gflops and "
                          "bandwidth_gbs)",
                          spec, missing);
    }
    if (!core_bw_set)
        node->core_bandwidth_gbs = node->bandwidth_gbs / node->cores;
    return HCNN_OK;
}

/* ---- scaling with threads ------------------------------------------------------ */

static int capped_threads(const hcnn_node *node, int threads)
{
    return threads < 1 ? 0 : threads < node->cores ? threads : node->cores;
}

double hcnn_node_peak_gflops(const hcnn_node *node, int threads)
{
    if (node->cores < 1)
        return 0.0;
    return node->peak_gflops * capped_threads(node, threads) / node->cores;
}

double hcnn_node_bandwidth_gbs(const hcnn_node *node, int threads)
{
    const double drawn = capped_threads(node, threads) * node->core_bandwidth_gbs;
    return drawn < node->bandwidth_gbs ? drawn : node->bandwidth_gbs;
}

double hcnn_node_barrier_s(const hcnn_node *node, int threads)
{
    const int t = capped_threads(node, threads);
    if (t < 2 || node->cores < 2)
        return 0.0;
    return node->barrier_us * 1e-6 * (t - 1) / (node->cores - 1);
}

/* ---- the barrier ------------------------------------------------------------------- */

/* Means over BARRIER_REGIONS empty regions, the best of BARRIER_REPEATS: a
 * shared machine's other load only ever adds to it. */
#define BARRIER_REGIONS 2000
#define BARRIER_REPEATS 7

int hcnn_measure_barrier_us(int threads, double *us)
{
    if (threads < 1)
        return hcnn_error_code(HCNN_EINVAL, "barrier benchmark: %d threads, expected >= 1",
                               threads);
    double best = 0.0;
    volatile int sink = 0;
    for (int r = 0; r < BARRIER_REPEATS; r++) {
        const double t0 = omp_get_wtime();
        for (int i = 0; i < BARRIER_REGIONS; i++) {
#pragma omp parallel num_threads(threads)
            {
                if (omp_get_thread_num() == 0)
                    sink = sink + 1;
            }
        }
        const double mean = (omp_get_wtime() - t0) / BARRIER_REGIONS;
        best = r == 0 || mean < best ? mean : best;
    }
    *us = best * 1e6;
    return HCNN_OK;
}

/* ---- FMA throughput ---------------------------------------------------------------- */

/* Each thread updates n independent accumulators acc = acc * x + y.  A
 * vector FMA has a latency of 4 cycles and up to two pipes issue one each
 * per cycle (Skylake-SP to Emerald Rapids; Zen 3/4), so at least 8 vectors
 * must be in flight for the loop to be throughput-bound: 12 are kept, all
 * in registers (the compiler unrolls the vectorised inner loop and keeps
 * the array in registers across the outer one).  The project builds
 * without -march and -std=c11 turns contraction off, so the kernel calls
 * fmaf() explicitly and is compiled once per instruction set with its own
 * accumulator count: one body for all (target_clones) would need 24 ymm
 * registers for 12 zmm's worth of floats and spill them under AVX2.  x and
 * y keep acc bounded (it tends to y / (1 - x) = 1); the sum is returned and
 * checked so that nothing is optimised away. */
#define FMA_MAX_FLOATS 192
#if defined(__GNUC__) || defined(__clang__)
#define FMA_INLINE static inline __attribute__((always_inline))
#else
#define FMA_INLINE static inline
#endif

FMA_INLINE float fma_body(long iters, float x, float y, int n, int fused)
{
    float acc[FMA_MAX_FLOATS];
    for (int j = 0; j < n; j++)
        acc[j] = (float)j / (float)n;
    for (long i = 0; i < iters; i++)
        for (int j = 0; j < n; j++)
            acc[j] = fused ? fmaf(acc[j], x, y) : acc[j] * x + y;
    float s = 0.0f;
    for (int j = 0; j < n; j++)
        s += acc[j];
    return s;
}

typedef float (*fma_kernel)(long iters, float x, float y);

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
/* 12 zmm (vfmadd132ps %zmm), 12 ymm (vfmadd132ps %ymm: 12 + x + y fit the
 * 16 ymm registers); before Haswell no FMA unit: mulps + addps on 10 xmm,
 * in registers with GCC 12. */
__attribute__((target("avx512f,fma"))) static float fma_avx512(long iters, float x, float y)
{
    return fma_body(iters, x, y, 12 * 16, 1);
}
__attribute__((target("avx2,fma"))) static float fma_avx2(long iters, float x, float y)
{
    return fma_body(iters, x, y, 12 * 8, 1);
}
static float fma_sse(long iters, float x, float y)
{
    return fma_body(iters, x, y, 10 * 4, 0);
}
static fma_kernel fma_pick(int *floats)
{
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) {
        *floats = 12 * 16;
        return fma_avx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *floats = 12 * 8;
        return fma_avx2;
    }
    *floats = 10 * 4;
    return fma_sse;
}
#else
/* Elsewhere (AArch64: 128-bit NEON, 32 registers) one plain version: 24
 * vectors of 4 floats, fused where the C library says fmaf is fast. */
#ifdef FP_FAST_FMAF
#define FMA_PORTABLE_FUSED 1
#else
#define FMA_PORTABLE_FUSED 0
#endif
static float fma_portable(long iters, float x, float y)
{
    return fma_body(iters, x, y, 96, FMA_PORTABLE_FUSED);
}
static fma_kernel fma_pick(int *floats)
{
    *floats = 96;
    return fma_portable;
}
#endif

/* One repeat: every thread of the team runs the kernel in chunks of
 * FMA_CHUNK iterations until `seconds` have passed since their common
 * start; GFLOP/s from all threads' iterations over the time to the last
 * thread's end.  Timed by the clock rather than by a calibrated iteration
 * count: here (a shared 2-vCPU VM) a calibration run that lost the CPU for
 * a scheduler tick made one call's count 100x too small, and the result
 * 0.5 GFLOP/s instead of ~480. */
#define FMA_CHUNK 8192L /* ~13 us here with the avx512 kernel */
#define FMA_SECONDS 0.030
#define FMA_REPEATS 5

static double fma_team(fma_kernel k, int floats, int threads, double seconds, float *sum)
{
    double t0 = 0.0, t1 = 0.0;
    long long iters = 0;
    float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total, iters)
    {
#pragma omp single
        t0 = omp_get_wtime();
        do {
            total += k(FMA_CHUNK, 0.999f, 1e-3f);
            iters += FMA_CHUNK;
        } while (omp_get_wtime() - t0 < seconds);
#pragma omp barrier
#pragma omp single
        t1 = omp_get_wtime();
    }
    *sum += total;
    return t1 > t0 ? 2.0 * floats * (double)iters / (t1 - t0) * 1e-9 : 0.0;
}

/* Measured here (make's build, the avx512 kernel): an "Intel(R) Xeon(R)
 * Processor" family 6 model 207 (Emerald Rapids; 300 MiB of L3), 2 vCPUs
 * under KVM, TSC 2.1 GHz: 1 thread 232-243 GFLOP/s, 2 threads 429-486
 * (over 8 calls, no other job of ours running; with one on the cores, 2
 * threads fell to ~200).  Theoretical: 2 FMA pipes x 16 lanes x 2 FLOP =
 * 64 FLOP/cycle/core, 134 GFLOP/s a core at the 2.1 GHz base, so the
 * measurement is a core at ~3.8 GHz (turbo), and linear in threads. */
int hcnn_measure_fma_gflops(int threads, double *gflops)
{
    if (threads < 1)
        return hcnn_error("FMA benchmark: threads: expected >= 1, got %d", threads);
    int floats;
    const fma_kernel k = fma_pick(&floats);
    float sum = 0.0f;
    fma_team(k, floats, threads, 0.005, &sum); /* wake the threads and the vector units */
    double best = 0.0;
    for (int r = 0; r < FMA_REPEATS; r++) {
        const double g = fma_team(k, floats, threads, FMA_SECONDS, &sum);
        if (g > best)
            best = g;
    }
    if (!isfinite(sum) || !(best > 0))
        return hcnn_error("FMA benchmark: no usable result (sum %g, %.1f GFLOP/s)", (double)sum,
                          best);
    *gflops = best;
    return HCNN_OK;
}

/* ---- STREAM triad -------------------------------------------------------------------- */

/* Each array is 4x the machine's LLC (STREAM's rule, so that no repeat finds
 * its data in cache), at least 48 MiB (when the LLC is unknown) and at most
 * 1 GiB (3 GiB in all: a 2-socket node with 2 x 256 MiB of L3 would ask for
 * 2 GiB each). */
/* Measured here (the machine of the FMA figures, 3 x 1 GiB): 1 thread
 * 15.1-15.8 GB/s, 2 threads 27.0-30.6; a call takes 1.3 s (2 threads) to
 * 2.4 s (1 thread), most of it the first touch of 3 GiB. */
#define TRIAD_MIN_MIB 48.0
#define TRIAD_MAX_MIB 1024.0
#define TRIAD_REPEATS 5

int hcnn_measure_triad_gbs(int threads, double *gbs)
{
    if (threads < 1)
        return hcnn_error("triad benchmark: threads: expected >= 1, got %d", threads);
    double llc = 0.0;
    hcnn_llc_mib(&llc);
    double mib = 4.0 * llc;
    mib = mib < TRIAD_MIN_MIB ? TRIAD_MIN_MIB : mib > TRIAD_MAX_MIB ? TRIAD_MAX_MIB : mib;
    const long n = (long)(mib * 1024.0 * 1024.0 / sizeof(float));
    const size_t bytes = (size_t)n * sizeof(float);
    float *a = hcnn_alloc(bytes, "the triad's array a");
    float *b = a ? hcnn_alloc(bytes, "the triad's array b") : NULL;
    float *c = b ? hcnn_alloc(bytes, "the triad's array c") : NULL;
    if (!c) {
        hcnn_free(a);
        hcnn_free(b);
        return HCNN_ENOMEM;
    }
    /* first touch by the threads (and with the schedule) of the kernel, so
     * that on a multi-socket node each page lies near the core that uses it */
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long i = 0; i < n; i++) {
        a[i] = 1.0f;
        b[i] = 2.0f;
        c[i] = 0.5f;
    }
    const float s = 3.0f;
    double best = 0.0;
    for (int r = 0; r < TRIAD_REPEATS; r++) {
        const double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static) num_threads(threads)
        for (long i = 0; i < n; i++)
            a[i] = b[i] + s * c[i];
        const double t = omp_get_wtime() - t0;
        /* STREAM's count: 12 bytes an element, not the 4 more a write-
         * allocate cache reads for a[i] before writing it */
        const double g = t > 0 ? 12.0 * (double)n / t * 1e-9 : 0.0;
        if (g > best)
            best = g;
    }
    const int ok = a[n / 2] == 3.5f && best > 0; /* 2 + 3 x 0.5, exact */
    hcnn_free(a);
    hcnn_free(b);
    hcnn_free(c);
    if (!ok)
        return hcnn_error("triad benchmark: wrong result or no time measured");
    *gbs = best;
    return HCNN_OK;
}

/* ---- the last-level cache ------------------------------------------------------------- */

/* The first line of a small sysfs file, without its newline; 0 if unreadable. */
static int read_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    const int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (ok)
        buf[strcspn(buf, "\n")] = '\0';
    return ok;
}

/* cpu's cache of the highest level (not an instruction cache): its size in
 * MiB and the lowest CPU sharing it; 0 if sysfs does not say. */
static int cpu_llc(int cpu, double *mib, long *first)
{
    int best_level = 0;
    for (int idx = 0; idx < 16; idx++) {
        char path[128], buf[256];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/level", cpu, idx);
        if (!read_line(path, buf, sizeof buf))
            continue;
        const int level = atoi(buf);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/type", cpu, idx);
        if (level <= best_level || (read_line(path, buf, sizeof buf) && !strcmp(buf, "Instruction")))
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/size", cpu, idx);
        if (!read_line(path, buf, sizeof buf))
            continue;
        char *end;
        double size = strtod(buf, &end); /* "32K", "300M" */
        if (end == buf || !(size > 0))
            continue;
        size *= *end == 'K' ? 1.0 / 1024 : *end == 'M' ? 1.0 : *end == 'G' ? 1024.0
                                                                   : 1.0 / (1024.0 * 1024.0);
        snprintf(path, sizeof path,
                 "/sys/devices/system/cpu/cpu%d/cache/index%d/shared_cpu_list", cpu, idx);
        /* a list such as "0-31,64-95" is sorted: its first number is the lowest */
        *first = read_line(path, buf, sizeof buf) ? strtol(buf, NULL, 10) : cpu;
        *mib = size;
        best_level = level;
    }
    return best_level > 0;
}

int hcnn_llc_mib(double *mib)
{
    *mib = 0.0;
    /* the highest CPU number in "0-63" or "0-3,8-11" */
    char buf[256];
    long last = 0;
    if (read_line("/sys/devices/system/cpu/present", buf, sizeof buf))
        for (char *p = buf; *p;) {
            char *end;
            const long v = strtol(p, &end, 10);
            if (end == p) {
                p++;
                continue;
            }
            if (v > last)
                last = v;
            p = end;
        }
    /* each LLC instance counted once, by the lowest CPU that shares it */
    double total = 0.0;
    for (long cpu = 0; cpu <= last && cpu < 1L << 16; cpu++) {
        double size = 0.0;
        long first = -1;
        if (cpu_llc((int)cpu, &size, &first) && first == cpu)
            total += size;
    }
    *mib = total;
    return HCNN_OK;
}

/* ---- this machine ---------------------------------------------------------------------- */

int hcnn_node_measure(hcnn_node *node)
{
    memset(node, 0, sizeof *node);
    snprintf(node->name, sizeof node->name, "here");
    node->cores = hcnn_physical_cores(NULL);
    int rc = hcnn_measure_fma_gflops(node->cores, &node->peak_gflops);
    if (!rc)
        rc = hcnn_measure_triad_gbs(node->cores, &node->bandwidth_gbs);
    if (!rc)
        rc = hcnn_measure_triad_gbs(1, &node->core_bandwidth_gbs);
    if (!rc)
        rc = hcnn_measure_barrier_us(node->cores, &node->barrier_us);
    if (rc)
        return rc;
    hcnn_llc_mib(&node->llc_mib);
    node->assumed = 0;
    char cpu[160];
    hcnn_cpu_model(cpu, sizeof cpu);
    snprintf(node->source, sizeof node->source,
             "measured here: %.120s; FMA, STREAM triad and barrier on %d threads, LLC from sysfs", cpu,
             node->cores);
    return HCNN_OK;
}

void hcnn_node_describe(const hcnn_node *node, char *buf, size_t cap)
{
    char llc[32];
    if (node->llc_mib > 0)
        snprintf(llc, sizeof llc, "LLC %.0f MiB", node->llc_mib);
    else
        snprintf(llc, sizeof llc, "LLC unknown");
    snprintf(buf, cap,
             "%s: %d cores, %.1f GFLOP/s FP32 peak, %.1f GB/s memory (%.1f GB/s one core), %s, "
             "barrier %.2f us; %s",
             node->name, node->cores, node->peak_gflops, node->bandwidth_gbs,
             node->core_bandwidth_gbs, llc, node->barrier_us,
             node->assumed ? "datasheet figures: an assumption"
             : strcmp(node->name, "here") ? "measured"
                                          : "measured here");
}
