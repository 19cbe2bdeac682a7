/* How a Winograd call is cut (winograd_plan.c): the layer's shape in tiles,
 * the chunks of images and the workspace, the pieces of each phase (the
 * images' transforms by channel blocks and bands of tile rows, the GEMMs
 * by blocks of rows and columns, the weights' transforms by channel
 * blocks), all fixed by the shape, n and the thread count the comments
 * name; winograd.c runs them.  The pieces and GEMM queries of the profile
 * and `hcnn plan` (winograd.h) are answered here from the same functions,
 * so what is priced is what runs. */
#ifndef HCNN_CPU_WINOGRAD_PLAN_H
#define HCNN_CPU_WINOGRAD_PLAN_H

#include "cpu.h"

/* A stride-1 3x3 convolution of cin planes h x w (padding ph, pw) into cout
 * planes oh x ow, in tiles of m x m outputs. */
typedef struct wino_shape {
    int cin, h, w, ph, pw;
    int cout, oh, ow;
    int m, a, ntx, nty, tiles; /* tiles across, down, per image */
} wino_shape;

/* One piece of a per-image phase: channels [c0, c1) of image `image` of the
 * chunk (its tiles from t0), in tile rows [ty0, ty1). */
typedef struct wino_piece {
    int image, c0, c1, ty0, ty1;
    size_t t0;
} wino_piece;

/* How a per-image phase is cut: channel blocks, then bands of tile rows. */
typedef struct wino_split {
    int cblocks, bands;
} wino_split;

/* The input rows [r0, r1) a band of tile rows [ty0, ty1) adds to, the
 * first `seam` of them shared with the band above. */
typedef struct band_rows {
    int r0, seam, r1;
} band_rows;

/* A GEMM phase's items: each of the a^2 products cut into rb blocks of its
 * rows and cb blocks of its columns. */
typedef struct wino_blocks {
    int rb, cb;
} wino_blocks;

/* One item: tile element xi, rows [r0, r1), columns [c0, c1). */
typedef struct wino_item {
    int xi;
    size_t r0, r1, c0, c1;
} wino_item;

static inline int wino_max_channels(const wino_shape *s)
{
    return s->cin > s->cout ? s->cin : s->cout;
}

/* one image, input or output, whichever is larger */
static inline size_t wino_image_floats(const wino_shape *s)
{
    const size_t in = (size_t)s->cin * s->h * s->w, out = (size_t)s->cout * s->oh * s->ow;
    return hcnn_round_up16(in > out ? in : out);
}

/* the transformed weights U (or their gradient dU): [a^2][cout][cin] */
static inline size_t wino_weights_floats(const wino_shape *s)
{
    return hcnn_round_up16((size_t)s->a * s->a * s->cout * s->cin);
}

/* The layer's shape in tiles of m x m. */
wino_shape hcnn_wino_shape(const hcnn_conv_desc *l, int m);
/* A thread's scratch floats. */
size_t hcnn_wino_scratch_floats(const wino_shape *s);
/* Images per chunk of a call on n images. */
int hcnn_wino_chunk_images(const wino_shape *s, const hcnn_exec *ctx, int n);
/* The workspace of a call in chunks of nc images on nt threads:
 * [U or dU][V][M][nt scratch][seams]. */
size_t hcnn_wino_call_floats(const wino_shape *s, int nc, int nt);

/* The weights' transforms: cout x (this many channel blocks) pieces ... */
int hcnn_wino_weight_blocks(const wino_shape *s, int nt);
/* ... piece k: output channel co, input channels [c0, c1). */
void hcnn_wino_weight_piece(const wino_shape *s, int cb, long k, int *co, int *c0, int *c1);

/* The images' transforms: how a phase over C channels of nb images is cut
 * for nt threads (banded 0: whole tile rows) ... */
wino_split hcnn_wino_split(int C, int nty, int nb, int nt, int banded);
/* ... and its piece k. */
wino_piece hcnn_wino_piece(const wino_shape *s, wino_split sp, int C, long k);
/* The input gradient's scatter: its bands of tile rows (fixed by the shape,
 * nb and target, not by the threads) ... */
int hcnn_wino_dx_bands(const wino_shape *s, int nb, int target);
/* ... and the input rows of one. */
band_rows hcnn_wino_band_rows(const wino_shape *s, int ty0, int ty1);

/* The GEMM phases' blocks over a chunk of cols tiles, for a call's target
 * of pieces: forward M = V U^T, input gradient dV = dM U, weight gradient
 * dU (+)= dM^T V ... */
wino_blocks hcnn_wino_fwd_blocks(const wino_shape *s, size_t cols, int target);
wino_blocks hcnn_wino_dx_blocks(const wino_shape *s, size_t cols, int target);
wino_blocks hcnn_wino_dw_blocks(const wino_shape *s, size_t cols, int target);
/* ... how many items they make, and item `item` of a rows x cols product. */
long hcnn_wino_blocks_items(const wino_shape *s, wino_blocks b);
wino_item hcnn_wino_item(wino_blocks b, size_t rows, size_t cols, int item);

#endif
