/* How a Winograd call is cut: winograd_plan.h says what each function
 * answers; the measurements behind the constants are in
 * docs/performance.md, "Winograd" and "Pieces for many threads".  Nothing
 * here touches data: winograd.c runs what these functions describe, and
 * the profile's and `hcnn plan`'s queries (winograd.h) read the same. */
#include <stdio.h>

#include "winograd.h"
#include "winograd_plan.h"

/* ---- the shape of one Winograd convolution ------------------------------ */

static wino_shape shape_of(int cin, int h, int w, int ph, int pw, int cout, int oh, int ow, int m)
{
    wino_shape s = {cin, h, w, ph, pw, cout, oh, ow, m, m + 2, 0, 0, 0};
    s.ntx = (ow + m - 1) / m;
    s.nty = (oh + m - 1) / m;
    s.tiles = s.ntx * s.nty;
    return s;
}

wino_shape hcnn_wino_shape(const hcnn_conv_desc *l, int m)
{
    const hcnn_conv_geom *g = &l->g;
    return shape_of(g->c, g->h, g->w, g->ph, g->pw, l->out_c, g->oh, g->ow, m);
}

/* A thread's scratch: one image channels-last, one output image twice
 * (channels-last, then planes), a tile's a^2 rows of channels, a row of
 * zeros, a row for outputs past the edge and a tile row's a rows (the
 * input gradient's scatter); or the weight transforms' 9 + 3a rows of
 * channels. */

size_t hcnn_wino_scratch_floats(const wino_shape *s)
{
    const size_t mc = hcnn_round_up16((size_t)wino_max_channels(s));
    const size_t planes = 2 * wino_image_floats(s) + ((size_t)s->a * s->a + 2 + s->a) * mc;
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


/* Images per chunk: as many as the floats allow, then spread evenly over
 * the chunks the call needs (8 images under a cap of 7 go as 4 + 4, not
 * 7 + 1: a one-image chunk's phases offer the threads a seventh of the
 * pieces). */
static size_t chunk_cap(const wino_shape *s, const hcnn_exec *ctx)
{
    const size_t u = wino_weights_floats(s);
    size_t cap = WINO_CHUNK_FLOATS > u ? WINO_CHUNK_FLOATS : u;
    cap = cap < ctx->max_chunk_floats ? cap : ctx->max_chunk_floats;
    const size_t nc = cap / tile_floats(s);
    return nc < 1 ? 1 : nc;
}

int hcnn_wino_chunk_images(const wino_shape *s, const hcnn_exec *ctx, int n)
{
    const size_t nc = chunk_cap(s, ctx);
    if (n <= 0)
        return 1;
    if ((size_t)n <= nc)
        return n;
    const size_t chunks = ((size_t)n + nc - 1) / nc;
    return (int)(((size_t)n + chunks - 1) / chunks);
}

/* The largest chunk of any call on up to n images.  Not hcnn_wino_chunk_images(n):
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
size_t hcnn_wino_call_floats(const wino_shape *s, int nc, int nt)
{
    const size_t T = (size_t)nc * s->tiles, a2 = (size_t)s->a * s->a;
    return wino_weights_floats(s) + hcnn_round_up16(a2 * s->cin * T) +
           hcnn_round_up16(a2 * s->cout * T) + (size_t)nt * hcnn_wino_scratch_floats(s) +
           seam_floats(s, nc);
}

/* ---- the weight transforms ---------------------------------------------- */

/* The weights' transforms (U = G g G^T, and dW += G^T dU G) go by pieces
 * of (output channel, block of input channels): each (co, c) is its own
 * arithmetic, so the cut follows the thread count, as the images' pieces
 * do (hcnn_wino_split): blocks of >= 16 channels until the threads have one
 * piece each. */
int hcnn_wino_weight_blocks(const wino_shape *s, int nt)
{
    const int most = s->cin >= 32 ? s->cin / 16 : 1;
    const int want = (nt + s->cout - 1) / s->cout;
    return want < most ? want : most;
}

/* piece k of cout x cb: output channel k / cb, input channels [c0, c1) */
void hcnn_wino_weight_piece(const wino_shape *s, int cb, long k, int *co, int *c0, int *c1)
{
    const int b = (int)(k % cb);
    *co = (int)(k / cb);
    *c0 = b == 0 ? 0 : (int)(((long)s->cin * b / cb) & ~15L);
    *c1 = b + 1 == cb ? s->cin : (int)(((long)s->cin * (b + 1) / cb) & ~15L);
}

/* How a per-image phase is cut: channel blocks of at least 16 channels (one
 * vector of the transforms' loops), then bands of tile rows, until the
 * chunk's nb images give WINO_PIECES_PER_THREAD pieces a thread or the
 * shape has no more.  banded 0: whole tile rows only (the input gradient's
 * tiles overlap by 2 pixels and add into one image).  Each channel's and
 * each tile's arithmetic is its own, so the cut never changes the bits: it
 * follows the thread count (2 threads keep one piece an image, as before). */
#define WINO_PIECES_PER_THREAD 1

wino_split hcnn_wino_split(int C, int nty, int nb, int nt, int banded)
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
wino_piece hcnn_wino_piece(const wino_shape *s, wino_split sp, int C, long k)
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

/* The input gradient's scatter is cut into bands of tile rows fixed by
 * the shape and the chunk's images (hcnn_wino_dx_bands), never by the thread count:
 * the tiles overlap by a - m = 2 input rows, and a band's top rows (its
 * seam with the band above) are kept apart and added after every band has
 * been written, so each seam pixel is the sum of the band above's and its
 * own, in that order, whoever runs them.  Enough bands that the images'
 * channel blocks (16 channels each) and bands offer the call's target
 * (hcnn_pieces_for), at most one a tile row. */
int hcnn_wino_dx_bands(const wino_shape *s, int nb, int target)
{
    const long blocks = (long)nb * (s->cin >= 32 ? s->cin / 16 : 1);
    if (blocks >= target)
        return 1;
    const long bands = (target + blocks - 1) / blocks;
    return bands < s->nty ? (int)bands : s->nty;
}

band_rows hcnn_wino_band_rows(const wino_shape *s, int ty0, int ty1)
{
    band_rows b;
    const int top = ty0 * s->m - s->ph, bottom = (ty1 - 1) * s->m - s->ph + s->a;
    b.r0 = top > 0 ? top : 0;
    b.r1 = bottom < s->h ? bottom : s->h;
    b.r1 = b.r1 > b.r0 ? b.r1 : b.r0;
    /* the band above's last row + 1 */
    const int above = top + s->a - s->m < b.r1 ? top + s->a - s->m : b.r1;
    b.seam = ty0 > 0 && above > b.r0 ? above - b.r0 : 0;
    return b;
}

/* ---- the phases --------------------------------------------------------- */

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

wino_item hcnn_wino_item(wino_blocks b, size_t rows, size_t cols, int item)
{
    wino_item it;
    it.xi = item / (b.rb * b.cb);
    block_range(rows, b.rb, item / b.cb % b.rb, &it.r0, &it.r1);
    block_range(cols, b.cb, item % b.cb, &it.c0, &it.c1);
    return it;
}

/* The forward GEMMs of a chunk of `cols` tiles, items over (tiles, Cout):
 * M[xi][tiles] = V[xi][tiles] U[xi]^T. */
wino_blocks hcnn_wino_fwd_blocks(const wino_shape *s, size_t cols, int target)
{
    return blocks_of(s->a * s->a, cols, s->cout, (size_t)s->cin, target);
}

/* The input gradient's GEMMs, items over (tiles, C):
 * dV[xi][tiles] = dM[xi][tiles] U[xi]. */
wino_blocks hcnn_wino_dx_blocks(const wino_shape *s, size_t cols, int target)
{
    return blocks_of(s->a * s->a, cols, s->cin, (size_t)s->cout, target);
}

/* The weight gradient's GEMMs, items over (Cout, C), each summed over the
 * chunk's tiles: dU[xi] (+)= dM[xi]^T V[xi]. */
wino_blocks hcnn_wino_dw_blocks(const wino_shape *s, size_t cols, int target)
{
    return blocks_of(s->a * s->a, (size_t)s->cout, s->cin, cols, target);
}

long hcnn_wino_blocks_items(const wino_shape *s, wino_blocks b)
{
    return (long)s->a * s->a * b.rb * b.cb;
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
    const wino_shape f = hcnn_wino_shape(l, m);
    return hcnn_wino_call_floats(&f, chunk_images_most(&f, ctx, n), nt);
}

/* The GEMMs of a pass as the threads issue them: thread 0's share of each
 * chunk's items; pass 0 the forward, 1 the weight gradient, 2 the input
 * gradient. */
static void push_calls(const wino_shape *s, const hcnn_exec *ctx, int n, int nt, int backward,
                       int pass, hcnn_gemm_list *gl)
{
    const int nc = hcnn_wino_chunk_images(s, ctx, n);
    for (int i0 = 0; i0 < n; i0 += nc) {
        const size_t cols = (size_t)(n - i0 < nc ? n - i0 : nc) * s->tiles;
        const int target = hcnn_pieces_for(n);
        const wino_blocks b = pass == 1   ? hcnn_wino_dw_blocks(s, cols, target)
                              : pass == 2 ? hcnn_wino_dx_blocks(s, cols, target)
                                          : hcnn_wino_fwd_blocks(s, cols, target);
        const long items = (hcnn_wino_blocks_items(s, b) + nt - 1) / nt;
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
    const wino_shape f = hcnn_wino_shape(l, m);
    push_calls(&f, ctx, n, nt, 0, 0, gl);
    if (dw_by_wino)
        push_calls(&f, ctx, n, nt, 1, 1, gl);
    if (need_dx)
        push_calls(&f, ctx, n, nt, 1, 2, gl);
}

void hcnn_wino_pieces(const hcnn_conv_desc *l, const hcnn_exec *ctx, int m, int n, int nt,
                      hcnn_wino_phases *ph)
{
    const wino_shape f = hcnn_wino_shape(l, m);
    const int nb = hcnn_wino_chunk_images(&f, ctx, n);
    const size_t cols = (size_t)nb * f.tiles;
    const wino_split in = hcnn_wino_split(f.cin, f.nty, nb, nt, 1);
    const wino_split out = hcnn_wino_split(f.cout, f.nty, nb, nt, 1);
    const wino_split dx = hcnn_wino_split(f.cin, f.nty, nb, nt, 0);
    ph->images = nb;
    ph->weights = (long)f.cout * hcnn_wino_weight_blocks(&f, nt);
    ph->fwd[0] = (long)nb * in.cblocks * in.bands;
    const int target = hcnn_pieces_for(n);
    ph->fwd[1] = hcnn_wino_blocks_items(&f, hcnn_wino_fwd_blocks(&f, cols, target));
    ph->fwd[2] = (long)nb * out.cblocks * out.bands;
    ph->dx[0] = ph->fwd[2];
    ph->dx[1] = hcnn_wino_blocks_items(&f, hcnn_wino_dx_blocks(&f, cols, target));
    ph->dx[2] = (long)nb * dx.cblocks * hcnn_wino_dx_bands(&f, nb, target);
    ph->dx_seams = hcnn_wino_dx_bands(&f, nb, target) > 1 ? ph->dx[2] : 0;
    ph->dw[0] = ph->fwd[0] + ph->fwd[2];
    ph->dw[1] = hcnn_wino_blocks_items(&f, hcnn_wino_dw_blocks(&f, cols, target));
}

void hcnn_wino_describe(const hcnn_conv_desc *l, const hcnn_exec *ctx, int m, int n,
                        int dw_by_wino, char *buf, size_t cap)
{
    const wino_shape f = hcnn_wino_shape(l, m);
    hcnn_wino_phases ph;
    hcnn_wino_pieces(l, ctx, m, n, hcnn_cpu_threads(NULL), &ph);
    int len = snprintf(buf, cap, "winograd_f%d: Winograd F(%dx%d,3x3), %d tile%s an image, chunks "
                       "of %d images; weight gradient by %s; pieces (transform/GEMMs/inverse): "
                       "forward %ld/%ld/%ld, input gradient %ld/%ld/%ld",
                       m, m, m, f.tiles, f.tiles == 1 ? "" : "s", ph.images,
                       dw_by_wino ? "Winograd" : "the im2col plan", ph.fwd[0], ph.fwd[1],
                       ph.fwd[2], ph.dx[0], ph.dx[1], ph.dx[2]);
    if (dw_by_wino && len > 0 && (size_t)len < cap)
        snprintf(buf + len, cap - (size_t)len, ", weight gradient %ld/%ld", ph.dw[0], ph.dw[1]);
}
