/* Error reporting, checked allocation, timers and random numbers. */
#define _POSIX_C_SOURCE 200809L
#include "hcnn/common.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hd.h"

/* The messages of errors, kept for hcnn_last_error (include/hcnn/hcnn.h):
 * the calling thread's since its last API call began, and the newest of any
 * thread (a worker's), numbered so that a call can tell one raised during
 * it.  Process-wide like the fatal hook: an error may be raised in any
 * layer, on any thread, with no run at hand. */
#define LAST_ERROR_CAP 4096
static _Thread_local char thread_errors[LAST_ERROR_CAP];
static _Thread_local unsigned long thread_errors_since;
static struct {
    pthread_mutex_t mu;
    char newest[LAST_ERROR_CAP];
    unsigned long count; /* errors raised in the process */
    int quiet;           /* hcnn_set_error_output(0) */
} errors = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void keep_error(const char *msg)
{
    size_t len = strlen(thread_errors);
    if (len && len + 1 < LAST_ERROR_CAP)
        thread_errors[len++] = '\n';
    if (len + 1 < LAST_ERROR_CAP)
        snprintf(thread_errors + len, LAST_ERROR_CAP - len, "%s", msg);
    pthread_mutex_lock(&errors.mu);
    snprintf(errors.newest, sizeof errors.newest, "%s", msg);
    errors.count++;
    pthread_mutex_unlock(&errors.mu);
}

void hcnn_errors_begin_call(void)
{
    thread_errors[0] = '\0';
    pthread_mutex_lock(&errors.mu);
    thread_errors_since = errors.count;
    pthread_mutex_unlock(&errors.mu);
}

const char *hcnn_last_error(void)
{
    pthread_mutex_lock(&errors.mu);
    if (!thread_errors[0] && errors.count != thread_errors_since) /* a worker's */
        snprintf(thread_errors, sizeof thread_errors, "%s", errors.newest);
    pthread_mutex_unlock(&errors.mu);
    return thread_errors;
}

void hcnn_set_error_output(int print)
{
    pthread_mutex_lock(&errors.mu);
    errors.quiet = !print;
    pthread_mutex_unlock(&errors.mu);
}

/* Under mpirun with several ranks, messages name the rank; the launcher's
 * environment says which (read, never stored). */
static void vreport(const char *kind, const char *fmt, va_list ap)
{
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    const int is_error = !strcmp(kind, "error");
    if (is_error)
        keep_error(buf);
    pthread_mutex_lock(&errors.mu);
    const int quiet = errors.quiet && is_error;
    pthread_mutex_unlock(&errors.mu);
    if (quiet)
        return;
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (!rank)
        rank = getenv("PMIX_RANK");
    if (rank && size && atoi(size) > 1)
        fprintf(stderr, "hcnn: rank %s: %s: %s\n", rank, kind, buf);
    else
        fprintf(stderr, "hcnn: %s: %s\n", kind, buf);
    fflush(stderr);
}

int hcnn_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport("error", fmt, ap);
    va_end(ap);
    return HCNN_EINVAL;
}

int hcnn_error_code(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport("error", fmt, ap);
    va_end(ap);
    return code;
}

int hcnn_error_unsaid(int code, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    keep_error(buf);
    return code;
}

void hcnn_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport("warning", fmt, ap);
    va_end(ap);
}

void *hcnn_alloc(size_t bytes, const char *what)
{
    void *p = NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded == 0)
        rounded = 64;
    if (posix_memalign(&p, 64, rounded) != 0 || p == NULL) {
        hcnn_error("cannot allocate %zu bytes for %s", bytes, what ? what : "buffer");
        return NULL;
    }
    return p;
}

void *hcnn_calloc(size_t bytes, const char *what)
{
    void *p = hcnn_alloc(bytes, what);
    if (p)
        memset(p, 0, bytes);
    return p;
}

void hcnn_free(void *p) { free(p); }

double hcnn_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double hcnn_median(double *v, int n)
{
    if (n < 1)
        return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}


uint64_t hcnn_hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return hcnn_hd_hash4(a, b, c, d); /* the definition the CUDA kernels share */
}

void hcnn_rng_seed(hcnn_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = hcnn_hash4(seed, stream, 0x68636e6eull, 0);
    for (int i = 0; i < 4; i++)
        r->s[i] = hcnn_hd_splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t hcnn_rng_next(hcnn_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float hcnn_rng_uniform(hcnn_rng *r) { return (float)(hcnn_rng_next(r) >> 40) * (1.0f / 16777216.0f); }

float hcnn_rng_normal(hcnn_rng *r)
{
    /* Box-Muller; u1 in (0, 1] so the log is finite */
    double u1 = ((double)(hcnn_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(hcnn_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t hcnn_rng_below(hcnn_rng *r, uint64_t n)
{
    if (n <= 1)
        return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do
        v = hcnn_rng_next(r);
    while (v >= limit);
    return v % n;
}
