/* The convolution plan: how a convolution runs n images.  Made in one place
 * (src/layers/conv_plan.c); the convolution executes it, the network sizes
 * workspaces from it, the profile times its GEMM list.
 *
 * Two ways to walk the mini-batch (config key conv_algo):
 * - batched: all threads on each operation (im2col, one GEMM, layout
 *   change) over chunks of the batch as large as im2col_mb allows;
 * - per-thread groups: each thread takes a contiguous share of the images
 *   and runs im2col + single-threaded GEMMs on small groups of them, its
 *   weight gradient in a private partial; the partials are added in thread
 *   order afterwards.  One-image groups of stride-1 layers with wide planes
 *   skip im2col/col2im: one GEMM per kernel tap on the zero-padded input
 *   ("shifted windows").
 * auto takes per-thread groups for planes of 64 outputs or more.  The
 * measurements behind every threshold are in docs/performance.md. */
#ifndef HCNN_CONV_H
#define HCNN_CONV_H

#include "hcnn/layer.h"

typedef struct hcnn_conv_plan {
    int per_thread;     /* 1: per-thread image groups; 0: batched chunks */
    int nt;             /* threads of the per-thread path */
    int group;          /* images per GEMM: a per-thread group, or a batched chunk */
    int shifted;        /* one-image per-thread groups by shifted windows (forward, dx) */
    int dw_transposed;  /* per-thread weight gradient as dW^T += col dY^T */
    int rows_per_block; /* one-image groups: output rows per forward / dW GEMM */
} hcnn_conv_plan;

void hcnn_conv_plan_make(const hcnn_layer *l, const hcnn_ctx *ctx, int n, hcnn_conv_plan *p);

/* Workspace floats of the per-thread path on nt threads (0: conv_algo
 * never takes it for this layer). */
size_t hcnn_conv_per_thread_ws(const hcnn_layer *l, const hcnn_ctx *ctx, int nt);
/* Whether per-thread one-image groups of this layer take shifted windows:
 * stride 1, C >= 16, at most 1/16 of the padded width discarded. */
int hcnn_conv_shifted(const hcnn_layer *l);

#endif
