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
    return HCNN_OK;
}

void hcnn_scratch_free(hcnn_scratch *s)
{
    hcnn_free(s->ctx.ws);
    hcnn_free(s->ctx.tmp);
    hcnn_free(s->g[0]);
    hcnn_free(s->g[1]);
    memset(s, 0, sizeof *s);
}

/* ---- forward / backward ------------------------------------------------ */

int hcnn_net_forward(hcnn_net *net, const hcnn_ctx *ctx, hcnn_acts *acts, const float *x, int n)
{
    if (n > acts->capacity)
        return hcnn_error("batch of %d samples exceeds the activation capacity %d", n,
                          acts->capacity);
    const float *in = x;
    for (int i = acts->first; i < acts->last; i++) {
        const int k = i - acts->first;
        const double t0 = ctx->prof_fwd ? hcnn_now() : 0.0;
        HCNN_MARKER_START(ctx, net->layers[i].name, 0);
        int rc = hcnn_layer_forward(&net->layers[i], ctx, in, acts->y[k], acts->aux[k], n);
        HCNN_MARKER_STOP(ctx, net->layers[i].name, 0);
        if (ctx->prof_fwd)
            ctx->prof_fwd[i] += hcnn_now() - t0;
        if (rc)
            return rc;
        in = acts->y[k];
    }
    return HCNN_OK;
}

int hcnn_net_backward(hcnn_net *net, hcnn_scratch *s, hcnn_acts *acts, const float *x,
                      const float *dy, float *dx, int n, hcnn_block_done_fn block_done,
                      void *arg)
{
    const float *cur = dy;
    int which = 0;
    for (int i = acts->last - 1; i >= acts->first; i--) {
        const int k = i - acts->first;
        const float *in = i == acts->first ? x : acts->y[k - 1];
        float *out = i == acts->first ? dx : s->g[which];
        const double t0 = s->ctx.prof_bwd ? hcnn_now() : 0.0;
        HCNN_MARKER_START(&s->ctx, net->layers[i].name, 1);
        int rc = hcnn_layer_backward(&net->layers[i], &s->ctx, in, acts->y[k], acts->aux[k], cur,
                                     out, n);
        HCNN_MARKER_STOP(&s->ctx, net->layers[i].name, 1);
        if (s->ctx.prof_bwd)
            s->ctx.prof_bwd[i] += hcnn_now() - t0;
        if (!rc && block_done)
            rc = block_done(arg, i);
        if (rc)
            return rc;
        cur = out;
        which ^= 1;
    }
    return HCNN_OK;
}
