/* The conformance suite's harness (backend_check.h): the record of a check,
 * its memory, the comparisons, and the run of a check. */
#define _POSIX_C_SOURCE 200809L
#include "backend_check.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the record of a check: its comparison closest to its tolerance --------------- */

check_record g_rec;

void note(const char *what, double err, double tol, size_t values)
{
    g_rec.values += (long long)values;
    if (tol > 0)
        g_rec.toleranced = 1;
    const double ratio = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0.0);
    if (!g_rec.what[0] || ratio > g_rec.ratio ||
        (tol > 0 && g_rec.tol == 0 && ratio >= g_rec.ratio)) {
        g_rec.ratio = ratio, g_rec.err = err, g_rec.tol = tol;
        snprintf(g_rec.what, sizeof g_rec.what, "%s", what);
    }
}

/* ---- memory: everything a check takes is freed when it returns ------------------- */

/* an allocation that fails ends the check (it fails) through g_bail */
static jmp_buf g_bail;
static char g_bail_why[256];

enum { MEM_DEV, MEM_HOST, MEM_PINNED };
#define ARENA_MAX 8192
static struct {
    const hcnn_backend *be;
    void *p;
    int kind;
    int guarded;     /* a backend tensor of dvec: GUARD floats after its guard_at */
    size_t guard_at;
} g_arena[ARENA_MAX];
static int g_narena;
/* the first guard found overwritten as its tensor was freed (arena_pop):
 * the check that wrote it fails (run_check), whether or not it looked */
static char g_guard_why[256];

static void *keep(const hcnn_backend *be, void *p, int kind, size_t bytes)
{
    if (!p || g_narena == ARENA_MAX) {
        snprintf(g_bail_why, sizeof g_bail_why, "cannot allocate %zu bytes of %s", bytes,
                 kind == MEM_DEV      ? "backend memory"
                 : kind == MEM_PINNED ? "alloc_host memory"
                                      : "host memory");
        longjmp(g_bail, 1);
    }
    g_arena[g_narena].be = be, g_arena[g_narena].p = p, g_arena[g_narena].kind = kind;
    g_arena[g_narena].guarded = 0;
    g_narena++;
    return p;
}

void arena_pop(int mark)
{
    while (g_narena > mark) {
        g_narena--;
        const hcnn_backend *be = g_arena[g_narena].be;
        const size_t n = g_arena[g_narena].guard_at;
        if (g_arena[g_narena].guarded && !g_guard_why[0]) {
            float g[GUARD];
            be->download(be, g, (const float *)g_arena[g_narena].p + n, sizeof g);
            for (int i = 0; i < GUARD; i++)
                if (g[i] != GUARD_VALUE) {
                    snprintf(g_guard_why, sizeof g_guard_why,
                             "a tensor of %zu floats: the float %d past its end was overwritten "
                             "(%g), found as it was freed",
                             n, i, (double)g[i]);
                    break;
                }
        }
        if (g_arena[g_narena].kind == MEM_DEV)
            be->free(be, g_arena[g_narena].p);
        else if (g_arena[g_narena].kind == MEM_PINNED)
            be->free_host(be, g_arena[g_narena].p);
        else
            free(g_arena[g_narena].p);
    }
}

int arena_mark(void) { return g_narena; }

void *dev_bytes(const hcnn_backend *be, size_t bytes)
{
    return keep(be, be->alloc(be, bytes ? bytes : 1, "conformance test"), MEM_DEV, bytes);
}
void *pinned_bytes(const hcnn_backend *be, size_t bytes)
{
    return keep(be, be->alloc_host(be, bytes ? bytes : 1, "conformance test"), MEM_PINNED, bytes);
}
void *host_bytes(size_t bytes) { return keep(NULL, malloc(bytes ? bytes : 1), MEM_HOST, bytes); }
float *hvec(size_t n) { return host_bytes(n * sizeof(float)); }
double *hdvec(size_t n) { return host_bytes(n * sizeof(double)); }

float *hfill(size_t n, float v)
{
    float *h = hvec(n);
    for (size_t i = 0; i < n; i++)
        h[i] = v;
    return h;
}
float *hrand(ref_rng *r, size_t n, float lo, float hi)
{
    float *h = hvec(n);
    for (size_t i = 0; i < n; i++)
        h[i] = ref_uniform(r, lo, hi);
    return h;
}
/* floats as doubles (an exact reference) */
double *hd(const float *f, size_t n)
{
    double *d = hdvec(n);
    for (size_t i = 0; i < n; i++)
        d[i] = f[i];
    return d;
}

/* Backend tensors: n floats and GUARD guard floats after them. */

void put(const hcnn_backend *be, float *d, const float *h, size_t n)
{
    be->upload(be, d, h, n * sizeof *h);
}
void get(const hcnn_backend *be, float *h, const float *d, size_t n)
{
    be->download(be, h, d, n * sizeof *h);
}
float *dvec(const hcnn_backend *be, size_t n)
{
    float *d = dev_bytes(be, (n + GUARD) * sizeof(float));
    float g[GUARD];
    for (int i = 0; i < GUARD; i++)
        g[i] = GUARD_VALUE;
    put(be, d + n, g, GUARD);
    g_arena[g_narena - 1].guarded = 1, g_arena[g_narena - 1].guard_at = n; /* (kept last) */
    return d;
}
float *dnew(const hcnn_backend *be, const float *h, size_t n)
{
    float *d = dvec(be, n);
    put(be, d, h, n);
    return d;
}
float *dnan(const hcnn_backend *be, size_t n) { return dnew(be, hfill(n, NAN), n); }
void put_nan(const hcnn_backend *be, float *d, size_t n) { put(be, d, hfill(n, NAN), n); }

/* ---- comparisons ----------------------------------------------------------------- */

/* got[0..n) against ref: tol 0, the same values; else max |got - ref| <= tol scale,
 * scale = max |ref|, or floor if larger (the magnitude of the terms of a result
 * that cancels) */
int cmp_floor(const char *what, const float *got, const double *ref, size_t n, double tol,
              double floor, char *why, size_t cap)
{
    double scale = floor, worst = 0.0;
    for (size_t i = 0; i < n; i++)
        scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
    scale = scale > 1e-30 ? scale : 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) && isfinite(ref[i]))
            FAIL("%s: element %zu of %zu is %g, expected %.9g (not written?)", what, i, n,
                 (double)got[i], ref[i]);
        const double e = fabs(got[i] - ref[i]) / scale;
        if (tol == 0.0 && (double)got[i] != ref[i])
            FAIL("%s: element %zu of %zu is %.9g, expected exactly %.9g", what, i, n,
                 (double)got[i], ref[i]);
        if (e > tol)
            FAIL("%s: element %zu of %zu is %.9g, expected %.9g: error %.3g of the magnitude "
                 "%.3g, tolerance %.1g",
                 what, i, n, (double)got[i], ref[i], e, scale, tol);
        worst = e > worst ? e : worst;
    }
    note(what, worst, tol, n);
    return 1;
}
int cmp(const char *what, const float *got, const double *ref, size_t n, double tol, char *why,
        size_t cap)
{
    return cmp_floor(what, got, ref, n, tol, 0.0, why, cap);
}

/* the guard after a backend tensor of n floats is untouched */
int guard_ok(const hcnn_backend *be, const char *what, const float *d, size_t n, char *why,
             size_t cap)
{
    float g[GUARD];
    get(be, g, d + n, GUARD);
    for (int i = 0; i < GUARD; i++)
        if (g[i] != GUARD_VALUE)
            FAIL("%s: the float %d past its %zu was overwritten (%g)", what, i, n, (double)g[i]);
    return 1;
}

/* a backend tensor of n floats against ref (cmp_floor), and its guard */
int check_dev_floor(const hcnn_backend *be, const char *what, const float *d, const double *ref,
                    size_t n, double tol, double floor, char *why, size_t cap)
{
    const int mark = g_narena;
    float *h = hvec(n);
    get(be, h, d, n);
    const int ok =
        cmp_floor(what, h, ref, n, tol, floor, why, cap) && guard_ok(be, what, d, n, why, cap);
    arena_pop(mark);
    return ok;
}
int check_dev(const hcnn_backend *be, const char *what, const float *d, const double *ref, size_t n,
              double tol, char *why, size_t cap)
{
    return check_dev_floor(be, what, d, ref, n, tol, 0.0, why, cap);
}

/* a double against its expected value: |got - want| <= tol scale */
int cmp_double(const char *what, double got, double want, double scale, double tol, char *why,
               size_t cap)
{
    scale = scale > 1e-30 ? scale : 1e-30;
    const double e = fabs(got - want) / scale;
    if (!(e <= tol) || (tol == 0.0 && got != want))
        FAIL("%s is %.17g, expected %.17g (error %.3g of %.3g, tolerance %.1g)", what, got, want, e,
             scale, tol);
    note(what, e, tol, 1);
    return 1;
}

/* expected := base + delta (an accumulating operation's result) */
double *plus(const float *base, const double *delta, size_t n)
{
    double *r = hdvec(n);
    for (size_t i = 0; i < n; i++)
        r[i] = (base ? base[i] : 0.0) + delta[i];
    return r;
}

/* ---- a check ----------------------------------------------------------------------- */

/* Runs a check with its memory freed afterwards; 1: passed. */
int run_check(const hcnn_backend *be, check_fn fn, char *why, size_t cap)
{
    memset(&g_rec, 0, sizeof g_rec);
    why[0] = '\0';
    g_guard_why[0] = '\0';
    const int mark = g_narena;
    volatile int ok = 0;
    if (setjmp(g_bail) == 0)
        ok = fn(be, why, cap);
    else
        snprintf(why, cap, "%s", g_bail_why);
    be->sync(be);
    arena_pop(mark);
    if (ok && g_guard_why[0]) {
        snprintf(why, cap, "%s", g_guard_why);
        ok = 0;
    }
    return ok;
}

/* ---- activations in the backend's layout ------------------------------------------ */

/* [n][c][np] <-> [n][np][c] on the host (to_nhwc: NCHW to NHWC) */
static void host_transpose(const float *x, float *y, int n, int c, int np, int to_nhwc)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < np; p++) {
                const size_t nchw = ((size_t)i * c + ch) * np + p;
                const size_t nhwc = ((size_t)i * np + p) * c + ch;
                if (to_nhwc)
                    y[nhwc] = x[nchw];
                else
                    y[nchw] = x[nhwc];
            }
}

void put_act(const hcnn_backend *be, float *d, const float *h, int n, int c, int np)
{
    const size_t count = (size_t)n * c * np;
    if (be->layout != HCNN_LAYOUT_NHWC) {
        put(be, d, h, count);
        return;
    }
    const int mark = g_narena;
    float *t = hvec(count);
    host_transpose(h, t, n, c, np, 1);
    put(be, d, t, count);
    arena_pop(mark);
}

void get_act(const hcnn_backend *be, float *h, const float *d, int n, int c, int np)
{
    const size_t count = (size_t)n * c * np;
    if (be->layout != HCNN_LAYOUT_NHWC) {
        get(be, h, d, count);
        return;
    }
    const int mark = g_narena;
    float *t = hvec(count);
    get(be, t, d, count);
    host_transpose(t, h, n, c, np, 0);
    arena_pop(mark);
}

float *dnew_act(const hcnn_backend *be, const float *h, int n, int c, int np)
{
    float *d = dvec(be, (size_t)n * c * np);
    put_act(be, d, h, n, c, np);
    return d;
}

int check_act_floor(const hcnn_backend *be, const char *what, const float *d, const double *ref,
                    int n, int c, int np, double tol, double floor, char *why, size_t cap)
{
    const int mark = g_narena;
    const size_t count = (size_t)n * c * np;
    float *h = hvec(count);
    get_act(be, h, d, n, c, np);
    const int ok = cmp_floor(what, h, ref, count, tol, floor, why, cap) &&
                   guard_ok(be, what, d, count, why, cap);
    arena_pop(mark);
    return ok;
}

int check_act(const hcnn_backend *be, const char *what, const float *d, const double *ref, int n,
              int c, int np, double tol, char *why, size_t cap)
{
    return check_act_floor(be, what, d, ref, n, c, np, tol, 0.0, why, cap);
}
