/* The backend conformance suite: every operation of the backend table
 * (include/hcnn/backend.h) against a slow, obvious host reference
 * (tests/conformance/backend_ref.c, double precision, nothing from src/), on seeded
 * random inputs and several shapes each, for every backend of the build
 * (hcnn_backend_names()) or those named in HCNN_CONFORMANCE_BACKENDS
 * (comma-separated).  A backend that cannot be created here (the CUDA one
 * without a GPU) has its cases SKIPPED, with the reason.  HCNN_CONFORMANCE_CHECKS
 * (comma-separated check names, e.g. "bn_fwd_train,bn_bwd") runs those
 * alone, without deliberate_errors: tests/cuda/deliberate_bugs.sh's
 * quick look at the operations a bug touches.
 *
 * The checks (tests/conformance/backend_checks_*.c, one function per operation; their
 * harness and tolerances: tests/conformance/backend_check.h) reach tensors only through
 * be->upload and be->download (cpu-devmem's pointers fault when
 * dereferenced); an output an operation overwrites is NaN before it, so that
 * an element it forgets shows; one it accumulates into holds known values.
 *
 * This file: one cmocka case per backend and check, printing the largest
 * error found against its tolerance; and the case "deliberate_errors", which
 * runs checks on copies of the cpu backend's table with one operation broken
 * each, and requires every one of them to fail. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend_check.h"
#include "hcnn/backend.h"
#include "hcnn/common.h"

/* seconds of a monotonic clock */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the checks ---------------------------------------------------------------------------- */

typedef struct check_entry {
    const char *name;
    check_fn fn;
} check_entry;

static const check_entry checks[] = {
    {"memory",
     check_memory}, /* alloc, free, upload, download, their async forms, sync, alloc_host */
    {"fill", check_fill},
    {"zero", check_zero},
    {"copy", check_copy},
    {"gemm", check_gemm},
    {"conv_fwd", check_conv_fwd},
    {"conv_fwd_bn_stats", check_conv_fwd_bn_stats},
    {"conv_relu", check_conv_relu},
    {"conv_bwd", check_conv_bwd},
    {"conv_bwd_filter", check_conv_bwd_filter},
    {"conv_bwd_data", check_conv_bwd_data},
    {"conv_bf16", check_conv_bf16},
    {"conv_workspace", check_conv_workspace},
    {"conv_gemms_describe", check_conv_gemms_describe},
    {"pass_pieces", check_pass_pieces},
    {"row_sum_acc", check_row_sum_acc},
    {"add_row_bias", check_add_row_bias},
    {"relu_fwd", check_relu_fwd},
    {"relu_bwd", check_relu_bwd},
    {"add", check_add},
    {"add_acc", check_add_acc},
    {"scale", check_scale},
    {"mul", check_mul},
    {"dropout_fwd", check_dropout},
    {"maxpool_fwd", check_maxpool_fwd},
    {"maxpool_bwd", check_maxpool_bwd},
    {"avgpool_fwd", check_avgpool_fwd},
    {"avgpool_bwd", check_avgpool_bwd},
    {"layout", check_layout}, /* layout_from_nchw, layout_to_nchw (NULL in NCHW) */
    {"bn_fwd_train", check_bn_fwd_train},
    {"bn_fwd_infer", check_bn_fwd_infer},
    {"bn_bwd", check_bn_bwd},
    {"softmax_xent", check_softmax_xent},
    {"sgd_step", check_sgd_step},
    {"sum_sq", check_sum_sq},
    {"unit_images", check_unit_images},
    {"threads_parallel", check_parallel},
    {"timer", check_timer},
};
#define NCHECKS (sizeof checks / sizeof *checks)

/* ---- deliberate errors: the checks fail on a wrong operation ------------------------------- */

static const hcnn_backend *g_real; /* the cpu backend whose operations the wrong ones wrap */

static void bad_add(const hcnn_backend *be, const float *a, const float *b, float *y, size_t n)
{
    (void)be; /* writes n - 1 elements */
    g_real->add(g_real, a, b, y, n ? n - 1 : 0);
}
static void bad_fill(const hcnn_backend *be, float *x, size_t n, float v)
{
    (void)be; /* writes n - 1 elements */
    g_real->fill(g_real, x, n ? n - 1 : 0, v);
}
static void bad_mul(const hcnn_backend *be, const float *a, const float *b, float *y, size_t n)
{
    (void)be, (void)b; /* a * a */
    g_real->mul(g_real, a, a, y, n);
}
static void bad_gemm(const hcnn_backend *be, int ta, int tb, int m, int n, int k, float alpha,
                     const float *a, int lda, const float *b, int ldb, float beta, float *c,
                     int ldc)
{
    (void)be; /* A read transposed wrongly (when square, so that nothing is read out of bounds) */
    g_real->gemm(g_real, m == k ? !ta : ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
static int bad_conv_fwd(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                        const float *x, const float *w, const float *b, float *y, int n)
{
    (void)be, (void)b; /* ignores the bias */
    return g_real->conv_fwd(g_real, d, ex, x, w, NULL, y, n);
}
static int bad_conv_bwd(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                        const float *x, const float *w, const float *dy, float *dw, float *db,
                        float *dx, int dx_acc, int n)
{
    (void)be; /* dw overwritten instead of accumulated */
    g_real->fill(g_real, dw, (size_t)d->out_c * d->g.c * d->g.kh * d->g.kw, 0.0f);
    return g_real->conv_bwd(g_real, d, ex, x, w, dy, dw, db, dx, dx_acc, n);
}
static int bad_conv_bwd_filter(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                               const float *x, const float *dy, float *dw, float *db, int n)
{
    (void)be, (void)db; /* forgets db */
    return g_real->conv_bwd_filter(g_real, d, ex, x, dy, dw, NULL, n);
}
static int bad_conv_bwd_data(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                             const float *w, const float *dy, float *dx, int dx_acc, int n)
{
    (void)be, (void)dx_acc; /* ignores dx_acc */
    return g_real->conv_bwd_data(g_real, d, ex, w, dy, dx, 0, n);
}
static void bad_softmax_xent(const hcnn_backend *be, const float *logits, const int32_t *labels,
                             int n, int k, float grad_scale, float *dlogits, double *stats)
{
    (void)be; /* overwrites the statistics instead of adding to them */
    g_real->zero(g_real, stats, 2 * sizeof(double));
    g_real->softmax_xent(g_real, logits, labels, n, k, grad_scale, dlogits, stats);
}
static void bad_relu_bwd(const hcnn_backend *be, const float *y, const float *dy, float *dx,
                         size_t n, float slope)
{
    (void)be; /* takes y >= 0 as positive: y's zeros made 1 before the real one */
    float *h = malloc(n * sizeof *h), *d = g_real->alloc(g_real, n * sizeof *h, "test");
    if (!h || !d)
        abort();
    g_real->download(g_real, h, y, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = h[i] == 0.0f ? 1.0f : h[i];
    g_real->upload(g_real, d, h, n * sizeof *h);
    g_real->relu_bwd(g_real, d, dy, dx, n, slope);
    g_real->free(g_real, d);
    free(h);
}
static void bad_row_sum_acc(const hcnn_backend *be, const float *dy, int n, int m, float *db)
{
    (void)be; /* overwrites db */
    g_real->fill(g_real, db, (size_t)m, 0.0f);
    g_real->row_sum_acc(g_real, dy, n, m, db);
}
static void bad_sum_sq(const hcnn_backend *be, const float *x, size_t n, double *stats)
{
    (void)be; /* overwrites stats[SUMSQ] */
    g_real->zero(g_real, stats + HCNN_STAT_SUMSQ, sizeof(double));
    g_real->sum_sq(g_real, x, n, stats);
}
static void bad_sgd_step(const hcnn_backend *be, float *w, float *g, float *v, size_t n,
                         float lr, float mu, float wd, int nesterov, double *stats)
{
    (void)be, (void)nesterov; /* ignores nesterov */
    g_real->sgd_step(g_real, w, g, v, n, lr, mu, wd, 0, stats);
}
static void bad_dropout_fwd(const hcnn_backend *be, const float *x, float *y, float *mask, int n,
                            size_t per_sample, float p, uint64_t seed, uint64_t step,
                            uint64_t first_sample, uint64_t layer_id)
{
    (void)be, (void)step; /* ignores the step */
    g_real->dropout_fwd(g_real, x, y, mask, n, per_sample, p, seed, 0, first_sample, layer_id);
}
static void bad_maxpool_bwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy,
                            const int32_t *argmax, int n, float *dx)
{
    (void)be; /* adds into dx instead of overwriting it */
    const size_t nx = (size_t)n * g->c * g->h * g->w;
    float *t = g_real->alloc(g_real, nx * sizeof *t, "test");
    if (!t)
        abort();
    g_real->maxpool_bwd(g_real, g, dy, argmax, n, t);
    g_real->add_acc(g_real, t, dx, nx);
    g_real->free(g_real, t);
}
static void bad_bn_fwd_train(const hcnn_backend *be, const float *x, int n, int c, int np,
                             const float *gamma, const float *beta, float eps, float momentum,
                             float *rm, float *rv, float *sm, float *si, const float *add, int relu,
                             const hcnn_bn_stats *stats, float *y)
{
    (void)be, (void)momentum; /* ignores the momentum: the running statistics are the batch's */
    g_real->bn_fwd_train(g_real, x, n, c, np, gamma, beta, eps, 1.0f, rm, rv, sm, si, add, relu,
                         stats, y);
}
static void bad_bn_fwd_infer(const hcnn_backend *be, const float *x, int n, int c, int np,
                             const float *gamma, const float *beta, float eps, const float *rm,
                             const float *rv, const float *add, int relu, float *y)
{
    (void)be, (void)add; /* ignores add */
    g_real->bn_fwd_infer(g_real, x, n, c, np, gamma, beta, eps, rm, rv, NULL, relu, y);
}
static void bad_bn_bwd(const hcnn_backend *be, const float *x, const float *dy, int n, int c,
                       int np, const float *gamma, const float *beta, const float *sm,
                       const float *si, int relu, float *dx, float *dgamma, float *dbeta)
{
    (void)be; /* overwrites dgamma */
    g_real->fill(g_real, dgamma, (size_t)c, 0.0f);
    g_real->bn_bwd(g_real, x, dy, n, c, np, gamma, beta, sm, si, relu, dx, dgamma, dbeta);
}
static void bad_bn_bwd_relu(const hcnn_backend *be, const float *x, const float *dy, int n, int c,
                            int np, const float *gamma, const float *beta, const float *sm,
                            const float *si, int relu, float *dx, float *dgamma, float *dbeta)
{
    (void)be, (void)relu; /* ignores the fused ReLU's mask */
    g_real->bn_bwd(g_real, x, dy, n, c, np, gamma, beta, sm, si, 0, dx, dgamma, dbeta);
}
static void bad_relu_fwd(const hcnn_backend *be, const float *x, float *y, size_t n, float slope)
{
    (void)be, (void)slope; /* ignores the slope */
    g_real->relu_fwd(g_real, x, y, n, 0.0f);
}
static int bad_unit_images(const hcnn_backend *be, int n)
{
    (void)be; /* units of one image: more than HCNN_MAX_UNITS of them */
    return n > 0 ? 1 : 0;
}
static void bad_parallel(const hcnn_backend *be, void (*fn)(void *arg, int t, int nt), void *arg)
{
    (void)be; /* tells fn one thread more than threads() and runs it once */
    fn(arg, 0, g_real->threads(g_real) + 1);
}

/* [n][p][c] -> [n][c][p] on the cpu backend's (host) memory: layout_to_nchw's
 * transpose, which the bad layout_from_nchw below does instead of its own */
static void host_to_nchw(const float *x, float *y, int n, int c, int np)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < np; p++)
                y[((size_t)i * c + ch) * np + p] = x[((size_t)i * np + p) * c + ch];
}
static void bad_layout_from_nchw(const hcnn_backend *be, const float *x, float *y, int n, int c,
                                 int np)
{
    (void)be; /* transposes the wrong way: right only when c or np is 1 */
    host_to_nchw(x, y, n, c, np);
}
static void good_layout_to_nchw(const hcnn_backend *be, const float *x, float *y, int n, int c,
                                int np)
{
    (void)be;
    host_to_nchw(x, y, n, c, np);
}
/* the cpu backend as an NHWC one for the layout check alone, its from_nchw wrong */
static void install_bad_layout(hcnn_backend *b)
{
    b->layout = HCNN_LAYOUT_NHWC;
    b->layout_from_nchw = bad_layout_from_nchw;
    b->layout_to_nchw = good_layout_to_nchw;
}
/* an NCHW backend with a layout operation, which the network would then call */
static void install_nchw_with_layout(hcnn_backend *b) { b->layout_to_nchw = good_layout_to_nchw; }

typedef struct deliberate {
    const char *wrong; /* what is wrong */
    const char *check; /* the check that must fail */
    void (*install)(hcnn_backend *b);
} deliberate;

#define INSTALL(field, fn)                                                                         \
    static void install_##fn(hcnn_backend *b) { b->field = fn; }
INSTALL(add, bad_add)
INSTALL(fill, bad_fill)
INSTALL(mul, bad_mul)
INSTALL(gemm, bad_gemm)
INSTALL(conv_fwd, bad_conv_fwd)
INSTALL(conv_bwd, bad_conv_bwd)
INSTALL(conv_bwd_filter, bad_conv_bwd_filter)
INSTALL(conv_bwd_data, bad_conv_bwd_data)
INSTALL(softmax_xent, bad_softmax_xent)
INSTALL(relu_bwd, bad_relu_bwd)
INSTALL(row_sum_acc, bad_row_sum_acc)
INSTALL(sum_sq, bad_sum_sq)
INSTALL(sgd_step, bad_sgd_step)
INSTALL(dropout_fwd, bad_dropout_fwd)
INSTALL(maxpool_bwd, bad_maxpool_bwd)
INSTALL(bn_fwd_train, bad_bn_fwd_train)
INSTALL(bn_fwd_infer, bad_bn_fwd_infer)
INSTALL(bn_bwd, bad_bn_bwd)
INSTALL(bn_bwd, bad_bn_bwd_relu)
INSTALL(relu_fwd, bad_relu_fwd)
INSTALL(unit_images, bad_unit_images)
INSTALL(parallel, bad_parallel)

static const deliberate deliberates[] = {
    {"add writes n - 1 elements", "add", install_bad_add},
    {"fill writes n - 1 elements", "fill", install_bad_fill},
    {"mul computes a * a", "mul", install_bad_mul},
    {"gemm reads A transposed wrongly", "gemm", install_bad_gemm},
    {"conv_fwd ignores the bias", "conv_fwd", install_bad_conv_fwd},
    {"conv_bwd overwrites dw instead of accumulating", "conv_bwd", install_bad_conv_bwd},
    {"conv_bwd_filter forgets db", "conv_bwd_filter", install_bad_conv_bwd_filter},
    {"conv_bwd_data ignores dx_acc", "conv_bwd_data", install_bad_conv_bwd_data},
    {"softmax_xent overwrites the statistics", "softmax_xent", install_bad_softmax_xent},
    {"relu_bwd takes y >= 0 as positive", "relu_bwd", install_bad_relu_bwd},
    {"row_sum_acc overwrites db", "row_sum_acc", install_bad_row_sum_acc},
    {"sum_sq overwrites stats[SUMSQ]", "sum_sq", install_bad_sum_sq},
    {"sgd_step ignores nesterov", "sgd_step", install_bad_sgd_step},
    {"dropout_fwd ignores the step", "dropout_fwd", install_bad_dropout_fwd},
    {"maxpool_bwd adds into dx", "maxpool_bwd", install_bad_maxpool_bwd},
    {"layout_from_nchw transposes the wrong way", "layout", install_bad_layout},
    {"an NCHW backend has layout_to_nchw", "layout", install_nchw_with_layout},
    {"bn_fwd_train ignores the momentum", "bn_fwd_train", install_bad_bn_fwd_train},
    {"bn_fwd_infer ignores add", "bn_fwd_infer", install_bad_bn_fwd_infer},
    {"bn_bwd overwrites dgamma", "bn_bwd", install_bad_bn_bwd},
    {"bn_bwd ignores the fused ReLU", "bn_bwd", install_bad_bn_bwd_relu},
    {"relu_fwd ignores the slope", "relu_fwd", install_bad_relu_fwd},
    {"unit_images makes units of one image", "unit_images", install_bad_unit_images},
    {"parallel tells fn a wrong thread count", "threads_parallel", install_bad_parallel},
};

static const check_entry *find_check(const char *name)
{
    for (size_t i = 0; i < NCHECKS; i++)
        if (!strcmp(checks[i].name, name))
            return &checks[i];
    return NULL;
}

static void test_deliberate_errors(void **state)
{
    (void)state;
    hcnn_backend *cpu = NULL;
    assert_int_equal(hcnn_backend_create("cpu", 0, &cpu), HCNN_OK);
    g_real = cpu;
    int missed = 0;
    for (size_t i = 0; i < sizeof deliberates / sizeof *deliberates; i++) {
        const check_entry *chk = find_check(deliberates[i].check);
        assert_non_null(chk);
        hcnn_backend b = *cpu; /* the table, one operation replaced */
        deliberates[i].install(&b);
        char why[1024];
        if (run_check(&b, chk->fn, why, sizeof why)) {
            print_message("  NOT DETECTED: %s (check %s passed)\n", deliberates[i].wrong,
                          chk->name);
            missed++;
        } else {
            print_message("  detected: %s -> check %s failed: %s\n", deliberates[i].wrong,
                          chk->name, why);
        }
    }
    hcnn_backend_destroy(cpu);
    g_real = NULL;
    if (missed)
        fail_msg("%d deliberate errors were not detected", missed);
}

/* ---- the backends and their cases ------------------------------------------------------------ */

#define MAX_BACKENDS 8
typedef struct backend_slot {
    char name[64];
    hcnn_backend *be; /* NULL: not available here */
    char reason[512]; /* why not */
} backend_slot;
static backend_slot g_backends[MAX_BACKENDS];
static int g_nbackends;

typedef struct op_case {
    int backend;
    const check_entry *chk;
    char name[96];
} op_case;

static void test_op(void **state)
{
    const op_case *oc = *state;
    const backend_slot *s = &g_backends[oc->backend];
    if (!s->be) {
        print_message("  SKIPPED %s on %s: the backend cannot be created here: %s\n", oc->chk->name,
                      s->name, s->reason);
        skip();
    }
    char why[1024];
    const double t0 = now_s();
    const int ok = run_check(s->be, oc->chk->fn, why, sizeof why);
    const double dt = now_s() - t0;
    if (!ok)
        fail_msg("%s on %s: %s", oc->chk->name, s->name, why);
    if (!g_rec.values)
        print_message("  %-10s %-19s properties only (no values compared), %.2f s\n", s->name,
                      oc->chk->name, dt);
    else if (g_rec.toleranced)
        print_message("  %-10s %-19s largest error %.2e, tolerance %.0e (%.2f of it), %lld values, "
                      "%.2f s; at %s\n",
                      s->name, oc->chk->name, g_rec.err, g_rec.tol, g_rec.ratio, g_rec.values, dt,
                      g_rec.what);
    else
        print_message("  %-10s %-19s exact (tolerance 0), %lld values, %.2f s\n", s->name,
                      oc->chk->name, g_rec.values, dt);
}

/* Makes backend `name`, its stderr captured as the reason when it fails. */
static void backend_open(backend_slot *s)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    const int saved = tmp ? dup(2) : -1;
    if (saved >= 0)
        dup2(fileno(tmp), 2);
    const int rc = hcnn_backend_create(s->name, 0, &s->be);
    fflush(stderr);
    char text[512] = "";
    if (saved >= 0) {
        dup2(saved, 2);
        close(saved);
        rewind(tmp);
        const size_t len = fread(text, 1, sizeof text - 1, tmp);
        text[len] = '\0';
    }
    if (tmp)
        fclose(tmp);
    if (rc == HCNN_OK && s->be) {
        fputs(text, stderr); /* what it said, as it was */
        return;
    }
    s->be = NULL;
    text[strcspn(text, "\n")] = '\0';
    snprintf(s->reason, sizeof s->reason, "hcnn_backend_create(\"%.64s\") returned %d%s%.300s",
             s->name, rc, text[0] ? ": " : "", text);
}

/* the names of a comma-separated list, trimmed */
static void add_backends(const char *list)
{
    const char *p = list;
    while (*p && g_nbackends < MAX_BACKENDS) {
        const size_t len = strcspn(p, ",");
        size_t a = 0, b = len;
        while (a < b && (p[a] == ' ' || p[a] == '\t'))
            a++;
        while (b > a && (p[b - 1] == ' ' || p[b - 1] == '\t'))
            b--;
        if (b > a && b - a < sizeof g_backends[0].name) {
            backend_slot *s = &g_backends[g_nbackends++];
            memcpy(s->name, p + a, b - a);
            s->name[b - a] = '\0';
        }
        p += len + (p[len] == ',');
    }
}

/* whether name is one of the comma-separated list's (no blanks) */
static int listed(const char *list, const char *name)
{
    const size_t len = strlen(name);
    for (const char *p = list; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        if (strcspn(p, ",") == len && strncmp(p, name, len) == 0)
            return 1;
    }
    return 0;
}

/* HCNN_CONFORMANCE_CHECKS: each name one of the checks (0), else a message */
static int checks_known(const char *list)
{
    for (const char *p = list; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        const size_t len = strcspn(p, ",");
        size_t c = 0;
        while (c < NCHECKS &&
               !(strlen(checks[c].name) == len && strncmp(p, checks[c].name, len) == 0))
            c++;
        if (c == NCHECKS) {
            printf("HCNN_CONFORMANCE_CHECKS: no check is named \"%.*s\" (the names: the "
                   "second part of each case's name, e.g. bn_bwd)\n", (int)len, p);
            return 1;
        }
    }
    return 0;
}

int main(void)
{
    const double t0 = now_s();
    const char *env = getenv("HCNN_CONFORMANCE_BACKENDS");
    add_backends(env && *env ? env : hcnn_backend_names());
    printf("backend conformance: %s (%s)\n", env && *env ? env : hcnn_backend_names(),
           env && *env ? "HCNN_CONFORMANCE_BACKENDS" : "all of this build");
    for (int i = 0; i < g_nbackends; i++) {
        backend_open(&g_backends[i]);
        if (!g_backends[i].be)
            printf("backend %s: not available here, its cases are skipped: %s\n",
                   g_backends[i].name, g_backends[i].reason);
    }
    const char *only = getenv("HCNN_CONFORMANCE_CHECKS");
    if (only && *only && checks_known(only))
        return 1;
    fflush(stdout);
    const size_t ncases = (size_t)g_nbackends * NCHECKS + 1;
    struct CMUnitTest *tests = calloc(ncases, sizeof *tests);
    op_case *cases = calloc(ncases, sizeof *cases);
    if (!tests || !cases)
        return 1;
    size_t k = 0;
    for (int b = 0; b < g_nbackends; b++)
        for (size_t c = 0; c < NCHECKS; c++) {
            if (only && *only && !listed(only, checks[c].name))
                continue;
            cases[k].backend = b, cases[k].chk = &checks[c];
            snprintf(cases[k].name, sizeof cases[k].name, "%.40s: %.40s", g_backends[b].name,
                     checks[c].name);
            tests[k].name = cases[k].name;
            tests[k].test_func = test_op;
            tests[k].initial_state = &cases[k];
            k++;
        }
    if (!(only && *only)) {
        tests[k].name = "deliberate_errors";
        tests[k].test_func = test_deliberate_errors;
        k++;
    }
    const int failed = _cmocka_run_group_tests("backend conformance", tests, k, NULL, NULL);
    for (int i = 0; i < g_nbackends; i++)
        hcnn_backend_destroy(g_backends[i].be);
    free(tests);
    free(cases);
    printf("backend conformance: %.1f s\n", now_s() - t0);
    return failed ? 1 : 0; /* (77 failures would read as a skip) */
}
