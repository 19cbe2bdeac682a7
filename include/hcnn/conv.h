/* The convolution plan: how a convolution runs n images.  Made in one place
 * (src/layers/conv_plan.c); the convolution executes it, the network sizes
 * workspaces from it, the profile times its GEMM list.
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
 * src/cpu/gemm.c cuts products by shape).  When n is small, images are
 * split into items (rows, channels) so that a rank with fewer images than
 * threads still has work for them.  The measurements behind every
 * threshold are in docs/performance.md. */
#ifndef HCNN_CONV_H
#define HCNN_CONV_H

#include "hcnn/layer.h"

typedef struct hcnn_conv_plan {
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

void hcnn_conv_plan_make(const hcnn_layer *l, const hcnn_ctx *ctx, int n, hcnn_conv_plan *p);

/* Workspace floats of the per-thread path for n images on nt threads (0:
 * conv_algo never takes it for this layer). */
size_t hcnn_conv_per_thread_ws(const hcnn_layer *l, const hcnn_ctx *ctx, int n, int nt);
/* Whether one-image groups of this layer take shifted windows: stride 1,
 * C >= 16, at most 1/16 of the padded width discarded. */
int hcnn_conv_shifted(const hcnn_layer *l);

#endif
