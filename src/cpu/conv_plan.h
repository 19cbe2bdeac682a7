/* The CPU backend's convolution plan: how a convolution runs n images, made
 * in one place (conv_plan.c), executed by conv.c, which also sizes the
 * workspace from it and lists its GEMMs for the profile.
 *
 * Two ways to walk the mini-batch (config key conv_algo):
 * - batched: all threads on each operation (im2col, one GEMM, layout
 *   change) over chunks of the batch as large as im2col_mb allows;
 * - per-thread items: the work is cut into items, each run by one thread
 *   with single-threaded GEMMs: forward and weight-gradient items are a
 *   group of images, or a block of output rows of one image; input-gradient
 *   items a group, or a block of input channels of one image.  The weight
 *   gradient of consecutive items goes to a partial sum (a chunk), and the
 *   partials are added in chunk order.  One-image groups of stride-1 layers
 *   with wide planes skip im2col/col2im: one GEMM per kernel tap on the
 *   zero-padded input ("shifted windows").
 * auto takes per-thread items for planes of 64 outputs or more.
 *
 * Every choice depends on the layer's shape and n, never on the thread
 * count: threads only decide who runs which item, so a convolution gives
 * the same bits on 1 thread or 64 (the BLAS runs single-threaded, and
 * gemm.c cuts products by shape).  When n is small, images are split into
 * items (rows, channels) so that a rank with fewer images than threads
 * still has work for them.  The measurements behind every threshold are
 * in docs/performance.md.
 *
 * Shapes, with K = C*kh*kw and P = oh*ow, for a group of nb images:
 *   col = im2col(x) [K][nb*P],  Y = W col [Cout][nb*P],  y = nchw(Y) + b
 * Shifted windows: the input zero-padded to Hp x Wp planes; output (oy, ox)
 * of tap (ki, kj) reads padded element (oy + ki) * Wp + ox + kj, so on the
 * padded width (oh * Wp columns, kw - 1 of each row discarded) a tap is one
 * GEMM whose B is the padded input at offset ki * Wp + kj; a block of
 * output rows [oy0, oy1) reads padded rows [oy0, oy1 + kh - 1). */
#ifndef HCNN_CONV_PLAN_INTERNAL_H
#define HCNN_CONV_PLAN_INTERNAL_H

#include "cpu.h"
#include "winograd.h"

typedef struct hcnn_conv_plan {
    int bf16;          /* the backend computes in bf16: im2col + GEMM only, products rounded */
    int wino;          /* Winograd's output tile (2, 4): the layer goes by winograd.c; 0: im2col */
    int wino_dw;       /* its weight gradient by Winograd too (else by the im2col fields below) */
    int per_thread;    /* 1: per-thread items; 0: batched chunks */
    int nt;            /* threads that run the items */
    int group;         /* images per group (per-thread) or per chunk (batched) */
    int ngroups;
    int shifted;       /* one-image groups by shifted windows (forward, input gradient) */
    int dw_transposed; /* weight gradient as dW^T += col dY^T */
    int rows;          /* output rows of a one-image group's forward / weight-gradient item */
    int row_items;     /* items of a group: ceil(oh / rows) for one image, else 1 */
    int nitems;        /* forward and weight-gradient items */
    int dx_channels;   /* input channels of a one-image input-gradient item */
    int ndx;           /* input-gradient items */
    int nchunks;       /* weight-gradient partial sums, each of consecutive items */
} hcnn_conv_plan;

/* The bf16 state layer l's products use: the backend's (hcnn_cpu_bf16_of),
 * or NULL where the layer keeps FP32 (precision bf16 under conv_algo auto,
 * on products where bf16 loses: conv_plan.c).  Every plan, workspace and
 * piece count of the layer takes its bf16 from here. */
struct hcnn_bf16 *hcnn_conv_bf16(const hcnn_backend *be, const hcnn_conv_desc *l,
                                 const hcnn_exec *ctx);

/* The plan of n images (bf16: the layer computes in bf16: hcnn_conv_bf16). */
void hcnn_conv_plan_make(const hcnn_conv_desc *l, const hcnn_exec *ctx, int n, int bf16,
                         hcnn_conv_plan *p);
/* Workspace floats of the per-thread path for n images on nt threads (0:
 * conv_algo never takes it for this layer). */
size_t hcnn_conv_per_thread_ws(const hcnn_conv_desc *l, const hcnn_exec *ctx, int n, int nt,
                               int bf16);
/* The batched path's bf16 operands (its chunk of `group` images' columns
 * and dY, and the weights, rounded), after its FP32 columns and output. */
size_t hcnn_conv_batched_bf16_floats(const hcnn_conv_desc *l, int group);
/* With bf16: where the plan keeps the weights rounded ([Cout][K]): after
 * the per-thread path's partial sums, or the batched path's rounded
 * columns and dY (whose places are then (uint16_t *)(ws + (K + Cout) *
 * group * P) and after it). */
uint16_t *hcnn_conv_weights16(const hcnn_conv_desc *l, const hcnn_conv_plan *p, float *ws);
/* Whether one-image groups of this layer take shifted windows: stride 1,
 * C >= 16, at most 1/16 of the padded width discarded. */
int hcnn_conv_shifted(const hcnn_conv_desc *l);

static inline size_t hcnn_conv_in_size(const hcnn_conv_desc *l)
{
    return (size_t)l->g.c * l->g.h * l->g.w;
}
static inline size_t hcnn_conv_out_size(const hcnn_conv_desc *l)
{
    return (size_t)l->out_c * l->g.oh * l->g.ow;
}
/* im2col columns and the GEMM's output of one image, the batched path's
 * workspace per image */
static inline size_t hcnn_conv_ws_per_sample(const hcnn_conv_desc *l)
{
    return ((size_t)l->g.c * l->g.kh * l->g.kw + (size_t)l->out_c) * l->g.oh * l->g.ow;
}

static inline int hcnn_conv_k(const hcnn_conv_desc *l) { return l->g.c * l->g.kh * l->g.kw; }
static inline int hcnn_conv_p(const hcnn_conv_desc *l) { return l->g.oh * l->g.ow; }

static inline int hcnn_conv_padded_w(const hcnn_conv_desc *l) { return l->g.w + 2 * l->g.pw; }
static inline size_t hcnn_conv_padded_plane(const hcnn_conv_desc *l)
{
    return (size_t)(l->g.h + 2 * l->g.ph) * hcnn_conv_padded_w(l);
}
static inline int hcnn_conv_shifted_columns(const hcnn_conv_desc *l)
{
    return l->g.oh * hcnn_conv_padded_w(l);
}
/* the padded input, plus the kw - 1 floats the last tap reads past it */
static inline size_t hcnn_conv_padded_floats(const hcnn_conv_desc *l)
{
    return hcnn_round_up16(l->g.c * hcnn_conv_padded_plane(l) + (size_t)l->g.kw - 1);
}
static inline size_t hcnn_conv_padded_out_floats(const hcnn_conv_desc *l)
{
    return hcnn_round_up16((size_t)l->out_c * hcnn_conv_shifted_columns(l));
}
static inline size_t hcnn_conv_tap_offset(const hcnn_conv_desc *l, int t)
{
    return (size_t)(t / l->g.kw) * hcnn_conv_padded_w(l) + t % l->g.kw;
}

/* One thread's slot: a group's columns, its GEMM output (groups of several
 * images), dY^T (transposed weight gradient), the padded planes and the
 * padded-width output (shifted windows); NULL where the plan uses none.
 * After the nt slots: the plan's weight-gradient partial sums ([Cout][K],
 * or [K][Cout] if transposed), a [Cout][K] buffer to transpose them back,
 * the taps' weights W_t = W[:, :, ki, kj] ([kh*kw][Cout][C]). */
typedef struct hcnn_conv_slot {
    float *col, *out, *dyt, *pad, *ext;
} hcnn_conv_slot;

hcnn_conv_slot hcnn_conv_slot_at(const hcnn_conv_desc *l, const hcnn_conv_plan *p, float *ws, int t);
float *hcnn_conv_partial(const hcnn_conv_desc *l, const hcnn_conv_plan *p, float *ws, int chunk);
float *hcnn_conv_dw_buffer(const hcnn_conv_desc *l, const hcnn_conv_plan *p, float *ws);
float *hcnn_conv_shifted_weights(const hcnn_conv_desc *l, const hcnn_conv_plan *p, float *ws);

/* The geometry of output rows [oy0, oy0 + rows): the layer's, with oh =
 * rows and the padding moved up by oy0 * sh, so that im2col writes just
 * that block's columns. */
hcnn_conv_geom hcnn_conv_row_block(const hcnn_conv_desc *l, int oy0, int rows);


/* The table's conv_workspace and conv_gemms (conv_plan.c), conv_fwd,
 * conv_bwd and its halves (conv.c) */
size_t hcnn_cpu_conv_workspace(const hcnn_backend *be, const hcnn_conv_desc *l,
                               const hcnn_exec *ctx, int capacity);
void hcnn_cpu_conv_gemms(const hcnn_backend *be, const hcnn_conv_desc *l, const hcnn_exec *ctx,
                         int n, int unit, int need_dx, hcnn_gemm_list *gl);
void hcnn_cpu_conv_describe(const hcnn_backend *be, const hcnn_conv_desc *l,
                            const hcnn_exec *ctx, int n, char *buf, size_t cap);
int hcnn_cpu_conv_fwd(const hcnn_backend *be, const hcnn_conv_desc *l, const hcnn_exec *ctx,
                      const float *x, const float *w, const float *b, float *y, int n);
int hcnn_cpu_conv_bwd(const hcnn_backend *be, const hcnn_conv_desc *l, const hcnn_exec *ctx,
                      const float *x, const float *w, const float *dy, float *dw, float *db,
                      float *dx, int dx_acc, int n);
int hcnn_cpu_conv_bwd_filter(const hcnn_backend *be, const hcnn_conv_desc *l,
                             const hcnn_exec *ctx, const float *x, const float *dy, float *dw,
                             float *db, int n);
int hcnn_cpu_conv_bwd_data(const hcnn_backend *be, const hcnn_conv_desc *l, const hcnn_exec *ctx,
                           const float *w, const float *dy, float *dx, int dx_acc, int n);

#endif
