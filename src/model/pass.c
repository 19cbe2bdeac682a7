/* Forward and backward over a range of blocks (a whole model, or one
 * pipeline stage) as one chain (src/layers/chain.c), and the scratch they
 * share (include/hcnn/net.h).
 *
 * Whole-network execution: when every block of the range computes each
 * sample on its own (no batch-norm statistics, no residual blocks:
 * LeNet-class networks), the samples are cut into work units of a size
 * fixed by n (unit_images), and each unit is carried through all the
 * blocks, forward and backward, by one thread: one parallel region per
 * pass, each unit's samples in its thread's cache.  Unit u accumulates its
 * parameter gradients into a buffer of its own, through copies of the
 * layers whose gradient views point there; the buffers are added to
 * net->grads in unit order.  The units and their order depend on n only,
 * so the result is the same bits whatever the thread count.
 * conv_algo: batched turns it off. */
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/net.h"
#include "../core/trace.h"

/* ---- whole-network execution: when, and its units -------------------------- */

/* The samples of a unit and the units of a pass of n: the backend's
 * choice (include/hcnn/backend.h, unit_images: a size fixed by n; 0 when
 * the backend runs block by block, as a device does, or the pass has too
 * few samples). */
static int unit_images(const hcnn_net *net, int n) { return net->be->unit_images(net->be, n); }

static int units_of(const hcnn_net *net, int n)
{
    const int g = unit_images(net, n);
    return g > 0 ? (n + g - 1) / g : 0;
}

static int per_sample_blocks(const hcnn_net *net, int first, int last)
{
    for (int i = first; i < last; i++) {
        const hcnn_layer *l = &net->layers[i];
        if (!l->ops->per_sample || l->aux_fixed)
            return 0;
    }
    return 1;
}

/* Whether a network's blocks run this way, whatever the thread count:
 * every block of the network per-sample, and at most 256 MiB of units'
 * gradient buffers (a large network without batch-norm takes the per-block
 * path).  The whole network decides, not the blocks a pipeline stage
 * holds: the partition is measured, and it must not move bits (the small
 * ResNet's last stage of dropout .. fc alone ran by units, one holding a
 * residual block too block by block, and fc's gradient differed by 1e-7
 * between partitions [0, 4] and [0, 6] at 64 samples a micro-batch). */
static int whole_net_eligible(const hcnn_net *net, hcnn_conv_algo algo)
{
    const double unit_grad_bytes =
        (double)HCNN_MAX_UNITS * (double)(net->nparams + 1) * sizeof(float);
    return algo != HCNN_CONV_BATCHED && unit_grad_bytes <= 256.0 * 1048576.0 &&
           per_sample_blocks(net, 0, net->nlayers);
}

/* Workspace one thread needs to run a unit of up to `images` samples. */
static size_t unit_ws(const hcnn_net *net, const hcnn_ctx *ctx, int first, int last, int images)
{
    size_t need = 0;
    for (int i = first; i < last; i++) {
        const size_t w = hcnn_layer_thread_workspace(&net->layers[i], ctx, images);
        need = w > need ? w : need;
    }
    return (need + 31) & ~(size_t)15;
}

int hcnn_net_unit_images(const hcnn_net *net, const hcnn_ctx *ctx, int first, int last, int n)
{
    (void)first, (void)last; /* the network decides, not the range (whole_net_eligible) */
    return whole_net_eligible(net, ctx->conv_algo) ? unit_images(net, n) : 0;
}

/* ---- scratch ---------------------------------------------------------------- */

/* Floats of the batch-norm statistics' table (include/hcnn/backend.h,
 * hcnn_bn_stats) for capacity samples: the most any batch-norm of blocks
 * [first, last) takes, bands of at least one output row. */
static size_t stats_floats(const hcnn_layer *l, int count, int capacity)
{
    size_t most = 0;
    for (int i = 0; i < count; i++) {
        const hcnn_layer *c = &l[i];
        size_t need = c->kind == HCNN_BLOCK_BN ? (size_t)capacity * c->out_c * c->out_h * 2 : 0;
        const size_t inner = stats_floats(c->children, c->nchildren, capacity);
        need = inner > need ? inner : need;
        most = need > most ? need : most;
    }
    return most;
}

int hcnn_scratch_alloc(hcnn_scratch *s, const hcnn_net *net, int first, int last, int capacity)
{
    const hcnn_backend *be = net->be;
    memset(s, 0, sizeof *s);
    const int rc = hcnn_net_check_capacity(net, first, last, capacity);
    if (rc)
        return rc;
    s->capacity = capacity;
    s->ctx.be = be;
    s->ctx.max_chunk_floats = net->chunk_floats ? net->chunk_floats : HCNN_DEFAULT_CHUNK_FLOATS;
    s->ctx.conv_algo = net->conv_algo;
    size_t ws = 0, tmp = 0;
    for (int i = first; i < last; i++) {
        const hcnn_layer *l = &net->layers[i];
        const size_t need = hcnn_layer_workspace(l, &s->ctx, capacity);
        ws = need > ws ? need : ws;
        tmp = l->tmp_per_sample * capacity > tmp ? l->tmp_per_sample * capacity : tmp;
    }
    const int nt = be->threads(be);
    const int whole = whole_net_eligible(net, net->conv_algo) &&
                      unit_images(net, capacity) > 0;
    if (whole) { /* a slice for each thread, for a unit of the largest size */
        const size_t per = unit_ws(net, &s->ctx, first, last, unit_images(net, capacity));
        ws = (size_t)nt * per > ws ? (size_t)nt * per : ws;
    }
    s->g_floats = hcnn_net_max_act(net, first, last) * capacity;
    /* each after the one before it succeeded: one message for the first
     * that fails (the second gradient buffer repeated the first's) */
    s->ctx.ws_floats = ws, s->ctx.tmp_floats = tmp;
    if ((s->ctx.ws = be->alloc(be, sizeof(float) * (ws + 16), "im2col workspace")) &&
        (s->ctx.tmp = be->alloc(be, sizeof(float) * (tmp + 16), "residual gradient buffers")) &&
        (s->g[0] = be->alloc(be, sizeof(float) * (s->g_floats + 16), "gradient buffer")))
        s->g[1] = be->alloc(be, sizeof(float) * (s->g_floats + 16), "gradient buffer");
    if (!s->ctx.ws || !s->ctx.tmp || !s->g[0] || !s->g[1]) {
        hcnn_scratch_free(s);
        return HCNN_ENOMEM;
    }
    const size_t stats = stats_floats(net->layers + first, last - first, capacity);
    if (stats) {
        hcnn_bn_stats *t = hcnn_calloc(sizeof *t, "batch-norm statistics table");
        if (t)
            t->part = be->alloc(be, sizeof(float) * (stats + 16), "batch-norm statistics");
        if (!t || !t->part) {
            hcnn_free(t);
            hcnn_scratch_free(s);
            return HCNN_ENOMEM;
        }
        t->cap = stats;
        s->ctx.bn_stats_table = t;
    }
    if (!whole)
        return HCNN_OK;
    int units = 0; /* the most units of any pass up to capacity */
    for (int n = 1; n <= capacity; n++)
        units = units_of(net, n) > units ? units_of(net, n) : units;
    const int nl = last - first;
    s->ugrads = be->alloc(be, sizeof(float) * (net->nparams + 1) * (size_t)units, "units' gradients");
    s->ulayers = hcnn_alloc(sizeof(hcnn_layer) * (size_t)nl * (size_t)units,
                            "units' layer views");
    if (!s->ugrads || !s->ulayers) {
        hcnn_scratch_free(s);
        return HCNN_ENOMEM;
    }
    for (int u = 0; u < units; u++)
        for (int i = first; i < last; i++) {
            hcnn_layer *c = &s->ulayers[(size_t)u * nl + (i - first)];
            float *g = s->ugrads + (size_t)u * (net->nparams + 1);
            *c = net->layers[i];
            if (c->dw)
                c->dw = g + (c->dw - net->grads);
            if (c->db)
                c->db = g + (c->db - net->grads);
        }
    s->units = units, s->first = first, s->last = last;
    return HCNN_OK;
}

void hcnn_scratch_free(hcnn_scratch *s)
{
    const hcnn_backend *be = s->ctx.be;
    if (be) {
        be->free(be, s->ctx.ws);
        be->free(be, s->ctx.tmp);
        be->free(be, s->g[0]);
        be->free(be, s->g[1]);
        be->free(be, s->ugrads);
        if (s->ctx.bn_stats_table)
            be->free(be, s->ctx.bn_stats_table->part);
    }
    hcnn_free(s->ctx.bn_stats_table);
    hcnn_free(s->ulayers);
    memset(s, 0, sizeof *s);
}

/* ---- forward / backward ------------------------------------------------ */

/* The outputs and aux of blocks [acts->first, acts->last) from sample i0
 * on, given the layers (layers[i] for block i). */
static void block_bufs(const hcnn_acts *acts, const hcnn_layer *layers, int i0, float **y,
                       float **aux)
{
    for (int i = acts->first; i < acts->last; i++) {
        const int k = i - acts->first;
        y[k] = acts->y[k] + (size_t)i0 * hcnn_layer_out_size(&layers[i]);
        aux[k] = acts->aux[k] + (size_t)i0 * layers[i].aux_per_sample;
    }
}

/* Forward of blocks [acts->first, acts->last) on samples [i0, i1) of x. */
/* The chain's layer j is block first + j (the context's before_block). */
typedef struct before_block_call {
    int (*fn)(void *arg, int block);
    void *arg;
    int first;
} before_block_call;

static int chain_before(void *arg, int j)
{
    const before_block_call *c = arg;
    return c->fn(c->arg, c->first + j);
}

static int forward_range(const hcnn_net *net, hcnn_layer *layers, const hcnn_ctx *ctx,
                         hcnn_acts *acts, const float *x, int i0, int i1)
{
    float *y[HCNN_MAX_BLOCKS], *aux[HCNN_MAX_BLOCKS];
    block_bufs(acts, layers, i0, y, aux);
    const float *in = x + (size_t)i0 * hcnn_layer_in_size(&net->layers[acts->first]);
    hcnn_ctx c = *ctx;
    before_block_call call = {ctx->before_block, ctx->before_block_arg, acts->first};
    if (ctx->before_block)
        c.before_block = chain_before, c.before_block_arg = &call;
    return hcnn_chain_forward(layers + acts->first, acts->last - acts->first, &c, in, y, aux,
                              i1 - i0, NULL);
}

/* The chain's layer j is block first + j. */
typedef struct block_done_call {
    hcnn_block_done_fn fn;
    void *arg;
    int first;
} block_done_call;

static int chain_done(void *arg, int j)
{
    const block_done_call *c = arg;
    return c->fn(c->arg, c->first + j);
}

/* Backward of blocks [acts->first, acts->last) on samples [i0, i1).  The
 * gradients between blocks go to g[0], g[1], alternately, from offset
 * i0 * gstride: gstride is the largest per-sample activation, so that
 * threads, which run through the blocks without waiting for each other,
 * never write over each other's samples when blocks differ in size. */
static int backward_range(const hcnn_net *net, hcnn_layer *layers, const hcnn_ctx *ctx,
                          float *const g[2], size_t gstride, hcnn_acts *acts, const float *x,
                          const float *dy, float *dx, int i0, int i1, hcnn_block_done_fn block_done,
                          void *arg)
{
    float *y[HCNN_MAX_BLOCKS], *aux[HCNN_MAX_BLOCKS];
    block_bufs(acts, layers, i0, y, aux);
    const size_t in_sz = hcnn_layer_in_size(&net->layers[acts->first]);
    const size_t out_sz = hcnn_layer_out_size(&net->layers[acts->last - 1]);
    float *const bufs[2] = {g[0] + (size_t)i0 * gstride, g[1] + (size_t)i0 * gstride};
    block_done_call call = {block_done, arg, acts->first};
    return hcnn_chain_backward(layers + acts->first, acts->last - acts->first, ctx,
                               x + (size_t)i0 * in_sz, y, aux, dy + (size_t)i0 * out_sz,
                               dx ? dx + (size_t)i0 * in_sz : NULL, 0, bufs, i1 - i0,
                               block_done ? chain_done : NULL, &call);
}

/* A pass of whole-network execution: each thread runs its units, each on
 * its workspace slice with its layers (forward: the network's; backward:
 * the unit's copies); only thread 0 profiles and drives communication. */
typedef struct net_job {
    hcnn_net *net;
    hcnn_scratch *s; /* backward only */
    const hcnn_ctx *ctx;
    hcnn_acts *acts;
    const float *x, *dy;
    float *dx;
    int n, units, unit_images;
    size_t slice;
    int rc[HCNN_MAX_UNITS]; /* each unit's */
} net_job;

/* Unit u on thread t. */
static int run_unit(net_job *j, int u, int t)
{
    const int i0 = u * j->unit_images;
    const int i1 = j->n - i0 < j->unit_images ? j->n : i0 + j->unit_images;
    hcnn_ctx c = *j->ctx;
    c.ws = j->ctx->ws + (size_t)t * j->slice;
    c.ws_floats = j->slice;
    c.in_unit = 1;
    c.first_sample += (uint64_t)i0; /* dropout masks follow the sample */
    c.before_block = NULL;           /* waited for before the units start */
    if (t != 0)
        c.poll = NULL, c.prof_fwd = c.prof_bwd = NULL;
    if (!j->s)
        return forward_range(j->net, j->net->layers, &c, j->acts, j->x, i0, i1);
    const hcnn_scratch *s = j->s;
    size_t off, count;
    hcnn_net_param_range(j->net, s->first, s->last, &off, &count);
    j->net->be->fill(j->net->be, s->ugrads + (size_t)u * (j->net->nparams + 1) + off, count, 0.0f);
    /* layers[i] is block i's copy for this unit */
    hcnn_layer *layers = s->ulayers + (size_t)u * (s->last - s->first) - s->first;
    const size_t gstride = s->g_floats / (size_t)s->capacity;
    return backward_range(j->net, layers, &c, s->g, gstride, j->acts, j->x, j->dy, j->dx, i0, i1,
                          NULL, NULL);
}

static void unit_thread(void *arg, int t, int nt)
{
    net_job *j = arg;
    const int a = (int)((long)j->units * t / nt), b = (int)((long)j->units * (t + 1) / nt);
    int rc = HCNN_OK;
    for (int u = a; u < b; u++)
        j->rc[u] = rc = rc ? rc : run_unit(j, u, t);
}

/* Runs the units of j->n samples, if blocks [acts->first, acts->last) take
 * whole-network execution (and, backward, s is set up for it): 1 and *rc,
 * else 0. */
/* Whether the pass runs as whole-network units */
static int units_wanted(const hcnn_net *net, const net_job *j)
{
    const hcnn_acts *a = j->acts;
    if (!whole_net_eligible(net, j->ctx->conv_algo) || !units_of(net, j->n))
        return 0;
    if (j->s && (!j->s->ulayers || j->s->first != a->first || j->s->last != a->last ||
                 units_of(net, j->n) > j->s->units))
        return 0;
    return units_of(net, j->n) <= HCNN_MAX_UNITS;
}

static int run_units(hcnn_net *net, net_job *j, int *rc)
{
    const int nt = net->be->threads(net->be);
    if (!units_wanted(net, j))
        return 0;
    j->units = units_of(net, j->n), j->unit_images = unit_images(net, j->n);
    j->slice = (j->ctx->ws_floats / (size_t)nt) & ~(size_t)15;
    net->be->parallel(net->be, unit_thread, j);
    *rc = HCNN_OK;
    for (int u = 0; u < j->units && !*rc; u++)
        *rc = j->rc[u];
    return 1;
}

static int net_forward(hcnn_net *net, const hcnn_ctx *ctx, hcnn_acts *acts, const float *x, int n)
{
    net_job j = {.net = net, .ctx = ctx, .acts = acts, .x = x, .n = n};
    int rc;
    /* whole-network units run every block at once: all parameters first */
    if (ctx->before_block && units_wanted(net, &j) &&
        (rc = ctx->before_block(ctx->before_block_arg, acts->last - 1)))
        return rc;
    if (run_units(net, &j, &rc))
        return rc;
    return forward_range(net, net->layers, ctx, acts, x, 0, n);
}

/* Inside an NVTX range (src/core/trace.h) around its layers' own. */
int hcnn_net_forward(hcnn_net *net, const hcnn_ctx *ctx, hcnn_acts *acts, const float *x, int n)
{
    if (n > acts->capacity)
        return hcnn_error("batch of %d samples exceeds the activation capacity %d", n,
                          acts->capacity);
    hcnn_trace_push("forward");
    if (acts->x_layout) { /* the first block's input, in the backend's layout */
        net->be->layout_from_nchw(net->be, x, acts->x_layout, n, net->in_c,
                                  net->in_h * net->in_w);
        x = acts->x_layout;
    }
    const int rc = net_forward(net, ctx, acts, x, n);
    hcnn_trace_pop();
    return rc;
}

/* net->grads += the units' gradients: every thread takes a slice of the
 * parameters and adds the buffers of units 0, 1, ... in that order, so
 * each element is summed in unit order whatever the slicing. */
typedef struct reduce_job {
    const hcnn_net *net;
    const hcnn_scratch *s;
    size_t off, count;
    int units;
} reduce_job;

static void reduce_thread(void *arg, int t, int nt)
{
    const reduce_job *j = arg;
    const size_t lo = j->off + j->count * (size_t)t / (size_t)nt;
    const size_t hi = j->off + j->count * (size_t)(t + 1) / (size_t)nt;
    for (int u = 0; u < j->units; u++)
        j->net->be->add_acc(j->net->be, j->s->ugrads + (size_t)u * (j->net->nparams + 1) + lo,
                            j->net->grads + lo, hi - lo);
}

static int net_backward(hcnn_net *net, hcnn_scratch *s, hcnn_acts *acts, const float *x,
                        const float *dy, float *dx, int n, hcnn_block_done_fn block_done,
                        void *arg)
{
    net_job j = {.net = net, .s = s, .ctx = &s->ctx, .acts = acts, .x = x, .dy = dy, .dx = dx,
                 .n = n};
    int rc;
    if (run_units(net, &j, &rc)) {
        if (rc)
            return rc;
        /* the units' gradients; then the blocks are complete, last first as
         * block_done expects */
        reduce_job r = {.net = net, .s = s, .units = j.units};
        hcnn_net_param_range(net, acts->first, acts->last, &r.off, &r.count);
        net->be->parallel(net->be, reduce_thread, &r);
        for (int i = acts->last - 1; block_done && i >= acts->first; i--)
            if ((rc = block_done(arg, i)))
                return rc;
        return HCNN_OK;
    }
    return backward_range(net, net->layers, &s->ctx, s->g, 0, acts, x, dy, dx, 0, n, block_done,
                          arg);
}

int hcnn_net_backward(hcnn_net *net, hcnn_scratch *s, hcnn_acts *acts, const float *x,
                      const float *dy, float *dx, int n, hcnn_block_done_fn block_done,
                      void *arg)
{
    if (acts->x_layout && dx) /* it would be NHWC: no caller wants the model input's */
        return hcnn_error("backward: the gradient of the model's input is not available with "
                          "an NHWC backend");
    hcnn_trace_push("backward");
    if (acts->x_layout) /* forward's conversion of the same x */
        x = acts->x_layout;
    const int rc = net_backward(net, s, acts, x, dy, dx, n, block_done, arg);
    hcnn_trace_pop();
    return rc;
}
