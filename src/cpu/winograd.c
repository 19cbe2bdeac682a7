/* Winograd minimal filtering for 3x3 stride-1 convolutions (Lavin & Gray,
 * "Fast Algorithms for Convolutional Neural Networks", 2016): F(m x m, 3x3)
 * computes an m x m output tile from an a x a input tile (a = m + 2) with
 * a^2 multiplications instead of 9 m^2 (F(2x2,3x3): 2.25x fewer, F(4x4,3x3):
 * 4x).  Per tile d of input channel c and filter g of (co, c):
 *   U = G g G^T  [a][a]       V = B^T d B  [a][a]       Y = A^T (sum_c U . V) A
 * and with xi = (k, l) one of the a^2 tile positions, the channel sum is a
 * GEMM per position over all tiles T of a chunk of images:
 *   M[xi] = V[xi] U[xi]^T      [T][Cout] = [T][C] [C][Cout]
 * so the BLAS still does the heavy work (a^2 GEMMs of T x Cout x C for the
 * 9 of one im2col GEMM with m^2 T columns).
 * Backward, the chain rule through the forward's transforms, from
 *   dM = A dY A^T per output tile  [a][a]:
 *   input gradient (the forward's adjoint, with the forward's U):
 *     dV[xi] = dM[xi] U[xi]  [T][C] = [T][Cout] [Cout][C],
 *     dx += B dV B^T scattered back onto each tile's a x a input pixels
 *     (the tiles overlap by 2: added in a fixed tile order, an image's
 *     tiles by one thread);
 *   weight gradient:
 *     dU[xi] += dM[xi]^T V[xi]  [Cout][C],  dW += G^T dU G.
 * The weights' transform U is computed once per training step for a call
 * of few tiles (a layer's cache: hcnn_exec.weights_key), which the forward
 * and the input gradient share; else once per call.
 * Tiles past the output's edge read zeros (padding) and their outputs are
 * dropped; their dy is zero.
 *
 * Layout: an image goes channels-last first (one transpose), so that every
 * transform is a loop over contiguous channels, whatever the plane's size;
 * V and M are [a^2][T][channels], U and dU [a^2][Cout][C].  A transform is
 * applied one axis at a time (winograd_rows.c).  The work runs
 * in phases over a chunk of images (transform, GEMMs, inverse transform),
 * each phase's items fixed by the shape and split between threads, so that
 * who runs an item never changes its bits.  The chunk's images, the GEMMs'
 * tile and channel blocks depend on the layer's shape and n only: the same
 * bits on 1 thread or 64.  The measurements behind the constants are in
 * docs/performance.md, "Winograd".  Which layers take it, with which m,
 * is the convolution plan's choice (conv_plan.c), given here as m. */
#include <stdio.h>

#include "bf16.h"
#include "winograd.h"
#include "winograd_plan.h"
#include "winograd_rows.h"

/* ---- a call's state, shared by its threads ------------------------------- */

typedef struct wino_job {
    wino_shape s;
    const hcnn_exec *ctx;
    int n, nc;            /* images, images per chunk */
    const float *w;       /* the layer's weights [Cout][C][3][3] */
    const float *bias;    /* forward: the bias or NULL */
    const float *x;       /* forward: input planes (cin of them per image) */
    float *y;             /* forward: output planes (cout per image) */
    int acc;              /* forward, input gradient: add to y / dx */
    const float *dy;      /* gradients: dy (cout planes per image) */
    float *dx;            /* input gradient: dx (cin planes per image) */
    float *dw;            /* weight gradient: dw += */
    float *wt, *V, *M, *scratch, *seams;
    float *u;             /* the transformed weights U the GEMMs read (wt, or the cache's) */
    hcnn_bf16 *bf;        /* precision bf16: the GEMMs' inputs rounded (bf16.c); NULL: FP32 */
    int transform;        /* 1: this call computes U into u */
} wino_job;

static void job_layout(wino_job *j)
{
    const size_t T = (size_t)j->nc * j->s.tiles, a2 = (size_t)j->s.a * j->s.a;
    j->wt = j->ctx->ws;
    j->V = j->wt + wino_weights_floats(&j->s);
    j->M = j->V + hcnn_round_up16(a2 * j->s.cin * T);
    j->scratch = j->M + hcnn_round_up16(a2 * j->s.cout * T);
    j->seams = j->scratch + (size_t)hcnn_cpu_threads(NULL) * hcnn_wino_scratch_floats(&j->s);
}

static void poll(const wino_job *j, int t)
{
    if (t == 0 && j->ctx->poll) /* only thread 0 drives communication */
        j->ctx->poll(j->ctx->poll_arg);
}

#define RANGE(count, t, nt, lo, hi)                                                               \
    const long lo = (long)(count) * (t) / (nt), hi = (long)(count) * ((t) + 1) / (nt)

/* ---- the weight transforms (their pieces: winograd_plan.c) --------------- */

/* U[xi][co][c] = G g G^T for output channel co, input channels [c0, c1)
 * (g the filter of (co, c)), into j->u.  sc: 9 + 3a rows of cin floats. */
static void weights_row(const wino_job *j, int co, int c0, int c1, float *sc)
{
    const wino_shape *s = &j->s;
    const int a = s->a, C = c1 - c0;
    const size_t mc = hcnn_round_up16((size_t)wino_max_channels(s));
    float *g[9], *t[18];
    for (int i = 0; i < 9; i++)
        g[i] = sc + (size_t)i * mc;
    for (int i = 0; i < 3 * a; i++)
        t[i] = sc + (size_t)(9 + i) * mc;
    for (int c = 0; c < C; c++) /* gather the 9 taps of each filter as rows */
        for (int i = 0; i < 9; i++)
            g[i][c] = j->w[((size_t)co * s->cin + c0 + c) * 9 + i];
    for (int q = 0; q < 3; q++) { /* along i: t[k*3 + q] = (G g)[k][q] */
        const float *in[3] = {g[q], g[3 + q], g[6 + q]};
        float *out[6];
        for (int k = 0; k < a; k++)
            out[k] = t[k * 3 + q];
        hcnn_wino_g_rows(s->m, in, out, C);
    }
    for (int k = 0; k < a; k++) { /* along j: into U[k*a + l][co] */
        const float *in[3] = {t[k * 3], t[k * 3 + 1], t[k * 3 + 2]};
        float *out[6];
        for (int l = 0; l < a; l++)
            out[l] = j->u + ((size_t)(k * a + l) * s->cout + co) * s->cin + c0;
        hcnn_wino_g_rows(s->m, in, out, C);
    }
}

/* dw[co][c] += G^T dU G, input channels [c0, c1).  sc: 3a + 9 rows of
 * cin floats. */
static void weight_grad_row(const wino_job *j, int co, int c0, int c1, float *sc)
{
    const wino_shape *s = &j->s;
    const int a = s->a, C = c1 - c0;
    const size_t mc = hcnn_round_up16((size_t)wino_max_channels(s));
    float *t[18], *r[9];
    for (int i = 0; i < 3 * a; i++)
        t[i] = sc + (size_t)i * mc;
    for (int i = 0; i < 9; i++)
        r[i] = sc + (size_t)(3 * a + i) * mc;
    for (int k = 0; k < a; k++) { /* along l: t[k*3 + q] */
        const float *in[6];
        for (int l = 0; l < a; l++)
            in[l] = j->wt + ((size_t)(k * a + l) * s->cout + co) * s->cin + c0;
        float *out[3] = {t[k * 3], t[k * 3 + 1], t[k * 3 + 2]};
        hcnn_wino_gt_rows(s->m, in, out, C);
    }
    for (int q = 0; q < 3; q++) { /* along k: r[i*3 + q] */
        const float *in[6];
        for (int k = 0; k < a; k++)
            in[k] = t[k * 3 + q];
        float *out[3] = {r[q], r[3 + q], r[6 + q]};
        hcnn_wino_gt_rows(s->m, in, out, C);
    }
    float *dw = j->dw + ((size_t)co * s->cin + c0) * 9;
    for (int c = 0; c < C; c++)
        for (int i = 0; i < 9; i++)
            dw[(size_t)c * 9 + i] += r[i][c];
}

/* ---- the transforms of images -------------------------------------------- */
/* A piece of an image goes channels-last first (one transpose), so that
 * every tile's transform runs over rows of channels: contiguous vectors,
 * whatever the plane's size. */

typedef struct wino_scratch {
    float *img, *img2, *tmp, *zero, *junk, *rows;
} wino_scratch;

static wino_scratch scratch_of(const wino_job *j, int t)
{
    const wino_shape *s = &j->s;
    const size_t mc = hcnn_round_up16((size_t)wino_max_channels(s));
    wino_scratch w;
    w.img = j->scratch + (size_t)t * hcnn_wino_scratch_floats(s);
    w.img2 = w.img + wino_image_floats(s);
    w.tmp = w.img2 + wino_image_floats(s);
    w.zero = w.tmp + (size_t)s->a * s->a * mc;
    w.junk = w.zero + mc;
    w.rows = w.junk + mc;
    return w;
}

typedef void (*rows_fn)(int m, ROWS_DECL);

/* out[xi][t0 + tile][c0 + c] = T d T^T for the tiles of rows [ty0, ty1) of
 * an image's C planes (h x w pixels, padding py, px) `planes`, channels
 * [c0, c1): the tile at (ty, tx) is the n x n pixels from (ty*m - py,
 * tx*m - px), zero outside the image; T, n inputs -> a outputs, is fn
 * (along i, then along j); out's rows hold ld channels. */
static void transform_tiles(const wino_job *j, const float *planes, int h, int w, int py, int px,
                            int n, rows_fn fn, float *out, size_t ld, const wino_piece *pc,
                            const wino_scratch *sc)
{
    const wino_shape *s = &j->s;
    const int m = s->m, a = s->a, C = pc->c1 - pc->c0;
    const size_t T = (size_t)j->nc * s->tiles, mc = hcnn_round_up16((size_t)wino_max_channels(s));
    /* the image rows the band's tiles read, channels-last */
    const int r0 = pc->ty0 * m - py > 0 ? pc->ty0 * m - py : 0;
    const int r1 = (pc->ty1 - 1) * m - py + n < h ? (pc->ty1 - 1) * m - py + n : h;
    const float *img = sc->img;
    if (r1 > r0)
        hcnn_cpu_transpose_ld(planes + (size_t)pc->c0 * h * w + (size_t)r0 * w, (size_t)h * w, C,
                              (r1 - r0) * w, sc->img, (size_t)C);
    zero_floats(sc->zero, C);
    for (int ty = pc->ty0; ty < pc->ty1; ty++)
        for (int tx = 0; tx < s->ntx; tx++) {
            const size_t t = pc->t0 + (size_t)ty * s->ntx + tx;
            for (int jj = 0; jj < n; jj++) { /* along i, column jj of the tile */
                const int ix = tx * m - px + jj;
                const float *in[6];
                float *o[6];
                for (int i = 0; i < n; i++) {
                    const int iy = ty * m - py + i;
                    in[i] = iy >= r0 && iy < r1 && ix >= 0 && ix < w
                                ? img + ((size_t)(iy - r0) * w + ix) * C
                                : sc->zero;
                }
                for (int k = 0; k < a; k++)
                    o[k] = sc->tmp + (size_t)(k * a + jj) * mc;
                fn(m, in, o, C);
            }
            for (int k = 0; k < a; k++) { /* along j, into out */
                const float *in[6];
                float *o[6];
                for (int jj = 0; jj < n; jj++)
                    in[jj] = sc->tmp + (size_t)(k * a + jj) * mc;
                for (int l = 0; l < a; l++)
                    o[l] = out + ((size_t)(k * a + l) * T + t) * ld + pc->c0;
                fn(m, in, o, C);
            }
        }
}

/* V[xi][t0 + tile][c] = B^T d B for the piece's tiles of image x (cin planes) */
static void input_image(const wino_job *j, const float *x, const wino_piece *pc,
                        const wino_scratch *w)
{
    const wino_shape *s = &j->s;
    transform_tiles(j, x, s->h, s->w, s->ph, s->pw, s->a, hcnn_wino_bt_rows, j->V,
                    (size_t)s->cin, pc, w);
}

/* dM[xi][t0 + tile][co] = A dY A^T for the piece's tiles of image dy (cout
 * planes), zero past the output's edge */
static void dy_image(const wino_job *j, const float *dy, const wino_piece *pc,
                     const wino_scratch *w)
{
    const wino_shape *s = &j->s;
    transform_tiles(j, dy, s->oh, s->ow, 0, 0, s->m, hcnn_wino_a_rows, j->M, (size_t)s->cout, pc,
                    w);
}

/* The batch-norm statistics of the piece's output rows [oy0, oy1) of
 * image y, just written (backend.h, hcnn_bn_stats: bands of a tile row,
 * set up by the caller). */
static void output_stats(const wino_job *j, const float *y, const wino_piece *pc, int oy0,
                         int oy1)
{
    const hcnn_bn_stats *st = j->ctx->stats;
    if (!st || !st->bands)
        return;
    const wino_shape *s = &j->s;
    const size_t out_sz = (size_t)s->cout * s->oh * s->ow, image = (size_t)(y - j->y) / out_sz;
    hcnn_cpu_bn_stats_rows(st, y, (size_t)s->oh * s->ow, s->ow, pc->c0, pc->c1, oy0, oy1 - oy0,
                           st->part + image * s->cout * st->bands * 2);
}

/* The piece's output rows of image y (cout planes) from M: Y = A^T M A per
 * tile, channels-last, then back to planes, plus the bias, written or
 * added. */
static void output_image(const wino_job *j, float *y, const wino_piece *pc, const wino_scratch *w)
{
    const wino_shape *s = &j->s;
    const int m = s->m, a = s->a, C = pc->c1 - pc->c0, ld = s->cout;
    const size_t T = (size_t)j->nc * s->tiles, mc = hcnn_round_up16((size_t)wino_max_channels(s));
    const size_t P = (size_t)s->oh * s->ow;
    const int oy0 = pc->ty0 * m, oy1 = pc->ty1 * m < s->oh ? pc->ty1 * m : s->oh;
    const int px = (oy1 - oy0) * s->ow; /* the band's pixels */
    for (int ty = pc->ty0; ty < pc->ty1; ty++)
        for (int tx = 0; tx < s->ntx; tx++) {
            const size_t t = pc->t0 + (size_t)ty * s->ntx + tx;
            for (int l = 0; l < a; l++) { /* along k, column l */
                const float *in[6];
                float *out[4];
                for (int k = 0; k < a; k++)
                    in[k] = j->M + ((size_t)(k * a + l) * T + t) * ld + pc->c0;
                for (int r = 0; r < m; r++)
                    out[r] = w->tmp + (size_t)(r * a + l) * mc;
                hcnn_wino_at_rows(m, in, out, C);
            }
            for (int r = 0; r < m; r++) { /* along l, into the band (or junk) */
                const int oy = ty * m + r;
                const float *in[6];
                float *out[4];
                for (int l = 0; l < a; l++)
                    in[l] = w->tmp + (size_t)(r * a + l) * mc;
                for (int q = 0; q < m; q++) {
                    const int ox = tx * m + q;
                    out[q] = oy < s->oh && ox < s->ow
                                 ? w->img + ((size_t)(oy - oy0) * s->ow + ox) * C
                                 : w->junk;
                }
                hcnn_wino_at_rows(m, in, out, C);
            }
        }
    float *dst = y + (size_t)pc->c0 * P + (size_t)oy0 * s->ow;
    if (!j->acc && !j->bias) {
        hcnn_cpu_transpose_ld(w->img, (size_t)C, px, C, dst, P);
        output_stats(j, y, pc, oy0, oy1);
        return;
    }
    hcnn_cpu_transpose_ld(w->img, (size_t)C, px, C, w->img2, (size_t)px);
    for (int co = 0; co < C; co++) {
        const float b = j->bias ? j->bias[pc->c0 + co] : 0.0f, *src = w->img2 + (size_t)co * px;
        float *d = dst + (size_t)co * P;
        if (j->acc)
            for (int p = 0; p < px; p++)
                d[p] += src[p] + b;
        else
            for (int p = 0; p < px; p++)
                d[p] = src[p] + b;
    }
    output_stats(j, y, pc, oy0, oy1);
}

/* the seam rows of the piece's (image, band) in the chunk, from its
 * channel c0: [C][a - m rows][w], a band known by its first tile row */
static float *seam_of(const wino_job *j, const wino_piece *pc)
{
    const wino_shape *s = &j->s;
    const size_t slot = (size_t)(pc->t0 / (size_t)s->tiles) * (size_t)s->nty + (size_t)pc->ty0;
    return j->seams + (slot * s->cin + (size_t)pc->c0) * (size_t)(s->a - s->m) * s->w;
}

/* The piece's channels and band of dx image (cin planes) from dV: dd = B dV
 * B^T per tile, added onto the tile's a x a input pixels (those inside the
 * image: the rest is padding) of a channels-last copy of the band's rows,
 * tiles in order; then the rows below the seam written or added to the
 * planes, the seam's kept for dx_seams. */
static void input_grad_image(const wino_job *j, float *dx, const wino_piece *pc,
                             const wino_scratch *w)
{
    const wino_shape *s = &j->s;
    const int m = s->m, a = s->a, C = pc->c1 - pc->c0, ld = s->cin;
    const size_t T = (size_t)j->nc * s->tiles, mc = hcnn_round_up16((size_t)wino_max_channels(s));
    const size_t P = (size_t)s->h * s->w;
    const band_rows br = hcnn_wino_band_rows(s, pc->ty0, pc->ty1);
    if (br.r1 <= br.r0)
        return;
    zero_floats(w->img, (int)((size_t)(br.r1 - br.r0) * s->w * (size_t)C));
    for (int ty = pc->ty0; ty < pc->ty1; ty++)
        for (int tx = 0; tx < s->ntx; tx++) {
            const size_t t = pc->t0 + (size_t)ty * s->ntx + tx;
            for (int l = 0; l < a; l++) { /* along k, column l */
                const float *in[6];
                float *out[6];
                for (int k = 0; k < a; k++) {
                    in[k] = j->V + ((size_t)(k * a + l) * T + t) * ld + pc->c0;
                    out[k] = w->tmp + (size_t)(k * a + l) * mc;
                }
                hcnn_wino_b_rows(m, in, out, C);
            }
            for (int i = 0; i < a; i++) { /* along l, row i, onto the band */
                const int iy = ty * m - s->ph + i;
                if (iy < br.r0 || iy >= br.r1)
                    continue;
                const float *in[6];
                float *out[6];
                for (int l = 0; l < a; l++) {
                    in[l] = w->tmp + (size_t)(i * a + l) * mc;
                    out[l] = w->rows + (size_t)l * mc;
                }
                hcnn_wino_b_rows(m, in, out, C);
                for (int jj = 0; jj < a; jj++) {
                    const int ix = tx * m - s->pw + jj;
                    if (ix < 0 || ix >= s->w)
                        continue;
                    float *dst = w->img + ((size_t)(iy - br.r0) * s->w + ix) * C;
                    const float *src = w->rows + (size_t)jj * mc;
                    for (int c = 0; c < C; c++)
                        dst[c] += src[c];
                }
            }
        }
    if (br.seam > 0) /* [seam rows][w][C] -> [C][seam rows * w] */
        hcnn_cpu_transpose_ld(w->img, (size_t)C, br.seam * s->w, C, seam_of(j, pc),
                              (size_t)(a - m) * s->w);
    const int px = (br.r1 - br.r0 - br.seam) * s->w; /* the band's own pixels */
    if (px <= 0)
        return;
    const float *img = w->img + (size_t)br.seam * s->w * C;
    float *d = dx + (size_t)pc->c0 * P + (size_t)(br.r0 + br.seam) * s->w;
    if (!j->acc) {
        hcnn_cpu_transpose_ld(img, (size_t)C, px, C, d, P);
        return;
    }
    hcnn_cpu_transpose_ld(img, (size_t)C, px, C, w->img2, (size_t)px);
    for (int c = 0; c < C; c++)
        hcnn_cpu_add_acc(NULL, w->img2 + (size_t)c * px, d + (size_t)c * P, (size_t)px);
}

/* After every band of the chunk has been written: each band's seam added
 * onto the rows the band above wrote. */
static void input_grad_seam(const wino_job *j, float *dx, const wino_piece *pc)
{
    const wino_shape *s = &j->s;
    const band_rows br = hcnn_wino_band_rows(s, pc->ty0, pc->ty1);
    if (br.seam <= 0)
        return;
    const size_t P = (size_t)s->h * s->w, px = (size_t)br.seam * s->w;
    const float *seam = seam_of(j, pc);
    for (int c = 0; c < pc->c1 - pc->c0; c++)
        hcnn_cpu_add_acc(NULL, seam + (size_t)c * (size_t)(s->a - s->m) * s->w,
                         dx + (size_t)(pc->c0 + c) * P + (size_t)br.r0 * s->w, px);
}

/* ---- the phases (their items: winograd_plan.c) --------------------------- */

/* One item of the forward's GEMMs: M[xi][tiles] = V[xi][tiles] U[xi]^T. */
static void gemm_item(const wino_job *j, size_t T, size_t cols, wino_blocks b, int item)
{
    const wino_shape *s = &j->s;
    const wino_item it = hcnn_wino_item(b, cols, (size_t)s->cout, item);
    hcnn_cpu_gemm_mixed(j->bf, HCNN_PIECES_MANY, 0, 1, (int)(it.r1 - it.r0), (int)(it.c1 - it.c0),
                        s->cin, 1.0f,
                        j->V + ((size_t)it.xi * T + it.r0) * s->cin, NULL, s->cin,
                        j->u + ((size_t)it.xi * s->cout + it.c0) * s->cin, NULL, s->cin, 0.0f,
                        j->M + ((size_t)it.xi * T + it.r0) * s->cout + it.c0, s->cout);
}

/* ... the input gradient's: dV[xi][tiles] = dM[xi][tiles] U[xi]. */
static void dx_gemm_item(const wino_job *j, size_t T, size_t cols, wino_blocks b, int item)
{
    const wino_shape *s = &j->s;
    const wino_item it = hcnn_wino_item(b, cols, (size_t)s->cin, item);
    hcnn_cpu_gemm_mixed(j->bf, HCNN_PIECES_MANY, 0, 0, (int)(it.r1 - it.r0), (int)(it.c1 - it.c0),
                        s->cout, 1.0f,
                        j->M + ((size_t)it.xi * T + it.r0) * s->cout, NULL, s->cout,
                        j->u + (size_t)it.xi * s->cout * s->cin + it.c0, NULL, s->cin, 0.0f,
                        j->V + ((size_t)it.xi * T + it.r0) * s->cin + it.c0, s->cin);
}

/* ... the weight gradient's: dU[xi] (+)= dM[xi]^T V[xi]. */
static void dw_gemm_item(const wino_job *j, size_t T, size_t cols, wino_blocks b, int item,
                         float beta)
{
    const wino_shape *s = &j->s;
    const wino_item it = hcnn_wino_item(b, (size_t)s->cout, (size_t)s->cin, item);
    hcnn_cpu_gemm_mixed(j->bf, HCNN_PIECES_MANY, 1, 0, (int)(it.r1 - it.r0), (int)(it.c1 - it.c0),
                        (int)cols, 1.0f,
                        j->M + (size_t)it.xi * T * s->cout + it.r0, NULL, s->cout,
                        j->V + (size_t)it.xi * T * s->cin + it.c0, NULL, s->cin, beta,
                        j->wt + ((size_t)it.xi * s->cout + it.r0) * s->cin + it.c0, s->cin);
}

/* The forward (Y = A^T [U V] A) and the input gradient (dM = A dY A^T,
 * dV = dM U, scattered back) share one shape of work: transform each image's
 * tiles, one GEMM per tile element, scatter the results back into images,
 * each phase in pieces (hcnn_wino_split).  U is transformed first unless this
 * step's forward left it in the layer's cache. */
typedef struct {
    void (*tiles)(const wino_job *, const float *, const wino_piece *, const wino_scratch *);
    void (*gemm)(const wino_job *, size_t, size_t, wino_blocks, int);
    wino_blocks (*blocks)(const wino_shape *, size_t, int);
    void (*scatter)(const wino_job *, float *, const wino_piece *, const wino_scratch *);
    const float *src;
    size_t src_sz;
    int src_c;
    float *dst;
    size_t dst_sz;
    int dst_c, dst_banded;
    /* the input gradient: its scatter's seams, added once all bands are written */
    void (*seam)(const wino_job *, float *, const wino_piece *);
} wino_pass;

static void pass_thread(const wino_job *j, const wino_pass *p, int t, int nt)
{
    const wino_shape *s = &j->s;
    const wino_scratch w = scratch_of(j, t);
    if (j->transform) {
        const int cb = hcnn_wino_weight_blocks(s, nt);
        RANGE((long)s->cout * cb, t, nt, a, b);
        for (long k = a; k < b; k++) {
            int co, c0, c1;
            hcnn_wino_weight_piece(s, cb, k, &co, &c0, &c1);
            weights_row(j, co, c0, c1, w.img);
        }
    }
    for (int i0 = 0; i0 < j->n; i0 += j->nc) {
        const int nb = j->n - i0 < j->nc ? j->n - i0 : j->nc;
        const size_t T = (size_t)j->nc * s->tiles, cols = (size_t)nb * s->tiles;
        {
            const wino_split sp = hcnn_wino_split(p->src_c, s->nty, nb, nt, 1);
            RANGE((long)nb * sp.cblocks * sp.bands, t, nt, a, b);
            for (long k = a; k < b; k++) {
                const wino_piece pc = hcnn_wino_piece(s, sp, p->src_c, k);
                p->tiles(j, p->src + (size_t)(i0 + pc.image) * p->src_sz, &pc, &w);
                poll(j, t);
            }
        }
#pragma omp barrier
        {
            const wino_blocks bl = p->blocks(s, cols, hcnn_pieces_for(j->n));
            RANGE(hcnn_wino_blocks_items(s, bl), t, nt, a, b);
            for (long it = a; it < b; it++) {
                p->gemm(j, T, cols, bl, (int)it);
                poll(j, t);
            }
        }
#pragma omp barrier
        wino_split sp = hcnn_wino_split(p->dst_c, s->nty, nb, nt, p->dst_banded);
        if (p->seam)
            sp.bands = hcnn_wino_dx_bands(s, nb, hcnn_pieces_for(j->n));
        RANGE((long)nb * sp.cblocks * sp.bands, t, nt, a, b);
        for (long k = a; k < b; k++) {
            const wino_piece pc = hcnn_wino_piece(s, sp, p->dst_c, k);
            p->scatter(j, p->dst + (size_t)(i0 + pc.image) * p->dst_sz, &pc, &w);
            poll(j, t);
        }
#pragma omp barrier
        if (p->seam && sp.bands > 1) {
            for (long k = a; k < b; k++) {
                const wino_piece pc = hcnn_wino_piece(s, sp, p->dst_c, k);
                p->seam(j, p->dst + (size_t)(i0 + pc.image) * p->dst_sz, &pc);
            }
#pragma omp barrier
        }
    }
}

static void forward_thread(void *arg, int t, int nt)
{
    const wino_job *j = arg;
    const wino_shape *s = &j->s;
    const size_t in_sz = (size_t)s->cin * s->h * s->w, out_sz = (size_t)s->cout * s->oh * s->ow;
    const wino_pass p = {input_image, gemm_item, hcnn_wino_fwd_blocks, output_image,
                         j->x,        in_sz,     s->cin,               j->y,
                         out_sz,      s->cout,   1,                    NULL};
    pass_thread(j, &p, t, nt);
}

static void input_grad_thread(void *arg, int t, int nt)
{
    const wino_job *j = arg;
    const wino_shape *s = &j->s;
    const size_t in_sz = (size_t)s->cin * s->h * s->w, out_sz = (size_t)s->cout * s->oh * s->ow;
    const wino_pass p = {dy_image, dx_gemm_item, hcnn_wino_dx_blocks, input_grad_image,
                         j->dy,    out_sz,       s->cout,             j->dx,
                         in_sz,    s->cin,       0,                   input_grad_seam};
    pass_thread(j, &p, t, nt);
}

static void weight_grad_thread(void *arg, int t, int nt)
{
    const wino_job *j = arg;
    const wino_shape *s = &j->s;
    const size_t in_sz = (size_t)s->cin * s->h * s->w, out_sz = (size_t)s->cout * s->oh * s->ow;
    const wino_scratch w = scratch_of(j, t);
    for (int i0 = 0; i0 < j->n; i0 += j->nc) {
        const int nb = j->n - i0 < j->nc ? j->n - i0 : j->nc;
        const size_t T = (size_t)j->nc * s->tiles, cols = (size_t)nb * s->tiles;
        {
            /* x's pieces (cin channels), then dy's (cout), of the chunk's images */
            const wino_split sx = hcnn_wino_split(s->cin, s->nty, nb, nt, 1);
            const wino_split sd = hcnn_wino_split(s->cout, s->nty, nb, nt, 1);
            const long nx = (long)nb * sx.cblocks * sx.bands;
            RANGE(nx + (long)nb * sd.cblocks * sd.bands, t, nt, a, b);
            for (long k = a; k < b; k++) {
                if (k < nx) {
                    const wino_piece pc = hcnn_wino_piece(s, sx, s->cin, k);
                    input_image(j, j->x + (size_t)(i0 + pc.image) * in_sz, &pc, &w);
                } else {
                    const wino_piece pc = hcnn_wino_piece(s, sd, s->cout, k - nx);
                    dy_image(j, j->dy + (size_t)(i0 + pc.image) * out_sz, &pc, &w);
                }
                poll(j, t);
            }
        }
#pragma omp barrier
        {
            const wino_blocks bl = hcnn_wino_dw_blocks(s, cols, hcnn_pieces_for(j->n));
            RANGE(hcnn_wino_blocks_items(s, bl), t, nt, a, b);
            for (long it = a; it < b; it++) {
                dw_gemm_item(j, T, cols, bl, (int)it, i0 == 0 ? 0.0f : 1.0f);
                poll(j, t);
            }
        }
#pragma omp barrier
    }
    const int cb = hcnn_wino_weight_blocks(s, nt);
    RANGE((long)s->cout * cb, t, nt, a, b);
    for (long k = a; k < b; k++) {
        int co, c0, c1;
        hcnn_wino_weight_piece(s, cb, k, &co, &c0, &c1);
        weight_grad_row(j, co, c0, c1, w.img);
    }
}

/* ---- the operations, and the transformed weights a step keeps ------------ */

/* A call of fewer tiles than this keeps U in the layer's cache for the
 * other calls of its training step (the forward's transform serves the
 * input gradient); a call of more transforms per call, and keeps nothing:
 * its transform is a small share of its work, and the cache would hold
 * every such layer's U (ResNet-18 at batch 128: 148 MB).  ResNet-18 on 2
 * threads, the weights' transforms skipped altogether (wrong results, to
 * time them): batch 8 124 -> 138 images/s, batch 2 82 -> 87
 * (docs/performance.md, "Convolutions at small batches"). */
#define WINO_CACHE_TILES 64

typedef struct wino_cache {
    float *u;
    size_t floats;
    int m;
    uint64_t key; /* the weights_key U was computed for; 0: none */
} wino_cache;

static void cache_release(void *data)
{
    wino_cache *c = data;
    if (c)
        hcnn_free(c->u);
    hcnn_free(c);
}

/* Where the call's U comes from: j->u and whether the call computes it
 * (j->transform): the layer's cache, computed by this call or by an earlier
 * one of the step; else the workspace. */
static int prepare_weights(wino_job *j, const hcnn_conv_desc *l)
{
    j->u = j->wt;
    j->transform = 1;
    hcnn_conv_cache *cc = l->cache;
    if (!cc || !j->ctx->weights_key || (long)j->n * j->s.tiles >= WINO_CACHE_TILES) {
        if (cc)
            cc->transforms++;
        return HCNN_OK;
    }
    wino_cache *c = cc->data;
    if (!c) {
        if (!(c = hcnn_calloc(sizeof *c, "a layer's Winograd cache")))
            return HCNN_ENOMEM;
        cc->data = c;
        cc->release = cache_release;
    }
    const size_t need = wino_weights_floats(&j->s);
    if (c->m != j->s.m || c->floats < need) {
        hcnn_free(c->u);
        c->floats = 0, c->key = 0;
        if (!(c->u = hcnn_alloc(sizeof(float) * need, "a layer's transformed weights")))
            return HCNN_ENOMEM;
        c->floats = need, c->m = j->s.m;
    }
    j->u = c->u;
    if (c->key == j->ctx->weights_key) {
        j->transform = 0;
        return HCNN_OK;
    }
    c->key = j->ctx->weights_key; /* computed by this call, whole, before it returns */
    cc->transforms++;
    return HCNN_OK;
}

static int run(wino_job *j, const hcnn_conv_desc *l, int weights,
               void (*fn)(void *, int, int))
{
    const int nt = hcnn_cpu_threads(NULL);
    j->nc = hcnn_wino_chunk_images(&j->s, j->ctx, j->n);
    job_layout(j);
    if (hcnn_wino_call_floats(&j->s, j->nc, nt) > j->ctx->ws_floats)
        return hcnn_error("Winograd convolution F(%dx%d) of %d x %d x %d -> %d channels on %d "
                          "images: workspace of %zu floats, %zu needed",
                          j->s.m, j->s.m, j->s.cin, j->s.h, j->s.w, j->s.cout, j->n,
                          j->ctx->ws_floats, hcnn_wino_call_floats(&j->s, j->nc, nt));
    if (weights) {
        const int rc = prepare_weights(j, l);
        if (rc)
            return rc;
    }
    hcnn_cpu_parallel(NULL, fn, j);
    return HCNN_OK;
}

int hcnn_wino_fwd(const hcnn_conv_desc *l, const hcnn_exec *ctx, hcnn_bf16 *bf, int m,
                  const float *x, const float *w, const float *b, float *y, int n)
{
    wino_job j = {.s = hcnn_wino_shape(l, m), .ctx = ctx, .n = n, .w = w, .bias = b, .x = x, .y = y,
                  .bf = bf};
    return run(&j, l, 1, forward_thread);
}

int hcnn_wino_bwd_data(const hcnn_conv_desc *l, const hcnn_exec *ctx, hcnn_bf16 *bf, int m,
                       const float *w, const float *dy, float *dx, int dx_acc, int n)
{
    wino_job j = {.s = hcnn_wino_shape(l, m), .ctx = ctx, .n = n, .w = w, .dy = dy, .dx = dx,
                  .acc = dx_acc, .bf = bf};
    return run(&j, l, 1, input_grad_thread);
}

int hcnn_wino_bwd_filter(const hcnn_conv_desc *l, const hcnn_exec *ctx, hcnn_bf16 *bf, int m,
                         const float *x, const float *dy, float *dw, int n)
{
    wino_job j = {.s = hcnn_wino_shape(l, m), .ctx = ctx, .n = n, .x = x, .dy = dy, .dw = dw,
                  .bf = bf};
    return run(&j, l, 0, weight_grad_thread);
}
