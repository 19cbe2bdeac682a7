/* The chain runner: a sequence of layers forward and backward, with the
 * batch-norm + ReLU fusion, the convolution + ReLU forward on a backend
 * with conv_relu, and the timing and LIKWID wrapper of every layer
 * (contract in include/hcnn/layer.h).  Fusing saves a pass over an
 * activation each way (memory bound: a ReLU of ResNet-18's layer1 tensor,
 * 16 MB, took 1.6 ms); no layer's backward reads a batch-norm's own output,
 * which is therefore left unwritten. */
#include "hcnn/layer.h"
#include "hcnn/markers.h"
#include "../core/trace.h"

/* Whether layers[j] absorbs the ReLU layers[j + 1] in both passes. */
static int fuses_relu(const hcnn_layer *layers, int j, int count)
{
    return j >= 0 && j + 1 < count && layers[j].ops->forward_fused &&
           layers[j].ops->backward_relu && layers[j + 1].ops->is_relu;
}

/* Whether layers[j] is a convolution that runs the ReLU layers[j + 1] in
 * its forward (a backend with conv_relu; the ReLU's backward stays its
 * own).  What it saves: the ReLU's pass over the activation and its launch
 * (on a GPU, the bias addition's kernel applies it). */
static int conv_runs_relu(const hcnn_layer *layers, int j, int count, const hcnn_ctx *ctx)
{
    return ctx->be->conv_relu && j + 1 < count && layers[j].kind == HCNN_BLOCK_CONV &&
           layers[j + 1].ops->is_relu;
}

/* A layer's pass, timed when profiling by the backend's timer pair (the
 * host clock on the CPU; events on a device, whose work is asynchronous),
 * inside its LIKWID region ("fwd:layer1.0.conv1" nested in "fwd:layer1.0":
 * a region only reads the counters at its start and stop, so regions nest)
 * and its NVTX range (l->trace, named when the network was built; a
 * batch-norm's covers the ReLU fused into it). */
static void pass_start(const hcnn_ctx *ctx, const hcnn_layer *l, int backward, hcnn_timer *t)
{
    (void)l; /* without LIKWID and NVTX the marker and the range are nothing */
    hcnn_trace_push(l->trace[backward]);
    if (backward ? ctx->prof_bwd : ctx->prof_fwd)
        ctx->be->timer_start(ctx->be, t);
    HCNN_MARKER_START(ctx, l->name, backward);
}

static void pass_stop(const hcnn_ctx *ctx, const hcnn_layer *l, int backward, hcnn_timer *t)
{
    HCNN_MARKER_STOP(ctx, l->name, backward);
    double *acc = backward ? ctx->prof_bwd : ctx->prof_fwd;
    if (acc)
        acc[l->id] += ctx->be->timer_stop(ctx->be, t);
    hcnn_trace_pop();
}

/* Whether layers[j] is a convolution whose batch statistics the batch-norm
 * layers[j + 1] takes from it (training, with the scratch's table): the
 * convolution gathers them while it writes its output, the batch-norm
 * then reads its input once instead of three times. */
static int gathers_stats(const hcnn_layer *layers, int j, int count, const hcnn_ctx *ctx)
{
    return ctx->training && ctx->bn_stats_table && j + 1 < count &&
           layers[j].kind == HCNN_BLOCK_CONV && layers[j + 1].kind == HCNN_BLOCK_BN;
}

int hcnn_chain_forward(hcnn_layer *layers, int count, const hcnn_ctx *ctx_in, const float *x,
                       float *const *y, float *const *aux, int n, hcnn_chain_epilogue *epi)
{
    const float *in = x;
    if (epi)
        epi->done = 0;
    hcnn_ctx pair = *ctx_in; /* with bn_stats for a convolution and its batch-norm */
    pair.bn_stats = NULL;
    pair.conv_relu = 0;
    pair.before_block = NULL; /* the top chain's blocks only (a residual's body is not one) */
    for (int j = 0; j < count; j++) {
        hcnn_layer *l = &layers[j];
        if (ctx_in->before_block) {
            const int rc = ctx_in->before_block(ctx_in->before_block_arg, j);
            if (rc)
                return rc;
        }
        if (gathers_stats(layers, j, count, ctx_in)) {
            pair.bn_stats = ctx_in->bn_stats_table;
            pair.bn_stats->bands = 0;
        } else if (j == 0 || !gathers_stats(layers, j - 1, count, ctx_in)) {
            pair.bn_stats = NULL; /* a batch-norm keeps its convolution's */
        }
        pair.conv_relu = conv_runs_relu(layers, j, count, ctx_in);
        const hcnn_ctx *ctx = &pair;
        const int last = j == count - 1;
        const int relu = fuses_relu(layers, j, count) || pair.conv_relu;
        const int epilogue = last && epi && l->ops->forward_fused;
        float *out = epilogue ? epi->out : y[j + relu];
        hcnn_timer t;
        pass_start(ctx, l, 0, &t);
        int rc = HCNN_OK;
        if (epilogue)
            l->ops->forward_fused(l, ctx, in, epi->add, epi->relu, out, aux[j], n);
        else if (relu && !pair.conv_relu)
            l->ops->forward_fused(l, ctx, in, NULL, 1, out, aux[j], n);
        else /* with pair.conv_relu: the convolution and the ReLU */
            rc = l->ops->forward(l, ctx, in, out, aux[j], n);
        pass_stop(ctx, l, 0, &t);
        if (rc)
            return rc;
        if (epilogue)
            epi->done = 1;
        in = out;
        j += relu; /* the ReLU is done */
    }
    return HCNN_OK;
}

int hcnn_chain_backward(hcnn_layer *layers, int count, const hcnn_ctx *ctx, const float *x,
                        float *const *y, float *const *aux, const float *dy, float *dx, int dx_acc,
                        float *const bufs[2], int n, hcnn_chain_done_fn done, void *arg)
{
    const float *cur = dy;
    int which = 0;
    for (int j = count - 1; j >= 0; j--) {
        /* a ReLU fused with the layer before it: that layer applies its mask */
        const int relu = fuses_relu(layers, j - 1, count);
        if (relu && done) {
            const int rc = done(arg, j);
            if (rc)
                return rc;
        }
        j -= relu;
        hcnn_layer *l = &layers[j];
        const float *in = j == 0 ? x : y[j - 1];
        float *out = j == 0 ? dx : bufs[which];
        const int acc = j == 0 && dx_acc && dx;
        hcnn_timer t;
        pass_start(ctx, l, 1, &t);
        int rc = HCNN_OK;
        if (relu)
            l->ops->backward_relu(l, ctx, in, aux[j], cur, out, n);
        else if (acc)
            l->ops->backward_acc(l, ctx, in, cur, out, n);
        else
            rc = l->ops->backward(l, ctx, in, y[j], aux[j], cur, out, n);
        pass_stop(ctx, l, 1, &t);
        if (!rc && done)
            rc = done(arg, j);
        if (rc)
            return rc;
        hcnn_ctx_poll(ctx);
        cur = out;
        which ^= 1;
    }
    return HCNN_OK;
}
