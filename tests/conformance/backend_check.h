/* The backend conformance suite's harness (tests/conformance/backend_check.c) and its
 * checks (tests/conformance/backend_checks_conv.c: gemm and convolution;
 * tests/conformance/backend_checks_ops.c: memory, element-wise, dropout, pooling,
 * layout changes;
 * tests/conformance/backend_checks_train.c: batch-norm, loss, optimiser, statistics,
 * threads, units, timers), run by
 * tests/conformance/test_backend.c.
 *
 * A check is a function returning 1 when a backend's operation meets its
 * contract in include/hcnn/backend.h, else 0 with the reason in why.  It
 * reaches tensors only through be->upload and be->download (a backend's
 * pointers may not be the host's): dvec/dnew/dnan make a tensor of n floats
 * followed by GUARD guard floats that no operation may touch; check_dev
 * compares one with its reference and checks its guard, and every guard is
 * checked again as its tensor is freed (an overwritten one fails the check
 * that freed it, whether it looked or not).  Everything a check
 * allocates is freed when it returns (arena_mark/arena_pop free earlier); an
 * allocation that fails ends the check, failed.  The references are in
 * tests/conformance/backend_ref.c; nothing here comes from src/. */
#ifndef HCNN_TEST_BACKEND_CHECK_H
#define HCNN_TEST_BACKEND_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "backend_ref.h"
#include "hcnn/backend.h"
#include "hcnn/common.h"

/* ---- tolerances ----------------------------------------------------------------
 * The largest error allowed, relative to the largest magnitude of the expected
 * tensor; 0: the same values.  A device backend (cuBLAS/cuDNN in FP32, no TF32)
 * must meet them too, so where the order of a sum is the backend's choice they
 * are not bit-exact.  u = 2^-24, float32's unit roundoff. */
/* copies, fill, zero, ReLU, add, mul, scale, bias rows, max-pool forward (and its
 * backward where windows do not overlap), dropout's y: no arithmetic, or one IEEE
 * operation per element: every backend gets the same bits */
#define TOL_EXACT 0.0
/* float32 dot products of up to 9000 terms against double: ~sqrt(k) u ~ 1e-6 of the
 * result in any summation order (blocking, split k, cuBLAS's); 10x that */
#define TOL_GEMM 1e-5
/* the same dot products (up to 12800 terms: a weight gradient over a batch), ordered
 * by the backend's algorithm (im2col + GEMM, shifted windows, partial sums, cuDNN) */
#define TOL_CONV 1e-5
/* Winograd's bounds (tests/unit/test_winograd.c: 4x the worst error observed) */
#define TOL_WINOGRAD_F2 2.0e-6
#define TOL_WINOGRAD_F4 3.8e-5
/* row sums of up to 257 float32 terms in any order: ~sqrt(n) u ~ 4e-7; 10x that */
#define TOL_SUM 4e-6
/* pooling windows of at most 49 terms (overlapping max-pool gradients: at most 9)
 * summed in any order, times 1/(kh kw) */
#define TOL_POOL 1e-6
/* batch statistics over up to 8192 values a channel and the backward's two sums in
 * float32 partials of any order, y = x a + b rounded in float32 (|mean| <= 3 std);
 * bn_bwd's dx relative to its first term gamma invstd dy (it cancels) */
#define TOL_BN 1e-5
/* softmax in its max-subtracted form, exp(z - max) / sum: a float32 exp per element
 * (a few ulp) and the loss summed in any order; the loss relative to max(loss, 1) */
#define TOL_LOSS 1e-6
/* three float32 operations per element, with or without FMA: a few ulp of the weight */
#define TOL_SGD 1e-6
/* a sum of positive squares (no cancellation): float32 partials in a tree reach ~1e-7 */
#define TOL_SUMSQ 1e-6
/* dropout's scale 1/(1-p), computed in float32 or double and rounded */
#define TOL_DROPOUT_SCALE 1e-6

/* a check: 1 when the operation meets its contract, else 0 and why */
typedef int (*check_fn)(const hcnn_backend *be, char *why, size_t cap);
/* runs one with its memory freed afterwards, g_rec its record */
int run_check(const hcnn_backend *be, check_fn fn, char *why, size_t cap);

/* the record of the running check: its comparison closest to its tolerance */
typedef struct check_record {
    double ratio, err, tol; /* the worst comparison: err / tol */
    char what[256];
    long long values; /* values compared */
    int toleranced;   /* 1: a comparison had a tolerance */
} check_record;
extern check_record g_rec;
/* a comparison of `values` values whose largest error was err (tolerance tol) */
void note(const char *what, double err, double tol, size_t values);

/* ---- memory, freed when the check returns or at arena_pop(mark) ---- */
int arena_mark(void);
void arena_pop(int mark);
void *dev_bytes(const hcnn_backend *be, size_t bytes);    /* be->alloc */
void *pinned_bytes(const hcnn_backend *be, size_t bytes); /* be->alloc_host */
void *host_bytes(size_t bytes);                           /* malloc */
float *hvec(size_t n);
double *hdvec(size_t n);
float *hfill(size_t n, float v);
float *hrand(ref_rng *r, size_t n, float lo, float hi);         /* uniform in [lo, hi) */
double *hd(const float *f, size_t n);                           /* floats as doubles */
double *plus(const float *base, const double *delta, size_t n); /* base + delta */

/* backend tensors: n floats and GUARD floats of GUARD_VALUE after them */
#define GUARD 16
#define GUARD_VALUE 1234.5f
float *dvec(const hcnn_backend *be, size_t n);
float *dnew(const hcnn_backend *be, const float *h, size_t n); /* with h's values */
float *dnan(const hcnn_backend *be, size_t n);                 /* NaN: must be written */
void put(const hcnn_backend *be, float *d, const float *h, size_t n);
void get(const hcnn_backend *be, float *h, const float *d, size_t n);
void put_nan(const hcnn_backend *be, float *d, size_t n);

/* ---- comparisons: 1 if equal within tol, else 0 and why ----
 * tol 0: the same values; else max |got - ref| <= tol * max(max |ref|, floor) */
#define FAIL(...) return (snprintf(why, cap, __VA_ARGS__), 0)
#define TRY(check)                                                                                 \
    do {                                                                                           \
        if (!(check))                                                                              \
            return 0;                                                                              \
    } while (0)
int cmp_floor(const char *what, const float *got, const double *ref, size_t n, double tol,
              double floor, char *why, size_t cap);
int cmp(const char *what, const float *got, const double *ref, size_t n, double tol, char *why,
        size_t cap);
int guard_ok(const hcnn_backend *be, const char *what, const float *d, size_t n, char *why,
             size_t cap);
int check_dev_floor(const hcnn_backend *be, const char *what, const float *d, const double *ref,
                    size_t n, double tol, double floor, char *why, size_t cap);
int check_dev(const hcnn_backend *be, const char *what, const float *d, const double *ref, size_t n,
              double tol, char *why, size_t cap);
/* Activations (include/hcnn/backend.h, hcnn_act_layout): [n][c][np] NCHW on the
 * host, the backend's layout in its memory (NHWC: transposed on the way in
 * and out, so that every check states its data and references in NCHW). */
float *dnew_act(const hcnn_backend *be, const float *h, int n, int c, int np);
void put_act(const hcnn_backend *be, float *d, const float *h, int n, int c, int np);
void get_act(const hcnn_backend *be, float *h, const float *d, int n, int c, int np);
int check_act_floor(const hcnn_backend *be, const char *what, const float *d, const double *ref,
                    int n, int c, int np, double tol, double floor, char *why, size_t cap);
int check_act(const hcnn_backend *be, const char *what, const float *d, const double *ref, int n,
              int c, int np, double tol, char *why, size_t cap);
/* |got - want| <= tol * max(scale, tiny) */
int cmp_double(const char *what, double got, double want, double scale, double tol, char *why,
               size_t cap);

/* ---- the checks ---- */
int check_memory(const hcnn_backend *be, char *why, size_t cap);
int check_fill(const hcnn_backend *be, char *why, size_t cap);
int check_zero(const hcnn_backend *be, char *why, size_t cap);
int check_copy(const hcnn_backend *be, char *why, size_t cap);
int check_row_sum_acc(const hcnn_backend *be, char *why, size_t cap);
int check_add_row_bias(const hcnn_backend *be, char *why, size_t cap);
int check_relu_fwd(const hcnn_backend *be, char *why, size_t cap);
int check_relu_bwd(const hcnn_backend *be, char *why, size_t cap);
int check_add(const hcnn_backend *be, char *why, size_t cap);
int check_add_acc(const hcnn_backend *be, char *why, size_t cap);
int check_scale(const hcnn_backend *be, char *why, size_t cap);
int check_mul(const hcnn_backend *be, char *why, size_t cap);
int check_dropout(const hcnn_backend *be, char *why, size_t cap);
int check_maxpool_fwd(const hcnn_backend *be, char *why, size_t cap);
int check_maxpool_bwd(const hcnn_backend *be, char *why, size_t cap);
int check_avgpool_fwd(const hcnn_backend *be, char *why, size_t cap);
int check_avgpool_bwd(const hcnn_backend *be, char *why, size_t cap);
int check_layout(const hcnn_backend *be, char *why, size_t cap);
int check_bn_fwd_train(const hcnn_backend *be, char *why, size_t cap);
int check_bn_fwd_infer(const hcnn_backend *be, char *why, size_t cap);
int check_bn_bwd(const hcnn_backend *be, char *why, size_t cap);
int check_softmax_xent(const hcnn_backend *be, char *why, size_t cap);
int check_sgd_step(const hcnn_backend *be, char *why, size_t cap);
int check_sum_sq(const hcnn_backend *be, char *why, size_t cap);
int check_unit_images(const hcnn_backend *be, char *why, size_t cap);
int check_parallel(const hcnn_backend *be, char *why, size_t cap);
int check_timer(const hcnn_backend *be, char *why, size_t cap);
int check_gemm(const hcnn_backend *be, char *why, size_t cap);
int check_conv_fwd(const hcnn_backend *be, char *why, size_t cap);
int check_conv_fwd_bn_stats(const hcnn_backend *be, char *why, size_t cap);
int check_conv_relu(const hcnn_backend *be, char *why, size_t cap);
int check_conv_bwd(const hcnn_backend *be, char *why, size_t cap);
int check_conv_bwd_filter(const hcnn_backend *be, char *why, size_t cap);
int check_conv_bwd_data(const hcnn_backend *be, char *why, size_t cap);
int check_conv_bf16(const hcnn_backend *be, char *why, size_t cap);
int check_pass_pieces(const hcnn_backend *be, char *why, size_t cap);
int check_conv_workspace(const hcnn_backend *be, char *why, size_t cap);
int check_conv_gemms_describe(const hcnn_backend *be, char *why, size_t cap);

#endif
