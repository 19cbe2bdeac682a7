/* Residual basic block (ResNet):
 *   y = relu(body(x) + shortcut(x))
 *   body     = conv3x3(stride s) - bn - relu - conv3x3 - bn
 *   shortcut = identity, or conv1x1(stride s) - bn ("projection")
 * Backward, with g = dy * [y > 0]:
 *   dx = body'(x)^T g + shortcut'(x)^T g
 *
 * Forward fusions: a batch-norm followed by a ReLU writes the ReLU's output
 * (the ReLU does not run), and a body that ends in a batch-norm adds the
 * shortcut and applies the block's ReLU in that batch-norm's pass (the
 * shortcut runs first).  Each saves a pass over an activation (memory
 * bound: a ReLU of layer1's 16 MB tensor took 1.6 ms).  No child's backward
 * reads a batch-norm's output, which is therefore left unwritten.
 * Backward fusion: the ReLU after a batch-norm does not run either; the
 * batch-norm's backward applies its mask (hcnn_bn_relu_fused).
 *
 * aux layout for n samples: for each body layer then each projection
 * layer, its output followed by its own aux.  Gradient temporaries come
 * from ctx->tmp: g (one output), then two ping-pong buffers of the largest
 * inner tensor, then one input-sized buffer for the projection's dx. */
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/layer.h"
#include "hcnn/markers.h"

typedef struct child_bufs {
    float *y;
    float *aux;
} child_bufs;

/* Pointers to the saved output and aux of child k (body first, then proj). */
static child_bufs child_at(const hcnn_layer *l, const float *aux, int n, int k)
{
    size_t off = 0;
    for (int j = 0; j < l->nbody + l->nproj; j++) {
        const hcnn_layer *c = j < l->nbody ? &l->body[j] : &l->proj[j - l->nbody];
        child_bufs b = {(float *)aux + off, (float *)aux + off + hcnn_layer_out_size(c) * n};
        if (j == k)
            return b;
        off += hcnn_layer_out_size(c) * n + hcnn_layer_aux_size(c, n);
    }
    child_bufs none = {NULL, NULL};
    return none;
}

/* A child's forward or backward, timed when profiling, and a LIKWID region
 * of its own ("fwd:layer1.0.conv1" inside "fwd:layer1.0": a region only
 * reads the counters at its start and stop, so regions nest). */
static int child_forward(hcnn_layer *c, const hcnn_ctx *ctx, const float *x, float *y,
                         float *aux, int n, const float *add, int relu)
{
    const double t0 = ctx->prof_child_fwd ? hcnn_now() : 0.0;
    HCNN_MARKER_START(ctx, c->name, 0);
    int rc = 0;
    if (add || relu) /* a batch-norm with the fused epilogue */
        hcnn_bn_forward_fused(c, ctx, x, add, relu, y, aux, n);
    else
        rc = hcnn_layer_forward(c, ctx, x, y, aux, n);
    HCNN_MARKER_STOP(ctx, c->name, 0);
    if (ctx->prof_child_fwd)
        ctx->prof_child_fwd[c->id] += hcnn_now() - t0;
    return rc;
}

static int child_backward(hcnn_layer *c, const hcnn_ctx *ctx, const float *x, const float *y,
                          const float *aux, const float *dy, float *dx, int dx_acc, int relu,
                          int n)
{
    const double t0 = ctx->prof_child_bwd ? hcnn_now() : 0.0;
    HCNN_MARKER_START(ctx, c->name, 1);
    int rc = 0;
    if (dx_acc) /* a convolution adding its dx (see hcnn_residual_backward) */
        hcnn_conv_backward_into(c, ctx, x, dy, dx, 1, n);
    else if (relu) /* a batch-norm with the following ReLU's mask */
        hcnn_bn_backward_fused(c, ctx, x, aux, dy, 1, dx, n);
    else
        rc = hcnn_layer_backward(c, ctx, x, y, aux, dy, dx, n);
    HCNN_MARKER_STOP(ctx, c->name, 1);
    if (ctx->prof_child_bwd)
        ctx->prof_child_bwd[c->id] += hcnn_now() - t0;
    return rc;
}

static size_t max_inner(const hcnn_layer *l)
{
    size_t m = hcnn_layer_in_size(l);
    for (int j = 0; j < l->nbody; j++)
        if (hcnn_layer_out_size(&l->body[j]) > m)
            m = hcnn_layer_out_size(&l->body[j]);
    return m;
}

static int is_kind(const hcnn_layer *l, int j, hcnn_block_kind kind)
{
    return j >= 0 && j < l->nbody && l->body[j].kind == kind;
}

int hcnn_residual_forward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, float *y,
                          float *aux, int n)
{
    const float *s = x;
    for (int j = 0; j < l->nproj; j++) {
        child_bufs b = child_at(l, aux, n, l->nbody + j);
        int rc = child_forward(&l->proj[j], ctx, s, b.y, b.aux, n, NULL, 0);
        if (rc)
            return rc;
        s = b.y;
    }
    const int last_bn = is_kind(l, l->nbody - 1, HCNN_BLOCK_BN);
    const float *h = x;
    for (int j = 0; j < l->nbody; j++) {
        child_bufs b = child_at(l, aux, n, j);
        const float *add = NULL;
        int relu = 0;
        float *out = b.y;
        if (j == l->nbody - 1 && last_bn) { /* y = relu(bn(h) + shortcut) */
            add = s, relu = 1, out = y;
        } else if (hcnn_bn_relu_fused(l->body, j, l->nbody)) {
            relu = 1, out = child_at(l, aux, n, j + 1).y; /* the ReLU's output */
        }
        const int rc = child_forward(&l->body[j], ctx, h, out, b.aux, n, add, relu);
        if (rc)
            return rc;
        h = out;
        if (relu && !add) /* the ReLU is done */
            j++;
    }
    if (last_bn)
        return 0;
    const size_t sz = hcnn_layer_out_size(l) * n;
    ctx->be->add(h, s, y, sz);
    ctx->be->relu_fwd(y, y, sz, 0.0f);
    return 0;
}

/* Backward through a chain of children [k0, k0+cnt) whose input is x0,
 * from gradient g to dx (which may be NULL; added to if dx_acc, the first
 * child then being a convolution), using buffers t[0], t[1]. */
static int chain_backward(hcnn_layer *l, hcnn_layer *chain, int cnt, int k0, const hcnn_ctx *ctx,
                          const float *x0, const float *aux, const float *g, float *dx,
                          int dx_acc, float *t0, float *t1, int n)
{
    const float *cur = g;
    float *bufs[2] = {t0, t1};
    int which = 0;
    for (int j = cnt - 1; j >= 0; j--) {
        const int relu = hcnn_bn_relu_fused(chain, j - 1, cnt);
        if (relu) /* the batch-norm before this ReLU applies its mask */
            j--;
        child_bufs b = child_at(l, aux, n, k0 + j);
        const float *in = j == 0 ? x0 : child_at(l, aux, n, k0 + j - 1).y;
        float *out = j == 0 ? dx : bufs[which];
        int rc = child_backward(&chain[j], ctx, in, b.y, b.aux, cur, out, j == 0 && dx_acc, relu,
                                n);
        if (rc)
            return rc;
        hcnn_ctx_poll(ctx);
        cur = out;
        which ^= 1;
    }
    return 0;
}

int hcnn_residual_backward(hcnn_layer *l, const hcnn_ctx *ctx, const float *x, const float *y,
                           const float *aux, const float *dy, float *dx, int n)
{
    const size_t out_sz = hcnn_layer_out_size(l) * n, inner = max_inner(l) * n;
    float *g = ctx->tmp, *t0 = g + out_sz, *t1 = t0 + inner, *t2 = t1 + inner;
    /* identity shortcut, body from a convolution to another child: g is
     * written into dx, which only the body's last child reads, and the
     * convolution adds its dx to it (no g buffer, no addition pass: two
     * passes over the block's input gradient fewer) */
    const int into_dx = l->nproj == 0 && dx && l->nbody > 1 &&
                        l->body[0].kind == HCNN_BLOCK_CONV;
    if (into_dx)
        g = dx;
    ctx->be->relu_bwd(y, dy, g, out_sz, 0.0f);
    int rc = chain_backward(l, l->body, l->nbody, 0, ctx, x, aux, g, dx, into_dx, t0, t1, n);
    if (rc)
        return rc;
    if (l->nproj == 0) {
        if (dx && !into_dx)
            ctx->be->add_acc(g, dx, out_sz);
        return 0;
    }
    /* projection: parameter gradients always; its input gradient is added
     * to dx, by the convolution's col2im itself when the chain starts with
     * one (no input-sized buffer written and read again: ResNet-18's
     * layer2.0-4.0 spent 3.4-3.6 ms a step in their own backward passes,
     * now 1.4-1.6, with the projections' rows about as before), else
     * through t2 */
    const int direct = l->proj[0].kind == HCNN_BLOCK_CONV;
    rc = chain_backward(l, l->proj, l->nproj, l->nbody, ctx, x, aux, g,
                        dx && !direct ? t2 : dx, dx && direct, t0, t1, n);
    if (rc)
        return rc;
    if (dx && !direct)
        ctx->be->add_acc(t2, dx, hcnn_layer_in_size(l) * n);
    return 0;
}
