/* A network: the sequence of blocks from the model spec, all parameters in
 * one contiguous buffer and all gradients in another (per-layer views, as
 * in llm.c), so allreduce buckets, checkpoints and pipeline-stage ownership
 * are offset arithmetic.  The buffers are the backend's memory; the host
 * fills and reads them only through the backend (hcnn_net_init, and the
 * checkpoints' upload and download).  Forward and backward over a range of
 * blocks run it as one chain (src/model/pass.c). */
#ifndef HCNN_NET_H
#define HCNN_NET_H

#include <stddef.h>
#include <string.h>
#include <stdint.h>

#include "hcnn/layer.h"
#include "hcnn/model_spec.h"

#define HCNN_TENSOR_NAME_MAX 160

/* One named tensor (parameter or batch-norm statistic), PyTorch-style name
 * such as "layer1.0.conv1.weight" or "bn1.running_mean". */
typedef struct hcnn_tensor_info {
    char name[HCNN_TENSOR_NAME_MAX];
    int ndim;
    int dims[4];
    size_t count;
    size_t offset;       /* into params (is_state == 0) or state (is_state == 1) */
    int is_state;
    int layer;           /* top-level block owning it (pipeline stage ownership) */
} hcnn_tensor_info;

/* A batch-norm running variance: its values must not be negative (loaders
 * refuse a file that says otherwise). */
static inline int hcnn_tensor_is_variance(const hcnn_tensor_info *t)
{
    const size_t len = strlen(t->name), suffix = sizeof "running_var" - 1;
    return t->is_state && len >= suffix && !strcmp(t->name + len - suffix, "running_var");
}

/* Floats after the parameters' gradients in net->grads: the per-step
 * agreement of the data-parallel ranks (src/train/train.c) rides there on
 * the first gradient bucket's allreduce instead of a latency-bound
 * allreduce of its own (grad_sync.h). */
#define HCNN_GRAD_TAIL 4

/* 128 MiB of im2col columns: a network's chunk_floats when the run sets none */
#define HCNN_DEFAULT_CHUNK_FLOATS ((size_t)32 << 20)

typedef struct hcnn_net {
    const hcnn_backend *be;
    int in_c, in_h, in_w, classes;
    int nlayers;
    hcnn_layer *layers;          /* top-level blocks */
    int nids;                    /* layers including residual children (ids 0..nids-1) */

    float *params, *grads;       /* nparams each, backend memory; grads has
                                    HCNN_GRAD_TAIL floats more, see below */
    size_t nparams;
    float *state;                /* batch-norm running statistics */
    size_t nstate;

    hcnn_tensor_info *tensors;
    int ntensors;

    uint64_t model_hash;         /* hash of the architecture (checkpoint check), version 2 */
    uint64_t model_hash_v1;      /* the same as version 1 hashed it (older checkpoints) */
    size_t chunk_floats;         /* cap on one im2col chunk (0: HCNN_DEFAULT_CHUNK_FLOATS) */
    hcnn_conv_algo conv_algo;    /* how convolutions walk the mini-batch */
} hcnn_net;

/* Build from the spec (shape inference, buffers, views, tensor names).
 * Parameters are left zero: call hcnn_net_init. */
int hcnn_net_create(hcnn_net *net, const hcnn_model_spec *spec, const hcnn_backend *be,
                    const char *cfg_path);
void hcnn_net_free(hcnn_net *net);

/* Every layer's initial parameters and statistics (its init operation:
 * He or Xavier weights, zero biases, batch-norm gamma 1, beta 0, running
 * variance 1) from one seeded stream, written on the host and uploaded. */
int hcnn_net_init(hcnn_net *net, hcnn_init init, uint64_t seed);

/* The tensor named by name[0..len) (is_state: 0 parameters, 1 statistics,
 * -1 either), or NULL. */
const hcnn_tensor_info *hcnn_net_find_tensor(const hcnn_net *net, const char *name, size_t len,
                                             int is_state);

/* Parameters owned by blocks [first, last): [off, off + count). */
void hcnn_net_param_range(const hcnn_net *net, int first, int last, size_t *off, size_t *count);

/* Batch-norm statistics owned by blocks [first, last): [off, off + count). */
void hcnn_net_state_range(const hcnn_net *net, int first, int last, size_t *off, size_t *count);

/* ---- activations of one (micro-)batch for blocks [first, last) ---- */
typedef struct hcnn_acts {
    const hcnn_backend *be;
    int first, last;
    int capacity;                /* samples */
    float **y;                   /* y[i - first]: output of block i */
    float **aux;                 /* aux[i - first] */
    float *buf;
    size_t floats;               /* buf's, and x_layout's if any: the memory they take */
    /* An NHWC backend's (include/hcnn/backend.h), for the first block: the
     * input as that backend lays it out, converted by forward, read by
     * backward (NULL otherwise) */
    float *x_layout;
} hcnn_acts;

/* Refuses (with a message) a capacity whose activation tensors in blocks
 * [first, last) would pass HCNN_MAX_SAMPLE_FLOATS values: checked before
 * any buffer sized by it is allocated. */
int hcnn_net_check_capacity(const hcnn_net *net, int first, int last, int capacity);
/* The same test without a message. */
int hcnn_net_capacity_ok(const hcnn_net *net, int first, int last, int capacity);
int hcnn_acts_alloc(hcnn_acts *a, const hcnn_net *net, int first, int last, int capacity);
void hcnn_acts_free(hcnn_acts *a);

/* Scratch shared by all micro-batches: kernel workspace, residual
 * temporaries and the two gradient ping-pong buffers between blocks. */
typedef struct hcnn_scratch {
    hcnn_ctx ctx;                /* ctx.be owns the buffers */
    float *g[2];
    size_t g_floats;
    int capacity;
    /* whole-network execution (src/model/pass.c): for each of up to `units`
     * work units, a gradient buffer and copies of the layers of
     * [first, last) whose gradient views point into it (NULL: not set up) */
    int units;
    int first, last;
    float *ugrads;
    hcnn_layer *ulayers;
} hcnn_scratch;

int hcnn_scratch_alloc(hcnn_scratch *s, const hcnn_net *net, int first, int last, int capacity);
void hcnn_scratch_free(hcnn_scratch *s);

/* Forward blocks [first, last) on n samples of x; output in
 * acts->y[last - 1 - first]. */
int hcnn_net_forward(hcnn_net *net, const hcnn_ctx *ctx, hcnn_acts *acts, const float *x, int n);
/* Backward through blocks [first, last) given dy (gradient of the last
 * block's output); accumulates into net->grads; writes dx (gradient of x)
 * unless dx is NULL.  block_done (may be NULL) is called after each block's
 * backward, in descending block order, e.g. to start the allreduce of
 * gradients that are complete; a non-zero return stops backward. */
typedef int (*hcnn_block_done_fn)(void *arg, int block);
int hcnn_net_backward(hcnn_net *net, hcnn_scratch *s, hcnn_acts *acts, const float *x,
                      const float *dy, float *dx, int n, hcnn_block_done_fn block_done,
                      void *arg);

static inline const float *hcnn_acts_output(const hcnn_acts *a)
{
    return a->y[a->last - 1 - a->first];
}

/* Samples of a work unit when n samples go through blocks [first, last)
 * by whole-network execution (every block of the network per-sample,
 * whichever blocks the range holds, and conv_algo not batched: each unit
 * carried through all the blocks by one thread), or 0 when they go block
 * by block. */
int hcnn_net_unit_images(const hcnn_net *net, const hcnn_ctx *ctx, int first, int last, int n);

/* Largest per-sample activation (input or output) of blocks [first, last). */
size_t hcnn_net_max_act(const hcnn_net *net, int first, int last);

/* ---- the GEMMs of a pass (src/model/gemms.c) ---------------------------- */

/* Median of reps (<= 5) timings of the GEMM list g[0, ng) on be, on scratch
 * buffers, each run of per-thread shapes issued by all threads at once as
 * the layer does (also the per-block profile's raw-GEMM reference). */
double hcnn_time_gemms(const hcnn_backend *be, const hcnn_gemm_shape *g, int ng, int reps);

/* The GEMMs of one training pass (forward and backward) of blocks [first,
 * last) on n samples, as the layers issue them, merged by shape: calls
 * counts those of the busiest thread (all threads run theirs at once), hash
 * identifies the list (shapes and counts).  reps > 0: every shape timed
 * (hcnn_time_gemms, median of reps <= 5), seconds = sum of calls x time:
 * the BLAS kernels' measurement (src/blas/). */
typedef struct hcnn_pass_gemms {
    int shapes;
    double calls, flops, seconds;
    uint64_t hash;
} hcnn_pass_gemms;

int hcnn_net_pass_gemms(const hcnn_net *net, const hcnn_ctx *ctx, int first, int last, int n,
                        int reps, hcnn_pass_gemms *out);

#endif
