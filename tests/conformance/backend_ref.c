/* The conformance suite's references (backend_ref.h): each the plainest loop
 * of its formula, in double precision.  Nothing here comes from src/. */
#include "backend_ref.h"

#include <math.h>
#include <string.h>

/* ---- products ------------------------------------------------------------------ */

void ref_gemm(int ta, int tb, int m, int n, int k, double alpha, const float *a, int lda,
              const float *b, int ldb, double beta, const float *c0, int ldc, double *c)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int l = 0; l < k; l++) {
                const double av = ta ? a[(size_t)l * lda + i] : a[(size_t)i * lda + l];
                const double bv = tb ? b[(size_t)j * ldb + l] : b[(size_t)l * ldb + j];
                s += av * bv;
            }
            c[(size_t)i * n + j] = alpha * s + (beta != 0.0 ? beta * c0[(size_t)i * ldc + j] : 0.0);
        }
}

/* ---- convolution -------------------------------------------------------------------- */

/* x[i][c][iy][ix], 0 outside the image */
static double conv_in(const hcnn_conv_geom *g, const float *x, int i, int c, int iy, int ix)
{
    if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
        return 0.0;
    return x[(((size_t)i * g->c + c) * g->h + iy) * g->w + ix];
}

void ref_conv_fwd(const hcnn_conv_desc *d, const float *x, const float *w, const float *b, int n,
                  double *y)
{
    const hcnn_conv_geom *g = &d->g;
    for (int i = 0; i < n; i++)
        for (int o = 0; o < d->out_c; o++)
            for (int oy = 0; oy < g->oh; oy++)
                for (int ox = 0; ox < g->ow; ox++) {
                    double s = b ? b[o] : 0.0;
                    for (int c = 0; c < g->c; c++)
                        for (int ki = 0; ki < g->kh; ki++)
                            for (int kj = 0; kj < g->kw; kj++)
                                s += w[(((size_t)o * g->c + c) * g->kh + ki) * g->kw + kj] *
                                     conv_in(g, x, i, c, oy * g->sh - g->ph + ki,
                                             ox * g->sw - g->pw + kj);
                    y[(((size_t)i * d->out_c + o) * g->oh + oy) * g->ow + ox] = s;
                }
}

void ref_conv_bwd_filter(const hcnn_conv_desc *d, const float *x, const float *dy, int n,
                         double *dw, double *db)
{
    const hcnn_conv_geom *g = &d->g;
    for (int o = 0; o < d->out_c; o++) {
        double sb = 0.0;
        for (int i = 0; i < n; i++)
            for (int p = 0; p < g->oh * g->ow; p++)
                sb += dy[((size_t)i * d->out_c + o) * g->oh * g->ow + p];
        db[o] = sb;
        for (int c = 0; c < g->c; c++)
            for (int ki = 0; ki < g->kh; ki++)
                for (int kj = 0; kj < g->kw; kj++) {
                    double s = 0.0;
                    for (int i = 0; i < n; i++)
                        for (int oy = 0; oy < g->oh; oy++)
                            for (int ox = 0; ox < g->ow; ox++)
                                s += dy[(((size_t)i * d->out_c + o) * g->oh + oy) * g->ow + ox] *
                                     conv_in(g, x, i, c, oy * g->sh - g->ph + ki,
                                             ox * g->sw - g->pw + kj);
                    dw[(((size_t)o * g->c + c) * g->kh + ki) * g->kw + kj] = s;
                }
    }
}

void ref_conv_bwd_data(const hcnn_conv_desc *d, const float *w, const float *dy, int n, double *dx)
{
    const hcnn_conv_geom *g = &d->g;
    memset(dx, 0, sizeof *dx * (size_t)n * g->c * g->h * g->w);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < d->out_c; o++)
            for (int oy = 0; oy < g->oh; oy++)
                for (int ox = 0; ox < g->ow; ox++) {
                    const double gy = dy[(((size_t)i * d->out_c + o) * g->oh + oy) * g->ow + ox];
                    for (int c = 0; c < g->c; c++)
                        for (int ki = 0; ki < g->kh; ki++)
                            for (int kj = 0; kj < g->kw; kj++) {
                                const int iy = oy * g->sh - g->ph + ki;
                                const int ix = ox * g->sw - g->pw + kj;
                                if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
                                    continue;
                                dx[(((size_t)i * g->c + c) * g->h + iy) * g->w + ix] +=
                                    gy * w[(((size_t)o * g->c + c) * g->kh + ki) * g->kw + kj];
                            }
                }
}

/* ---- pooling ----------------------------------------------------------------------- */

/* The window of output (oy, ox), clipped to the image: rows [*y0, *y1), columns [*x0, *x1). */
static void window(const hcnn_pool_geom *g, int oy, int ox, int *y0, int *y1, int *x0, int *x1)
{
    *y0 = oy * g->sh - g->ph, *y1 = *y0 + g->kh;
    *x0 = ox * g->sw - g->pw, *x1 = *x0 + g->kw;
    *y0 = *y0 < 0 ? 0 : *y0, *x0 = *x0 < 0 ? 0 : *x0;
    *y1 = *y1 > g->h ? g->h : *y1, *x1 = *x1 > g->w ? g->w : *x1;
}

/* the position (in its plane) of the largest value of the window */
static int window_argmax(const hcnn_pool_geom *g, const float *xp, int oy, int ox)
{
    int y0, y1, x0, x1, arg = -1;
    window(g, oy, ox, &y0, &y1, &x0, &x1);
    for (int iy = y0; iy < y1; iy++)
        for (int ix = x0; ix < x1; ix++)
            if (arg < 0 || xp[iy * g->w + ix] > xp[arg])
                arg = iy * g->w + ix;
    return arg;
}

void ref_maxpool_fwd(const hcnn_pool_geom *g, const float *x, int n, double *y)
{
    for (size_t pl = 0; pl < (size_t)n * g->c; pl++) {
        const float *xp = x + pl * g->h * g->w;
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++)
                y[(pl * g->oh + oy) * g->ow + ox] = xp[window_argmax(g, xp, oy, ox)];
    }
}

void ref_maxpool_bwd(const hcnn_pool_geom *g, const float *x, const float *dy, int n, double *dx)
{
    memset(dx, 0, sizeof *dx * (size_t)n * g->c * g->h * g->w);
    for (size_t pl = 0; pl < (size_t)n * g->c; pl++) {
        const float *xp = x + pl * g->h * g->w;
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++)
                dx[pl * g->h * g->w + window_argmax(g, xp, oy, ox)] +=
                    dy[(pl * g->oh + oy) * g->ow + ox];
    }
}

void ref_avgpool_fwd(const hcnn_pool_geom *g, const float *x, int n, double *y)
{
    for (size_t pl = 0; pl < (size_t)n * g->c; pl++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++) {
                int y0, y1, x0, x1;
                window(g, oy, ox, &y0, &y1, &x0, &x1);
                double s = 0.0;
                for (int iy = y0; iy < y1; iy++)
                    for (int ix = x0; ix < x1; ix++)
                        s += x[(pl * g->h + iy) * g->w + ix];
                y[(pl * g->oh + oy) * g->ow + ox] = s / (g->kh * g->kw);
            }
}

void ref_avgpool_bwd(const hcnn_pool_geom *g, const float *dy, int n, double *dx)
{
    memset(dx, 0, sizeof *dx * (size_t)n * g->c * g->h * g->w);
    for (size_t pl = 0; pl < (size_t)n * g->c; pl++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++) {
                int y0, y1, x0, x1;
                window(g, oy, ox, &y0, &y1, &x0, &x1);
                const double d = dy[(pl * g->oh + oy) * g->ow + ox] / (double)(g->kh * g->kw);
                for (int iy = y0; iy < y1; iy++)
                    for (int ix = x0; ix < x1; ix++)
                        dx[(pl * g->h + iy) * g->w + ix] += d;
            }
}

/* ---- batch normalisation ----------------------------------------------------------- */

#define AT(i, ch, p) (((size_t)(i)*c + (ch)) * np + (p))

void ref_bn_stats(const float *x, int n, int c, int np, double *mean, double *var)
{
    const double cnt = (double)n * np;
    for (int ch = 0; ch < c; ch++) {
        double s = 0.0, ss = 0.0;
        for (int i = 0; i < n; i++)
            for (int p = 0; p < np; p++)
                s += x[AT(i, ch, p)];
        mean[ch] = s / cnt;
        for (int i = 0; i < n; i++)
            for (int p = 0; p < np; p++)
                ss += (x[AT(i, ch, p)] - mean[ch]) * (x[AT(i, ch, p)] - mean[ch]);
        var[ch] = ss / cnt;
    }
}

void ref_bn_apply(const float *x, int n, int c, int np, const float *gamma, const float *beta,
                  const double *mean, const double *invstd, const float *add, int relu, double *y)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < np; p++) {
                double v = gamma[ch] * (x[AT(i, ch, p)] - mean[ch]) * invstd[ch] + beta[ch];
                if (add)
                    v += add[AT(i, ch, p)];
                y[AT(i, ch, p)] = relu && !(v > 0.0) ? 0.0 : v;
            }
}

void ref_bn_bwd(const float *x, const float *dy, int n, int c, int np, const float *gamma,
                const float *beta, const float *m, const float *is, int relu, double *dx,
                double *dgamma, double *dbeta)
{
    const double cnt = (double)n * np;
    for (int ch = 0; ch < c; ch++) {
        double sg = 0.0, sgx = 0.0;
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < n; i++)
                for (int p = 0; p < np; p++) {
                    const double xhat = ((double)x[AT(i, ch, p)] - m[ch]) * is[ch];
                    const int off = relu && !((double)gamma[ch] * xhat + beta[ch] > 0.0);
                    const double gv = off ? 0.0 : dy[AT(i, ch, p)];
                    if (pass == 0)
                        sg += gv, sgx += gv * xhat;
                    else
                        dx[AT(i, ch, p)] =
                            (double)gamma[ch] * is[ch] * (gv - sg / cnt - xhat * sgx / cnt);
                }
        dbeta[ch] = sg;
        dgamma[ch] = sgx;
    }
}

/* ---- loss and optimiser ------------------------------------------------------------- */

void ref_softmax_xent(const float *z, const int32_t *labels, int n, int k, double grad_scale,
                      double *dz, double *loss, double *correct)
{
    *loss = 0.0, *correct = 0.0;
    for (int i = 0; i < n; i++) {
        const float *zi = z + (size_t)i * k;
        int arg = 0;
        for (int j = 1; j < k; j++)
            if (zi[j] > zi[arg])
                arg = j;
        double sum = 0.0;
        for (int j = 0; j < k; j++)
            sum += exp((double)zi[j] - zi[arg]);
        const double logsum = zi[arg] + log(sum);
        *loss += logsum - zi[labels[i]];
        *correct += arg == labels[i];
        for (int j = 0; dz && j < k; j++)
            dz[(size_t)i * k + j] = (exp(zi[j] - logsum) - (j == labels[i])) * grad_scale;
    }
}

void ref_sgd(const float *w, const float *g, const float *v, size_t n, double lr, double mu,
             double wd, int nesterov, double *w_out, double *v_out)
{
    for (size_t i = 0; i < n; i++) {
        const double gi = g[i] + wd * w[i];
        const double vi = mu * v[i] + gi;
        v_out[i] = vi;
        w_out[i] = w[i] - lr * (nesterov ? gi + mu * vi : vi);
    }
}
