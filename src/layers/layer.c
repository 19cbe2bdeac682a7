/* What every layer shares: set-up through the type's shape inference,
 * dispatch of the passes, workspace and GEMM lists over a layer and its
 * children, initial weights (contract in include/hcnn/layer.h).  The table
 * of block types, above every type, is registry.c: the types call this
 * file, and a block made of others (residual.c) sets its children up with
 * their types' operations, so nothing here reaches the types. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hcnn/layer.h"

/* Per-sample sizes that the kernels index with int (GEMM dimensions, one
 * image's columns): at most HCNN_MAX_SAMPLE_FLOATS each, checked here, so
 * that a model such as a 65536x65536 input is refused before anything is
 * allocated rather than overflowing. */
static int check_sample_sizes(const hcnn_layer *l, const char *cfg_path, int index)
{
    const struct {
        const char *what;
        size_t floats;
    } sizes[] = {
        {"input values per sample", hcnn_layer_in_size(l)},
        {"output values per sample", hcnn_layer_out_size(l)},
        {"auxiliary values per sample", l->aux_per_sample},
        {"workspace values per sample", l->ws_per_sample},
        {"weights", l->nw},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].floats > HCNN_MAX_SAMPLE_FLOATS)
            return hcnn_error("%s: model.blocks.%d (%s): %zu %s, more than the %d a tensor may "
                              "hold (sizes are int in the kernels): make the model smaller",
                              cfg_path, index, l->name, sizes[i].floats, sizes[i].what,
                              HCNN_MAX_SAMPLE_FLOATS);
    return HCNN_OK;
}

int hcnn_layer_setup_as(hcnn_layer *l, const hcnn_layer_ops *ops, const hcnn_block_spec *spec,
                        int in_c, int in_h, int in_w, const char *cfg_path, int index)
{
    /* keep the name given by the caller (net.c derives defaults) */
    char name[sizeof l->name];
    snprintf(name, sizeof name, "%s", spec->name);
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->kind = spec->kind;
    l->ops = ops;
    if (!l->ops)
        return hcnn_error("%s: block %d: unknown block kind %d", cfg_path, index, (int)spec->kind);
    l->spec = *spec;
    l->in_c = in_c, l->in_h = in_h, l->in_w = in_w;
    l->out_c = in_c, l->out_h = in_h, l->out_w = in_w;
    if (in_c > HCNN_MAX_DIM || in_h > HCNN_MAX_DIM || in_w > HCNN_MAX_DIM)
        return hcnn_error("%s: model.blocks.%d (%s): its input %dx%dx%d has a dimension above "
                          "%d",
                          cfg_path, index, l->name, in_c, in_h, in_w, HCNN_MAX_DIM);
    const int rc = l->ops->setup(l, cfg_path, index);
    if (rc == HCNN_OK)
        return check_sample_sizes(l, cfg_path, index);
    if (rc != HCNN_LAYER_BAD_SHAPE)
        return rc;
    return hcnn_error("%s: model.blocks.%d (%s, %s): cannot apply kernel %dx%d stride %dx%d "
                      "pad %dx%d out %d to an input of %dx%dx%d",
                      cfg_path, index, hcnn_block_kind_name(spec->kind), l->name, spec->kh,
                      spec->kw, spec->sh, spec->sw, spec->ph, spec->pw, spec->out, in_c, in_h,
                      in_w);
}

void hcnn_layer_free(hcnn_layer *l)
{
    for (int j = 0; l->children && j < l->nchildren; j++)
        hcnn_layer_free(&l->children[j]);
    hcnn_free(l->children);
    l->children = l->body = l->proj = NULL;
    l->nchildren = l->nbody = l->nproj = 0;
    if (l->conv_cache.release)
        l->conv_cache.release(l->conv_cache.data);
    l->conv_cache = (hcnn_conv_cache){0};
}

int hcnn_layer_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                       int n)
{
    return l->ops->forward(l, ctx, x, y, aux, n);
}

int hcnn_layer_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                        const float *aux, const float *dy, float *dx, int n)
{
    return l->ops->backward(l, ctx, x, y, aux, dy, dx, n);
}

size_t hcnn_layer_workspace(const hcnn_layer *l, const hcnn_ctx *ctx, int n)
{
    size_t need = l->ops->workspace ? l->ops->workspace(l, ctx, n) : 0;
    for (int j = 0; j < l->nchildren; j++) {
        const size_t c = hcnn_layer_workspace(&l->children[j], ctx, n);
        need = c > need ? c : need;
    }
    return need;
}

size_t hcnn_layer_thread_workspace(const hcnn_layer *l, const hcnn_ctx *ctx, int n)
{
    return l->ops->thread_workspace ? l->ops->thread_workspace(l, ctx, n) : 0;
}

void hcnn_layer_gemms(const hcnn_layer *l, const hcnn_ctx *ctx, int n, int unit, int need_dx,
                      hcnn_gemm_list *g)
{
    for (int j = 0; j < l->nchildren; j++)
        hcnn_layer_gemms(&l->children[j], ctx, n, unit, 1, g);
    if (l->ops->gemms)
        l->ops->gemms(l, ctx, n, unit, need_dx, g);
}

void hcnn_init_weights(hcnn_init init, hcnn_rng *rng, size_t fan_in, size_t fan_out, float *w,
                       size_t nw, float *b, size_t nb)
{
    if (init == HCNN_INIT_HE) {
        const float std = sqrtf(2.0f / (float)fan_in);
        for (size_t i = 0; i < nw; i++)
            w[i] = std * hcnn_rng_normal(rng);
    } else {
        const float a = sqrtf(6.0f / (float)(fan_in + fan_out));
        for (size_t i = 0; i < nw; i++)
            w[i] = a * (2.0f * hcnn_rng_uniform(rng) - 1.0f);
    }
    for (size_t i = 0; i < nb; i++)
        b[i] = 0.0f;
}

int hcnn_layer_op(const hcnn_layer *l, const hcnn_layer *prev, int need_dx, hcnn_conv_desc *d,
                  hcnn_op *op)
{
    memset(op, 0, sizeof *op);
    op->c = l->out_c, op->np = l->out_h * l->out_w;
    op->need_dx = need_dx, op->has_bias = l->has_bias;
    switch (l->kind) {
    case HCNN_BLOCK_CONV:
        memset(d, 0, sizeof *d);
        d->g = l->conv, d->out_c = l->out_c;
        op->kind = HCNN_OP_CONV, op->conv = d;
        return 1;
    case HCNN_BLOCK_FC:
        op->kind = HCNN_OP_FC, op->in = (int)hcnn_layer_in_size(l);
        op->out = (int)hcnn_layer_out_size(l);
        return 1;
    case HCNN_BLOCK_BN: /* the chain pairs it with a convolution before it (chain.c) */
        op->kind = HCNN_OP_BN, op->gathered = prev && prev->kind == HCNN_BLOCK_CONV;
        return 1;
    case HCNN_BLOCK_RELU:
    case HCNN_BLOCK_LEAKY_RELU: /* inside the layer before it when that one fuses it */
        if (l->ops->is_relu && prev && prev->ops->forward_fused)
            return 0;
        op->kind = HCNN_OP_ELEMENTWISE;
        return 1;
    case HCNN_BLOCK_DROPOUT: op->kind = HCNN_OP_ELEMENTWISE; return 1;
    case HCNN_BLOCK_FLATTEN:
        op->kind = HCNN_OP_COPY, op->c = (int)hcnn_layer_out_size(l), op->np = 1;
        return 1;
    case HCNN_BLOCK_RESIDUAL: return 0; /* its children, and its addition (element-wise) */
    default: /* the pools */
        op->kind = HCNN_OP_POOL, op->c = l->in_c, op->np = l->in_h * l->in_w;
        op->out_np = l->out_h * l->out_w;
        return 1;
    }
}
