/* Layers: forward and backward of each block kind.
 *
 * A layer does not own memory.  Its parameters and gradients are views
 * into the network's two contiguous buffers; what it saves for backward
 * ("aux": max-pool argmax, dropout mask, batch-norm mean/invstd, the inner
 * activations of a residual block) lives in an activation arena owned by
 * the caller, one per micro-batch, so a pipeline can keep several in
 * flight.  Transient scratch (im2col columns) comes from the context. */
#ifndef HCNN_LAYER_H
#define HCNN_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "hcnn/backend.h"
#include "hcnn/config.h"

/* Everything a forward/backward call needs besides its tensors. */
typedef struct hcnn_ctx {
    const hcnn_backend *be;
    float *ws;               /* kernel workspace (im2col columns, GEMM staging) */
    size_t ws_floats;
    float *tmp;              /* residual-block gradient temporaries */
    size_t tmp_floats;
    int training;            /* 1: batch statistics, dropout active */
    uint64_t seed;           /* run seed (dropout masks) */
    uint64_t step;           /* global optimiser step (dropout masks) */
    uint64_t first_sample;   /* epoch position of this batch's first sample */
    size_t max_chunk_floats; /* cap on one im2col chunk */
    hcnn_conv_algo conv_algo;
    /* called between GEMMs and sub-layers so that non-blocking communication
     * progresses during long layers (NULL: nothing to drive) */
    void (*poll)(void *arg);
    void *poll_arg;
    /* profiling (NULL: off): seconds accumulated per top-level block, and
     * per layer id for the children of residual blocks */
    double *prof_fwd, *prof_bwd;
    double *prof_child_fwd, *prof_child_bwd;
} hcnn_ctx;

static inline void hcnn_ctx_poll(const hcnn_ctx *ctx)
{
    if (ctx->poll)
        ctx->poll(ctx->poll_arg);
}

typedef struct hcnn_layer {
    hcnn_block_kind kind;
    char name[2 * HCNN_NAME_MAX];
    int id;                          /* unique within the network (dropout streams) */
    int in_c, in_h, in_w;            /* per-sample input shape */
    int out_c, out_h, out_w;         /* per-sample output shape */
    hcnn_conv_geom conv;             /* conv */
    hcnn_pool_geom pool;             /* max/avg/global pool */
    int has_bias;
    float p;                         /* dropout */
    float eps, momentum;             /* batch-norm */

    float *w, *b, *dw, *db;          /* parameter and gradient views (NULL if none) */
    size_t nw, nb;
    size_t param_off;                /* offset of w in the parameter buffer */
    size_t nparams;                  /* all parameters of the layer (incl. children) */
    float *running_mean, *running_var; /* batch-norm state views */
    size_t state_off, nstate;

    size_t aux_per_sample;           /* floats saved for backward, per sample */
    size_t aux_fixed;                /* floats saved for backward, per call */
    size_t ws_per_sample;            /* workspace floats per sample of a chunk */
    size_t tmp_per_sample;           /* gradient temporaries per sample */
    double flops_per_sample;         /* forward multiply-adds x 2 */

    /* residual block: body (conv, bn, relu, conv, bn) and projection
     * shortcut (conv 1x1, bn) or none (identity) */
    struct hcnn_layer *body;
    int nbody;
    struct hcnn_layer *proj;
    int nproj;
} hcnn_layer;

static inline size_t hcnn_layer_in_size(const hcnn_layer *l)
{
    return (size_t)l->in_c * l->in_h * l->in_w;
}
static inline size_t hcnn_layer_out_size(const hcnn_layer *l)
{
    return (size_t)l->out_c * l->out_h * l->out_w;
}
static inline size_t hcnn_layer_aux_size(const hcnn_layer *l, int n)
{
    return l->aux_per_sample * (size_t)n + l->aux_fixed;
}

/* Shape inference from the spec; fills geometry, sizes, FLOPs.  Errors
 * (e.g. a kernel larger than the padded input) name the block. */
int hcnn_layer_setup(hcnn_layer *l, const hcnn_block_spec *spec, int in_c, int in_h, int in_w,
                     const char *cfg_path, int index);

/* y = f(x) for n samples; aux receives what backward needs. */
int hcnn_layer_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                       int n);
/* Given dy, accumulate parameter gradients and write dx (dx may be NULL when
 * the input gradient is not needed, e.g. for the first layer). */
int hcnn_layer_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                        const float *aux, const float *dy, float *dx, int n);

/* per-kind implementations (src/layers/) */
void hcnn_conv_forward(const hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, int n);
void hcnn_conv_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *dy,
                        float *dx, int n);
/* hcnn_conv_backward, with dx added to instead of overwritten if dx_acc */
void hcnn_conv_backward_into(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *dy,
                             float *dx, int dx_acc, int n);
void hcnn_fc_forward(const hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, int n);
void hcnn_fc_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *dy,
                      float *dx, int n);
void hcnn_bn_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                     int n);
/* y = act(bn(x) + add), act = ReLU if relu (add may be NULL) */
void hcnn_bn_forward_fused(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *add,
                           int relu, float *y, float *aux, int n);
void hcnn_bn_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *aux,
                      const float *dy, float *dx, int n);
/* hcnn_bn_backward, dy being the gradient of the ReLU that followed if relu */
void hcnn_bn_backward_fused(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *aux,
                            const float *dy, int relu, float *dx, int n);
/* Whether layers[i], a batch-norm, and layers[i + 1] < end, a ReLU, run as
 * one pass each way: the forward writes the ReLU's output (the batch-norm's
 * own output is not written), the backward applies the ReLU's mask in the
 * batch-norm's pass; the ReLU itself does not run. */
int hcnn_bn_relu_fused(const hcnn_layer *layers, int i, int end);
int hcnn_residual_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y,
                          float *aux, int n);
int hcnn_residual_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                           const float *aux, const float *dy, float *dx, int n);

/* Images per im2col chunk so that the workspace stays bounded. */
int hcnn_conv_chunk(const hcnn_layer *l, const hcnn_ctx *ctx, int n);
/* Workspace floats of the per-thread path for nt threads (0 if the layer
 * never takes it under ctx->conv_algo). */
size_t hcnn_conv_per_thread_ws(const hcnn_layer *l, const hcnn_ctx *ctx, int nt);
/* 1 if per-thread groups compute the weight gradient transposed,
 * dW^T += col dY^T (GEMM [K][Cout][nb*P], no operand transposed) */
int hcnn_conv_dw_transposed(const hcnn_layer *l);
/* 1 if per-thread one-image groups compute the forward and dx by shifted
 * windows: one GEMM per tap on the zero-padded input, no columns */
int hcnn_conv_shifted(const hcnn_layer *l);
/* Columns of each of its tap GEMMs: the output rows on the padded width. */
int hcnn_conv_shifted_columns(const hcnn_layer *l);
/* Output rows per block of a one-image group's forward and weight-gradient
 * GEMMs (out_h: one block) */
int hcnn_conv_rows_per_block(const hcnn_layer *l);
/* Whether n images take the per-thread path (see src/layers/conv.c); *group
 * receives its images per GEMM, *nt its thread count. */
int hcnn_conv_per_thread(const hcnn_layer *l, const hcnn_ctx *ctx, int n, int *group, int *nt);

#endif
