/* Shape inference and forward/backward dispatch for every block kind.
 * Element-wise layers (ReLU, dropout, flatten, pooling) are short enough to
 * live here, forward next to backward. */
#include <stdio.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/layer.h"

static int pool_setup(hcnn_layer *l, int kh, int kw, int sh, int sw, int ph, int pw)
{
    hcnn_pool_geom *g = &l->pool;
    g->c = l->in_c, g->h = l->in_h, g->w = l->in_w;
    g->kh = kh, g->kw = kw, g->sh = sh, g->sw = sw, g->ph = ph, g->pw = pw;
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || ph < 0 || pw < 0 || 2 * ph > kh || 2 * pw > kw)
        return -1;
    g->oh = (l->in_h + 2 * ph - kh) / sh + 1;
    g->ow = (l->in_w + 2 * pw - kw) / sw + 1;
    if (l->in_h + 2 * ph < kh || l->in_w + 2 * pw < kw || g->oh < 1 || g->ow < 1)
        return -1;
    l->out_c = l->in_c, l->out_h = g->oh, l->out_w = g->ow;
    return 0;
}

static int conv_setup(hcnn_layer *l, int out, int kh, int kw, int sh, int sw, int ph, int pw,
                      int bias)
{
    hcnn_conv_geom *g = &l->conv;
    g->c = l->in_c, g->h = l->in_h, g->w = l->in_w;
    g->kh = kh, g->kw = kw, g->sh = sh, g->sw = sw, g->ph = ph, g->pw = pw;
    if (out < 1 || kh < 1 || kw < 1 || sh < 1 || sw < 1 || ph < 0 || pw < 0)
        return -1;
    if (l->in_h + 2 * ph < kh || l->in_w + 2 * pw < kw)
        return -1;
    g->oh = (l->in_h + 2 * ph - kh) / sh + 1;
    g->ow = (l->in_w + 2 * pw - kw) / sw + 1;
    l->out_c = out, l->out_h = g->oh, l->out_w = g->ow;
    const size_t K = (size_t)l->in_c * kh * kw, P = (size_t)g->oh * g->ow;
    l->nw = (size_t)out * K;
    l->nb = bias ? (size_t)out : 0;
    l->has_bias = bias;
    l->ws_per_sample = (K + (size_t)out) * P;
    l->flops_per_sample = 2.0 * (double)K * out * P;
    return 0;
}

static void child_spec(hcnn_block_spec *s, hcnn_block_kind kind, int out, int k, int stride,
                       int pad)
{
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->out = out;
    s->kh = s->kw = k;
    s->sh = s->sw = stride;
    s->ph = s->pw = pad;
    s->bias = 0;
    s->eps = 1e-5f;
    s->momentum = 0.1f;
}

/* "<block>.<suffix>", PyTorch's (torchvision's) names inside a BasicBlock */
static int child_name(hcnn_layer *child, const hcnn_layer *parent, const char *suffix)
{
    if (snprintf(child->name, sizeof child->name, "%s.%s", parent->name, suffix) >=
        (int)sizeof child->name)
        return hcnn_error("block name %s is too long", parent->name);
    return 0;
}

static int residual_setup(hcnn_layer *l, const hcnn_block_spec *spec, const char *cfg_path,
                          int index)
{
    static const int nbody = 5;
    const int out = spec->out, sh = spec->sh > 0 ? spec->sh : 1, sw = spec->sw > 0 ? spec->sw : 1;
    int proj = spec->shortcut == HCNN_SHORTCUT_PROJECTION ||
               (spec->shortcut == HCNN_SHORTCUT_AUTO && (out != l->in_c || sh != 1 || sw != 1));
    if (spec->shortcut == HCNN_SHORTCUT_IDENTITY && (out != l->in_c || sh != 1 || sw != 1))
        return hcnn_error("%s: block %d (%s): identity shortcut needs the same shape, but the "
                          "block maps %d channels to %d with stride %dx%d (use shortcut: "
                          "projection)",
                          cfg_path, index, l->name, l->in_c, out, sh, sw);
    l->body = hcnn_calloc(sizeof *l->body * nbody, "residual block");
    l->proj = proj ? hcnn_calloc(sizeof *l->proj * 2, "residual shortcut") : NULL;
    if (!l->body || (proj && !l->proj))
        return HCNN_ENOMEM;
    l->nbody = nbody;
    l->nproj = proj ? 2 : 0;

    hcnn_block_spec cs[7];
    static const char *suffix[7] = {"conv1", "bn1", "relu", "conv2", "bn2", "downsample.0",
                                    "downsample.1"};
    child_spec(&cs[0], HCNN_BLOCK_CONV, out, 3, 1, 1);
    cs[0].sh = sh, cs[0].sw = sw;
    child_spec(&cs[1], HCNN_BLOCK_BN, out, 0, 0, 0);
    child_spec(&cs[2], HCNN_BLOCK_RELU, out, 0, 0, 0);
    child_spec(&cs[3], HCNN_BLOCK_CONV, out, 3, 1, 1);
    child_spec(&cs[4], HCNN_BLOCK_BN, out, 0, 0, 0);
    child_spec(&cs[5], HCNN_BLOCK_CONV, out, 1, 1, 0);
    cs[5].sh = sh, cs[5].sw = sw;
    child_spec(&cs[6], HCNN_BLOCK_BN, out, 0, 0, 0);

    int c = l->in_c, h = l->in_h, w = l->in_w;
    for (int j = 0; j < nbody; j++) {
        int rc = hcnn_layer_setup(&l->body[j], &cs[j], c, h, w, cfg_path, index);
        if (!rc)
            rc = child_name(&l->body[j], l, suffix[j]);
        if (rc)
            return rc;
        c = l->body[j].out_c, h = l->body[j].out_h, w = l->body[j].out_w;
    }
    l->out_c = c, l->out_h = h, l->out_w = w;
    if (proj) {
        int rc = hcnn_layer_setup(&l->proj[0], &cs[5], l->in_c, l->in_h, l->in_w, cfg_path, index);
        if (!rc)
            rc = hcnn_layer_setup(&l->proj[1], &cs[6], out, l->proj[0].out_h, l->proj[0].out_w,
                                  cfg_path, index);
        if (!rc)
            rc = child_name(&l->proj[0], l, suffix[5]);
        if (!rc)
            rc = child_name(&l->proj[1], l, suffix[6]);
        if (rc)
            return rc;
        if (l->proj[1].out_h != h || l->proj[1].out_w != w)
            return hcnn_error("%s: block %d (%s): shortcut output %dx%d differs from body %dx%d",
                              cfg_path, index, l->name, l->proj[1].out_h, l->proj[1].out_w, h, w);
    }
    size_t inner = hcnn_layer_in_size(l);
    for (int j = 0; j < l->nbody + l->nproj; j++) {
        const hcnn_layer *ch = j < l->nbody ? &l->body[j] : &l->proj[j - l->nbody];
        l->aux_per_sample += hcnn_layer_out_size(ch) + ch->aux_per_sample;
        l->aux_fixed += ch->aux_fixed;
        if (ch->ws_per_sample > l->ws_per_sample)
            l->ws_per_sample = ch->ws_per_sample;
        l->flops_per_sample += ch->flops_per_sample;
        if (j < l->nbody && hcnn_layer_out_size(ch) > inner)
            inner = hcnn_layer_out_size(ch);
    }
    l->tmp_per_sample = hcnn_layer_out_size(l) + 2 * inner + hcnn_layer_in_size(l);
    return 0;
}

int hcnn_layer_setup(hcnn_layer *l, const hcnn_block_spec *spec, int in_c, int in_h, int in_w,
                     const char *cfg_path, int index)
{
    /* keep the name given by the caller (net.c derives defaults) */
    char name[sizeof l->name];
    snprintf(name, sizeof name, "%s", spec->name);
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->kind = spec->kind;
    l->in_c = in_c, l->in_h = in_h, l->in_w = in_w;
    l->out_c = in_c, l->out_h = in_h, l->out_w = in_w;
    int bad = 0;
    switch (spec->kind) {
    case HCNN_BLOCK_CONV:
        bad = conv_setup(l, spec->out, spec->kh, spec->kw, spec->sh, spec->sw, spec->ph, spec->pw,
                         spec->bias);
        break;
    case HCNN_BLOCK_BN:
        l->eps = spec->eps > 0 ? spec->eps : 1e-5f;
        l->momentum = spec->momentum > 0 ? spec->momentum : 0.1f;
        l->nw = l->nb = (size_t)in_c;
        l->nstate = 2 * (size_t)in_c;
        l->aux_fixed = 2 * (size_t)in_c;
        break;
    case HCNN_BLOCK_RELU:
    case HCNN_BLOCK_FLATTEN:
        if (spec->kind == HCNN_BLOCK_FLATTEN)
            l->out_c = in_c * in_h * in_w, l->out_h = l->out_w = 1;
        break;
    case HCNN_BLOCK_DROPOUT:
        l->p = spec->p;
        bad = l->p < 0.0f || l->p >= 1.0f;
        l->aux_per_sample = hcnn_layer_in_size(l);
        break;
    case HCNN_BLOCK_MAXPOOL:
    case HCNN_BLOCK_AVGPOOL:
        bad = pool_setup(l, spec->kh, spec->kw, spec->sh > 0 ? spec->sh : spec->kh,
                         spec->sw > 0 ? spec->sw : spec->kw, spec->ph, spec->pw);
        if (spec->kind == HCNN_BLOCK_MAXPOOL)
            l->aux_per_sample = hcnn_layer_out_size(l); /* int32 argmax */
        break;
    case HCNN_BLOCK_GAP:
        bad = pool_setup(l, in_h, in_w, 1, 1, 0, 0);
        break;
    case HCNN_BLOCK_FC:
        if (spec->out < 1) {
            bad = 1;
            break;
        }
        l->out_c = spec->out, l->out_h = l->out_w = 1;
        l->nw = (size_t)spec->out * hcnn_layer_in_size(l);
        l->nb = spec->bias ? (size_t)spec->out : 0;
        l->has_bias = spec->bias;
        l->flops_per_sample = 2.0 * (double)l->nw;
        break;
    case HCNN_BLOCK_RESIDUAL:
        if (spec->out < 1) {
            bad = 1;
            break;
        }
        return residual_setup(l, spec, cfg_path, index);
    default:
        return hcnn_error("%s: block %d: unknown block kind %d", cfg_path, index, (int)spec->kind);
    }
    if (bad)
        return hcnn_error("%s: model.blocks.%d (%s, %s): cannot apply kernel %dx%d stride %dx%d "
                          "pad %dx%d out %d to an input of %dx%dx%d",
                          cfg_path, index, hcnn_block_kind_name(spec->kind), l->name, spec->kh,
                          spec->kw, spec->sh, spec->sw, spec->ph, spec->pw, spec->out, in_c, in_h,
                          in_w);
    return 0;
}

int hcnn_layer_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y, float *aux,
                       int n)
{
    const hcnn_backend *be = ctx->be;
    const size_t sz = hcnn_layer_out_size(l) * (size_t)n;
    switch (l->kind) {
    case HCNN_BLOCK_CONV:
        hcnn_conv_forward(l, ctx, x, y, n);
        return 0;
    case HCNN_BLOCK_FC:
        hcnn_fc_forward(l, ctx, x, y, n);
        return 0;
    case HCNN_BLOCK_BN:
        hcnn_bn_forward(l, ctx, x, y, aux, n);
        return 0;
    case HCNN_BLOCK_RELU: /* y = max(x, 0) */
        be->relu_fwd(x, y, sz, 0.0f);
        return 0;
    case HCNN_BLOCK_FLATTEN: /* NCHW is already [n][c*h*w] */
        be->copy(y, x, sz);
        return 0;
    case HCNN_BLOCK_DROPOUT: /* y = x * mask, mask in {0, 1/(1-p)}; identity at inference */
        if (!ctx->training || l->p == 0.0f)
            be->copy(y, x, sz);
        else
            be->dropout_fwd(x, y, aux, n, hcnn_layer_in_size(l), l->p, ctx->seed, ctx->step,
                            ctx->first_sample, (uint64_t)l->id);
        return 0;
    case HCNN_BLOCK_MAXPOOL:
        be->maxpool_fwd(&l->pool, x, n, y, (int32_t *)aux);
        return 0;
    case HCNN_BLOCK_AVGPOOL:
    case HCNN_BLOCK_GAP:
        be->avgpool_fwd(&l->pool, x, n, y);
        return 0;
    case HCNN_BLOCK_RESIDUAL:
        return hcnn_residual_forward(l, ctx, x, y, aux, n);
    default:
        return hcnn_error("layer %s: unknown kind %d", l->name, (int)l->kind);
    }
}

int hcnn_layer_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                        const float *aux, const float *dy, float *dx, int n)
{
    const hcnn_backend *be = ctx->be;
    const size_t sz = hcnn_layer_out_size(l) * (size_t)n;
    switch (l->kind) {
    case HCNN_BLOCK_CONV:
        hcnn_conv_backward(l, ctx, x, dy, dx, n);
        return 0;
    case HCNN_BLOCK_FC:
        hcnn_fc_backward(l, ctx, x, dy, dx, n);
        return 0;
    case HCNN_BLOCK_BN:
        hcnn_bn_backward(l, ctx, x, aux, dy, dx, n);
        return 0;
    case HCNN_BLOCK_RESIDUAL:
        return hcnn_residual_backward(l, ctx, x, y, aux, dy, dx, n);
    default:
        break;
    }
    if (!dx) /* parameter-free layers only produce dx */
        return 0;
    switch (l->kind) {
    case HCNN_BLOCK_RELU: /* dx = dy * [y > 0] */
        be->relu_bwd(y, dy, dx, sz, 0.0f);
        return 0;
    case HCNN_BLOCK_FLATTEN:
        be->copy(dx, dy, sz);
        return 0;
    case HCNN_BLOCK_DROPOUT: /* dx = dy * mask */
        if (!ctx->training || l->p == 0.0f)
            be->copy(dx, dy, sz);
        else
            be->mul(dy, aux, dx, sz);
        return 0;
    case HCNN_BLOCK_MAXPOOL: /* dy routed to the argmax of each window */
        be->maxpool_bwd(&l->pool, dy, (const int32_t *)aux, n, dx);
        return 0;
    case HCNN_BLOCK_AVGPOOL:
    case HCNN_BLOCK_GAP: /* dy spread evenly over each window */
        be->avgpool_bwd(&l->pool, dy, n, dx);
        return 0;
    default:
        return hcnn_error("layer %s: unknown kind %d", l->name, (int)l->kind);
    }
}
