/* Residual basic block (ResNet), two chains and an addition:
 *   y = relu(body(x) + shortcut(x))
 *   body     = conv3x3(stride s) - bn - relu - conv3x3 - bn
 *   shortcut = identity, or conv1x1(stride s) - bn ("projection")
 * Backward, with g = dy * [y > 0]:
 *   dx = body'(x)^T g + shortcut'(x)^T g
 *
 * The shortcut runs first, so that the body's last batch-norm adds it and
 * applies the block's ReLU in its own pass (the chain's epilogue).  The
 * input gradient is written once: by the body's first convolution adding
 * its dx to g written into dx (identity shortcut), and by the projection's
 * convolution adding its dx into the block's (no input-sized buffer
 * written and read again).
 *
 * aux layout for n samples: for each body layer, then each projection
 * layer, its output followed by its own aux.  Gradient temporaries come
 * from ctx->tmp: g (one output), two ping-pong buffers of the largest inner
 * tensor, one input-sized buffer for a projection without backward_acc. */
#include <stdio.h>
#include <string.h>

#include "hcnn/layer.h"

#define BODY 5         /* conv, bn, relu, conv, bn */
#define MAX_CHILDREN 7 /* and the projection's conv, bn */

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

static int residual_setup(hcnn_layer *l, const char *cfg_path, int index)
{
    const hcnn_block_spec *spec = &l->spec;
    if (spec->out < 1)
        return HCNN_LAYER_BAD_SHAPE;
    const int out = spec->out, sh = spec->sh > 0 ? spec->sh : 1, sw = spec->sw > 0 ? spec->sw : 1;
    int proj = spec->shortcut == HCNN_SHORTCUT_PROJECTION ||
               (spec->shortcut == HCNN_SHORTCUT_AUTO && (out != l->in_c || sh != 1 || sw != 1));
    if (spec->shortcut == HCNN_SHORTCUT_IDENTITY && (out != l->in_c || sh != 1 || sw != 1))
        return hcnn_error("%s: block %d (%s): identity shortcut needs the same shape, but the "
                          "block maps %d channels to %d with stride %dx%d (use shortcut: "
                          "projection)",
                          cfg_path, index, l->name, l->in_c, out, sh, sw);
    l->nchildren = BODY + (proj ? 2 : 0);
    l->children = hcnn_calloc(sizeof *l->children * (size_t)l->nchildren, "residual block");
    if (!l->children)
        return HCNN_ENOMEM;
    l->body = l->children, l->nbody = BODY;
    l->proj = proj ? l->children + BODY : NULL, l->nproj = proj ? 2 : 0;

    hcnn_block_spec cs[MAX_CHILDREN];
    static const char *suffix[MAX_CHILDREN] = {"conv1", "bn1", "relu", "conv2", "bn2",
                                               "downsample.0", "downsample.1"};
    child_spec(&cs[0], HCNN_BLOCK_CONV, out, 3, 1, 1);
    cs[0].sh = sh, cs[0].sw = sw;
    child_spec(&cs[1], HCNN_BLOCK_BN, out, 0, 0, 0);
    child_spec(&cs[2], HCNN_BLOCK_RELU, out, 0, 0, 0);
    child_spec(&cs[3], HCNN_BLOCK_CONV, out, 3, 1, 1);
    child_spec(&cs[4], HCNN_BLOCK_BN, out, 0, 0, 0);
    child_spec(&cs[5], HCNN_BLOCK_CONV, out, 1, 1, 0);
    cs[5].sh = sh, cs[5].sw = sw;
    child_spec(&cs[6], HCNN_BLOCK_BN, out, 0, 0, 0);

    /* the children's types, named here rather than looked up in the table
     * (which holds this block: src/layers/registry.c) */
    static const hcnn_layer_ops *const ops[MAX_CHILDREN] = {
        &hcnn_layer_conv, &hcnn_layer_bn, &hcnn_layer_relu, &hcnn_layer_conv,
        &hcnn_layer_bn,   &hcnn_layer_conv, &hcnn_layer_bn};

    int c = l->in_c, h = l->in_h, w = l->in_w;
    for (int j = 0; j < l->nbody; j++) {
        int rc = hcnn_layer_setup_as(&l->body[j], ops[j], &cs[j], c, h, w, cfg_path, index);
        if (!rc)
            rc = child_name(&l->body[j], l, suffix[j]);
        if (rc)
            return rc;
        c = l->body[j].out_c, h = l->body[j].out_h, w = l->body[j].out_w;
    }
    l->out_c = c, l->out_h = h, l->out_w = w;
    if (proj) {
        int rc = hcnn_layer_setup_as(&l->proj[0], ops[5], &cs[5], l->in_c, l->in_h, l->in_w,
                                     cfg_path, index);
        if (!rc)
            rc = hcnn_layer_setup_as(&l->proj[1], ops[6], &cs[6], out, l->proj[0].out_h,
                                     l->proj[0].out_w, cfg_path, index);
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
    for (int j = 0; j < l->nchildren; j++) {
        const hcnn_layer *ch = &l->children[j];
        l->aux_per_sample += hcnn_layer_out_size(ch) + ch->aux_per_sample;
        l->aux_fixed += ch->aux_fixed;
        if (ch->ws_per_sample > l->ws_per_sample)
            l->ws_per_sample = ch->ws_per_sample;
        l->flops_per_sample += ch->flops_per_sample;
        if (j < l->nbody && hcnn_layer_out_size(ch) > inner)
            inner = hcnn_layer_out_size(ch);
    }
    l->tmp_per_sample = hcnn_layer_out_size(l) + 2 * inner + hcnn_layer_in_size(l);
    return HCNN_OK;
}

/* The saved output and aux of every child (body first, then proj). */
static void child_bufs(const hcnn_layer *l, const float *aux, int n, float **y, float **caux)
{
    size_t off = 0;
    for (int j = 0; j < l->nchildren; j++) {
        const hcnn_layer *c = &l->children[j];
        y[j] = (float *)aux + off;
        caux[j] = (float *)aux + off + hcnn_layer_out_size(c) * n;
        off += hcnn_layer_out_size(c) * n + hcnn_layer_aux_size(c, n);
    }
}

static int residual_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y,
                            float *aux, int n)
{
    float *ys[MAX_CHILDREN], *auxs[MAX_CHILDREN];
    child_bufs(l, aux, n, ys, auxs);
    const float *s = x;
    if (l->nproj) {
        const int rc =
            hcnn_chain_forward(l->proj, l->nproj, ctx, x, ys + l->nbody, auxs + l->nbody, n, NULL);
        if (rc)
            return rc;
        s = ys[l->nbody + l->nproj - 1];
    }
    /* y = relu(bn(h) + shortcut) in the body's last pass */
    hcnn_chain_epilogue epi = {.add = s, .relu = 1, .out = y};
    const int rc = hcnn_chain_forward(l->body, l->nbody, ctx, x, ys, auxs, n, &epi);
    if (rc || epi.done)
        return rc;
    const size_t sz = hcnn_layer_out_size(l) * n;
    ctx->be->add(ctx->be, ys[l->nbody - 1], s, y, sz);
    ctx->be->relu_fwd(ctx->be, y, y, sz, 0.0f);
    return HCNN_OK;
}

static size_t max_inner(const hcnn_layer *l)
{
    size_t m = hcnn_layer_in_size(l);
    for (int j = 0; j < l->nbody; j++)
        if (hcnn_layer_out_size(&l->body[j]) > m)
            m = hcnn_layer_out_size(&l->body[j]);
    return m;
}

static int residual_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                             const float *aux, const float *dy, float *dx, int n)
{
    float *ys[MAX_CHILDREN], *auxs[MAX_CHILDREN];
    child_bufs(l, aux, n, ys, auxs);
    const size_t out_sz = hcnn_layer_out_size(l) * n, inner = max_inner(l) * n;
    float *g = ctx->tmp, *t0 = g + out_sz, *t1 = t0 + inner, *t2 = t1 + inner;
    float *const bufs[2] = {t0, t1};
    /* identity shortcut, body from a layer that adds its dx: g is written
     * into dx, which only the body's last layer reads, and the first one
     * adds its dx to it (two passes over the input gradient fewer) */
    const int into_dx = l->nproj == 0 && dx && l->nbody > 1 && l->body[0].ops->backward_acc;
    if (into_dx)
        g = dx;
    ctx->be->relu_bwd(ctx->be, y, dy, g, out_sz, 0.0f);
    int rc = hcnn_chain_backward(l->body, l->nbody, ctx, x, ys, auxs, g, dx, into_dx, bufs, n, NULL,
                                 NULL);
    if (rc)
        return rc;
    if (l->nproj == 0) {
        if (dx && !into_dx)
            ctx->be->add_acc(ctx->be, g, dx, out_sz);
        return HCNN_OK;
    }
    /* projection: parameter gradients always; its input gradient added to
     * dx by its first layer when that can, else through t2 */
    const int direct = l->proj[0].ops->backward_acc != NULL;
    rc = hcnn_chain_backward(l->proj, l->nproj, ctx, x, ys + l->nbody, auxs + l->nbody, g,
                             dx && !direct ? t2 : dx, dx && direct, bufs, n, NULL, NULL);
    if (rc)
        return rc;
    if (dx && !direct)
        ctx->be->add_acc(ctx->be, t2, dx, hcnn_layer_in_size(l) * n);
    return HCNN_OK;
}

const hcnn_layer_ops hcnn_layer_residual = {
    .setup = residual_setup,
    .forward = residual_forward,
    .backward = residual_backward,
};
