/* The CPU backend's convolution plan (conv_plan.h): every choice of how a
 * convolution runs, from the layer's shape and the number of images only;
 * the workspace it needs and its layout; the GEMMs it issues.  The
 * measurements behind each threshold are in docs/performance.md
 * ("Convolutions"); the reason is repeated in a line where the choice is
 * made. */
#include <stdio.h>
#include <string.h>

#include "bf16.h"
#include "conv_plan.h"

/* auto: per-thread items for planes of >= 64 outputs (ResNet-18's 4 x 4
 * stage, P = 16, runs 1.4x slower per-thread: its GEMMs would be narrow) */
#define PER_THREAD_MIN_P 64
/* columns of one per-thread GEMM (256 beat 100 and 512 on LeNet-5's conv2) */
#define GROUP_N 256
/* floats of a group's columns: they stay in a core's L2 (2 MB) with the
 * packed weights (ResNet-18's K = 2304 layers take 2 images, not 4) */
#define GROUP_MAX_COL ((size_t)300000)
/* one image's output rows in blocks of ~600 KB of columns once its columns
 * exceed twice that (ResNet-18's layer1: 2.4 MB an image) */
#define BLOCK_FLOATS ((size_t)150000)
/* shifted windows need taps of >= 16 channels (the stem, C = 3, was 1.75x
 * slower) */
#define SHIFTED_MIN_C 16
/* Items a plan makes available to threads when the batch allows
 * (hcnn_pieces_for, cpu.h: 256 for a pass of few images, else 64): a
 * smaller batch has its images cut into
 * row and channel items, down to HCNN_PIECE_MIN_MACS multiply-adds an
 * item.  The weight gradient's partial sums, each a copy of dW summed at
 * the end, are at most CHUNKS_MAX (64: one a core of the node; more would
 * cost their sum and memory, and the input-gradient items share the
 * backward's queue with them). */
#define ITEM_MIN_MACS HCNN_PIECE_MIN_MACS
#define CHUNKS_MAX 64
/* An item's GEMM keeps >= 64 columns (a block of output rows) or rows (a
 * block of input channels' taps): one thread, SkylakeX kernels, 256 x N x
 * 1152: N = 16 60.5, 32 71.6, 64 77.7 GFLOP/s.  Blocks of 2 output rows
 * (16 columns) made ResNet-18's layer3.0.conv1 forward 44% slower at batch
 * 64 on 2 threads (17.8 -> 25.7 ms; docs/performance.md, "Pieces"). */
#define ITEM_MIN_WIDTH 64
/* a weight-gradient partial sum covers at least this many columns (images
 * x pixels) of dY col^T: each of its floats, written and read once, then
 * costs 1/1024 of its multiply-adds (ResNet-18's layer3, dW 2.4 MB, P = 64,
 * at batch 64: 2 partials, not 64; the input-gradient items keep the other
 * threads busy meanwhile) */
#define CHUNK_MIN_COLUMNS 2048

static int group_images(const hcnn_conv_desc *l)
{
    const int P = hcnn_conv_p(l), g = (GROUP_N + P - 1) / P;
    const size_t cap = GROUP_MAX_COL / ((size_t)hcnn_conv_k(l) * P);
    return cap < 1 ? 1 : (size_t)g < cap ? g : (int)cap;
}

/* dW^T += col dY^T for 16 <= Cout <= 32: OpenBLAS 0.3.21's kernels for
 * dY col^T (B transposed) are slow there */
static int dw_transposed(const hcnn_conv_desc *l) { return l->out_c >= 16 && l->out_c <= 32; }

int hcnn_conv_shifted(const hcnn_conv_desc *l)
{
    const hcnn_conv_geom *g = &l->g;
    return g->sh == 1 && g->sw == 1 && g->kh * g->kw > 1 && g->c >= SHIFTED_MIN_C &&
           group_images(l) == 1 && 16 * (g->kw - 1) <= g->ow;
}

static int rows_per_block(const hcnn_conv_desc *l)
{
    const size_t per_row = (size_t)hcnn_conv_k(l) * l->g.ow;
    if (per_row * l->g.oh <= 2 * BLOCK_FLOATS)
        return l->g.oh;
    const int rows = (int)(BLOCK_FLOATS / per_row);
    return rows < 1 ? 1 : rows;
}

static int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }

/* The per-thread decomposition of n images (everything but nt). */
static void decompose(const hcnn_conv_desc *l, const hcnn_exec *ctx, int n, int bf16,
                      hcnn_conv_plan *p)
{
    const int target = ctx->in_unit ? 1 : hcnn_pieces_for(n);
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l), oh = l->g.oh, C = l->g.c;
    const double co = l->out_c;
    /* fewer images than items wanted: smaller groups first */
    int g = group_images(l);
    if (n < g * target)
        g = n / target > 1 ? (n / target < g ? n / target : g) : 1;
    p->group = g;
    p->ngroups = ceil_div(n > 0 ? n : 1, g);
    /* bf16: im2col + GEMM only (its products round their inputs, bf16.c) */
    p->shifted = !bf16 && hcnn_conv_shifted(l);
    p->dw_transposed = !bf16 && dw_transposed(l);
    /* then one image's output rows (forward, weight gradient) ... */
    p->rows = g == 1 && !p->dw_transposed ? rows_per_block(l) : oh;
    if (g == 1 && !p->dw_transposed && p->ngroups < target) {
        int rows = ceil_div(oh, ceil_div(target, p->ngroups));
        int min_rows = (int)(ITEM_MIN_MACS / (co * K * l->g.ow)) + 1;
        const int wide = (ITEM_MIN_WIDTH + l->g.ow - 1) / l->g.ow;
        min_rows = min_rows > wide ? min_rows : wide;
        rows = rows < min_rows ? min_rows : rows;
        p->rows = rows < p->rows ? rows : p->rows;
    }
    p->row_items = g == 1 ? ceil_div(oh, p->rows) : 1;
    p->nitems = p->ngroups * p->row_items;
    /* ... and its input channels (input gradient) */
    p->dx_channels = C;
    if (g == 1 && p->ngroups < target) {
        int cb = ceil_div(C, ceil_div(target, p->ngroups));
        int min_cb = (int)(ITEM_MIN_MACS / (co * l->g.kh * l->g.kw * P)) + 1;
        const int tall = (ITEM_MIN_WIDTH + l->g.kh * l->g.kw - 1) / (l->g.kh * l->g.kw);
        min_cb = min_cb > tall ? min_cb : tall;
        cb = cb < min_cb ? min_cb : cb;
        p->dx_channels = cb < C ? cb : C;
    }
    p->ndx = p->ngroups * ceil_div(C, p->dx_channels);
    const long by_columns = (long)n * P / CHUNK_MIN_COLUMNS;
    const int chunks = target < CHUNKS_MAX ? target : CHUNKS_MAX;
    p->nchunks = p->nitems < chunks ? p->nitems : chunks;
    if (p->nchunks > by_columns)
        p->nchunks = by_columns > 1 ? (int)by_columns : 1;
}

/* ---- the workspace ---------------------------------------------------------- */

static size_t slot_layout(const hcnn_conv_desc *l, const hcnn_conv_plan *p, float *base,
                          hcnn_conv_slot *s)
{
    const size_t K = (size_t)hcnn_conv_k(l), P = (size_t)hcnn_conv_p(l), g = (size_t)p->group;
    const size_t out = hcnn_round_up16((size_t)l->out_c * g * P);
    const size_t sizes[5] = {
        hcnn_round_up16(K * g * P),
        g > 1 ? out : 0,
        p->dw_transposed ? out : 0,
        p->shifted ? hcnn_conv_padded_floats(l) : 0,
        p->shifted ? hcnn_conv_padded_out_floats(l) : 0,
    };
    float **at[5] = {&s->col, &s->out, &s->dyt, &s->pad, &s->ext};
    size_t off = 0;
    for (int i = 0; i < 5; i++) {
        *at[i] = base && sizes[i] ? base + off : NULL;
        off += sizes[i];
    }
    return off;
}

static size_t slot_floats(const hcnn_conv_desc *l, const hcnn_conv_plan *p)
{
    return slot_layout(l, p, NULL, &(hcnn_conv_slot){0});
}

static size_t dw_floats(const hcnn_conv_desc *l)
{
    return hcnn_round_up16((size_t)l->out_c * hcnn_conv_k(l));
}

hcnn_conv_slot hcnn_conv_slot_at(const hcnn_conv_desc *l, const hcnn_conv_plan *p, float *ws, int t)
{
    hcnn_conv_slot s;
    slot_layout(l, p, ws + (size_t)t * slot_floats(l, p), &s);
    return s;
}

float *hcnn_conv_partial(const hcnn_conv_desc *l, const hcnn_conv_plan *p, float *ws, int chunk)
{
    return ws + (size_t)p->nt * slot_floats(l, p) + (size_t)chunk * dw_floats(l);
}

float *hcnn_conv_dw_buffer(const hcnn_conv_desc *l, const hcnn_conv_plan *p, float *ws)
{
    return hcnn_conv_partial(l, p, ws, p->nchunks);
}

float *hcnn_conv_shifted_weights(const hcnn_conv_desc *l, const hcnn_conv_plan *p, float *ws)
{
    return hcnn_conv_dw_buffer(l, p, ws) + (p->dw_transposed ? dw_floats(l) : 0);
}

/* auto on few images: per-thread items only from PER_THREAD_MIN_COLUMNS
 * columns (images x pixels) of a layer with K >= PER_THREAD_WIDE_K; below,
 * its items' GEMMs are too narrow for such wide weights and the batched
 * plan's one GEMM cut by shape wins.  Forward + both gradients, ms per
 * image, 2 threads of a Zen 5 (best of 2 rounds; docs/performance.md,
 * "Convolutions at small batches"), per_thread vs batched: 64 channels on
 * 32 x 32 (K 576) 1 image 0.88 vs 0.77, 4 images 0.84 vs 0.83, 8 images
 * 0.69 vs 0.85; 128 on 16 x 16 8 images 0.78 vs 0.66, 16 images 0.64 vs
 * 0.68; 256 on 8 x 8 16 images 0.75 vs 0.65, 32 images 0.63 vs 0.67 (the
 * rule's one miss, 7%), 64 images 0.59 vs 0.68. */
#define PER_THREAD_MIN_COLUMNS 4096
#define PER_THREAD_WIDE_K 512

/* the Winograd settings take auto's plan for what they leave to it (other
 * layers, and the weight gradient where Winograd does not win) */
static int per_thread_allowed(const hcnn_conv_desc *l, const hcnn_exec *ctx, int n)
{
    if (ctx->conv_algo == HCNN_CONV_PER_THREAD)
        return 1;
    if (ctx->conv_algo == HCNN_CONV_BATCHED || hcnn_conv_p(l) < PER_THREAD_MIN_P)
        return 0;
    return ctx->in_unit || hcnn_conv_k(l) < PER_THREAD_WIDE_K ||
           (long)n * hcnn_conv_p(l) >= PER_THREAD_MIN_COLUMNS;
}

/* auto: Winograd for 3x3 stride-1 layers of >= 32 input and output
 * channels, with the larger tile that still gives a call >= 32 tiles
 * (images x tiles an image): F(4x4,3x3), else F(2x2,3x3) (4x the tiles on
 * the same images), else the im2col plan; fewer tiles do not pay for the
 * weights' transform and the narrow GEMMs.  The weight gradient by
 * Winograd for >= 16 channels (below, the im2col plan's is faster).
 * Forward + both gradients, ms per image, 2 threads of a Zen 5 (best of 2
 * rounds; docs/performance.md, "Convolutions at small batches"), the best
 * im2col plan vs F2 vs F4: 256 channels on 8 x 8: 1 image 0.82 / 1.09 /
 * 1.29, 2 images 0.71 / 0.62 / 0.87, 4 images 0.69 / 0.43 / 0.55, 8 images
 * 0.68 / 0.37 / 0.31; 512 on 4 x 4: 4 images 0.84 / 1.18 / 1.86, 8 images
 * 0.78 / 0.72 / 1.12, 16 images 0.69 / 0.47 / 0.62, 32 images 0.70 / 0.41
 * / 0.40; 128 on 16 x 16, 1 image: 0.69 / 0.52 / 0.51; 64 on 32 x 32, 1
 * image: 0.77 / 0.70 / 0.41.  (Before, F(2x2) was not auto's, and F(4x4)
 * needed 32 of its tiles: 3x slower per image for 256 channels on 2
 * images.)  Earlier, 64 images: 3 -> 64 channels (ResNet-18's stem) 8.3
 * vs 23.0 ms; 16 -> 16 7.7 vs 9.5; 32 -> 32 26-29 vs 19-20 (im2col vs
 * F(4x4)). */
#define WINO_MIN_C 32
#define WINO_MIN_TILES 32
#define WINO_DW_MIN_C 16

static int min_channels(const hcnn_conv_desc *l)
{
    return l->g.c < l->out_c ? l->g.c : l->out_c;
}

static int wino_auto(const hcnn_conv_desc *l, int n)
{
    if (min_channels(l) < WINO_MIN_C)
        return 0;
    for (int m = 4; m >= 2; m -= 2) {
        const long tiles = (long)((l->g.oh + m - 1) / m) * ((l->g.ow + m - 1) / m);
        if ((long)n * tiles >= WINO_MIN_TILES)
            return m;
    }
    return 0;
}

/* The output tile Winograd runs the layer with on n images (0: not at all):
 * the whole choice, made here once per call and handed to winograd.c. */
static int wino_tile(const hcnn_conv_desc *l, const hcnn_exec *ctx, int n)
{
    if (!hcnn_wino_applies(l))
        return 0;
    switch (ctx->conv_algo) {
    case HCNN_CONV_WINOGRAD_F2: return 2;
    case HCNN_CONV_WINOGRAD: case HCNN_CONV_WINOGRAD_F4: return 4;
    case HCNN_CONV_AUTO: return wino_auto(l, n);
    default: return 0;
    }
}

static int wino_dw(const hcnn_conv_desc *l, int m)
{
    return m > 0 && min_channels(l) >= WINO_DW_MIN_C;
}

/* Whether the layer may go by Winograd with tile m on some number of
 * images (auto's tile changes with n) */
static int wino_may_take(const hcnn_conv_desc *l, const hcnn_exec *ctx, int m)
{
    if (!hcnn_wino_applies(l))
        return 0;
    switch (ctx->conv_algo) {
    case HCNN_CONV_WINOGRAD_F2: return m == 2;
    case HCNN_CONV_WINOGRAD: case HCNN_CONV_WINOGRAD_F4: return m == 4;
    case HCNN_CONV_AUTO: return min_channels(l) >= WINO_MIN_C;
    default: return 0;
    }
}

/* The most workspace Winograd's calls take on up to capacity images: a
 * tile's grows with n up to the chunk the plan allows, so each tile's at
 * capacity covers its calls on fewer images. */
static size_t wino_ws_most(const hcnn_conv_desc *l, const hcnn_exec *ctx, int capacity, int nt)
{
    size_t most = 0;
    for (int m = 2; m <= 4; m += 2)
        if (wino_may_take(l, ctx, m)) {
            const size_t ws = hcnn_wino_ws(l, ctx, m, capacity, nt);
            most = ws > most ? ws : most;
        }
    return most;
}

size_t hcnn_conv_per_thread_ws(const hcnn_conv_desc *l, const hcnn_exec *ctx, int n, int nt,
                               int bf16)
{
    if (!per_thread_allowed(l, ctx, n))
        return 0;
    hcnn_conv_plan p;
    decompose(l, ctx, n, bf16, &p);
    p.nt = nt;
    return (size_t)nt * slot_floats(l, &p) + (size_t)p.nchunks * dw_floats(l) +
           (p.dw_transposed ? dw_floats(l) : 0) + (p.shifted ? dw_floats(l) : 0) +
           (bf16 ? hcnn_round_up16((dw_floats(l) + 1) / 2) : 0);
}

uint16_t *hcnn_conv_weights16(const hcnn_conv_desc *l, const hcnn_conv_plan *p, float *ws)
{
    if (!p->per_thread) {
        const size_t K = (size_t)hcnn_conv_k(l), P = (size_t)hcnn_conv_p(l), g = (size_t)p->group;
        return (uint16_t *)(ws + (K + (size_t)l->out_c) * g * P) +
               2 * (hcnn_round_up16((K * P * g + 1) / 2) +
                    hcnn_round_up16(((size_t)l->out_c * P * g + 1) / 2));
    }
    return (uint16_t *)(hcnn_conv_shifted_weights(l, p, ws) + (p->shifted ? dw_floats(l) : 0));
}

/* Floats of a batched chunk's workspace per image: its columns and GEMM
 * output, and with bf16 both rounded (two to a float). */
static size_t batched_per_sample(const hcnn_conv_desc *l, int bf16)
{
    return hcnn_conv_ws_per_sample(l) + (bf16 ? (hcnn_conv_ws_per_sample(l) + 1) / 2 : 0);
}

/* Images per batched chunk: its columns stay within im2col_mb. */
static int batched_chunk(const hcnn_conv_desc *l, const hcnn_exec *ctx, int n, int bf16)
{
    const size_t per = batched_per_sample(l, bf16) ? batched_per_sample(l, bf16) : 1;
    size_t cap = ctx->max_chunk_floats / per;
    if (cap < 1)
        cap = 1;
    return (size_t)n < cap ? n : (int)cap;
}

/* The batched path's bf16 operands after its chunk's columns and output:
 * the chunk's columns and the weights, rounded (conv.c). */
size_t hcnn_conv_batched_bf16_floats(const hcnn_conv_desc *l, int group)
{
    const size_t K = (size_t)hcnn_conv_k(l), P = (size_t)hcnn_conv_p(l), co = (size_t)l->out_c;
    return hcnn_round_up16((K * P * group + 1) / 2) + hcnn_round_up16((co * P * group + 1) / 2) +
           hcnn_round_up16((co * K + 1) / 2);
}

/* ---- the precision ---------------------------------------------------------- */

/* precision bf16 under conv_algo auto: a layer whose one-image product
 * (Cout x P x K) oneDNN's matmul does not take (bf16.c's rule; on a CPU
 * where it loses, none), or takes at under 2^20 multiply-adds, keeps FP32:
 * there bf16 only adds the rounding and loses FP32's shifted windows.  One
 * thread, the Xeon with AMX, oneDNN 2.6.3 bf16 against OpenBLAS sgemm
 * (bench/onednn_gemm's shapes): LeNet-5's conv1 6 x 576 x 25 0.69x, conv2
 * 16 x 64 x 150 1.00x; ResNet-18's layer3 256 x 64 x 2304 4.4x.  LeNet-5
 * at batch 64, 2 threads, hcnn bench: conv1 0.52 -> 0.96 ms, conv2 1.04 ->
 * 1.40 ms a step in bf16, the step 0.73x FP32's; with this rule 0.996x
 * (batch 256 1.047x; docs/performance.md, "bf16 on the CPU").  Another
 * conv_algo rounds every layer's products, as asked.  Shape only: the
 * same on every batch and thread count. */
#define BF16_LAYER_MIN_MACS (1 << 20)

hcnn_bf16 *hcnn_conv_bf16(const hcnn_backend *be, const hcnn_conv_desc *l, const hcnn_exec *ctx)
{
    hcnn_bf16 *bf = hcnn_cpu_bf16_of(be);
    if (!bf || ctx->conv_algo != HCNN_CONV_AUTO)
        return bf;
    const int m = l->out_c, n = hcnn_conv_p(l), k = hcnn_conv_k(l);
    const int wins = hcnn_bf16_by_onednn(bf, m, n, k) && (double)m * n * k >= BF16_LAYER_MIN_MACS;
    return wins ? bf : NULL;
}

/* ---- the plan --------------------------------------------------------------- */

void hcnn_conv_plan_make(const hcnn_conv_desc *l, const hcnn_exec *ctx, int n, int bf16,
                         hcnn_conv_plan *p)
{
    p->bf16 = bf16;
    /* bf16 takes auto's Winograd rule too: its GEMMs round the transformed
     * tiles and weights (winograd.c).  ResNet-18, batch 64, 2 threads, the
     * Xeon with AMX, 5 alternated rounds against FP32 auto: bf16 with the
     * im2col plans 1.08-1.34x, with F(2x2) 1.12-1.41x, with F(4x4)
     * 1.35-1.91x; one step's update error against float64 (batch 8): 0.30,
     * 0.38, 0.73 of the update (FP32: 1e-6, 2e-6, 0.013); training:
     * bench/bf16_training.sh (docs/performance.md, "bf16 on the CPU") */
    p->wino = wino_tile(l, ctx, n);
    p->wino_dw = wino_dw(l, p->wino);
    p->nt = hcnn_cpu_threads(NULL);
    /* the workspace is sized for the plan (hcnn_conv_workspace): the check
     * only guards against a caller's smaller one */
    p->per_thread = per_thread_allowed(l, ctx, n) &&
                    hcnn_conv_per_thread_ws(l, ctx, n, p->nt, bf16) <= ctx->ws_floats;
    if (p->per_thread) {
        decompose(l, ctx, n, bf16, p);
        return;
    }
    p->group = batched_chunk(l, ctx, n, bf16);
    p->ngroups = ceil_div(n > 0 ? n : 1, p->group);
    p->shifted = p->dw_transposed = 0;
    p->rows = rows_per_block(l);
    p->row_items = 1;
    p->nitems = p->ngroups;
    p->dx_channels = l->g.c;
    p->ndx = p->ngroups;
    p->nchunks = 1;
}

hcnn_conv_geom hcnn_conv_row_block(const hcnn_conv_desc *l, int oy0, int rows)
{
    hcnn_conv_geom g = l->g;
    g.ph -= oy0 * g.sh;
    g.oh = rows;
    return g;
}

/* Workspace for `capacity` images: the largest batched chunk, or the
 * per-thread slots on all threads (one, for a work unit of whole-network
 * execution on the calling thread) and the partial sums, whichever is
 * larger. */
size_t hcnn_cpu_conv_workspace(const hcnn_backend *be, const hcnn_conv_desc *l,
                               const hcnn_exec *ctx, int capacity)
{
    const int bf16 = hcnn_conv_bf16(be, l, ctx) != NULL;
    const int chunk = batched_chunk(l, ctx, capacity, bf16);
    const size_t batched = (size_t)chunk * hcnn_conv_ws_per_sample(l) +
                           (bf16 ? hcnn_conv_batched_bf16_floats(l, chunk) : 0);
    const int nt = ctx->in_unit ? 1 : hcnn_cpu_threads(NULL);
    /* a call on fewer images (a pass's remainder, an evaluation's last
     * batch) has its own per-thread plan: its groups shrink and its pieces
     * target changes at 32 images, so nothing makes its workspace the
     * smaller (ResNet-18's and LeNet-5's layers: none larger, measured); a
     * workspace short of it would switch that call to the batched plan,
     * other bits.  The most over every n, as Winograd's (winograd_plan.c). */
    size_t per_thread = 0;
    for (int n = 1; n <= capacity; n++) {
        const size_t need = hcnn_conv_per_thread_ws(l, ctx, n, nt, bf16);
        per_thread = need > per_thread ? need : per_thread;
    }
    const size_t wino = wino_ws_most(l, ctx, capacity, nt);
    const size_t most = per_thread > batched ? per_thread : batched;
    return wino > most ? wino : most;
}

/* The GEMMs of a pass as conv.c issues them: on the per-thread path those
 * of the first thread's items (the largest share), all threads at once;
 * under whole-network execution those of one unit. */
void hcnn_cpu_conv_gemms(const hcnn_backend *be, const hcnn_conv_desc *l, const hcnn_exec *ctx,
                         int n, int unit, int need_dx, hcnn_gemm_list *gl)
{
    hcnn_conv_plan p;
    hcnn_exec c = *ctx;
    c.in_unit = unit > 0; /* each thread runs its own units alone */
    const int nimg = unit > 0 ? unit : n;
    hcnn_conv_plan_make(l, &c, nimg, hcnn_conv_bf16(be, l, ctx) != NULL, &p);
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c, C = l->g.c;
    const int taps = l->g.kh * l->g.kw, ow = l->g.ow, oh = l->g.oh;
    const int Wp = hcnn_conv_padded_w(l), per = p.per_thread || unit > 0;
    const int nthreads = p.per_thread && unit == 0 ? p.nt : 1;
    const int items = ceil_div(p.nitems, nthreads);
    /* Winograd's own GEMMs for what it runs */
    const int wino = p.wino, wino_dw = p.wino_dw;
    if (wino)
        hcnn_wino_gemms(l, &c, wino, nimg, unit > 0 ? 1 : hcnn_cpu_threads(NULL), wino_dw, need_dx,
                        gl);
    for (int i = 0; i < items && !(wino && wino_dw); i++) {
        const int k = i / p.row_items, r = i % p.row_items;
        const int nb = nimg - k * p.group < p.group ? nimg - k * p.group : p.group;
        const int rows = oh - r * p.rows < p.rows ? oh - r * p.rows : p.rows;
        const int cols = nb == 1 ? rows * ow : nb * P;
        for (int t = 0; !wino && p.shifted && t < taps; t++)
            hcnn_gemm_push(gl, 0, 0, 0, co, rows * Wp, C, per);
        if (!wino && !p.shifted)
            hcnn_gemm_push(gl, 0, 0, 0, co, cols, K, per);
        if (p.dw_transposed)
            hcnn_gemm_push(gl, 1, 0, 0, K, co, nb * P, per);
        else
            hcnn_gemm_push(gl, 1, 0, 1, co, K, cols, per);
    }
    const int dx_items = need_dx && !wino ? ceil_div(p.ndx, nthreads) : 0;
    const int per_group = p.ndx / p.ngroups;
    for (int d = 0; d < dx_items; d++) {
        const int k = d / per_group, b = d % per_group;
        const int nb = nimg - k * p.group < p.group ? nimg - k * p.group : p.group;
        const int cb = C - b * p.dx_channels < p.dx_channels ? C - b * p.dx_channels
                                                              : p.dx_channels;
        for (int t = 0; p.shifted && t < taps; t++)
            hcnn_gemm_push(gl, 1, 1, 0, cb, hcnn_conv_shifted_columns(l), co, per);
        if (!p.shifted)
            hcnn_gemm_push(gl, 1, 1, 0, cb * taps, nb * P, co, per);
    }
    gl->flops += 2.0 * K * co * (double)P * n * (need_dx ? 3 : 2);
}

void hcnn_cpu_conv_describe(const hcnn_backend *be, const hcnn_conv_desc *l,
                            const hcnn_exec *ctx, int n, char *buf, size_t cap)
{
    hcnn_conv_plan p;
    const int bf16 = hcnn_conv_bf16(be, l, ctx) != NULL;
    const int fp32_kept = hcnn_cpu_bf16_of(be) && !bf16;
    hcnn_conv_plan_make(l, ctx, n, bf16, &p);
    if (p.wino)
        hcnn_wino_describe(l, ctx, p.wino, n, p.wino_dw, buf, cap);
    else if (!p.per_thread)
        snprintf(buf, cap, "batched: im2col + GEMM on all threads, chunks of %d images", p.group);
    else if (p.shifted)
        snprintf(buf, cap, "per_thread: shifted windows (%d items, %d weight partials)",
                 p.nitems, p.nchunks);
    else
        snprintf(buf, cap, "per_thread: im2col + GEMM on groups of %d images (%d items, %d "
                 "weight partials)",
                 p.group, p.nitems, p.nchunks);
    const size_t len = strlen(buf);
    if (fp32_kept && len < cap)
        snprintf(buf + len, cap - len, "; " HCNN_DESCRIBE_FP32_KEPT " (conv_algo auto: bf16 loses "
                 "on its %d x %d x %d products)", l->out_c, hcnn_conv_p(l), hcnn_conv_k(l));
}
