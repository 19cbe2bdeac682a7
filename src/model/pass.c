/* Forward and backward over a range of blocks (a whole model, or one
 * pipeline stage) as one chain (src/layers/chain.c), and the scratch they
 * share (include/hcnn/net.h).
 *
 * Whole-network per-thread execution: when every block of the range
 * computes each sample on its own (no batch-norm statistics, no residual
 * blocks: LeNet-class networks), each thread carries its share of the
 * samples through all of them: one parallel region per forward and one per
 * backward instead of several per block, and each thread's samples stay in
 * its cache.  Activations, saved aux (argmax, dropout masks) and gradient
 * buffers are per-sample arrays, so a thread works on its slice of each.
 * Thread 0 accumulates parameter gradients into net->grads, thread t > 0
 * into a buffer of its own through copies of the layers whose gradient
 * views point there; those are added to net->grads in thread order after
 * the backward, so a run is repeatable for a given thread count.
 * conv_algo: batched turns it off. */
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/net.h"

#define HCNN_DEFAULT_CHUNK_FLOATS ((size_t)32 << 20) /* 128 MiB of im2col columns */

/* ---- whole-network per-thread execution: when ---------------------------- */

static int per_sample_blocks(const hcnn_net *net, int first, int last)
{
    for (int i = first; i < last; i++) {
        const hcnn_layer *l = &net->layers[i];
        if (!l->ops->per_sample || l->aux_fixed)
            return 0;
    }
    return 1;
}

/* Whether blocks [first, last) can run this way on nt threads: per-sample
 * blocks, and per-thread gradient buffers of at most 256 MiB (a large
 * network without batch-norm on many threads takes the per-block path). */
static int whole_net_eligible(const hcnn_net *net, hcnn_conv_algo algo, int nt, int first, int last)
{
    const double tgrad_bytes = (double)(nt - 1) * (double)(net->nparams + 1) * sizeof(float);
    return algo != HCNN_CONV_BATCHED && nt > 1 && nt <= HCNN_MAX_THREADS &&
           tgrad_bytes <= 256.0 * 1048576.0 && per_sample_blocks(net, first, last);
}

/* Each thread's slice of the workspace, or 0 if some layer does not fit. */
static size_t thread_ws_slice(const hcnn_net *net, const hcnn_ctx *ctx, int first, int last, int nt)
{
    const size_t slice = (ctx->ws_floats / (size_t)nt) & ~(size_t)15;
    for (int i = first; i < last; i++)
        if (hcnn_layer_thread_workspace(&net->layers[i], ctx) > slice)
            return 0;
    return slice;
}

/* Each thread's workspace slice if n samples run the whole-network
 * per-thread path on *nt threads, else 0. */
static size_t per_thread_net(const hcnn_net *net, const hcnn_ctx *ctx, int first, int last, int n,
                             int *nt)
{
    *nt = ctx->be->threads();
    if (n < *nt || !whole_net_eligible(net, ctx->conv_algo, *nt, first, last))
        return 0;
    return thread_ws_slice(net, ctx, first, last, *nt);
}

int hcnn_net_whole_threads(const hcnn_net *net, const hcnn_ctx *ctx, int first, int last, int n)
{
    int nt;
    return per_thread_net(net, ctx, first, last, n, &nt) ? nt : 0;
}

/* ---- scratch ---------------------------------------------------------------- */

int hcnn_scratch_alloc(hcnn_scratch *s, const hcnn_net *net, int first, int last, int capacity)
{
    const hcnn_backend *be = net->be;
    memset(s, 0, sizeof *s);
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
    const int nt = be->threads();
    const int whole = whole_net_eligible(net, net->conv_algo, nt, first, last);
    for (int i = first; whole && i < last; i++) {
        const size_t need =
            (size_t)nt * (hcnn_layer_thread_workspace(&net->layers[i], &s->ctx) + 16);
        ws = need > ws ? need : ws;
    }
    s->g_floats = hcnn_net_max_act(net, first, last) * capacity;
    s->ctx.ws = be->alloc(sizeof(float) * (ws + 16), "im2col workspace");
    s->ctx.ws_floats = ws;
    s->ctx.tmp = be->alloc(sizeof(float) * (tmp + 16), "residual gradient buffers");
    s->ctx.tmp_floats = tmp;
    s->g[0] = be->alloc(sizeof(float) * (s->g_floats + 16), "gradient buffer");
    s->g[1] = be->alloc(sizeof(float) * (s->g_floats + 16), "gradient buffer");
    if (!s->ctx.ws || !s->ctx.tmp || !s->g[0] || !s->g[1]) {
        hcnn_scratch_free(s);
        return HCNN_ENOMEM;
    }
    if (!whole)
        return HCNN_OK;
    const int nl = last - first;
    s->tgrads =
        be->alloc(sizeof(float) * (net->nparams + 1) * (size_t)(nt - 1), "per-thread gradients");
    s->tlayers =
        hcnn_alloc(sizeof(hcnn_layer) * (size_t)nl * (size_t)(nt - 1), "per-thread layer views");
    if (!s->tgrads || !s->tlayers) {
        hcnn_scratch_free(s);
        return HCNN_ENOMEM;
    }
    for (int t = 1; t < nt; t++)
        for (int i = first; i < last; i++) {
            hcnn_layer *c = &s->tlayers[(size_t)(t - 1) * nl + (i - first)];
            float *g = s->tgrads + (size_t)(t - 1) * (net->nparams + 1);
            *c = net->layers[i];
            if (c->dw)
                c->dw = g + (c->dw - net->grads);
            if (c->db)
                c->db = g + (c->db - net->grads);
        }
    s->nt = nt, s->first = first, s->last = last;
    return HCNN_OK;
}

void hcnn_scratch_free(hcnn_scratch *s)
{
    const hcnn_backend *be = s->ctx.be;
    if (be) {
        be->free(s->ctx.ws);
        be->free(s->ctx.tmp);
        be->free(s->g[0]);
        be->free(s->g[1]);
        be->free(s->tgrads);
    }
    hcnn_free(s->tlayers);
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
static int forward_range(const hcnn_net *net, hcnn_layer *layers, const hcnn_ctx *ctx,
                         hcnn_acts *acts, const float *x, int i0, int i1)
{
    float *y[HCNN_MAX_BLOCKS], *aux[HCNN_MAX_BLOCKS];
    block_bufs(acts, layers, i0, y, aux);
    const float *in = x + (size_t)i0 * hcnn_layer_in_size(&net->layers[acts->first]);
    return hcnn_chain_forward(layers + acts->first, acts->last - acts->first, ctx, in, y, aux,
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

/* A thread's part of a whole-network pass: its samples, its workspace
 * slice, its layers; only thread 0 profiles and drives communication. */
typedef struct net_job {
    hcnn_net *net;
    hcnn_scratch *s; /* backward only */
    const hcnn_ctx *ctx;
    hcnn_acts *acts;
    const float *x, *dy;
    float *dx;
    int n;
    size_t slice;
    int rc[HCNN_MAX_THREADS];
} net_job;

static hcnn_ctx thread_ctx(const net_job *j, int t, int *i0, int *i1, int nt)
{
    hcnn_ctx c = *j->ctx;
    c.ws = j->ctx->ws + (size_t)t * j->slice;
    c.ws_floats = j->slice;
    *i0 = (int)((long)j->n * t / nt), *i1 = (int)((long)j->n * (t + 1) / nt);
    c.first_sample += (uint64_t)*i0; /* dropout masks follow the sample */
    if (t != 0)
        c.poll = NULL, c.prof_fwd = c.prof_bwd = NULL;
    return c;
}

static void forward_thread(void *arg, int t, int nt)
{
    net_job *j = arg;
    int i0, i1;
    const hcnn_ctx c = thread_ctx(j, t, &i0, &i1, nt);
    j->rc[t] = forward_range(j->net, j->net->layers, &c, j->acts, j->x, i0, i1);
}

int hcnn_net_forward(hcnn_net *net, const hcnn_ctx *ctx, hcnn_acts *acts, const float *x, int n)
{
    if (n > acts->capacity)
        return hcnn_error("batch of %d samples exceeds the activation capacity %d", n,
                          acts->capacity);
    int nt;
    const size_t slice = per_thread_net(net, ctx, acts->first, acts->last, n, &nt);
    if (slice) {
        net_job j = {.net = net, .ctx = ctx, .acts = acts, .x = x, .n = n, .slice = slice};
        net->be->parallel(forward_thread, &j);
        for (int t = 0; t < nt; t++)
            if (j.rc[t])
                return j.rc[t];
        return HCNN_OK;
    }
    return forward_range(net, net->layers, ctx, acts, x, 0, n);
}

static void backward_thread(void *arg, int t, int nt)
{
    net_job *j = arg;
    int i0, i1;
    const hcnn_ctx c = thread_ctx(j, t, &i0, &i1, nt);
    hcnn_layer *layers = j->net->layers;
    if (t > 0) {
        const hcnn_scratch *s = j->s;
        size_t off, count;
        hcnn_net_param_range(j->net, s->first, s->last, &off, &count);
        j->net->be->fill(s->tgrads + (size_t)(t - 1) * (j->net->nparams + 1) + off, count, 0.0f);
        /* layers[i] is block i's copy for this thread */
        layers = s->tlayers + (size_t)(t - 1) * (s->last - s->first) - s->first;
    }
    const size_t gstride = j->s->g_floats / (size_t)j->s->capacity;
    j->rc[t] = backward_range(j->net, layers, &c, j->s->g, gstride, j->acts, j->x, j->dy, j->dx, i0,
                              i1, NULL, NULL);
}

/* net->grads += the other threads' gradients: every thread takes a slice of
 * the parameters and adds the buffers of threads 1, 2, ... in that order,
 * so each element is summed in thread order whatever the slicing. */
typedef struct reduce_job {
    const hcnn_net *net;
    const hcnn_scratch *s;
    size_t off, count;
} reduce_job;

static void reduce_thread(void *arg, int t, int nt)
{
    const reduce_job *j = arg;
    const size_t lo = j->off + j->count * (size_t)t / (size_t)nt;
    const size_t hi = j->off + j->count * (size_t)(t + 1) / (size_t)nt;
    for (int k = 1; k < j->s->nt; k++)
        j->net->be->add_acc(j->s->tgrads + (size_t)(k - 1) * (j->net->nparams + 1) + lo,
                            j->net->grads + lo, hi - lo);
}

int hcnn_net_backward(hcnn_net *net, hcnn_scratch *s, hcnn_acts *acts, const float *x,
                      const float *dy, float *dx, int n, hcnn_block_done_fn block_done, void *arg)
{
    int nt;
    const size_t slice = s->tlayers && s->first == acts->first && s->last == acts->last
                             ? per_thread_net(net, &s->ctx, acts->first, acts->last, n, &nt)
                             : 0;
    if (slice && nt == s->nt) {
        net_job j = {.net = net,
                     .s = s,
                     .ctx = &s->ctx,
                     .acts = acts,
                     .x = x,
                     .dy = dy,
                     .dx = dx,
                     .n = n,
                     .slice = slice};
        net->be->parallel(backward_thread, &j);
        for (int t = 0; t < nt; t++)
            if (j.rc[t])
                return j.rc[t];
        /* the other threads' gradients; then the blocks are complete, last
         * first as block_done expects */
        reduce_job r = {.net = net, .s = s};
        hcnn_net_param_range(net, acts->first, acts->last, &r.off, &r.count);
        net->be->parallel(reduce_thread, &r);
        for (int i = acts->last - 1; block_done && i >= acts->first; i--) {
            const int rc = block_done(arg, i);
            if (rc)
                return rc;
        }
        return HCNN_OK;
    }
    return backward_range(net, net->layers, &s->ctx, s->g, 0, acts, x, dy, dx, 0, n, block_done,
                          arg);
}
