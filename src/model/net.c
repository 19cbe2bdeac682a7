/* Network construction, the contiguous parameter/gradient buffers with
 * per-layer views, initialisation, and forward/backward over a range of
 * blocks (a whole model, or one pipeline stage). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/markers.h"
#include "hcnn/net.h"

/* ---- construction ------------------------------------------------------ */

static void default_name(char *dst, size_t cap, hcnn_block_kind kind, int *counters)
{
    static const char *prefix[HCNN_BLOCK_KIND_COUNT] = {
        [HCNN_BLOCK_CONV] = "conv",       [HCNN_BLOCK_BN] = "bn",
        [HCNN_BLOCK_RELU] = "relu",       [HCNN_BLOCK_MAXPOOL] = "maxpool",
        [HCNN_BLOCK_AVGPOOL] = "avgpool", [HCNN_BLOCK_GAP] = "gap",
        [HCNN_BLOCK_FC] = "fc",           [HCNN_BLOCK_DROPOUT] = "dropout",
        [HCNN_BLOCK_FLATTEN] = "flatten", [HCNN_BLOCK_RESIDUAL] = "res",
    };
    snprintf(dst, cap, "%s%d", prefix[kind], ++counters[kind]);
}

/* Walk a layer and its children: count parameters/state, then (second
 * pass, bufs set) assign views and register tensor names. */
typedef struct walk {
    hcnn_net *net;
    size_t poff, soff;
    int ntensors;
    int top;        /* top-level block index */
    int next_id;
    int assign;     /* 0: count only */
} walk;

static void add_tensor(walk *wk, const char *layer, const char *suffix, int ndim, const int *dims,
                       size_t count, size_t off, int is_state)
{
    if (wk->assign) {
        hcnn_tensor_info *t = &wk->net->tensors[wk->ntensors];
        snprintf(t->name, sizeof t->name, "%s.%s", layer, suffix);
        t->ndim = ndim;
        for (int i = 0; i < 4; i++)
            t->dims[i] = i < ndim ? dims[i] : 1;
        t->count = count;
        t->offset = off;
        t->is_state = is_state;
        t->layer = wk->top;
    }
    wk->ntensors++;
}

static void walk_layer(walk *wk, hcnn_layer *l)
{
    hcnn_net *net = wk->net;
    const size_t p0 = wk->poff;
    l->id = wk->next_id++;
    if (l->kind == HCNN_BLOCK_RESIDUAL) {
        l->param_off = wk->poff;
        for (int j = 0; j < l->nbody; j++)
            walk_layer(wk, &l->body[j]);
        for (int j = 0; j < l->nproj; j++)
            walk_layer(wk, &l->proj[j]);
        l->nparams = wk->poff - p0;
        return;
    }
    l->param_off = wk->poff;
    if (l->nw) {
        int dims[4], nd;
        if (l->kind == HCNN_BLOCK_CONV)
            nd = 4, dims[0] = l->out_c, dims[1] = l->in_c, dims[2] = l->conv.kh, dims[3] = l->conv.kw;
        else if (l->kind == HCNN_BLOCK_FC)
            nd = 2, dims[0] = l->out_c, dims[1] = (int)hcnn_layer_in_size(l);
        else
            nd = 1, dims[0] = (int)l->nw;
        if (wk->assign)
            l->w = net->params + wk->poff, l->dw = net->grads + wk->poff;
        add_tensor(wk, l->name, "weight", nd, dims, l->nw, wk->poff, 0);
        wk->poff += l->nw;
    }
    if (l->nb) {
        int dims[1] = {(int)l->nb};
        if (wk->assign)
            l->b = net->params + wk->poff, l->db = net->grads + wk->poff;
        add_tensor(wk, l->name, "bias", 1, dims, l->nb, wk->poff, 0);
        wk->poff += l->nb;
    }
    if (l->nstate) {
        int dims[1] = {l->in_c};
        l->state_off = wk->soff;
        if (wk->assign) {
            l->running_mean = net->state + wk->soff;
            l->running_var = net->state + wk->soff + l->in_c;
        }
        add_tensor(wk, l->name, "running_mean", 1, dims, (size_t)l->in_c, wk->soff, 1);
        add_tensor(wk, l->name, "running_var", 1, dims, (size_t)l->in_c, wk->soff + l->in_c, 1);
        wk->soff += l->nstate;
    }
    l->nparams = wk->poff - p0;
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

int hcnn_net_create(hcnn_net *net, const hcnn_model_spec *spec, const hcnn_backend *be,
                    const char *cfg_path)
{
    memset(net, 0, sizeof *net);
    net->be = be;
    net->in_c = spec->in_c, net->in_h = spec->in_h, net->in_w = spec->in_w;
    net->classes = spec->classes;
    if (spec->nblocks < 1)
        return hcnn_error("%s: model.blocks is empty", cfg_path);
    net->layers = hcnn_calloc(sizeof *net->layers * spec->nblocks, "layers");
    if (!net->layers)
        return HCNN_ENOMEM;
    net->nlayers = spec->nblocks;

    int counters[HCNN_BLOCK_KIND_COUNT] = {0};
    int c = spec->in_c, h = spec->in_h, w = spec->in_w;
    for (int i = 0; i < spec->nblocks; i++) {
        hcnn_block_spec bs = spec->blocks[i];
        if (bs.name[0] == '\0')
            default_name(bs.name, sizeof bs.name, bs.kind, counters);
        int rc = hcnn_layer_setup(&net->layers[i], &bs, c, h, w, cfg_path, i);
        if (rc) {
            hcnn_net_free(net);
            return rc;
        }
        c = net->layers[i].out_c, h = net->layers[i].out_h, w = net->layers[i].out_w;
    }
    if (c * h * w != spec->classes) {
        hcnn_net_free(net);
        return hcnn_error("%s: the model's last block outputs %dx%dx%d values per sample, "
                          "expected model.classes = %d",
                          cfg_path, c, h, w, spec->classes);
    }

    walk wk = {.net = net};
    for (int i = 0; i < net->nlayers; i++)
        wk.top = i, walk_layer(&wk, &net->layers[i]);
    net->nparams = wk.poff;
    net->nstate = wk.soff;
    net->nids = wk.next_id;
    net->params = hcnn_calloc(sizeof(float) * (net->nparams + 1), "parameters");
    net->grads = hcnn_calloc(sizeof(float) * (net->nparams + 1), "gradients");
    net->state = hcnn_calloc(sizeof(float) * (net->nstate + 1), "batch-norm statistics");
    net->tensors = hcnn_calloc(sizeof *net->tensors * (wk.ntensors + 1), "tensor table");
    if (!net->params || !net->grads || !net->state || !net->tensors) {
        hcnn_net_free(net);
        return HCNN_ENOMEM;
    }
    wk = (walk){.net = net, .assign = 1};
    for (int i = 0; i < net->nlayers; i++)
        wk.top = i, walk_layer(&wk, &net->layers[i]);
    net->ntensors = wk.ntensors;

    uint64_t hsh = 0xcbf29ce484222325ull;
    int shape[4] = {net->in_c, net->in_h, net->in_w, net->classes};
    hsh = fnv1a(hsh, shape, sizeof shape);
    for (int t = 0; t < net->ntensors; t++) {
        const hcnn_tensor_info *ti = &net->tensors[t];
        hsh = fnv1a(hsh, ti->name, strlen(ti->name));
        hsh = fnv1a(hsh, ti->dims, sizeof ti->dims);
    }
    for (int i = 0; i < net->nlayers; i++) {
        const hcnn_layer *l = &net->layers[i];
        int geo[8] = {(int)l->kind, l->out_c, l->out_h, l->out_w,
                      l->conv.sh, l->conv.ph, l->pool.kh, l->pool.sh};
        hsh = fnv1a(hsh, geo, sizeof geo);
    }
    net->model_hash = hsh;
    return HCNN_OK;
}

static void free_layer(hcnn_layer *l)
{
    for (int j = 0; l->body && j < l->nbody; j++)
        free_layer(&l->body[j]);
    for (int j = 0; l->proj && j < l->nproj; j++)
        free_layer(&l->proj[j]);
    hcnn_free(l->body);
    hcnn_free(l->proj);
    l->body = l->proj = NULL;
}

void hcnn_net_free(hcnn_net *net)
{
    for (int i = 0; net->layers && i < net->nlayers; i++)
        free_layer(&net->layers[i]);
    hcnn_free(net->layers);
    hcnn_free(net->params);
    hcnn_free(net->grads);
    hcnn_free(net->state);
    hcnn_free(net->tensors);
    memset(net, 0, sizeof *net);
}

/* ---- initialisation ---------------------------------------------------- */

static void init_layer(hcnn_layer *l, hcnn_init init, hcnn_rng *rng)
{
    for (int j = 0; j < l->nbody; j++)
        init_layer(&l->body[j], init, rng);
    for (int j = 0; j < l->nproj; j++)
        init_layer(&l->proj[j], init, rng);
    if (l->kind == HCNN_BLOCK_BN) {
        for (size_t i = 0; i < l->nw; i++)
            l->w[i] = 1.0f, l->b[i] = 0.0f;
        for (int i = 0; i < l->in_c; i++)
            l->running_mean[i] = 0.0f, l->running_var[i] = 1.0f;
        return;
    }
    if (l->kind != HCNN_BLOCK_CONV && l->kind != HCNN_BLOCK_FC)
        return;
    size_t fan_in, fan_out;
    if (l->kind == HCNN_BLOCK_CONV) {
        fan_in = (size_t)l->in_c * l->conv.kh * l->conv.kw;
        fan_out = (size_t)l->out_c * l->conv.kh * l->conv.kw;
    } else {
        fan_in = hcnn_layer_in_size(l);
        fan_out = (size_t)l->out_c;
    }
    if (init == HCNN_INIT_HE) {
        /* He et al. 2015: N(0, 2 / fan_in), for ReLU networks */
        const float std = sqrtf(2.0f / (float)fan_in);
        for (size_t i = 0; i < l->nw; i++)
            l->w[i] = std * hcnn_rng_normal(rng);
    } else {
        /* Glorot & Bengio 2010: U(-a, a), a = sqrt(6 / (fan_in + fan_out)) */
        const float a = sqrtf(6.0f / (float)(fan_in + fan_out));
        for (size_t i = 0; i < l->nw; i++)
            l->w[i] = a * (2.0f * hcnn_rng_uniform(rng) - 1.0f);
    }
    for (size_t i = 0; i < l->nb; i++)
        l->b[i] = 0.0f;
}

void hcnn_net_init(hcnn_net *net, hcnn_init init, uint64_t seed)
{
    hcnn_rng rng;
    hcnn_rng_seed(&rng, seed, 0x696e6974ull /* "init" */);
    for (int i = 0; i < net->nlayers; i++)
        init_layer(&net->layers[i], init, &rng);
}

const hcnn_tensor_info *hcnn_net_find_tensor(const hcnn_net *net, const char *name, size_t len,
                                             int is_state)
{
    for (int i = 0; i < net->ntensors; i++) {
        const hcnn_tensor_info *t = &net->tensors[i];
        if ((is_state < 0 || t->is_state == is_state) && strlen(t->name) == len &&
            !memcmp(t->name, name, len))
            return t;
    }
    return NULL;
}

void hcnn_net_param_range(const hcnn_net *net, int first, int last, size_t *off, size_t *count)
{
    *off = first < net->nlayers ? net->layers[first].param_off : net->nparams;
    size_t end = last < net->nlayers ? net->layers[last].param_off : net->nparams;
    *count = end - *off;
}

void hcnn_net_state_range(const hcnn_net *net, int first, int last, size_t *off, size_t *count)
{
    size_t lo = net->nstate, hi = 0;
    for (int t = 0; t < net->ntensors; t++) {
        const hcnn_tensor_info *ti = &net->tensors[t];
        if (!ti->is_state || ti->layer < first || ti->layer >= last)
            continue;
        if (ti->offset < lo)
            lo = ti->offset;
        if (ti->offset + ti->count > hi)
            hi = ti->offset + ti->count;
    }
    *off = hi > lo ? lo : 0;
    *count = hi > lo ? hi - lo : 0;
}

/* ---- activations and scratch ------------------------------------------- */

size_t hcnn_net_max_act(const hcnn_net *net, int first, int last)
{
    size_t m = 0;
    for (int i = first; i < last; i++) {
        const hcnn_layer *l = &net->layers[i];
        if (hcnn_layer_in_size(l) > m)
            m = hcnn_layer_in_size(l);
        if (hcnn_layer_out_size(l) > m)
            m = hcnn_layer_out_size(l);
    }
    return m;
}

int hcnn_acts_alloc(hcnn_acts *a, const hcnn_net *net, int first, int last, int capacity)
{
    memset(a, 0, sizeof *a);
    a->first = first, a->last = last, a->capacity = capacity;
    const int nl = last - first;
    a->y = hcnn_calloc(sizeof *a->y * (nl + 1), "activation table");
    a->aux = hcnn_calloc(sizeof *a->aux * (nl + 1), "activation table");
    if (!a->y || !a->aux) {
        hcnn_acts_free(a);
        return HCNN_ENOMEM;
    }
    size_t total = 0;
    for (int i = first; i < last; i++) {
        const hcnn_layer *l = &net->layers[i];
        /* round each tensor to 16 floats so every tensor is 64-byte aligned */
        total += (hcnn_layer_out_size(l) * capacity + 15) & ~(size_t)15;
        total += (hcnn_layer_aux_size(l, capacity) + 15) & ~(size_t)15;
    }
    a->buf = net->be->alloc(sizeof(float) * (total + 16), "activations");
    if (!a->buf) {
        hcnn_acts_free(a);
        return HCNN_ENOMEM;
    }
    a->floats = total;
    size_t off = 0;
    for (int i = first; i < last; i++) {
        const hcnn_layer *l = &net->layers[i];
        a->y[i - first] = a->buf + off;
        off += (hcnn_layer_out_size(l) * capacity + 15) & ~(size_t)15;
        a->aux[i - first] = a->buf + off;
        off += (hcnn_layer_aux_size(l, capacity) + 15) & ~(size_t)15;
    }
    return HCNN_OK;
}

void hcnn_acts_free(hcnn_acts *a)
{
    hcnn_free(a->y);
    hcnn_free(a->aux);
    hcnn_free(a->buf);
    memset(a, 0, sizeof *a);
}

/* Workspace that layer l needs for `capacity` samples. */
static size_t ws_need(const hcnn_layer *l, const hcnn_ctx *ctx, int capacity)
{
    size_t need = 0;
    for (int j = 0; j < l->nbody; j++) {
        size_t s = ws_need(&l->body[j], ctx, capacity);
        if (s > need)
            need = s;
    }
    for (int j = 0; j < l->nproj; j++) {
        size_t s = ws_need(&l->proj[j], ctx, capacity);
        if (s > need)
            need = s;
    }
    if (l->kind == HCNN_BLOCK_CONV) {
        size_t chunk = ctx->max_chunk_floats / l->ws_per_sample;
        if (chunk < 1)
            chunk = 1;
        if (chunk > (size_t)capacity)
            chunk = (size_t)capacity;
        need = chunk * l->ws_per_sample;
        size_t per_thread = hcnn_conv_per_thread_ws(l, ctx, ctx->be->threads());
        if (per_thread > need)
            need = per_thread;
    }
    return need;
}

#define HCNN_DEFAULT_CHUNK_FLOATS ((size_t)32 << 20) /* 128 MiB of im2col columns */

/* ---- whole-network per-thread execution ----------------------------------
 * When every block of [first, last) treats each image on its own (no
 * batch-norm statistics, no residual blocks: LeNet-class networks), each
 * thread carries its share of the images through all of them: one parallel
 * region per forward and one per backward instead of several per block,
 * and each thread's images stay in its cache.  Activations, saved aux
 * (argmax, dropout masks) and gradient buffers are per-sample arrays, so a
 * thread works on its slice of each.  Thread 0 accumulates parameter
 * gradients into net->grads, thread t > 0 into a buffer of its own through
 * copies of the layers whose gradient views point there; those are added to
 * net->grads in thread order after the backward, so a run is repeatable for
 * a given thread count, as with the per-thread convolutions this extends.
 * conv_algo: batched turns both off. */

static int image_local(const hcnn_net *net, int first, int last)
{
    for (int i = first; i < last; i++) {
        const hcnn_layer *l = &net->layers[i];
        if (l->kind == HCNN_BLOCK_BN || l->kind == HCNN_BLOCK_RESIDUAL || l->aux_fixed)
            return 0;
    }
    return 1;
}

/* Whether blocks [first, last) can run this way on nt threads: image-local
 * blocks, and per-thread gradient buffers of at most 256 MiB (a large
 * network without batch-norm on many threads takes the per-block path). */
static int whole_net_eligible(const hcnn_net *net, hcnn_conv_algo algo, int nt, int first,
                              int last)
{
    const double tgrad_bytes = (double)(nt - 1) * (double)(net->nparams + 1) * sizeof(float);
    return algo != HCNN_CONV_BATCHED && nt > 1 && nt <= HCNN_MAX_THREADS &&
           tgrad_bytes <= 256.0 * 1048576.0 && image_local(net, first, last);
}

/* Workspace one thread needs to run layer l on any number of images. */
static size_t thread_ws_need(const hcnn_layer *l, const hcnn_ctx *ctx)
{
    if (l->kind != HCNN_BLOCK_CONV)
        return 0;
    const size_t own = hcnn_conv_per_thread_ws(l, ctx, 1);
    return own > l->ws_per_sample ? own : l->ws_per_sample;
}

/* Each thread's slice of the workspace, or 0 if some layer does not fit. */
static size_t thread_ws_slice(const hcnn_net *net, const hcnn_ctx *ctx, int first, int last,
                              int nt)
{
    const size_t slice = (ctx->ws_floats / (size_t)nt) & ~(size_t)15;
    for (int i = first; i < last; i++)
        if (thread_ws_need(&net->layers[i], ctx) > slice)
            return 0;
    return slice;
}

/* Each thread's workspace slice if n images run the whole-network
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

int hcnn_scratch_alloc(hcnn_scratch *s, const hcnn_net *net, int first, int last, int capacity)
{
    memset(s, 0, sizeof *s);
    s->capacity = capacity;
    s->ctx.be = net->be;
    s->ctx.max_chunk_floats = net->chunk_floats ? net->chunk_floats : HCNN_DEFAULT_CHUNK_FLOATS;
    s->ctx.conv_algo = net->conv_algo;
    size_t ws = 0, tmp = 0;
    for (int i = first; i < last; i++) {
        const hcnn_layer *l = &net->layers[i];
        size_t need = ws_need(l, &s->ctx, capacity);
        if (need > ws)
            ws = need;
        if (l->tmp_per_sample * capacity > tmp)
            tmp = l->tmp_per_sample * capacity;
    }
    const int nt = net->be->threads();
    const int whole = whole_net_eligible(net, net->conv_algo, nt, first, last);
    if (whole)
        for (int i = first; i < last; i++) {
            const size_t need = (size_t)nt * (thread_ws_need(&net->layers[i], &s->ctx) + 16);
            if (need > ws)
                ws = need;
        }
    s->g_floats = hcnn_net_max_act(net, first, last) * capacity;
    s->ctx.ws = net->be->alloc(sizeof(float) * (ws + 16), "im2col workspace");
    s->ctx.ws_floats = ws;
    s->ctx.tmp = net->be->alloc(sizeof(float) * (tmp + 16), "residual gradient buffers");
    s->ctx.tmp_floats = tmp;
    s->g[0] = net->be->alloc(sizeof(float) * (s->g_floats + 16), "gradient buffer");
    s->g[1] = net->be->alloc(sizeof(float) * (s->g_floats + 16), "gradient buffer");
    if (!s->ctx.ws || !s->ctx.tmp || !s->g[0] || !s->g[1]) {
        hcnn_scratch_free(s);
        return HCNN_ENOMEM;
    }
    if (whole) {
        const int nl = last - first;
        s->tgrads = hcnn_alloc(sizeof(float) * (net->nparams + 1) * (size_t)(nt - 1),
                               "per-thread gradients");
        s->tlayers = hcnn_alloc(sizeof(hcnn_layer) * (size_t)nl * (size_t)(nt - 1),
                                "per-thread layer views");
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
    }
    return HCNN_OK;
}

void hcnn_scratch_free(hcnn_scratch *s)
{
    hcnn_free(s->ctx.ws);
    hcnn_free(s->ctx.tmp);
    hcnn_free(s->g[0]);
    hcnn_free(s->g[1]);
    hcnn_free(s->tgrads);
    hcnn_free(s->tlayers);
    memset(s, 0, sizeof *s);
}

/* ---- forward / backward ------------------------------------------------ */

/* Forward of blocks [acts->first, acts->last) on images [i0, i1) of x,
 * with the given layers (layers[i] for block i). */
static int forward_range(hcnn_net *net, hcnn_layer *layers, const hcnn_ctx *ctx, hcnn_acts *acts,
                         const float *x, int i0, int i1)
{
    const float *in = x + (size_t)i0 * hcnn_layer_in_size(&net->layers[acts->first]);
    for (int i = acts->first; i < acts->last; i++) {
        const int k = i - acts->first;
        hcnn_layer *l = &layers[i];
        const int relu = hcnn_bn_relu_fused(layers, i, acts->last);
        /* a batch-norm fused with its ReLU writes the ReLU's output */
        float *y = acts->y[k + relu] + (size_t)i0 * hcnn_layer_out_size(l);
        float *aux = acts->aux[k] + (size_t)i0 * l->aux_per_sample;
        const double t0 = ctx->prof_fwd ? hcnn_now() : 0.0;
        HCNN_MARKER_START(ctx, l->name, 0);
        int rc = 0;
        if (relu)
            hcnn_bn_forward_fused(l, ctx, in, NULL, 1, y, aux, i1 - i0);
        else
            rc = hcnn_layer_forward(l, ctx, in, y, aux, i1 - i0);
        HCNN_MARKER_STOP(ctx, l->name, 0);
        if (ctx->prof_fwd)
            ctx->prof_fwd[i] += hcnn_now() - t0;
        if (rc)
            return rc;
        in = y;
        i += relu;
    }
    return HCNN_OK;
}

/* A thread's part of a whole-network pass: its images, its workspace
 * slice, its layers; only thread 0 profiles and drives communication. */
typedef struct net_job {
    hcnn_net *net;
    hcnn_scratch *s;          /* backward only */
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

/* Backward of blocks [acts->first, acts->last) on images [i0, i1), with the
 * given layers.  The gradients between blocks go to g[0], g[1], alternately,
 * from offset i0 * gstride: gstride is the largest per-sample activation, so
 * that threads, which run through the blocks without waiting for each
 * other, never write over each other's images when blocks differ in size. */
static int backward_range(hcnn_net *net, hcnn_layer *layers, const hcnn_ctx *ctx, float *const g[2],
                          size_t gstride, hcnn_acts *acts, const float *x, const float *dy,
                          float *dx, int i0, int i1, hcnn_block_done_fn block_done, void *arg)
{
    const float *cur = dy + (size_t)i0 * hcnn_layer_out_size(&net->layers[acts->last - 1]);
    int which = 0;
    for (int i = acts->last - 1; i >= acts->first; i--) {
        /* a ReLU fused with the batch-norm before it: that batch-norm's
         * backward applies its mask */
        const int relu = i - 1 >= acts->first && hcnn_bn_relu_fused(layers, i - 1, acts->last);
        if (relu && block_done) {
            const int rc = block_done(arg, i);
            if (rc)
                return rc;
        }
        i -= relu;
        const int k = i - acts->first;
        hcnn_layer *l = &layers[i];
        const size_t in_sz = hcnn_layer_in_size(l), out_sz = hcnn_layer_out_size(l);
        const float *in = (i == acts->first ? x : acts->y[k - 1]) + (size_t)i0 * in_sz;
        float *out = i == acts->first ? (dx ? dx + (size_t)i0 * in_sz : NULL)
                                      : g[which] + (size_t)i0 * gstride;
        const double t0 = ctx->prof_bwd ? hcnn_now() : 0.0;
        HCNN_MARKER_START(ctx, l->name, 1);
        const float *aux = acts->aux[k] + (size_t)i0 * l->aux_per_sample;
        int rc = 0;
        if (relu)
            hcnn_bn_backward_fused(l, ctx, in, aux, cur, 1, out, i1 - i0);
        else
            rc = hcnn_layer_backward(l, ctx, in, acts->y[k] + (size_t)i0 * out_sz, aux, cur, out,
                                     i1 - i0);
        HCNN_MARKER_STOP(ctx, l->name, 1);
        if (ctx->prof_bwd)
            ctx->prof_bwd[i] += hcnn_now() - t0;
        if (!rc && block_done)
            rc = block_done(arg, i);
        if (rc)
            return rc;
        cur = out;
        which ^= 1;
    }
    return HCNN_OK;
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
        memset(s->tgrads + (size_t)(t - 1) * (j->net->nparams + 1) + off, 0, sizeof(float) * count);
        /* layers[i] is block i's copy for this thread */
        layers = s->tlayers + (size_t)(t - 1) * (s->last - s->first) - s->first;
    }
    const size_t gstride = j->s->g_floats / (size_t)j->s->capacity;
    j->rc[t] = backward_range(j->net, layers, &c, j->s->g, gstride, j->acts, j->x, j->dy, j->dx,
                              i0, i1, NULL, NULL);
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
                      const float *dy, float *dx, int n, hcnn_block_done_fn block_done,
                      void *arg)
{
    int nt;
    const size_t slice = s->tlayers && s->first == acts->first && s->last == acts->last
                             ? per_thread_net(net, &s->ctx, acts->first, acts->last, n, &nt)
                             : 0;
    if (slice && nt == s->nt) {
        net_job j = {.net = net, .s = s, .ctx = &s->ctx, .acts = acts, .x = x, .dy = dy,
                     .dx = dx, .n = n, .slice = slice};
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
            int rc = block_done(arg, i);
            if (rc)
                return rc;
        }
        return HCNN_OK;
    }
    return backward_range(net, net->layers, &s->ctx, s->g, 0, acts, x, dy, dx, 0, n, block_done,
                          arg);
}
