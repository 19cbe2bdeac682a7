/* The conformance suite's checks of what training adds to the layers'
 * operations: batch normalisation, the loss, the optimiser, the step's
 * statistics, and the backend's threads, work units and timers
 * (backend_check.h; memory, element-wise and pooling checks are in
 * backend_checks_ops.c). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend_check.h"

/* ---- batch normalisation ----------------------------------------------------------------- */

/* x, add, y, dy and dx are activations, stated in NCHW and moved in the
 * backend's layout (dnew_act, check_act); the per-channel vectors are
 * layout-free. */

static const int bn_cases[][3] = {
    {2, 3, 1},                              /* after a fully connected layer: np = 1 */
    {3, 5, 49},                             /* 7x7 planes */
    {1, 4, 36},                             /* n = 1 */
    {8, 2, 100}, {4, 17, 9}, {2, 10, 4096}, /* 8192 values a channel */
};
#define NBN (sizeof bn_cases / sizeof *bn_cases)
#define BN_EPS 1e-5f
#define BN_MOMENTUM 0.1f

/* x with a mean of its own per channel, of at most 3 standard deviations (the
 * batch's own: also with 2 values a channel).  The form y = x a + b with
 * b = beta - mean a loses |mean| / std of y's relative accuracy; a backend is
 * not asked to do better than that. */
static float *bn_input(ref_rng *r, int n, int c, int np)
{
    const size_t cnt = (size_t)n * np;
    float *x = hvec(cnt * c);
    double *u = hdvec(cnt);
    for (int ch = 0; ch < c; ch++) {
        double mu = 0.0, sd = 0.0;
        for (size_t i = 0; i < cnt; i++)
            u[i] = ref_uniform(r, -1, 1), mu += u[i] / cnt;
        for (size_t i = 0; i < cnt; i++)
            sd += (u[i] - mu) * (u[i] - mu) / cnt;
        sd = sqrt(sd);
        const double spread = ref_uniform(r, 0.5f, 2), off = ref_uniform(r, -3, 3) * spread * sd;
        for (size_t i = 0; i < cnt; i++)
            x[((i / np) * c + ch) * np + i % np] = (float)(off + spread * (u[i] - mu));
    }
    return x;
}

/* gamma of either sign, magnitude 0.5 to 1.5 */
static float *bn_gamma(ref_rng *r, int c)
{
    float *g = hrand(r, (size_t)c, 0.5f, 1.5f);
    for (int ch = 0; ch < c; ch += 3)
        g[ch] = -g[ch];
    return g;
}

static void bn_name(const int *bc, const char *op, int add, int relu, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s n %d c %d np %d%s%s", op, bc[0], bc[1], bc[2], add ? " add" : "",
             relu ? " relu" : "");
}

/* training forward: saved mean and 1/sqrt(var + eps), running statistics
 * r = (1 - momentum) r + momentum s (var unbiased: N/(N-1)), y = act(bn + add) */
int check_bn_fwd_train(const hcnn_backend *be, char *why, size_t cap)
{
    char what[128];
    for (size_t c = 0; c < NBN; c++)
        for (int v = 0; v < 4; v++) {
            const int mark = arena_mark();
            const int n = bn_cases[c][0], ch = bn_cases[c][1], np = bn_cases[c][2];
            const int with_add = v & 1, relu = v >> 1;
            const size_t nn = (size_t)n * ch * np, cnt = (size_t)n * np;
            ref_rng r = {81 + c * 4 + (size_t)v};
            float *x = bn_input(&r, n, ch, np), *gamma = bn_gamma(&r, ch);
            float *beta = hrand(&r, (size_t)ch, -1, 1), *add = hrand(&r, nn, -1, 1);
            float *rm = hrand(&r, (size_t)ch, -0.5f, 0.5f), *rv = hrand(&r, (size_t)ch, 0.5f, 1.5f);
            double *mean = hdvec((size_t)ch), *var = hdvec((size_t)ch), *is = hdvec((size_t)ch);
            double *rm_want = hdvec((size_t)ch), *rv_want = hdvec((size_t)ch), *y_want = hdvec(nn);
            ref_bn_stats(x, n, ch, np, mean, var);
            for (int k = 0; k < ch; k++) {
                is[k] = 1.0 / sqrt(var[k] + (double)BN_EPS);
                rm_want[k] = (1.0 - BN_MOMENTUM) * rm[k] + (double)BN_MOMENTUM * mean[k];
                rv_want[k] = (1.0 - BN_MOMENTUM) * rv[k] +
                             (double)BN_MOMENTUM * var[k] * (double)cnt / (double)(cnt - 1);
            }
            ref_bn_apply(x, n, ch, np, gamma, beta, mean, is, with_add ? add : NULL, relu, y_want);
            float *d_x = dnew_act(be, x, n, ch, np), *d_g = dnew(be, gamma, (size_t)ch);
            float *d_b = dnew(be, beta, (size_t)ch), *d_add = dnew_act(be, add, n, ch, np);
            float *d_rm = dnew(be, rm, (size_t)ch), *d_rv = dnew(be, rv, (size_t)ch);
            float *d_sm = dnan(be, (size_t)ch), *d_si = dnan(be, (size_t)ch), *d_y = dnan(be, nn);
            be->bn_fwd_train(be, d_x, n, ch, np, d_g, d_b, BN_EPS, BN_MOMENTUM, d_rm, d_rv, d_sm,
                             d_si, with_add ? d_add : NULL, relu, NULL, d_y);
            bn_name(bn_cases[c], "bn_fwd_train y", with_add, relu, what, sizeof what);
            TRY(check_act(be, what, d_y, y_want, n, ch, np, TOL_BN, why, cap));
            bn_name(bn_cases[c], "bn_fwd_train save_mean", with_add, relu, what, sizeof what);
            TRY(check_dev(be, what, d_sm, mean, (size_t)ch, TOL_BN, why, cap));
            bn_name(bn_cases[c], "bn_fwd_train save_invstd", with_add, relu, what, sizeof what);
            TRY(check_dev(be, what, d_si, is, (size_t)ch, TOL_BN, why, cap));
            bn_name(bn_cases[c], "bn_fwd_train running_mean", with_add, relu, what, sizeof what);
            TRY(check_dev(be, what, d_rm, rm_want, (size_t)ch, TOL_BN, why, cap));
            bn_name(bn_cases[c], "bn_fwd_train running_var", with_add, relu, what, sizeof what);
            TRY(check_dev(be, what, d_rv, rv_want, (size_t)ch, TOL_BN, why, cap));
            arena_pop(mark);
        }
    return 1;
}

/* inference: y = act(gamma (x - running_mean) / sqrt(running_var + eps) + beta + add) */
int check_bn_fwd_infer(const hcnn_backend *be, char *why, size_t cap)
{
    char what[128];
    for (size_t c = 0; c < NBN; c++)
        for (int v = 0; v < 4; v++) {
            const int mark = arena_mark();
            const int n = bn_cases[c][0], ch = bn_cases[c][1], np = bn_cases[c][2];
            const int with_add = v & 1, relu = v >> 1;
            const size_t nn = (size_t)n * ch * np;
            ref_rng r = {91 + c * 4 + (size_t)v};
            float *x = bn_input(&r, n, ch, np), *gamma = bn_gamma(&r, ch);
            float *beta = hrand(&r, (size_t)ch, -1, 1), *add = hrand(&r, nn, -1, 1);
            float *rm = hrand(&r, (size_t)ch, -2, 2), *rv = hrand(&r, (size_t)ch, 0.25f, 4);
            double *mean = hdvec((size_t)ch), *is = hdvec((size_t)ch), *y_want = hdvec(nn);
            for (int k = 0; k < ch; k++)
                mean[k] = rm[k], is[k] = 1.0 / sqrt((double)rv[k] + (double)BN_EPS);
            ref_bn_apply(x, n, ch, np, gamma, beta, mean, is, with_add ? add : NULL, relu, y_want);
            float *d_x = dnew_act(be, x, n, ch, np), *d_g = dnew(be, gamma, (size_t)ch);
            float *d_b = dnew(be, beta, (size_t)ch), *d_add = dnew_act(be, add, n, ch, np);
            float *d_rm = dnew(be, rm, (size_t)ch), *d_rv = dnew(be, rv, (size_t)ch);
            float *d_y = dnan(be, nn); /* all NaN: the same in either layout */
            be->bn_fwd_infer(be, d_x, n, ch, np, d_g, d_b, BN_EPS, d_rm, d_rv,
                             with_add ? d_add : NULL, relu, d_y);
            bn_name(bn_cases[c], "bn_fwd_infer y", with_add, relu, what, sizeof what);
            TRY(check_act(be, what, d_y, y_want, n, ch, np, TOL_BN, why, cap));
            bn_name(bn_cases[c], "bn_fwd_infer running_mean kept", with_add, relu, what,
                    sizeof what);
            TRY(check_dev(be, what, d_rm, hd(rm, (size_t)ch), (size_t)ch, TOL_EXACT, why, cap));
            arena_pop(mark);
        }
    return 1;
}

/* x for the fused-ReLU backward, whose mask [gamma xhat + beta > 0] must not
 * depend on rounding: per channel N = n np values m + h k, k integers in
 * pairs +-k (one 0 when N is odd), shuffled, so that the mean is m exactly;
 * beta puts the ReLU's edge at k = k0 + 1/2, half a grid step from every value. */
static void bn_grid(ref_rng *r, int n, int c, int np, float *x, const float *gamma, float *beta)
{
    const double h = 1.0 / 64;
    const size_t cnt = (size_t)n * np;
    int *k = host_bytes(cnt * sizeof(int));
    for (int ch = 0; ch < c; ch++) {
        const double m = (ref_below(r, 9) - 4) * 0.25;
        for (size_t i = 0; i + 1 < cnt; i += 2)
            k[i] = 1 + ref_below(r, 32), k[i + 1] = -k[i];
        if (cnt % 2)
            k[cnt - 1] = 0;
        double ss = 0.0;
        for (size_t i = cnt; i > 1; i--) {
            const size_t j = ref_next(r) % i;
            const int t = k[i - 1];
            k[i - 1] = k[j], k[j] = t;
        }
        for (size_t i = 0; i < cnt; i++) {
            x[((i / np) * c + ch) * np + i % np] = (float)(m + h * k[i]);
            ss += (h * k[i]) * (h * k[i]);
        }
        const double is = 1.0 / sqrt(ss / cnt + BN_EPS);
        const int k0 = ref_below(r, 7) - 3;
        beta[ch] = (float)(-(double)gamma[ch] * (k0 + 0.5) * h * is);
    }
}

/* backward: dbeta += sum g, dgamma += sum g xhat, dx = gamma is (g - mean g - xhat mean(g xhat)),
 * g = dy, or dy [y > 0] with relu */
int check_bn_bwd(const hcnn_backend *be, char *why, size_t cap)
{
    char what[128];
    for (size_t c = 0; c < NBN; c++)
        for (int relu = 0; relu < 2; relu++) {
            const int mark = arena_mark();
            const int n = bn_cases[c][0], ch = bn_cases[c][1], np = bn_cases[c][2];
            const size_t nn = (size_t)n * ch * np;
            ref_rng r = {101 + c * 2 + (size_t)relu};
            float *gamma = bn_gamma(&r, ch), *beta = hrand(&r, (size_t)ch, -1, 1);
            float *x = relu ? hvec(nn) : bn_input(&r, n, ch, np);
            if (relu)
                bn_grid(&r, n, ch, np, x, gamma, beta);
            float *dy = hrand(&r, nn, -1, 1);
            float *dg0 = hrand(&r, (size_t)ch, -1, 1), *db0 = hrand(&r, (size_t)ch, -1, 1);
            /* the saved statistics: the batch's, rounded to float */
            double *mean = hdvec((size_t)ch), *var = hdvec((size_t)ch);
            ref_bn_stats(x, n, ch, np, mean, var);
            float *sm = hvec((size_t)ch), *si = hvec((size_t)ch);
            for (int k = 0; k < ch; k++)
                sm[k] = (float)mean[k], si[k] = (float)(1.0 / sqrt(var[k] + (double)BN_EPS));
            double *dx_want = hdvec(nn), *dg = hdvec((size_t)ch), *dbt = hdvec((size_t)ch);
            ref_bn_bwd(x, dy, n, ch, np, gamma, beta, sm, si, relu, dx_want, dg, dbt);
            float *d_x = dnew_act(be, x, n, ch, np), *d_dy = dnew_act(be, dy, n, ch, np);
            float *d_g = dnew(be, gamma, (size_t)ch), *d_b = dnew(be, beta, (size_t)ch);
            float *d_sm = dnew(be, sm, (size_t)ch), *d_si = dnew(be, si, (size_t)ch);
            float *d_dx = dnan(be, nn), *d_dg = dnew(be, dg0, (size_t)ch),
                  *d_db = dnew(be, db0, (size_t)ch);
            be->bn_bwd(be, d_x, d_dy, n, ch, np, d_g, d_b, d_sm, d_si, relu, d_dx, d_dg, d_db);
            /* dx cancels (with 2 values a channel it is 0 but for eps): its error is
             * relative to its first term's magnitude, max |gamma is dy| */
            double dx_terms = 0.0;
            for (size_t i = 0; i < nn; i++) {
                const int k = (int)(i / (size_t)np % (size_t)ch);
                dx_terms = fmax(dx_terms, fabs((double)gamma[k] * si[k] * dy[i]));
            }
            bn_name(bn_cases[c], "bn_bwd dx", 0, relu, what, sizeof what);
            TRY(check_act_floor(be, what, d_dx, dx_want, n, ch, np, TOL_BN, dx_terms, why, cap));
            bn_name(bn_cases[c], "bn_bwd dgamma (accumulated)", 0, relu, what, sizeof what);
            TRY(check_dev(be, what, d_dg, plus(dg0, dg, (size_t)ch), (size_t)ch, TOL_BN, why, cap));
            bn_name(bn_cases[c], "bn_bwd dbeta (accumulated)", 0, relu, what, sizeof what);
            TRY(check_dev(be, what, d_db, plus(db0, dbt, (size_t)ch), (size_t)ch, TOL_BN, why,
                          cap));
            arena_pop(mark);
        }
    return 1;
}

/* ---- loss, optimiser, statistics ----------------------------------------------------------- */

/* the step's statistics before an operation adds to them */
static const double stats0[HCNN_STATS] = {100.25, 3.0, 7.5, 11.0, 13.5, -1.0};

/* the statistics other than those of `except` (a NULL-terminated list of
 * indices as ints < 0 ends it) left as stats0 had them */
static int others_untouched(const char *what, const double *stats, const int *except, char *why,
                            size_t cap)
{
    for (int i = 0; i < HCNN_STATS; i++) {
        int skip = 0;
        for (const int *e = except; *e >= 0; e++)
            skip |= *e == i;
        if (!skip)
            TRY(cmp_double(what, stats[i], stats0[i], 1, 0, why, cap));
    }
    return 1;
}

static double *stats_new(const hcnn_backend *be)
{
    double *d = dev_bytes(be, sizeof stats0);
    be->upload(be, d, stats0, sizeof stats0);
    return d;
}

/* stats[LOSS] += sum of the rows' losses, stats[CORRECT] += rows whose argmax is
 * the label, dlogits = (softmax - onehot) grad_scale (NULL: not written) */
int check_softmax_xent(const hcnn_backend *be, char *why, size_t cap)
{
    char what[128];
    static const struct {
        int n, k;
        float scale, offset;
        int with_d;
    } cases[] = {
        {1, 1, 1.0f, 0, 1},        {1, 10, 1.0f, 0, 1},   {7, 3, 0.25f, 0, 1},
        {64, 10, 1.0f / 64, 0, 1}, {5, 1000, 1.0f, 0, 1}, {33, 17, 2.0f, 100, 1}, /* large logits */
        {16, 10, 1.0f, 0, 0},                                                     /* dlogits NULL */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int mark = arena_mark();
        const int n = cases[c].n, k = cases[c].k;
        const size_t nk = (size_t)n * k;
        ref_rng r = {111 + c};
        float *z = hrand(&r, nk, -4, 4);
        for (size_t i = 0; i < nk; i++)
            z[i] += cases[c].offset;
        int32_t *labels = host_bytes((size_t)n * sizeof(int32_t));
        for (int i = 0; i < n; i++) { /* every other row labelled with its argmax */
            int arg = 0;
            for (int j = 1; j < k; j++)
                arg = z[(size_t)i * k + j] > z[(size_t)i * k + arg] ? j : arg;
            labels[i] = i % 2 ? ref_below(&r, k) : arg;
        }
        double loss, correct, *dz = hdvec(nk);
        ref_softmax_xent(z, labels, n, k, cases[c].scale, dz, &loss, &correct);
        float *d_z = dnew(be, z, nk), *d_d = cases[c].with_d ? dnan(be, nk) : NULL;
        int32_t *d_l = dev_bytes(be, (size_t)n * sizeof(int32_t));
        be->upload(be, d_l, labels, (size_t)n * sizeof(int32_t));
        double *d_stats = stats_new(be), stats[HCNN_STATS];
        be->softmax_xent(be, d_z, d_l, n, k, cases[c].scale, d_d, d_stats);
        be->download(be, stats, d_stats, sizeof stats);
        snprintf(what, sizeof what, "softmax_xent n %d k %d scale %g offset %g: loss (accumulated)",
                 n, k, (double)cases[c].scale, (double)cases[c].offset);
        TRY(cmp_double(what, stats[HCNN_STAT_LOSS], stats0[HCNN_STAT_LOSS] + loss,
                       fmax(fabs(loss), 1.0), TOL_LOSS, why, cap));
        snprintf(what, sizeof what, "softmax_xent n %d k %d: correct (accumulated)", n, k);
        TRY(cmp_double(what, stats[HCNN_STAT_CORRECT], stats0[HCNN_STAT_CORRECT] + correct, 1, 0,
                       why, cap));
        snprintf(what, sizeof what, "softmax_xent n %d k %d: the other statistics", n, k);
        static const int touched[] = {HCNN_STAT_LOSS, HCNN_STAT_CORRECT, -1};
        TRY(others_untouched(what, stats, touched, why, cap));
        if (d_d) {
            snprintf(what, sizeof what, "softmax_xent n %d k %d scale %g offset %g: dlogits", n, k,
                     (double)cases[c].scale, (double)cases[c].offset);
            TRY(check_dev(be, what, d_d, dz, nk, TOL_LOSS, why, cap));
        }
        arena_pop(mark);
    }
    return 1;
}

/* g' = g + wd w; v = mu v + g'; w -= lr (nesterov ? g' + mu v : v); g := 0; with
 * stats, stats[WSQ] += sum w'^2 and stats[VSQ] += sum v'^2, the same bits
 * on the backend's every thread count, the other statistics untouched */
int check_sgd_step(const hcnn_backend *be, char *why, size_t cap)
{
    char what[128];
    static const size_t sizes[] = {1, 7, 1000, 20001};
    static const struct {
        float lr, mu, wd;
        int nesterov;
    } params[] = {
        {0.1f, 0.9f, 5e-4f, 0},
        {0.1f, 0.9f, 5e-4f, 1},
        {0.05f, 0.0f, 0.0f, 0},
        {0.2f, 0.5f, 0.0f, 1},
    };
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (size_t p = 0; p < sizeof params / sizeof *params; p++) {
            const int mark = arena_mark();
            const size_t n = sizes[s];
            ref_rng r = {121 + s * 4 + p};
            float *w = hrand(&r, n, -1, 1), *g = hrand(&r, n, -1, 1), *v = hrand(&r, n, -1, 1);
            double *w_want = hdvec(n), *v_want = hdvec(n);
            ref_sgd(w, g, v, n, params[p].lr, params[p].mu, params[p].wd, params[p].nesterov,
                    w_want, v_want);
            float *d_w = dnew(be, w, n), *d_g = dnew(be, g, n), *d_v = dnew(be, v, n);
            double *d_stats = stats_new(be), stats[HCNN_STATS];
            be->sgd_step(be, d_w, d_g, d_v, n, params[p].lr, params[p].mu, params[p].wd,
                         params[p].nesterov, d_stats);
            be->download(be, stats, d_stats, sizeof stats);
            double wsq = 0.0, vsq = 0.0;
            for (size_t i = 0; i < n; i++)
                wsq += w_want[i] * w_want[i], vsq += v_want[i] * v_want[i];
            snprintf(what, sizeof what, "sgd_step n %zu: the sums of squares of w and v", n);
            TRY(cmp_double(what, stats[HCNN_STAT_WSQ], stats0[HCNN_STAT_WSQ] + wsq, wsq, TOL_SUMSQ,
                           why, cap));
            TRY(cmp_double(what, stats[HCNN_STAT_VSQ], stats0[HCNN_STAT_VSQ] + vsq, vsq, TOL_SUMSQ,
                           why, cap));
            static const int touched[] = {HCNN_STAT_WSQ, HCNN_STAT_VSQ, -1};
            TRY(others_untouched(what, stats, touched, why, cap));
            for (int out = 0; out < 2; out++) {
                snprintf(what, sizeof what, "sgd_step n %zu lr %g mu %g wd %g nesterov %d: %s", n,
                         (double)params[p].lr, (double)params[p].mu, (double)params[p].wd,
                         params[p].nesterov, out ? "v" : "w");
                TRY(check_dev(be, what, out ? d_v : d_w, out ? v_want : w_want, n, TOL_SGD, why,
                              cap));
            }
            double *zeros = hdvec(n);
            for (size_t i = 0; i < n; i++)
                zeros[i] = 0.0;
            TRY(check_dev(be, "sgd_step's g (zeroed)", d_g, zeros, n, TOL_EXACT, why, cap));
            arena_pop(mark);
        }
    return 1;
}

/* stats[SUMSQ] += sum x^2, the other statistics untouched */
int check_sum_sq(const hcnn_backend *be, char *why, size_t cap)
{
    char what[96];
    static const size_t sizes[] = {1, 17, 1000, 70001, 300000};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const int mark = arena_mark();
        const size_t n = sizes[s];
        ref_rng r = {131 + s};
        float *x = hrand(&r, n, -1, 1);
        double ss = 0.0, stats[HCNN_STATS];
        for (size_t i = 0; i < n; i++)
            ss += (double)x[i] * x[i];
        float *d_x = dnew(be, x, n);
        double *d_stats = stats_new(be);
        be->sum_sq(be, d_x, n, d_stats);
        be->download(be, stats, d_stats, sizeof stats);
        snprintf(what, sizeof what, "sum_sq n %zu (accumulated)", n);
        TRY(cmp_double(what, stats[HCNN_STAT_SUMSQ], stats0[HCNN_STAT_SUMSQ] + ss, ss, TOL_SUMSQ,
                       why, cap));
        snprintf(what, sizeof what, "sum_sq n %zu: the other statistics", n);
        static const int touched[] = {HCNN_STAT_SUMSQ, -1};
        TRY(others_untouched(what, stats, touched, why, cap));
        arena_pop(mark);
    }
    return 1;
}

/* ---- threads, units, timers ---------------------------------------------------------------- */

static const int unit_ns[] = {1,  2,  3,   8,   15,  16,   31,   32,    33,
                              63, 64, 100, 128, 256, 1000, 4096, 100000};
#define NUNIT (sizeof unit_ns / sizeof *unit_ns)

typedef struct unit_probe {
    const hcnn_backend *be;
    int inside[NUNIT];
} unit_probe;

static void unit_thread(void *arg, int t, int nt)
{
    (void)nt;
    unit_probe *u = arg;
    if (t == 0)
        for (size_t i = 0; i < NUNIT; i++)
            u->inside[i] = u->be->unit_images(u->be, unit_ns[i]);
}

/* 0, or a unit making at most HCNN_MAX_UNITS units of n; the same for the same
 * n, inside be->parallel too (a size fixed by n, not by the threads) */
int check_unit_images(const hcnn_backend *be, char *why, size_t cap)
{
    unit_probe u = {be, {0}};
    be->parallel(be, unit_thread, &u);
    for (size_t i = 0; i < NUNIT; i++) {
        const int n = unit_ns[i], a = be->unit_images(be, n), b = be->unit_images(be, n);
        if (a < 0 || (a > 0 && (n + a - 1) / a > HCNN_MAX_UNITS))
            FAIL("unit_images(%d) = %d: %d units (at most %d)", n, a, a > 0 ? (n + a - 1) / a : -1,
                 HCNN_MAX_UNITS);
        if (a != b || a != u.inside[i])
            FAIL("unit_images(%d) = %d, then %d, and %d inside parallel", n, a, b, u.inside[i]);
    }
    note("unit_images", 0, 0, NUNIT);
    return 1;
}

#define MAX_THREADS 1024
typedef struct par_probe {
    const hcnn_backend *be;
    int runs[MAX_THREADS];
    int nt_seen[MAX_THREADS];
    int bad_t;
    const float *a, *b;
    float *y;
    size_t n;
} par_probe;

static void par_thread(void *arg, int t, int nt)
{
    par_probe *p = arg;
    if (t < 0 || t >= MAX_THREADS || nt < 1 || nt > MAX_THREADS) {
        __atomic_store_n(&p->bad_t, 1, __ATOMIC_RELAXED);
        return;
    }
    __atomic_fetch_add(&p->runs[t], 1, __ATOMIC_RELAXED);
    p->nt_seen[t] = nt;
    /* an operation on this thread's slice (operations run on the calling thread) */
    const size_t lo = p->n * (size_t)t / (size_t)nt, hi = p->n * (size_t)(t + 1) / (size_t)nt;
    p->be->add(p->be, p->a + lo, p->b + lo, p->y + lo, hi - lo);
}

/* threads() >= 1; parallel runs fn once on each of threads() threads, t = 0..nt-1 */
int check_parallel(const hcnn_backend *be, char *why, size_t cap)
{
    const int nt = be->threads(be);
    if (nt < 1 || nt > MAX_THREADS)
        FAIL("threads() = %d", nt);
    const size_t n = 10007;
    ref_rng r = {141};
    float *a = hrand(&r, n, -1, 1), *b = hrand(&r, n, -1, 1);
    double *want = hdvec(n);
    for (size_t i = 0; i < n; i++)
        want[i] = a[i] + b[i];
    for (int round = 0; round < 3; round++) {
        par_probe *p = host_bytes(sizeof *p);
        memset(p, 0, sizeof *p);
        p->be = be, p->n = n;
        p->a = dnew(be, a, n), p->b = dnew(be, b, n), p->y = dnan(be, n);
        be->parallel(be, par_thread, p);
        if (p->bad_t)
            FAIL("parallel: fn called with t or nt out of range");
        for (int t = 0; t < MAX_THREADS; t++) {
            const int want_runs = t < nt ? 1 : 0;
            if (p->runs[t] != want_runs)
                FAIL("parallel (threads() = %d): fn ran %d times with t = %d", nt, p->runs[t], t);
            if (t < nt && p->nt_seen[t] != nt)
                FAIL("parallel: thread %d was told nt = %d, threads() is %d", t, p->nt_seen[t], nt);
        }
        TRY(check_dev(be, "add on each thread's slice inside parallel", p->y, want, n, TOL_EXACT,
                      why, cap));
    }
    return 1;
}

/* timer_stop: seconds >= 0 of the work between start and stop */
int check_timer(const hcnn_backend *be, char *why, size_t cap)
{
    const int m = 256;
    ref_rng r = {151};
    float *a = dnew(be, hrand(&r, (size_t)m * m, -1, 1), (size_t)m * m);
    float *c = dvec(be, (size_t)m * m);
    for (int round = 0; round < 3; round++) {
        hcnn_timer t;
        memset(&t, 0, sizeof t);
        be->timer_start(be, &t);
        if (round > 0)
            be->gemm(be, 0, 0, m, m, m, 1.0f, a, m, a, m, 0.0f, c, m);
        const double s = be->timer_stop(be, &t);
        if (!(s >= 0.0) || !(s < 1000.0))
            FAIL("timer_stop returned %g seconds (round %d)", s, round);
    }
    note("timer", 0, 0, 0);
    return 1;
}
