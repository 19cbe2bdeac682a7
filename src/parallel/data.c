/* The serial and data-parallel strategies (one code path; one rank is the
 * serial case): every rank holds a full replica and a contiguous shard of
 * each global batch (rank r of R: samples [nb*r/R, nb*(r+1)/R)); forward,
 * loss, backward with the gradients' allreduce started bucket by bucket as
 * backward completes them (grad_sync.c), so every rank takes the serial
 * optimiser step of the global batch (include/hcnn/strategy.h). */
#include "hcnn/common.h"
#include "hcnn/markers.h"
#include "hcnn/strategy.h"

typedef struct data_impl {
    hcnn_acts acts; /* one arena for training and evaluation */
    float *dlogits;
    hcnn_grad_sync sync;
    int sync_ready;
} data_impl;

static int data_check(const hcnn_config *cfg, const hcnn_comm *comm)
{
    const int root = comm->rank == 0;
    if (cfg->stages != 1 || cfg->microbatches != 1 || cfg->npartition != 0) {
        if (root)
            hcnn_error("%s: stages, microbatches and partition apply to strategy 'pipeline' "
                       "(strategy is '%s')",
                       cfg->path, hcnn_strategy_name(cfg->strategy));
        return HCNN_EINVAL;
    }
    if (cfg->batch_size < comm->size) {
        if (root)
            hcnn_error("%s: batch_size %d is smaller than the number of ranks %d: every rank "
                       "needs at least one sample of each global batch",
                       cfg->path, cfg->batch_size, comm->size);
        return HCNN_EINVAL;
    }
    return HCNN_OK;
}

static int data_init(hcnn_strategy *s, int need_train)
{
    const hcnn_config *cfg = s->cfg;
    hcnn_net *net = s->net;
    data_impl *d = hcnn_calloc(sizeof *d, "data-parallel strategy");
    if (!d)
        return HCNN_ENOMEM;
    s->impl = d;
    s->first = 0, s->last = net->nlayers;
    s->group = s->comm->rank, s->ngroups = s->comm->size;
    const int shard = (cfg->batch_size + s->ngroups - 1) / s->ngroups;
    s->eval_batch = cfg->eval_batch_size > 0 ? cfg->eval_batch_size : shard;
    s->pass_samples = shard, s->passes = 1;
    s->counts_loss = 1;
    s->cuts_at_comm = 1; /* the buckets' starts and finish (grad_sync.h) */
    int cap = s->eval_batch;
    if (need_train && shard > cap)
        cap = shard;
    int rc = hcnn_acts_alloc(&d->acts, net, 0, net->nlayers, cap);
    if (!rc)
        rc = hcnn_scratch_alloc(&s->scratch, net, 0, net->nlayers, cap);
    if (rc || !need_train)
        return rc;
    d->dlogits =
        net->be->alloc(net->be, sizeof(float) * ((size_t)cap + 1) * net->classes, "logit gradients");
    if (!d->dlogits)
        return HCNN_ENOMEM;
    if (s->comm->size == 1)
        return HCNN_OK;
    d->sync_ready = 1; /* freed whole even when set-up fails half-way */
    rc = hcnn_grad_sync_init(&d->sync, s->comm->world, net, 0, net->nlayers, cfg->bucket_mb,
                             cfg->allreduce_progress, cfg->optimizer_sharding);
    if (rc)
        return rc;
    s->sync = &d->sync;
    s->allreduce_s = hcnn_grad_sync_calibrate(&d->sync, 3);
    if (cfg->allreduce_progress == HCNN_PROGRESS_TEST) {
        s->scratch.ctx.poll = hcnn_grad_sync_poll;
        s->scratch.ctx.poll_arg = &d->sync;
    }
    if (d->sync.sharded) { /* the parameters' all-gathers end in the next forward */
        d->sync.gather_in_forward = 1;
        s->scratch.ctx.before_block = hcnn_grad_sync_gathers_ready;
        s->scratch.ctx.before_block_arg = &d->sync;
    }
    return HCNN_OK;
}

static int data_step(hcnn_strategy *s, const float *x, const int32_t *y, int n, int gn,
                     double *stats)
{
    data_impl *d = s->impl;
    hcnn_net *net = s->net;
    hcnn_ctx *ctx = &s->scratch.ctx;
    int rc;
    if (s->sync)
        s->sync->cut = s->cut;
    if (n > 0) {
        if ((rc = hcnn_net_forward(net, ctx, &d->acts, x, n)))
            return rc;
        /* gradient of the mean loss over the global batch */
        net->be->softmax_xent(net->be, hcnn_acts_output(&d->acts), y, n, net->classes,
                              1.0f / (float)gn, d->dlogits, stats);
    }
    if (s->sync) {
        hcnn_grad_sync_settle(s->sync); /* a rank without samples ran no forward */
        hcnn_grad_sync_begin(s->sync);
    }
    if (n > 0 && (rc = hcnn_net_backward(net, &s->scratch, &d->acts, x, d->dlogits, NULL, n,
                                         s->sync ? hcnn_grad_sync_block_done : NULL,
                                         s->sync)))
        return rc;
    if (!s->sync)
        return HCNN_OK;
    HCNN_MARKER_START(ctx, "comm_wait", 2);
    rc = hcnn_grad_sync_finish(s->sync);
    HCNN_MARKER_STOP(ctx, "comm_wait", 2);
    return rc;
}

static int data_infer(hcnn_strategy *s, const float *x, const int32_t *y, int n, double *stats)
{
    data_impl *d = s->impl;
    hcnn_ctx ctx = s->scratch.ctx;
    ctx.training = 0;
    ctx.weights_key = 0; /* not the weights of the last step's calls */
    ctx.poll = NULL;
    ctx.before_block = NULL;
    hcnn_grad_sync_settle(s->sync); /* the last update's parameters */
    const int rc = hcnn_net_forward(s->net, &ctx, &d->acts, x, n);
    if (!rc)
        s->net->be->softmax_xent(s->net->be, hcnn_acts_output(&d->acts), y, n, s->net->classes,
                                 0.0f, NULL, stats);
    return rc;
}

/* every rank holds the whole model already, but for the momentum outside
 * its pieces when the optimiser is sharded */
static int data_gather(hcnn_strategy *s, float *momentum)
{
    hcnn_grad_sync_settle(s->sync);
    if (s->sync && s->sync->sharded && momentum)
        return hcnn_grad_sync_gather_momentum(s->sync, momentum);
    return HCNN_OK;
}

static void data_report_header(const hcnn_strategy *s, FILE *out)
{
    if (s->sync)
        hcnn_grad_sync_print(s->sync, s->cfg->bucket_mb, s->allreduce_s, out);
    else if (s->cfg->optimizer_sharding != HCNN_SHARDING_NONE)
        fprintf(out, "hcnn: optimizer_sharding: %s: one rank, nothing to shard (the whole "
                     "optimiser step here)\n",
                hcnn_sharding_name(s->cfg->optimizer_sharding));
}

static int data_report_epoch(hcnn_strategy *s, double epoch_s, FILE *out)
{
    (void)s, (void)epoch_s, (void)out;
    return HCNN_OK;
}

static void data_free(hcnn_strategy *s)
{
    data_impl *d = s->impl;
    if (d) {
        if (d->sync_ready)
            hcnn_grad_sync_free(&d->sync);
        hcnn_acts_free(&d->acts);
        if (d->dlogits)
            s->net->be->free(s->net->be, d->dlogits);
        hcnn_free(d);
    }
    hcnn_scratch_free(&s->scratch);
}

const hcnn_strategy_ops hcnn_strategy_data = {
    .name = "data",
    .check = data_check,
    .init = data_init,
    .step = data_step,
    .infer = data_infer,
    .gather = data_gather,
    .report_header = data_report_header,
    .report_epoch = data_report_epoch,
    .free = data_free,
};
