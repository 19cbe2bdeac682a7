/* The convolution plan (include/hcnn/conv.h): every choice of how a
 * convolution runs, the workspace it needs, the layout of that workspace,
 * and the GEMMs it issues.  The measurements behind each threshold are in
 * docs/performance.md ("Convolutions"); the reason is repeated in a line
 * where the choice is made. */
#include "conv_plan.h"

/* auto: per-thread groups for planes of >= 64 outputs (ResNet-18's 4 x 4
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

static int group_images(const hcnn_layer *l)
{
    const int P = hcnn_conv_p(l), g = (GROUP_N + P - 1) / P;
    const size_t cap = GROUP_MAX_COL / ((size_t)hcnn_conv_k(l) * P);
    return cap < 1 ? 1 : (size_t)g < cap ? g : (int)cap;
}

/* Per-thread groups with 16 <= Cout <= 32 compute dW^T += col dY^T:
 * OpenBLAS 0.3.21's kernels for dY col^T (B transposed) are slow there. */
static int dw_transposed(const hcnn_layer *l) { return l->out_c >= 16 && l->out_c <= 32; }

int hcnn_conv_shifted(const hcnn_layer *l)
{
    const hcnn_conv_geom *g = &l->conv;
    return g->sh == 1 && g->sw == 1 && g->kh * g->kw > 1 && g->c >= SHIFTED_MIN_C &&
           group_images(l) == 1 && 16 * (g->kw - 1) <= g->ow;
}

static int rows_per_block(const hcnn_layer *l)
{
    const size_t per_row = (size_t)hcnn_conv_k(l) * l->conv.ow;
    if (per_row * l->conv.oh <= 2 * BLOCK_FLOATS)
        return l->conv.oh;
    const int rows = (int)(BLOCK_FLOATS / per_row);
    return rows < 1 ? 1 : rows;
}

/* ---- the workspace ---------------------------------------------------------- */

static size_t slot_layout(const hcnn_layer *l, float *base, hcnn_conv_slot *s)
{
    const size_t K = (size_t)hcnn_conv_k(l), P = (size_t)hcnn_conv_p(l);
    const size_t g = (size_t)group_images(l);
    const size_t out = hcnn_round_up16((size_t)l->out_c * g * P);
    const int shifted = hcnn_conv_shifted(l);
    const size_t sizes[6] = {
        hcnn_round_up16(K * g * P),
        g > 1 ? out : 0,
        dw_transposed(l) ? out : 0,
        shifted ? hcnn_conv_padded_floats(l) : 0,
        shifted ? hcnn_conv_padded_out_floats(l) : 0,
        hcnn_round_up16((size_t)l->out_c * K),
    };
    float **at[6] = {&s->col, &s->out, &s->dyt, &s->pad, &s->ext, &s->dw};
    size_t off = 0;
    for (int i = 0; i < 6; i++) {
        *at[i] = base ? base + off : NULL;
        off += sizes[i];
    }
    return off;
}

static size_t slot_floats(const hcnn_layer *l)
{
    return slot_layout(l, NULL, &(hcnn_conv_slot){0});
}

hcnn_conv_slot hcnn_conv_slot_at(const hcnn_layer *l, float *ws, int t)
{
    hcnn_conv_slot s;
    slot_layout(l, ws + (size_t)t * slot_floats(l), &s);
    if (!dw_transposed(l))
        s.dyt = NULL;
    return s;
}

float *hcnn_conv_shifted_weights(const hcnn_layer *l, float *ws, int nt)
{
    return ws + (size_t)nt * slot_floats(l);
}

size_t hcnn_conv_per_thread_ws(const hcnn_layer *l, const hcnn_ctx *ctx, int nt)
{
    if (ctx->conv_algo == HCNN_CONV_BATCHED ||
        (ctx->conv_algo == HCNN_CONV_AUTO && hcnn_conv_p(l) < PER_THREAD_MIN_P))
        return 0;
    return (size_t)nt * slot_floats(l) +
           (hcnn_conv_shifted(l) ? hcnn_round_up16((size_t)l->out_c * hcnn_conv_k(l)) : 0);
}

/* Images per batched chunk, so that its columns stay within im2col_mb and
 * the workspace. */
static int batched_chunk(const hcnn_layer *l, const hcnn_ctx *ctx, int n)
{
    size_t per = l->ws_per_sample ? l->ws_per_sample : 1;
    size_t cap = ctx->max_chunk_floats / per;
    if (cap < 1)
        cap = 1;
    if (cap * per > ctx->ws_floats)
        cap = ctx->ws_floats / per;
    if (cap < 1)
        cap = 1;
    return (size_t)n < cap ? n : (int)cap;
}

/* ---- the plan --------------------------------------------------------------- */

void hcnn_conv_plan_make(const hcnn_layer *l, const hcnn_ctx *ctx, int n, hcnn_conv_plan *p)
{
    p->nt = ctx->be->threads();
    const size_t need = hcnn_conv_per_thread_ws(l, ctx, p->nt);
    /* the per-thread path when the workspace holds it and every thread has
     * an image (conv_algo per_thread: always) */
    p->per_thread = need != 0 && need <= ctx->ws_floats &&
                    (ctx->conv_algo == HCNN_CONV_PER_THREAD || n >= p->nt);
    p->group = p->per_thread ? group_images(l) : batched_chunk(l, ctx, n);
    p->shifted = p->per_thread && hcnn_conv_shifted(l);
    p->dw_transposed = p->per_thread && dw_transposed(l);
    p->rows_per_block = rows_per_block(l);
}

hcnn_conv_geom hcnn_conv_row_block(const hcnn_layer *l, int oy0, int rows)
{
    hcnn_conv_geom g = l->conv;
    g.ph -= oy0 * g.sh;
    g.oh = rows;
    return g;
}

/* Workspace for `capacity` samples: the largest batched chunk, or the
 * per-thread slots on all threads, whichever is larger. */
size_t hcnn_conv_workspace(const hcnn_layer *l, const hcnn_ctx *ctx, int capacity)
{
    size_t chunk = ctx->max_chunk_floats / l->ws_per_sample;
    if (chunk < 1)
        chunk = 1;
    if (chunk > (size_t)capacity)
        chunk = (size_t)capacity;
    const size_t need = chunk * l->ws_per_sample;
    const size_t per_thread = hcnn_conv_per_thread_ws(l, ctx, ctx->be->threads());
    return per_thread > need ? per_thread : need;
}

/* One thread alone on any number of images (whole-network execution). */
size_t hcnn_conv_thread_workspace(const hcnn_layer *l, const hcnn_ctx *ctx)
{
    const size_t own = hcnn_conv_per_thread_ws(l, ctx, 1);
    return own > l->ws_per_sample ? own : l->ws_per_sample;
}

/* The GEMMs of a pass as conv.c issues them: on the per-thread path those
 * of the slowest thread (the largest share), all threads at once. */
void hcnn_conv_gemms(const hcnn_layer *l, const hcnn_ctx *ctx, int n, int whole_nt, int need_dx,
                     hcnn_gemm_list *gl)
{
    (void)whole_nt; /* each thread then runs the per-thread path on its share: the same list */
    hcnn_conv_plan p;
    hcnn_conv_plan_make(l, ctx, n, &p);
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c, c = l->conv.c;
    const int taps = l->conv.kh * l->conv.kw, ow = l->conv.ow, oh = l->conv.oh;
    const int N = hcnn_conv_shifted_columns(l), per = p.per_thread;
    const int count = per ? (n + p.nt - 1) / p.nt : n;
    for (int i0 = 0; i0 < count; i0 += p.group) {
        const int nb = count - i0 < p.group ? count - i0 : p.group;
        const int rb = nb == 1 ? p.rows_per_block : oh;
        for (int t = 0; p.shifted && t < taps; t++)
            hcnn_gemm_push(gl, 0, 0, 0, co, N, c, per);
        for (int oy0 = 0; !p.shifted && oy0 < oh; oy0 += rb) {
            const int rows = oh - oy0 < rb ? oh - oy0 : rb;
            hcnn_gemm_push(gl, 0, 0, 0, co, rb == oh ? nb * P : rows * ow, K, per);
        }
        if (p.dw_transposed)
            hcnn_gemm_push(gl, 1, 0, 0, K, co, nb * P, per);
        for (int oy0 = 0; !p.dw_transposed && oy0 < oh; oy0 += rb) {
            const int rows = oh - oy0 < rb ? oh - oy0 : rb;
            hcnn_gemm_push(gl, 1, 0, 1, co, K, rb == oh ? nb * P : rows * ow, per);
        }
        for (int t = 0; need_dx && p.shifted && t < taps; t++)
            hcnn_gemm_push(gl, 1, 1, 0, c, N, co, per);
        if (need_dx && !p.shifted)
            hcnn_gemm_push(gl, 1, 1, 0, K, nb * P, co, per);
    }
    gl->flops += 2.0 * K * co * (double)P * n * (need_dx ? 3 : 2);
}
