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
#include "winograd_rows.h"

/* ---- the shape of one Winograd convolution ------------------------------ */

/* A stride-1 3x3 convolution of cin planes h x w (padding ph, pw) into cout
 * planes oh x ow, in tiles of m x m outputs. */
typedef struct wino_shape {
    int cin, h, w, ph, pw;
    int cout, oh, ow;
    int m, a, ntx, nty, tiles; /* tiles across, down, per image */
} wino_shape;

static wino_shape shape_of(int cin, int h, int w, int ph, int pw, int cout, int oh, int ow, int m)
{
    wino_shape s = {cin, h, w, ph, pw, cout, oh, ow, m, m + 2, 0, 0, 0};
    s.ntx = (ow + m - 1) / m;
    s.nty = (oh + m - 1) / m;
    s.tiles = s.ntx * s.nty;
    return s;
}

static wino_shape forward_shape(const hcnn_conv_desc *l, int m)
{
    const hcnn_conv_geom *g = &l->g;
    return shape_of(g->c, g->h, g->w, g->ph, g->pw, l->out_c, g->oh, g->ow, m);
}

static int max_channels(const wino_shape *s) { return s->cin > s->cout ? s->cin : s->cout; }

/* A thread's scratch: one image channels-last, one output image twice
 * (channels-last, then planes), a tile's a^2 rows of channels, a row of
 * zeros, a row for outputs past the edge and a tile row's a rows (the
 * input gradient's scatter); or the weight transforms' 9 + 3a rows of
 * channels. */
static size_t image_floats(const wino_shape *s)
{
    const size_t in = (size_t)s->cin * s->h * s->w, out = (size_t)s->cout * s->oh * s->ow;
    return hcnn_round_up16(in > out ? in : out);
}

static size_t scratch_floats(const wino_shape *s)
{
    const size_t mc = hcnn_round_up16((size_t)max_channels(s));
    const size_t planes = 2 * image_floats(s) + ((size_t)s->a * s->a + 2 + s->a) * mc;
    const size_t weights = (size_t)(9 + 3 * s->a) * mc;
    return planes > weights ? planes : weights;
}

/* ---- the plan of a call ------------------------------------------------- */

/* Floats of V and M per chunk of images: at least WINO_CHUNK_FLOATS, or as
 * many as the transformed weights (which every chunk's GEMMs read again),
 * at most im2col_mb.  4M floats (16 MB), forward + both gradients of 64
 * images on 2 threads, ms, chunks of 1M / 4M / 16M floats: 64 -> 64
 * channels on 32 x 32, 63 / 52 / 82-90; 128 on 16 x 16 45 / 38-50 / 43;
 * 256 on 8 x 8 41-44 / 42-44 / 41-44 (docs/performance.md, "Winograd"). */
#define WINO_CHUNK_FLOATS ((size_t)1 << 22)

static size_t tile_floats(const wino_shape *s)
{
    return (size_t)s->a * s->a * ((size_t)s->cin + s->cout) * s->tiles;
}

static size_t weights_floats(const wino_shape *s)
{
    return hcnn_round_up16((size_t)s->a * s->a * s->cout * s->cin);
}

/* Images per chunk: as many as the floats allow, then spread evenly over
 * the chunks the call needs (8 images under a cap of 7 go as 4 + 4, not
 * 7 + 1: a one-image chunk's phases offer the threads a seventh of the
 * pieces). */
static size_t chunk_cap(const wino_shape *s, const hcnn_exec *ctx)
{
    size_t cap = WINO_CHUNK_FLOATS > weights_floats(s) ? WINO_CHUNK_FLOATS : weights_floats(s);
    cap = cap < ctx->max_chunk_floats ? cap : ctx->max_chunk_floats;
    const size_t nc = cap / tile_floats(s);
    return nc < 1 ? 1 : nc;
}

static int chunk_images(const wino_shape *s, const hcnn_exec *ctx, int n)
{
    const size_t nc = chunk_cap(s, ctx);
    if (n <= 0)
        return 1;
    if ((size_t)n <= nc)
        return n;
    const size_t chunks = ((size_t)n + nc - 1) / nc;
    return (int)(((size_t)n + chunks - 1) / chunks);
}

/* The largest chunk of any call on up to n images.  Not chunk_images(n):
 * evened out, 64 images under a cap of 40 go as 32 + 32, but a call on 40
 * takes them in one chunk. */
static int chunk_images_most(const wino_shape *s, const hcnn_exec *ctx, int n)
{
    const size_t nc = chunk_cap(s, ctx);
    return n <= 0 ? 1 : (size_t)n < nc ? n : (int)nc;
}

/* The input gradient's seams: the a - m input rows a band of tile rows
 * shares with the band above, kept apart for each (image, band, channel)
 * until the bands have been written (at most every tile row a band). */
static size_t seam_floats(const wino_shape *s, int nc)
{
    return hcnn_round_up16((size_t)nc * s->nty * (s->a - s->m) * s->w * s->cin);
}

/* [U or dU][V][M][nt scratch][seams] for chunks of nc images */
static size_t call_floats(const wino_shape *s, int nc, int nt)
{
    const size_t T = (size_t)nc * s->tiles, a2 = (size_t)s->a * s->a;
    return weights_floats(s) + hcnn_round_up16(a2 * s->cin * T) +
           hcnn_round_up16(a2 * s->cout * T) + (size_t)nt * scratch_floats(s) +
           seam_floats(s, nc);
}

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
    j->V = j->wt + weights_floats(&j->s);
    j->M = j->V + hcnn_round_up16(a2 * j->s.cin * T);
    j->scratch = j->M + hcnn_round_up16(a2 * j->s.cout * T);
    j->seams = j->scratch + (size_t)hcnn_cpu_threads(NULL) * scratch_floats(&j->s);
}

static void poll(const wino_job *j, int t)
{
    if (t == 0 && j->ctx->poll) /* only thread 0 drives communication */
        j->ctx->poll(j->ctx->poll_arg);
}

#define RANGE(count, t, nt, lo, hi)                                                               \
    const long lo = (long)(count) * (t) / (nt), hi = (long)(count) * ((t) + 1) / (nt)

/* ---- the weight transforms ---------------------------------------------- */

/* The weights' transforms (U = G g G^T, and dW += G^T dU G) go by pieces
 * of (output channel, block of input channels): each (co, c) is its own
 * arithmetic, so the cut follows the thread count, as the images' pieces
 * do (split_of): blocks of >= 16 channels until the threads have one
 * piece each. */
static int weight_blocks(const wino_shape *s, int nt)
{
    const int most = s->cin >= 32 ? s->cin / 16 : 1;
    const int want = (nt + s->cout - 1) / s->cout;
    return want < most ? want : most;
}

/* piece k of cout x cb: output channel k / cb, input channels [c0, c1) */
static void weight_piece(const wino_shape *s, int cb, long k, int *co, int *c0, int *c1)
{
    const int b = (int)(k % cb);
    *co = (int)(k / cb);
    *c0 = b == 0 ? 0 : (int)(((long)s->cin * b / cb) & ~15L);
    *c1 = b + 1 == cb ? s->cin : (int)(((long)s->cin * (b + 1) / cb) & ~15L);
}

/* U[xi][co][c] = G g G^T for output channel co, input channels [c0, c1)
 * (g the filter of (co, c)), into j->u.  sc: 9 + 3a rows of cin floats. */
static void weights_row(const wino_job *j, int co, int c0, int c1, float *sc)
{
    const wino_shape *s = &j->s;
    const int a = s->a, C = c1 - c0;
    const size_t mc = hcnn_round_up16((size_t)max_channels(s));
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
    const size_t mc = hcnn_round_up16((size_t)max_channels(s));
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
    const size_t mc = hcnn_round_up16((size_t)max_channels(s));
    wino_scratch w;
    w.img = j->scratch + (size_t)t * scratch_floats(s);
    w.img2 = w.img + image_floats(s);
    w.tmp = w.img2 + image_floats(s);
    w.zero = w.tmp + (size_t)s->a * s->a * mc;
    w.junk = w.zero + mc;
    w.rows = w.junk + mc;
    return w;
}

/* One piece of a per-image phase: channels [c0, c1) of image `image` of the
 * chunk (its tiles from t0), in tile rows [ty0, ty1). */
typedef struct wino_piece {
    int image, c0, c1, ty0, ty1;
    size_t t0;
} wino_piece;

/* How a per-image phase is cut: channel blocks of at least 16 channels (one
 * vector of the transforms' loops), then bands of tile rows, until the
 * chunk's nb images give WINO_PIECES_PER_THREAD pieces a thread or the
 * shape has no more.  banded 0: whole tile rows only (the input gradient's
 * tiles overlap by 2 pixels and add into one image).  Each channel's and
 * each tile's arithmetic is its own, so the cut never changes the bits: it
 * follows the thread count (2 threads keep one piece an image, as before). */
#define WINO_PIECES_PER_THREAD 1

typedef struct wino_split {
    int cblocks, bands;
} wino_split;

static wino_split split_of(int C, int nty, int nb, int nt, int banded)
{
    const long want = (long)WINO_PIECES_PER_THREAD * nt;
    wino_split sp = {1, 1};
    const int most = C >= 32 ? C / 16 : 1;
    if (nb < want)
        sp.cblocks = (int)((want + nb - 1) / nb < most ? (want + nb - 1) / nb : most);
    const long have = (long)nb * sp.cblocks;
    if (banded && have < want)
        sp.bands = (int)((want + have - 1) / have < nty ? (want + have - 1) / have : nty);
    return sp;
}

/* piece k of sp over C channels and nty tile rows (k: image, then channel
 * block, then band: a thread's consecutive pieces share an image) */
static wino_piece piece_of(const wino_shape *s, wino_split sp, int C, long k)
{
    wino_piece pc;
    const int band = (int)(k % sp.bands), cb = (int)(k / sp.bands % sp.cblocks);
    pc.image = (int)(k / sp.bands / sp.cblocks);
    pc.c0 = cb == 0 ? 0 : (int)(((long)C * cb / sp.cblocks) & ~15L);
    pc.c1 = cb + 1 == sp.cblocks ? C : (int)(((long)C * (cb + 1) / sp.cblocks) & ~15L);
    pc.ty0 = (int)((long)s->nty * band / sp.bands);
    pc.ty1 = (int)((long)s->nty * (band + 1) / sp.bands);
    pc.t0 = (size_t)pc.image * s->tiles;
    return pc;
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
    const size_t T = (size_t)j->nc * s->tiles, mc = hcnn_round_up16((size_t)max_channels(s));
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
    const size_t T = (size_t)j->nc * s->tiles, mc = hcnn_round_up16((size_t)max_channels(s));
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

/* The input gradient's scatter is cut into bands of tile rows fixed by
 * the shape and the chunk's images (dx_bands), never by the thread count:
 * the tiles overlap by a - m = 2 input rows, and a band's top rows (its
 * seam with the band above) are kept apart and added after every band has
 * been written, so each seam pixel is the sum of the band above's and its
 * own, in that order, whoever runs them.  Enough bands that the images'
 * channel blocks (16 channels each) and bands offer the call's target
 * (hcnn_pieces_for), at most one a tile row. */
static int dx_bands(const wino_shape *s, int nb, int target)
{
    const long blocks = (long)nb * (s->cin >= 32 ? s->cin / 16 : 1);
    if (blocks >= target)
        return 1;
    const long bands = (target + blocks - 1) / blocks;
    return bands < s->nty ? (int)bands : s->nty;
}

/* The input rows [r0, r1) a band of tile rows [ty0, ty1) adds to, the
 * first `seam` of them shared with the band above. */
typedef struct band_rows {
    int r0, seam, r1;
} band_rows;

static band_rows rows_of_band(const wino_shape *s, int ty0, int ty1)
{
    band_rows b;
    const int top = ty0 * s->m - s->ph, bottom = (ty1 - 1) * s->m - s->ph + s->a;
    b.r0 = top > 0 ? top : 0;
    b.r1 = bottom < s->h ? bottom : s->h;
    b.r1 = b.r1 > b.r0 ? b.r1 : b.r0;
    const int above = top + s->a - s->m < b.r1 ? top + s->a - s->m : b.r1; /* the band above's last row + 1 */
    b.seam = ty0 > 0 && above > b.r0 ? above - b.r0 : 0;
    return b;
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
    const size_t T = (size_t)j->nc * s->tiles, mc = hcnn_round_up16((size_t)max_channels(s));
    const size_t P = (size_t)s->h * s->w;
    const band_rows br = rows_of_band(s, pc->ty0, pc->ty1);
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
    const band_rows br = rows_of_band(s, pc->ty0, pc->ty1);
    if (br.seam <= 0)
        return;
    const size_t P = (size_t)s->h * s->w, px = (size_t)br.seam * s->w;
    const float *seam = seam_of(j, pc);
    for (int c = 0; c < pc->c1 - pc->c0; c++)
        hcnn_cpu_add_acc(NULL, seam + (size_t)c * (size_t)(s->a - s->m) * s->w,
                         dx + (size_t)(pc->c0 + c) * P + (size_t)br.r0 * s->w, px);
}

/* ---- the phases --------------------------------------------------------- */

/* A GEMM phase's items: each of the a^2 products (one per tile element
 * xi) cut into rb blocks of its rows and cb blocks of its columns, the
 * blocks' bounds at multiples of 16 (one vector) and >= 16 wide, none of
 * fewer than HCNN_PIECE_MIN_MACS multiply-adds (cpu.h): the fewest blocks
 * that give the phase the call's target of items (hcnn_pieces_for: 256 at
 * few images; the squarest of those),
 * else the most the shape allows.  Fixed by the shape and the chunk's
 * images: the same bits on any thread count. */
typedef struct wino_blocks {
    int rb, cb;
} wino_blocks;

static int blocks_fit(wino_blocks b, size_t rows, size_t cols, size_t k)
{
    const size_t br = rows / (size_t)b.rb, bc = cols / (size_t)b.cb;
    return (b.rb == 1 || br >= 16) && (b.cb == 1 || bc >= 16) &&
           (double)br * (double)bc * (double)k >= HCNN_PIECE_MIN_MACS;
}

static wino_blocks blocks_of(int a2, size_t rows, int cols, size_t k, int target)
{
    const long need = (target + a2 - 1) / a2; /* blocks a product */
    wino_blocks best = {1, 1};
    long best_n = 1, best_skew = 0;
    for (int rb = 1; rb <= need; rb++)
        for (int cb = 1; cb <= need; cb++) {
            const wino_blocks b = {rb, cb};
            if ((rb > 1 || cb > 1) && !blocks_fit(b, rows, (size_t)cols, k))
                continue;
            const long n = (long)rb * cb;
            const long br = (long)(rows / (size_t)rb), bc = (long)((size_t)cols / (size_t)cb);
            const long skew = br > bc ? br - bc : bc - br;
            const int reach = n >= need, best_reach = best_n >= need;
            const int better = reach != best_reach ? reach
                               : n != best_n       ? (reach ? n < best_n : n > best_n)
                                                   : skew < best_skew;
            if (better || (rb == 1 && cb == 1))
                best = b, best_n = n, best_skew = skew;
        }
    return best;
}

/* block i of n blocks over count: [lo, hi), bounds at multiples of 16 */
static void block_range(size_t count, int n, int i, size_t *lo, size_t *hi)
{
    *lo = (count * (size_t)i / (size_t)n) & ~(size_t)15;
    *hi = i + 1 == n ? count : (count * (size_t)(i + 1) / (size_t)n) & ~(size_t)15;
}

/* item -> (xi, row block, column block): a thread's consecutive items
 * share xi and a row block */
typedef struct wino_item {
    int xi;
    size_t r0, r1, c0, c1;
} wino_item;

static wino_item item_of(wino_blocks b, size_t rows, size_t cols, int item)
{
    wino_item it;
    it.xi = item / (b.rb * b.cb);
    block_range(rows, b.rb, item / b.cb % b.rb, &it.r0, &it.r1);
    block_range(cols, b.cb, item % b.cb, &it.c0, &it.c1);
    return it;
}

/* The forward GEMMs of a chunk of `cols` tiles, items over (tiles, Cout):
 * M[xi][tiles] = V[xi][tiles] U[xi]^T. */
static wino_blocks fwd_blocks(const wino_shape *s, size_t cols, int target)
{
    return blocks_of(s->a * s->a, cols, s->cout, (size_t)s->cin, target);
}

static void gemm_item(const wino_job *j, size_t T, size_t cols, wino_blocks b, int item)
{
    const wino_shape *s = &j->s;
    const wino_item it = item_of(b, cols, (size_t)s->cout, item);
    hcnn_cpu_gemm_mixed(j->bf, HCNN_PIECES_MANY, 0, 1, (int)(it.r1 - it.r0), (int)(it.c1 - it.c0), s->cin, 1.0f,
                        j->V + ((size_t)it.xi * T + it.r0) * s->cin, NULL, s->cin,
                        j->u + ((size_t)it.xi * s->cout + it.c0) * s->cin, NULL, s->cin, 0.0f,
                        j->M + ((size_t)it.xi * T + it.r0) * s->cout + it.c0, s->cout);
}

/* The input gradient's GEMMs, items over (tiles, C):
 * dV[xi][tiles] = dM[xi][tiles] U[xi]. */
static wino_blocks dx_blocks(const wino_shape *s, size_t cols, int target)
{
    return blocks_of(s->a * s->a, cols, s->cin, (size_t)s->cout, target);
}

static void dx_gemm_item(const wino_job *j, size_t T, size_t cols, wino_blocks b, int item)
{
    const wino_shape *s = &j->s;
    const wino_item it = item_of(b, cols, (size_t)s->cin, item);
    hcnn_cpu_gemm_mixed(j->bf, HCNN_PIECES_MANY, 0, 0, (int)(it.r1 - it.r0), (int)(it.c1 - it.c0), s->cout, 1.0f,
                        j->M + ((size_t)it.xi * T + it.r0) * s->cout, NULL, s->cout,
                        j->u + (size_t)it.xi * s->cout * s->cin + it.c0, NULL, s->cin, 0.0f,
                        j->V + ((size_t)it.xi * T + it.r0) * s->cin + it.c0, s->cin);
}

/* The weight gradient's GEMMs, items over (Cout, C), each summed over the
 * chunk's tiles: dU[xi] (+)= dM[xi]^T V[xi]. */
static wino_blocks dw_blocks(const wino_shape *s, size_t cols, int target)
{
    return blocks_of(s->a * s->a, (size_t)s->cout, s->cin, cols, target);
}

static void dw_gemm_item(const wino_job *j, size_t T, size_t cols, wino_blocks b, int item,
                         float beta)
{
    const wino_shape *s = &j->s;
    const wino_item it = item_of(b, (size_t)s->cout, (size_t)s->cin, item);
    hcnn_cpu_gemm_mixed(j->bf, HCNN_PIECES_MANY, 1, 0, (int)(it.r1 - it.r0), (int)(it.c1 - it.c0), (int)cols, 1.0f,
                        j->M + (size_t)it.xi * T * s->cout + it.r0, NULL, s->cout,
                        j->V + (size_t)it.xi * T * s->cin + it.c0, NULL, s->cin, beta,
                        j->wt + ((size_t)it.xi * s->cout + it.r0) * s->cin + it.c0, s->cin);
}

static long blocks_items(const wino_shape *s, wino_blocks b)
{
    return (long)s->a * s->a * b.rb * b.cb;
}

/* The forward (Y = A^T [U V] A) and the input gradient (dM = A dY A^T,
 * dV = dM U, scattered back) share one shape of work: transform each image's
 * tiles, one GEMM per tile element, scatter the results back into images,
 * each phase in pieces (split_of).  U is transformed first unless this
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
        const int cb = weight_blocks(s, nt);
        RANGE((long)s->cout * cb, t, nt, a, b);
        for (long k = a; k < b; k++) {
            int co, c0, c1;
            weight_piece(s, cb, k, &co, &c0, &c1);
            weights_row(j, co, c0, c1, w.img);
        }
    }
    for (int i0 = 0; i0 < j->n; i0 += j->nc) {
        const int nb = j->n - i0 < j->nc ? j->n - i0 : j->nc;
        const size_t T = (size_t)j->nc * s->tiles, cols = (size_t)nb * s->tiles;
        {
            const wino_split sp = split_of(p->src_c, s->nty, nb, nt, 1);
            RANGE((long)nb * sp.cblocks * sp.bands, t, nt, a, b);
            for (long k = a; k < b; k++) {
                const wino_piece pc = piece_of(s, sp, p->src_c, k);
                p->tiles(j, p->src + (size_t)(i0 + pc.image) * p->src_sz, &pc, &w);
                poll(j, t);
            }
        }
#pragma omp barrier
        {
            const wino_blocks bl = p->blocks(s, cols, hcnn_pieces_for(j->n));
            RANGE(blocks_items(s, bl), t, nt, a, b);
            for (long it = a; it < b; it++) {
                p->gemm(j, T, cols, bl, (int)it);
                poll(j, t);
            }
        }
#pragma omp barrier
        wino_split sp = split_of(p->dst_c, s->nty, nb, nt, p->dst_banded);
        if (p->seam)
            sp.bands = dx_bands(s, nb, hcnn_pieces_for(j->n));
        RANGE((long)nb * sp.cblocks * sp.bands, t, nt, a, b);
        for (long k = a; k < b; k++) {
            const wino_piece pc = piece_of(s, sp, p->dst_c, k);
            p->scatter(j, p->dst + (size_t)(i0 + pc.image) * p->dst_sz, &pc, &w);
            poll(j, t);
        }
#pragma omp barrier
        if (p->seam && sp.bands > 1) {
            for (long k = a; k < b; k++) {
                const wino_piece pc = piece_of(s, sp, p->dst_c, k);
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
    const wino_pass p = {input_image, gemm_item, fwd_blocks, output_image, j->x,   in_sz,
                         s->cin,      j->y,      out_sz,     s->cout,      1,      NULL};
    pass_thread(j, &p, t, nt);
}

static void input_grad_thread(void *arg, int t, int nt)
{
    const wino_job *j = arg;
    const wino_shape *s = &j->s;
    const size_t in_sz = (size_t)s->cin * s->h * s->w, out_sz = (size_t)s->cout * s->oh * s->ow;
    const wino_pass p = {dy_image, dx_gemm_item, dx_blocks, input_grad_image, j->dy, out_sz,
                         s->cout,  j->dx,        in_sz,     s->cin,           0,     input_grad_seam};
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
            const wino_split sx = split_of(s->cin, s->nty, nb, nt, 1);
            const wino_split sd = split_of(s->cout, s->nty, nb, nt, 1);
            const long nx = (long)nb * sx.cblocks * sx.bands;
            RANGE(nx + (long)nb * sd.cblocks * sd.bands, t, nt, a, b);
            for (long k = a; k < b; k++) {
                if (k < nx) {
                    const wino_piece pc = piece_of(s, sx, s->cin, k);
                    input_image(j, j->x + (size_t)(i0 + pc.image) * in_sz, &pc, &w);
                } else {
                    const wino_piece pc = piece_of(s, sd, s->cout, k - nx);
                    dy_image(j, j->dy + (size_t)(i0 + pc.image) * out_sz, &pc, &w);
                }
                poll(j, t);
            }
        }
#pragma omp barrier
        {
            const wino_blocks bl = dw_blocks(s, cols, hcnn_pieces_for(j->n));
            RANGE(blocks_items(s, bl), t, nt, a, b);
            for (long it = a; it < b; it++) {
                dw_gemm_item(j, T, cols, bl, (int)it, i0 == 0 ? 0.0f : 1.0f);
                poll(j, t);
            }
        }
#pragma omp barrier
    }
    const int cb = weight_blocks(s, nt);
    RANGE((long)s->cout * cb, t, nt, a, b);
    for (long k = a; k < b; k++) {
        int co, c0, c1;
        weight_piece(s, cb, k, &co, &c0, &c1);
        weight_grad_row(j, co, c0, c1, w.img);
    }
}

/* ---- the operations ------------------------------------------------------ */

int hcnn_wino_applies(const hcnn_conv_desc *l)
{
    const hcnn_conv_geom *g = &l->g;
    return g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->ph <= 2 && g->pw <= 2;
}

size_t hcnn_wino_ws(const hcnn_conv_desc *l, const hcnn_exec *ctx, int m, int n, int nt)
{
    if (!m)
        return 0;
    const wino_shape f = forward_shape(l, m);
    return call_floats(&f, chunk_images_most(&f, ctx, n), nt);
}

/* ---- the transformed weights a step keeps --------------------------------- */

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
    const size_t need = weights_floats(&j->s);
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
    j->nc = chunk_images(&j->s, j->ctx, j->n);
    job_layout(j);
    if (call_floats(&j->s, j->nc, nt) > j->ctx->ws_floats)
        return hcnn_error("Winograd convolution F(%dx%d) of %d x %d x %d -> %d channels on %d "
                          "images: workspace of %zu floats, %zu needed",
                          j->s.m, j->s.m, j->s.cin, j->s.h, j->s.w, j->s.cout, j->n,
                          j->ctx->ws_floats, call_floats(&j->s, j->nc, nt));
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
    wino_job j = {.s = forward_shape(l, m), .ctx = ctx, .n = n, .w = w, .bias = b, .x = x, .y = y,
                  .bf = bf};
    return run(&j, l, 1, forward_thread);
}

int hcnn_wino_bwd_data(const hcnn_conv_desc *l, const hcnn_exec *ctx, hcnn_bf16 *bf, int m,
                       const float *w, const float *dy, float *dx, int dx_acc, int n)
{
    wino_job j = {.s = forward_shape(l, m), .ctx = ctx, .n = n, .w = w, .dy = dy, .dx = dx,
                  .acc = dx_acc, .bf = bf};
    return run(&j, l, 1, input_grad_thread);
}

int hcnn_wino_bwd_filter(const hcnn_conv_desc *l, const hcnn_exec *ctx, hcnn_bf16 *bf, int m,
                         const float *x, const float *dy, float *dw, int n)
{
    wino_job j = {.s = forward_shape(l, m), .ctx = ctx, .n = n, .x = x, .dy = dy, .dw = dw,
                  .bf = bf};
    return run(&j, l, 0, weight_grad_thread);
}

/* The GEMMs of a pass as the threads issue them: thread 0's share of each
 * chunk's items; pass 0 the forward, 1 the weight gradient, 2 the input
 * gradient. */
static void push_calls(const wino_shape *s, const hcnn_exec *ctx, int n, int nt, int backward,
                       int pass, hcnn_gemm_list *gl)
{
    const int nc = chunk_images(s, ctx, n);
    for (int i0 = 0; i0 < n; i0 += nc) {
        const size_t cols = (size_t)(n - i0 < nc ? n - i0 : nc) * s->tiles;
        const int target = hcnn_pieces_for(n);
        const wino_blocks b = pass == 1   ? dw_blocks(s, cols, target)
                              : pass == 2 ? dx_blocks(s, cols, target)
                                          : fwd_blocks(s, cols, target);
        const long items = (blocks_items(s, b) + nt - 1) / nt;
        for (long i = 0; i < items; i++)
            if (pass == 1)
                hcnn_gemm_push(gl, 1, 1, 0, s->cout / b.rb, s->cin / b.cb, (int)cols, 1);
            else if (pass == 2)
                hcnn_gemm_push(gl, 1, 0, 0, (int)(cols / (size_t)b.rb), s->cin / b.cb, s->cout, 1);
            else
                hcnn_gemm_push(gl, backward, 0, 1, (int)(cols / (size_t)b.rb), s->cout / b.cb,
                               s->cin, 1);
    }
}

void hcnn_wino_gemms(const hcnn_conv_desc *l, const hcnn_exec *ctx, int m, int n, int nt,
                     int dw_by_wino, int need_dx, hcnn_gemm_list *gl)
{
    const wino_shape f = forward_shape(l, m);
    push_calls(&f, ctx, n, nt, 0, 0, gl);
    if (dw_by_wino)
        push_calls(&f, ctx, n, nt, 1, 1, gl);
    if (need_dx)
        push_calls(&f, ctx, n, nt, 1, 2, gl);
}

void hcnn_wino_pieces(const hcnn_conv_desc *l, const hcnn_exec *ctx, int m, int n, int nt,
                      hcnn_wino_phases *ph)
{
    const wino_shape f = forward_shape(l, m);
    const int nb = chunk_images(&f, ctx, n);
    const size_t cols = (size_t)nb * f.tiles;
    const wino_split in = split_of(f.cin, f.nty, nb, nt, 1), out = split_of(f.cout, f.nty, nb, nt, 1);
    const wino_split dx = split_of(f.cin, f.nty, nb, nt, 0);
    ph->images = nb;
    ph->weights = (long)f.cout * weight_blocks(&f, nt);
    ph->fwd[0] = (long)nb * in.cblocks * in.bands;
    const int target = hcnn_pieces_for(n);
    ph->fwd[1] = blocks_items(&f, fwd_blocks(&f, cols, target));
    ph->fwd[2] = (long)nb * out.cblocks * out.bands;
    ph->dx[0] = ph->fwd[2];
    ph->dx[1] = blocks_items(&f, dx_blocks(&f, cols, target));
    ph->dx[2] = (long)nb * dx.cblocks * dx_bands(&f, nb, target);
    ph->dx_seams = dx_bands(&f, nb, target) > 1 ? ph->dx[2] : 0;
    ph->dw[0] = ph->fwd[0] + ph->fwd[2];
    ph->dw[1] = blocks_items(&f, dw_blocks(&f, cols, target));
}

void hcnn_wino_describe(const hcnn_conv_desc *l, const hcnn_exec *ctx, int m, int n,
                        int dw_by_wino, char *buf, size_t cap)
{
    const wino_shape f = forward_shape(l, m);
    hcnn_wino_phases ph;
    hcnn_wino_pieces(l, ctx, m, n, hcnn_cpu_threads(NULL), &ph);
    int len = snprintf(buf, cap, "winograd_f%d: Winograd F(%dx%d,3x3), %d tile%s an image, chunks "
                       "of %d images; weight gradient by %s; pieces (transform/GEMMs/inverse): "
                       "forward %ld/%ld/%ld, input gradient %ld/%ld/%ld",
                       m, m, m, f.tiles, f.tiles == 1 ? "" : "s", chunk_images(&f, ctx, n),
                       dw_by_wino ? "Winograd" : "the im2col plan", ph.fwd[0], ph.fwd[1],
                       ph.fwd[2], ph.dx[0], ph.dx[1], ph.dx[2]);
    if (dw_by_wino && len > 0 && (size_t)len < cap)
        snprintf(buf + len, cap - (size_t)len, ", weight gradient %ld/%ld", ph.dw[0], ph.dw[1]);
}
