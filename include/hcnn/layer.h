/* Layers: each block type's operations, registered in one table.
 *
 * A block type is a file src/layers/<type>.c defining hcnn_layer_<type>, an
 * hcnn_layer_ops (shape inference, forward, backward, and what else it
 * needs), and a line of HCNN_BLOCK_TYPES (include/hcnn/model_spec.h).  The
 * network, the chain runner, the profile and the strategies only call
 * through the table; none of them switches on the type.
 *
 * A layer does not own memory.  Its parameters and gradients are views into
 * the network's two contiguous buffers; what it saves for backward ("aux":
 * max-pool argmax, dropout mask, batch-norm mean/invstd, the inner
 * activations of a residual block) lives in an activation arena owned by
 * the caller, one per micro-batch, so a pipeline can keep several in
 * flight.  Transient scratch (im2col columns) comes from the context.  All
 * tensor math goes through the backend (include/hcnn/backend.h). */
#ifndef HCNN_LAYER_H
#define HCNN_LAYER_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "hcnn/backend.h"
#include "hcnn/common.h"
#include "hcnn/model_spec.h"

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
    /* 1: this call is one work unit of a larger decomposition, run on the
     * calling thread (whole-network execution): layers cut no items for
     * other threads */
    int in_unit;
    /* called between GEMMs and layers so that non-blocking communication
     * progresses during long passes (NULL: nothing to drive) */
    void (*poll)(void *arg);
    void *poll_arg;
    /* profiling (NULL: off): seconds accumulated per layer id */
    double *prof_fwd, *prof_bwd;
    /* nonzero: the weights do not change between the calls with this key
     * (the trainer's: one training step's passes); 0 (inference, tests,
     * whole-network units, whose threads would share a cache): backends
     * derive what they need from the weights at every call */
    uint64_t weights_key;
    /* Training: the table (backend.h, hcnn_bn_stats) in which a convolution
     * followed by a batch-norm gathers that batch-norm's statistics (the
     * scratch's; NULL: none), and the one a pass uses: set by the chain
     * (chain.c) for such a pair only, NULL otherwise. */
    hcnn_bn_stats *bn_stats_table;
    hcnn_bn_stats *bn_stats;
    /* 1: the convolution's forward also applies the ReLU after it (set by
     * the chain for that call, where the backend's conv_relu allows) */
    int conv_relu;
    /* called by the network's forward (pass.c) before block `block` runs,
     * with the last block before a whole-network pass: a sharded
     * optimiser's all-gathers bring that block's parameters (grad_sync.h);
     * NULL: nothing to wait for.  Not seen by the layers. */
    int (*before_block)(void *arg, int block);
    void *before_block_arg;
} hcnn_ctx;

static inline void hcnn_ctx_poll(const hcnn_ctx *ctx)
{
    if (ctx->poll)
        ctx->poll(ctx->poll_arg);
}

typedef struct hcnn_layer hcnn_layer;

/* The GEMMs a layer issues in a pass, for the profile's raw-GEMM
 * reference: hcnn_gemm_list (include/hcnn/backend.h; a convolution's are
 * its backend's). */

/* setup's answer for a spec whose geometry cannot apply to the input: the
 * caller prints one message naming the block, its keys and the input */
#define HCNN_LAYER_BAD_SHAPE (-1)

typedef struct hcnn_layer_ops {
    /* Shape inference: l->spec, l->in_* and the output shape (= input) are
     * set; fills the output shape, parameter and state counts (nw, nb,
     * nstate), saved floats (aux_*), workspace and temporaries per sample,
     * and forward FLOPs.  Returns HCNN_OK, HCNN_LAYER_BAD_SHAPE, or an
     * error code after its own message. */
    int (*setup)(hcnn_layer *l, const char *cfg_path, int index);
    /* y = f(x) for n samples; aux receives what backward needs */
    int (*forward)(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                   int n);
    /* Given dy, accumulate parameter gradients and write dx (dx NULL: the
     * input gradient is not needed, e.g. for the first layer). */
    int (*backward)(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                    const float *aux, const float *dy, float *dx, int n);

    /* Optional (NULL: not available). */
    /* y = act(f(x) + add), act = ReLU if relu (add may be NULL): the
     * epilogue a batch-norm fuses (the chain runner and residual blocks) */
    void (*forward_fused)(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *add,
                          int relu, float *y, float *aux, int n);
    /* backward, dy being the gradient of the ReLU that followed forward_fused */
    void (*backward_relu)(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *aux,
                          const float *dy, float *dx, int n);
    /* backward adding its input gradient to dx instead of overwriting it */
    void (*backward_acc)(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *dy,
                         float *dx, int n);
    /* Initial parameters into host buffers: w (nw), b (nb), state (nstate),
     * from the seeded generator (one stream, layers in order). */
    void (*init)(const hcnn_layer *l, hcnn_init init, hcnn_rng *rng, float *w, float *b,
                 float *state);
    /* Dimensions of the weight tensor in PyTorch's order; returns ndim
     * (NULL: one dimension of nw). */
    int (*weight_dims)(const hcnn_layer *l, int *dims);
    /* Workspace floats for n samples, as ctx runs it (NULL: none). */
    size_t (*workspace)(const hcnn_layer *l, const hcnn_ctx *ctx, int n);
    /* Workspace for n samples run on the calling thread as one work unit
     * (whole-network per-thread execution, ctx->in_unit; NULL: none). */
    size_t (*thread_workspace)(const hcnn_layer *l, const hcnn_ctx *ctx, int n);
    /* The GEMMs of a pass over n samples; unit > 0: whole-network execution,
     * the GEMMs of one work unit of that many samples (every thread runs
     * its own units at once). */
    void (*gemms)(const hcnn_layer *l, const hcnn_ctx *ctx, int n, int unit, int need_dx,
                  hcnn_gemm_list *g);
    /* How the backend runs this layer for n samples: "name: details", the
     * name without spaces (NULL: nothing to say; the convolution's plan). */
    void (*describe)(const hcnn_layer *l, const hcnn_ctx *ctx, int n, char *buf, size_t cap);

    /* Each sample is computed on its own, from its own input and aux:
     * whole-network per-thread execution may split the batch between
     * threads through this layer (batch-norm couples the samples). */
    int per_sample;
    /* The ReLU that a preceding forward_fused absorbs (forward and backward). */
    int is_relu;
    /* It reads its input's features in NCHW order (a fully connected
     * layer's weights, dropout's mask stream): a backend whose activations
     * are NHWC (include/hcnn/backend.h) cannot run it on an input of more
     * than one pixel and channel, which then needs a flatten before it. */
    int nchw_features;
} hcnn_layer_ops;

/* The table entry of every type: hcnn_layer_conv, hcnn_layer_bn, ... */
#define HCNN_LAYER_OPS_DECL_(e, type, prefix) extern const hcnn_layer_ops hcnn_layer_##type;
HCNN_BLOCK_TYPES(HCNN_LAYER_OPS_DECL_)
#undef HCNN_LAYER_OPS_DECL_

/* The operations of a block type (NULL for an unknown kind; registry.c). */
const hcnn_layer_ops *hcnn_layer_ops_of(hcnn_block_kind kind);

struct hcnn_layer {
    hcnn_block_kind kind;
    const hcnn_layer_ops *ops;
    hcnn_block_spec spec;            /* as configured: each type reads its own keys */
    char name[2 * HCNN_NAME_MAX];
    int id;                          /* unique within the network (dropout streams, profile) */
    /* its NVTX ranges' names, forward and backward, made once by the network
     * (src/core/trace.h: empty in a build without NVTX) */
    char trace[2][2 * HCNN_NAME_MAX + 32];
    int in_c, in_h, in_w;            /* per-sample input shape */
    int out_c, out_h, out_w;         /* per-sample output shape */
    hcnn_conv_geom conv;             /* conv */
    hcnn_pool_geom pool;             /* max/avg/global pool */
    int has_bias;
    float p;                         /* dropout */
    float eps, momentum;             /* batch-norm */
    hcnn_conv_cache conv_cache;      /* conv: what the backend keeps (released by hcnn_layer_free) */

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

    /* layers inside this one (a residual block: its body, then its
     * projection shortcut if any), in the order their parameters are laid
     * out; body and proj point into children */
    hcnn_layer *children;
    int nchildren;
    hcnn_layer *body, *proj;
    int nbody, nproj;
};

/* Whether a layer's passes are GEMMs (priced by FLOPs; hcnn plan's node
 * model) rather than streams over its tensors (priced by bytes). */
static inline int hcnn_layer_is_gemm(const hcnn_layer *l)
{
    return l->kind == HCNN_BLOCK_CONV || l->kind == HCNN_BLOCK_FC;
}

/* The most floats one tensor of one sample (and, with the batch, one
 * activation tensor: hcnn_acts_alloc) may have: kernels index them with int. */
#define HCNN_MAX_SAMPLE_FLOATS INT_MAX

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

/* Shape inference from the spec through the type's setup, found in the
 * table (registry.c); errors (e.g. a kernel larger than the padded input)
 * name the block. */
int hcnn_layer_setup(hcnn_layer *l, const hcnn_block_spec *spec, int in_c, int in_h, int in_w,
                     const char *cfg_path, int index);
/* The same with the type's operations given (ops NULL: an unknown kind):
 * for a block made of blocks of known types (residual.c), which thus does
 * not reach back into the table that holds it (layer.c). */
int hcnn_layer_setup_as(hcnn_layer *l, const hcnn_layer_ops *ops, const hcnn_block_spec *spec,
                        int in_c, int in_h, int in_w, const char *cfg_path, int index);
/* Free what setup allocated (the children). */
void hcnn_layer_free(hcnn_layer *l);

/* He et al. 2015 (normal, std sqrt(2 / fan_in), for ReLU networks) or
 * Glorot & Bengio 2010 (uniform in +-sqrt(6 / (fan_in + fan_out))) weights
 * w[0, nw) from rng; biases b[0, nb) zero. */
void hcnn_init_weights(hcnn_init init, hcnn_rng *rng, size_t fan_in, size_t fan_out, float *w,
                       size_t nw, float *b, size_t nb);

/* Through the table. */
int hcnn_layer_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                       int n);
int hcnn_layer_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                        const float *aux, const float *dy, float *dx, int n);
/* Workspace floats of l and its children for n samples. */
size_t hcnn_layer_workspace(const hcnn_layer *l, const hcnn_ctx *ctx, int n);
size_t hcnn_layer_thread_workspace(const hcnn_layer *l, const hcnn_ctx *ctx, int n);
/* The GEMMs of l and its children (children always compute their dx). */
void hcnn_layer_gemms(const hcnn_layer *l, const hcnn_ctx *ctx, int n, int unit, int need_dx,
                      hcnn_gemm_list *g);
/* The backend operation a layer's training passes are (backend.h's
 * hcnn_op, for pass_pieces): prev the layer before it in its chain (NULL:
 * the first), need_dx whether its backward computes the input gradient; d
 * the convolution's description op points at.  0: none of its own (a ReLU
 * inside the layer before it, a residual block: its children). */
int hcnn_layer_op(const hcnn_layer *l, const hcnn_layer *prev, int need_dx, hcnn_conv_desc *d,
                  hcnn_op *op);

/* ---- the chain runner (src/layers/chain.c) --------------------------------
 * A sequence of layers run one after another, each timed (ctx->prof_*) and
 * wrapped in its LIKWID region; a layer with forward_fused followed by a
 * ReLU (is_relu) runs as one pass each way: the forward writes the ReLU's
 * output (y[j + 1]; y[j] is not written), the backward applies the ReLU's
 * mask, and the ReLU itself does not run.  On a backend with conv_relu
 * (backend.h) a convolution followed by a ReLU runs the ReLU in its
 * forward (writing y[j + 1], not y[j]); the ReLU's backward runs as its
 * own, from its output.  The network is one chain, a
 * residual block two chains and an addition. */

/* The last layer's output fused with the chain's consumer: if the last
 * layer has forward_fused, it writes act(f(x) + add) to out (act = ReLU
 * if relu) and *done is set; otherwise the caller finishes. */
typedef struct hcnn_chain_epilogue {
    const float *add;
    int relu;
    float *out;
    int done;
} hcnn_chain_epilogue;

/* Forward of layers[0, count) on x: layer j writes y[j] and aux[j]. */
int hcnn_chain_forward(hcnn_layer *layers, int count, const hcnn_ctx *ctx, const float *x,
                       float *const *y, float *const *aux, int n, hcnn_chain_epilogue *epi);

/* Called after each layer's backward, last layer first (and for a fused
 * ReLU before the layer it is fused into); a non-zero return stops. */
typedef int (*hcnn_chain_done_fn)(void *arg, int j);

/* Backward of layers[0, count) from dy (the gradient of the last output)
 * to dx (NULL: not needed; added to if dx_acc, which the first layer must
 * support through backward_acc), through the ping-pong buffers bufs[0],
 * bufs[1]; inputs are x and y[j - 1], as the forward left them; ctx is
 * polled after each layer. */
int hcnn_chain_backward(hcnn_layer *layers, int count, const hcnn_ctx *ctx, const float *x,
                        float *const *y, float *const *aux, const float *dy, float *dx,
                        int dx_acc, float *const bufs[2], int n, hcnn_chain_done_fn done,
                        void *arg);

#endif
