/* Between the convolution's plan (conv_plan.c) and its execution (conv.c):
 * the sizes both compute with and the layout of the workspace.
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

#include "hcnn/conv.h"

static inline size_t hcnn_round_up16(size_t f) { return (f + 15) & ~(size_t)15; }

static inline int hcnn_conv_k(const hcnn_layer *l) { return l->conv.c * l->conv.kh * l->conv.kw; }
static inline int hcnn_conv_p(const hcnn_layer *l) { return l->conv.oh * l->conv.ow; }

static inline int hcnn_conv_padded_w(const hcnn_layer *l) { return l->conv.w + 2 * l->conv.pw; }
static inline size_t hcnn_conv_padded_plane(const hcnn_layer *l)
{
    return (size_t)(l->conv.h + 2 * l->conv.ph) * hcnn_conv_padded_w(l);
}
static inline int hcnn_conv_shifted_columns(const hcnn_layer *l)
{
    return l->conv.oh * hcnn_conv_padded_w(l);
}
/* the padded input, plus the kw - 1 floats the last tap reads past it */
static inline size_t hcnn_conv_padded_floats(const hcnn_layer *l)
{
    return hcnn_round_up16(l->conv.c * hcnn_conv_padded_plane(l) + (size_t)l->conv.kw - 1);
}
static inline size_t hcnn_conv_padded_out_floats(const hcnn_layer *l)
{
    return hcnn_round_up16((size_t)l->out_c * hcnn_conv_shifted_columns(l));
}
static inline size_t hcnn_conv_tap_offset(const hcnn_layer *l, int t)
{
    return (size_t)(t / l->conv.kw) * hcnn_conv_padded_w(l) + t % l->conv.kw;
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

hcnn_conv_slot hcnn_conv_slot_at(const hcnn_layer *l, const hcnn_conv_plan *p, float *ws, int t);
float *hcnn_conv_partial(const hcnn_layer *l, const hcnn_conv_plan *p, float *ws, int chunk);
float *hcnn_conv_dw_buffer(const hcnn_layer *l, const hcnn_conv_plan *p, float *ws);
float *hcnn_conv_shifted_weights(const hcnn_layer *l, const hcnn_conv_plan *p, float *ws);

/* The geometry of output rows [oy0, oy0 + rows): the layer's, with oh =
 * rows and the padding moved up by oy0 * sh, so that im2col writes just
 * that block's columns. */
hcnn_conv_geom hcnn_conv_row_block(const hcnn_layer *l, int oy0, int rows);

/* The table's workspace, thread_workspace and gemms operations */
size_t hcnn_conv_workspace(const hcnn_layer *l, const hcnn_ctx *ctx, int capacity);
size_t hcnn_conv_thread_workspace(const hcnn_layer *l, const hcnn_ctx *ctx, int n);
void hcnn_conv_gemms(const hcnn_layer *l, const hcnn_ctx *ctx, int n, int unit, int need_dx,
                     hcnn_gemm_list *gl);

#endif
