/* The backend conformance suite's references (tests/conformance/test_backend.c): slow,
 * obvious host loops in double precision, written from the contracts in
 * include/hcnn/backend.h and nothing else (no code or header of src/).
 * Every reference returns the operation's mathematical result; what an
 * operation accumulates into is the caller's to add. */
#ifndef HCNN_TEST_BACKEND_REF_H
#define HCNN_TEST_BACKEND_REF_H

#include <stddef.h>
#include <stdint.h>

#include "hcnn/backend.h"

/* ---- the suite's random numbers (splitmix64: seeded, the same on every run) */
typedef struct ref_rng {
    uint64_t s;
} ref_rng;

static inline uint64_t ref_next(ref_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* uniform in [lo, hi), 24 random bits */
static inline float ref_uniform(ref_rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(ref_next(r) >> 40) / 16777216.0);
}
/* uniform integer in [0, n) (n small: the modulo bias does not matter here) */
static inline int ref_below(ref_rng *r, int n) { return (int)(ref_next(r) % (uint64_t)n); }

/* ---- products ---------------------------------------------------------------
 * c[i][j] = alpha * sum_l op(A)[i][l] op(B)[l][j] + beta * c0[i][j], row-major,
 * op(A)[i][l] = ta ? a[l][i] : a[i][l] (leading dimension lda), the same for B;
 * c0 is read only when beta != 0 (the BLAS convention); c dense [m][n]. */
void ref_gemm(int ta, int tb, int m, int n, int k, double alpha, const float *a, int lda,
              const float *b, int ldb, double beta, const float *c0, int ldc, double *c);

/* ---- convolution (NCHW; x is zero outside the image) ----------------------------
 * y[i][o][oy][ox] = b[o] + sum_{c,ki,kj} w[o][c][ki][kj] x[i][c][oy*sh-ph+ki][ox*sw-pw+kj]
 * (b NULL: no bias) */
void ref_conv_fwd(const hcnn_conv_desc *d, const float *x, const float *w, const float *b, int n,
                  double *y);
/* dw[o][c][ki][kj] = sum_{i,oy,ox} dy[i][o][oy][ox] x[i][c][oy*sh-ph+ki][ox*sw-pw+kj]
 * db[o] = sum_{i,oy,ox} dy[i][o][oy][ox] */
void ref_conv_bwd_filter(const hcnn_conv_desc *d, const float *x, const float *dy, int n,
                         double *dw, double *db);
/* dx[i][c][iy][ix] = sum over (o, ki, kj, oy, ox) with oy*sh-ph+ki = iy, ox*sw-pw+kj = ix
 * of w[o][c][ki][kj] dy[i][o][oy][ox] (the adjoint of the forward) */
void ref_conv_bwd_data(const hcnn_conv_desc *d, const float *w, const float *dy, int n, double *dx);

/* ---- pooling (windows over the zero-padded plane) ------------------------------
 * max: y = the largest value of the window's positions inside the image
 * (padding is never the maximum, as in PyTorch); backward: dy of each window
 * added at the position of its maximum (values distinct: no ties). */
void ref_maxpool_fwd(const hcnn_pool_geom *g, const float *x, int n, double *y);
void ref_maxpool_bwd(const hcnn_pool_geom *g, const float *x, const float *dy, int n, double *dx);
/* average: y = (sum of the window's positions inside the image) / (kh kw)
 * (padding counted in the divisor); backward: dy / (kh kw) added to every
 * position of the window inside the image. */
void ref_avgpool_fwd(const hcnn_pool_geom *g, const float *x, int n, double *y);
void ref_avgpool_bwd(const hcnn_pool_geom *g, const float *dy, int n, double *dx);

/* ---- batch normalisation over (n, np) per channel, x [n][c][np] -------------------
 * mean[ch] = sum x / N, var[ch] = sum (x - mean)^2 / N (biased), N = n np */
void ref_bn_stats(const float *x, int n, int c, int np, double *mean, double *var);
/* y = act(gamma (x - mean) invstd + beta + add), act = ReLU if relu (add NULL: none) */
void ref_bn_apply(const float *x, int n, int c, int np, const float *gamma, const float *beta,
                  const double *mean, const double *invstd, const float *add, int relu, double *y);
/* With xhat = (x - m) is (m, is: the saved mean and inverse std) and
 * g = dy, or with relu dy [gamma xhat + beta > 0]:
 *   dbeta = sum g,  dgamma = sum g xhat,
 *   dx = gamma is (g - dbeta / N - xhat dgamma / N) */
void ref_bn_bwd(const float *x, const float *dy, int n, int c, int np, const float *gamma,
                const float *beta, const float *m, const float *is, int relu, double *dx,
                double *dgamma, double *dbeta);

/* ---- loss and optimiser ---------------------------------------------------------
 * loss = sum_i (log sum_j exp z[i][j] - z[i][label_i]);  correct = the rows whose
 * first largest logit is the label's;  dz[i][j] = (softmax(z_i)_j - [j = label_i])
 * grad_scale (dz NULL: not computed) */
void ref_softmax_xent(const float *z, const int32_t *labels, int n, int k, double grad_scale,
                      double *dz, double *loss, double *correct);
/* g' = g + wd w;  v' = mu v + g';  w' = w - lr (nesterov ? g' + mu v' : v') */
void ref_sgd(const float *w, const float *g, const float *v, size_t n, double lr, double mu,
             double wd, int nesterov, double *w_out, double *v_out);

#endif
