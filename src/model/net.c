/* Network construction: shape inference through each layer's setup, the
 * contiguous parameter / gradient / statistics buffers with per-layer
 * views, the table of named tensors, the model hash, initialisation, and
 * the ranges a pipeline stage owns (include/hcnn/net.h). */
#include <stdio.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/net.h"
#include "../core/trace.h"

/* ---- construction ------------------------------------------------------ */

/* Walk a layer and its children: count parameters/state, then (second
 * pass, buffers set) assign views and register tensor names. */
typedef struct walk {
    hcnn_net *net;
    size_t poff, soff;
    int ntensors;
    int top; /* top-level block index */
    int next_id;
    int assign; /* 0: count only */
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
    hcnn_trace_name(l->trace[0], sizeof l->trace[0], "fwd", l->id, l->name,
                    hcnn_block_kind_name(l->kind));
    hcnn_trace_name(l->trace[1], sizeof l->trace[1], "bwd", l->id, l->name,
                    hcnn_block_kind_name(l->kind));
    l->param_off = wk->poff;
    for (int j = 0; j < l->nchildren; j++)
        walk_layer(wk, &l->children[j]);
    if (l->nw) {
        int dims[4] = {(int)l->nw};
        const int nd = l->ops->weight_dims ? l->ops->weight_dims(l, dims) : 1;
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

/* The architecture as version 1 hashed it: input, classes, every tensor's
 * name and shape, every block's type and output shape, and a part of its
 * geometry.  Kept so that checkpoints written before version 2 still load. */
static uint64_t model_hash_v1(const hcnn_net *net)
{
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
        int geo[8] = {(int)l->kind, l->out_c,   l->out_h,   l->out_w,
                      l->conv.sh,   l->conv.ph, l->pool.kh, l->pool.sh};
        hsh = fnv1a(hsh, geo, sizeof geo);
    }
    return hsh;
}

/* What version 2 adds for one layer and its children: the whole kernel,
 * stride and padding of convolutions and pools, and the parameters of the
 * function a type computes (leaky_relu's negative_slope, dropout's p,
 * batch-norm's eps).  Two models that differ in any of them compute
 * different functions with the same tensors; version 1 took them for one.
 * Batch-norm's momentum is left out: like the learning rate it changes how
 * training proceeds, not the function, and a run may resume with another. */
static uint64_t hash_layer_v2(uint64_t hsh, const hcnn_layer *l)
{
    const hcnn_conv_geom *c = &l->conv;
    const hcnn_pool_geom *p = &l->pool;
    int geo[15] = {(int)l->kind, l->out_c, l->out_h, l->out_w, c->kh, c->kw, c->sh, c->sw,
                   c->ph, c->pw, p->kh, p->kw, p->sh, p->sw, p->ph};
    hsh = fnv1a(hsh, geo, sizeof geo);
    int more[2] = {p->pw, l->has_bias};
    hsh = fnv1a(hsh, more, sizeof more);
    /* floats by their bit patterns: the values as configured */
    float fp[3] = {l->kind == HCNN_BLOCK_LEAKY_RELU ? l->spec.negative_slope : 0.0f,
                   l->kind == HCNN_BLOCK_DROPOUT ? l->p : 0.0f,
                   l->kind == HCNN_BLOCK_BN ? l->eps : 0.0f};
    hsh = fnv1a(hsh, fp, sizeof fp);
    for (int i = 0; i < l->nchildren; i++)
        hsh = hash_layer_v2(hsh, &l->children[i]);
    return hsh;
}

static uint64_t model_hash_v2(const hcnn_net *net)
{
    uint64_t hsh = model_hash_v1(net);
    const char version[] = "model hash v2";
    hsh = fnv1a(hsh, version, sizeof version);
    for (int i = 0; i < net->nlayers; i++)
        hsh = hash_layer_v2(hsh, &net->layers[i]);
    return hsh;
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
        if (bs.name[0] == '\0' && (int)bs.kind >= 0 && bs.kind < HCNN_BLOCK_KIND_COUNT)
            snprintf(bs.name, sizeof bs.name, "%s%d", hcnn_block_kind_prefix(bs.kind),
                     ++counters[bs.kind]);
        int rc = hcnn_layer_setup(&net->layers[i], &bs, c, h, w, cfg_path, i);
        if (rc) {
            hcnn_net_free(net);
            return rc;
        }
        if (be->layout != HCNN_LAYOUT_NCHW && net->layers[i].ops->nchw_features && c > 1 &&
            h * w > 1) {
            hcnn_net_free(net);
            return hcnn_error("%s: block %d (%s) reads a %dx%dx%d input in NCHW order, and this "
                              "backend's activations are NHWC (HCNN_CUDA_LAYOUT=nhwc): put a "
                              "flatten before it, or use HCNN_CUDA_LAYOUT=nchw",
                              cfg_path, i, spec->blocks[i].name[0] ? spec->blocks[i].name
                                                                   : hcnn_block_kind_prefix(spec->blocks[i].kind),
                              c, h, w);
        }
        c = net->layers[i].out_c, h = net->layers[i].out_h, w = net->layers[i].out_w;
    }
    if (be->layout != HCNN_LAYOUT_NCHW && c > 1 && h * w > 1) {
        hcnn_net_free(net);
        return hcnn_error("%s: the model's last block outputs %dx%dx%d values per sample, which "
                          "the loss reads in NCHW order, and this backend's activations are NHWC "
                          "(HCNN_CUDA_LAYOUT=nhwc): end the model with a flatten, or use "
                          "HCNN_CUDA_LAYOUT=nchw",
                          cfg_path, c, h, w);
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
    net->params = be->alloc(be, sizeof(float) * (net->nparams + 1), "parameters");
    net->grads = be->alloc(be, sizeof(float) * (net->nparams + HCNN_GRAD_TAIL), "gradients");
    net->state = be->alloc(be, sizeof(float) * (net->nstate + 1), "batch-norm statistics");
    net->tensors = hcnn_calloc(sizeof *net->tensors * (wk.ntensors + 1), "tensor table");
    if (!net->params || !net->grads || !net->state || !net->tensors) {
        hcnn_net_free(net);
        return HCNN_ENOMEM;
    }
    be->fill(be, net->params, net->nparams + 1, 0.0f);
    be->fill(be, net->grads, net->nparams + HCNN_GRAD_TAIL, 0.0f);
    be->fill(be, net->state, net->nstate + 1, 0.0f);
    wk = (walk){.net = net, .assign = 1};
    for (int i = 0; i < net->nlayers; i++)
        wk.top = i, walk_layer(&wk, &net->layers[i]);
    net->ntensors = wk.ntensors;
    net->model_hash = model_hash_v2(net);
    net->model_hash_v1 = model_hash_v1(net);
    return HCNN_OK;
}

void hcnn_net_free(hcnn_net *net)
{
    for (int i = 0; net->layers && i < net->nlayers; i++)
        hcnn_layer_free(&net->layers[i]);
    hcnn_free(net->layers);
    if (net->be) {
        net->be->free(net->be, net->params);
        net->be->free(net->be, net->grads);
        net->be->free(net->be, net->state);
    }
    hcnn_free(net->tensors);
    memset(net, 0, sizeof *net);
}

/* ---- initialisation ---------------------------------------------------- */

/* Children first, in parameter order: one generator stream for the model. */
static void init_layer(const hcnn_layer *l, hcnn_init init, hcnn_rng *rng, float *params,
                       float *state)
{
    for (int j = 0; j < l->nchildren; j++)
        init_layer(&l->children[j], init, rng, params, state);
    if (l->ops->init)
        l->ops->init(l, init, rng, params + l->param_off, params + l->param_off + l->nw,
                     state + l->state_off);
}

int hcnn_net_init(hcnn_net *net, hcnn_init init, uint64_t seed)
{
    const hcnn_backend *be = net->be;
    const size_t np = net->nparams + 1, ns = net->nstate + 1;
    float *params = be->host_memory ? net->params : hcnn_calloc(sizeof(float) * np, "parameters");
    float *state = be->host_memory ? net->state : hcnn_calloc(sizeof(float) * ns, "statistics");
    int rc = params && state ? HCNN_OK : HCNN_ENOMEM;
    if (!rc) {
        hcnn_rng rng;
        hcnn_rng_seed(&rng, seed, 0x696e6974ull /* "init" */);
        for (int i = 0; i < net->nlayers; i++)
            init_layer(&net->layers[i], init, &rng, params, state);
    }
    if (!be->host_memory) {
        if (!rc) {
            be->upload(be, net->params, params, sizeof(float) * np);
            be->upload(be, net->state, state, sizeof(float) * ns);
        }
        hcnn_free(params);
        hcnn_free(state);
    }
    return rc;
}

/* ---- tensors and ranges ------------------------------------------------- */

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

/* ---- activations ----------------------------------------------------------- */

/* Values per sample of the larger of a block's output and auxiliary tensors;
 * the kernels index one tensor with int, and a layer's per-sample sizes are
 * at most HCNN_MAX_SAMPLE_FLOATS (hcnn_layer_setup). */
static size_t act_per_sample(const hcnn_layer *l)
{
    return hcnn_layer_out_size(l) > l->aux_per_sample ? hcnn_layer_out_size(l)
                                                      : l->aux_per_sample;
}

/* The first block of [first, last) whose activations at this capacity are
 * too large, or -1. */
static int capacity_exceeded_at(const hcnn_net *net, int first, int last, int capacity)
{
    for (int i = first; i < last; i++) {
        const size_t per_sample = act_per_sample(&net->layers[i]);
        if (capacity < 0 || per_sample > (size_t)HCNN_MAX_SAMPLE_FLOATS / ((size_t)capacity + 1))
            return i;
    }
    return -1;
}

int hcnn_net_capacity_ok(const hcnn_net *net, int first, int last, int capacity)
{
    return capacity_exceeded_at(net, first, last, capacity) < 0;
}

int hcnn_net_check_capacity(const hcnn_net *net, int first, int last, int capacity)
{
    const int i = capacity_exceeded_at(net, first, last, capacity);
    if (i >= 0) {
        return hcnn_error("block %s: %d samples of %zu values make one activation tensor "
                          "larger than %d values (sizes are int in the kernels): lower "
                          "batch_size (or eval_batch_size)",
                          net->layers[i].name, capacity, act_per_sample(&net->layers[i]),
                          HCNN_MAX_SAMPLE_FLOATS);
    }
    return HCNN_OK;
}

int hcnn_acts_alloc(hcnn_acts *a, const hcnn_net *net, int first, int last, int capacity)
{
    memset(a, 0, sizeof *a);
    const int rc = hcnn_net_check_capacity(net, first, last, capacity);
    if (rc)
        return rc;
    memset(a, 0, sizeof *a);
    a->be = net->be;
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
    a->buf = net->be->alloc(net->be, sizeof(float) * (total + 16), "activations");
    if (!a->buf) {
        hcnn_acts_free(a);
        return HCNN_ENOMEM;
    }
    a->floats = total;
    if (first == 0 && net->be->layout != HCNN_LAYOUT_NCHW) {
        const size_t in = (size_t)net->in_c * net->in_h * net->in_w * capacity;
        a->x_layout = net->be->alloc(net->be, sizeof(float) * (in + 1), "the input, NHWC");
        if (!a->x_layout) {
            hcnn_acts_free(a);
            return HCNN_ENOMEM;
        }
        a->floats += in; /* the memory reports count it (pipeline.c's slot_bytes) */
    }
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
    if (a->be) {
        a->be->free(a->be, a->buf);
        if (a->x_layout)
            a->be->free(a->be, a->x_layout);
    }
    memset(a, 0, sizeof *a);
}
