/* hcnn — common definitions: error codes, checked allocation, RNG, timers.
 *
 * Every function that can fail returns an int error code (HCNN_OK on
 * success) after printing one message that names the file/key/value and
 * what was expected.  There is no global mutable state: a run is a struct
 * passed down (see train.h). */
#ifndef HCNN_COMMON_H
#define HCNN_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "hcnn/hcnn.h" /* the status codes and the fatal hook are public */

/* Hot loops get an AVX-512 and an AVX2 clone besides the baseline x86-64
 * one (we build for any x86-64 node); the dynamic loader picks the best for
 * the CPU (GCC function multiversioning). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define HCNN_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HCNN_MULTIVERSION
#endif

/* a function that does not return, in C11 and in the C++ of src/cuda/ */
#if defined(__cplusplus)
#define HCNN_NORETURN [[noreturn]]
#else
#define HCNN_NORETURN _Noreturn
#endif


/* ---- the abort path (src/core/fatal.c) ----------------------------------
 * For what cannot be handled where it happens (a failed MPI call, a CUDA
 * error, a buffer a kernel cannot allocate inside a parallel region): one
 * message naming the file, line and cause, then the process ends.  How it
 * ends is the program's choice, not the library's: the program installs a
 * hook, which gets the file, line, exit code (never 0) and message, prints
 * it and ends the process (src/cli/main.c installs hcnn_mpi_fatal_hook,
 * include/hcnn/comm.h: the rank's message, then MPI_Abort of the job or
 * exit with the code).  Without a hook, or if the hook returns, the library
 * prints "hcnn: fatal at FILE:LINE: MESSAGE" on stderr and calls abort()
 * (SIGABRT: no atexit handlers, a core dump where enabled); these functions
 * never return. */
/* hcnn_fatal_hook, hcnn_set_fatal_hook: include/hcnn/hcnn.h (the public API) */
/* exit code 1 (a run-time failure) */
HCNN_NORETURN void hcnn_fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* the exit code given (0 is taken as 1) */
HCNN_NORETURN void hcnn_fatal_code_at(const char *file, int line, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define HCNN_FATAL(code, ...) hcnn_fatal_code_at(__FILE__, __LINE__, (code), __VA_ARGS__)

/* Print "hcnn: error: <message>" on stderr.  Returns HCNN_EINVAL so that
 * validation code can write `return hcnn_error(...)`. */
int hcnn_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Same, but returns the given code. */
int hcnn_error_code(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An error another rank has said: kept for hcnn_last_error, not printed
 * (a job says each failure once).  Returns code. */
int hcnn_error_unsaid(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hcnn_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Each error's message is also kept for hcnn_last_error (hcnn.h); an API
 * call begins by forgetting this thread's (src/api/). */
void hcnn_errors_begin_call(void);

/* 64-byte aligned allocation for tensors; prints "cannot allocate <bytes>
 * for <what>" and returns NULL on failure.  Free with hcnn_free. */
void *hcnn_alloc(size_t bytes, const char *what);
void *hcnn_calloc(size_t bytes, const char *what);
void hcnn_free(void *p);

/* Wall-clock seconds (monotonic). */
double hcnn_now(void);
/* Median of v[0..n) (sorts v in place; 0 when n < 1). */
double hcnn_median(double *v, int n);

/* ---- random numbers ----------------------------------------------------
 * xoshiro256** for sequential streams (initialisation, shuffling), and a
 * stateless counter-based hash for per-element randomness (dropout masks,
 * per-sample augmentation) so that results do not depend on how work is
 * split across threads, ranks or pipeline stages. */
typedef struct hcnn_rng {
    uint64_t s[4];
} hcnn_rng;

void hcnn_rng_seed(hcnn_rng *r, uint64_t seed, uint64_t stream);
uint64_t hcnn_rng_next(hcnn_rng *r);
/* uniform in [0, 1) with 24 random bits */
float hcnn_rng_uniform(hcnn_rng *r);
/* standard normal (Box-Muller, double precision internally) */
float hcnn_rng_normal(hcnn_rng *r);
/* uniform integer in [0, n) without modulo bias */
uint64_t hcnn_rng_below(hcnn_rng *r, uint64_t n);
/* stateless mixing of up to four 64-bit words */
uint64_t hcnn_hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d);

#endif
