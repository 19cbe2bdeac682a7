/* The training driver: epochs of (load batch, the strategy's step, the
 * optimiser on this rank's blocks), evaluation, progress, metrics and
 * checkpoints.  Everything a run owns lives in one struct passed down
 * (src/train/run.h); how the ranks share a step is the strategy's. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#include "hcnn/common.h"
#include "hcnn/env.h"
#include "hcnn/files.h"
#include "hcnn/markers.h"
#include "../core/trace.h"
#include "run.h"

/* What every rank must know before the optimiser step, in one small
 * allreduce (MPI_MAX) that replaces a per-step signal check: whether a
 * rank's loss or gradients are not finite (the lowest such rank, as
 * size - rank), a stop signal, a failed checkpoint write (rank 0's writer). */
enum { AGREE_BAD_RANK, AGREE_SIGNAL, AGREE_CKPT_FAILED, AGREE_N };

/* A pending SIGTERM or SIGUSR1 taken, or SIGTERM for the caller's stop
 * request (include/hcnn/hcnn.h), else 0. */
static int take_stop_signal(const hcnn_run *r)
{
    if (r->opts && r->opts->stop_request && *r->opts->stop_request)
        return SIGTERM;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    const struct timespec zero = {0, 0};
    int got = sigtimedwait(&set, NULL, &zero);
    return got > 0 ? got : 0;
}

/* The step's loss, correct predictions and the squared norm of this
 * rank's gradients, summed by the backend into its memory: read back
 * here, once per step.  The HCNN_FAIL_AT=rank:step hook poisons that
 * rank's loss. */
/* stats[HCNN_STAT_STATE_SUMSQ] += that of this rank's batch-norm running
 * statistics: their finiteness is part of the step's (lr 1e6 on a residual
 * network made a running variance inf while the loss stayed finite; the
 * checkpoint of that state could not be loaded) */
static void state_sum_sq(hcnn_run *r)
{
    size_t off, count;
    hcnn_net_state_range(&r->net, r->strat.first, r->strat.last, &off, &count);
    if (count)
        r->be->sum_sq(r->be, r->net.state + off, count,
                      r->stats + (HCNN_STAT_STATE_SUMSQ - HCNN_STAT_SUMSQ));
}

/* The optimiser sharded over this rank's replicas (grad_sync.h) */
static hcnn_grad_sync *sharded_sync(const hcnn_run *r)
{
    return r->strat.sync && r->strat.sync->sharded ? r->strat.sync : NULL;
}

static int step_results(hcnn_run *r, size_t off, size_t count, double *loss, int *correct,
                        double st[HCNN_STATS])
{
    hcnn_grad_sync *shard = sharded_sync(r);
    if (shard) { /* each rank its pieces: summed over the ranks below */
        if (!r->kept.have_norms)
            r->be->zero(r->be, r->stats + HCNN_STAT_WSQ, sizeof(double) * 2);
        hcnn_grad_sync_piece_sums(shard, r->kept.have_norms ? NULL : r->net.params,
                                  r->opt.velocity, r->stats);
        r->kept.have_norms = 1;
    } else
        r->be->sum_sq(r->be, r->net.grads + off, count, r->stats);
    if (!r->kept.have_norms) { /* the first step: the norms no update has summed yet */
        r->be->zero(r->be, r->stats + HCNN_STAT_WSQ, sizeof(double) * 2);
        r->be->sum_sq(r->be, r->net.params + off, count,
                      r->stats + (HCNN_STAT_WSQ - HCNN_STAT_SUMSQ));
        r->be->sum_sq(r->be, r->opt.velocity + off, count,
                      r->stats + (HCNN_STAT_VSQ - HCNN_STAT_SUMSQ));
        r->kept.have_norms = 1;
    }
    if (!r->strat.sync || !r->strat.sync->agree_fill) /* else agree_fill took it */
        state_sum_sq(r);
    r->be->download(r->be, st, r->stats, sizeof(double) * HCNN_STATS);
    if (shard) { /* the norms over the ranks' pieces, in rank order */
        double sums[3] = {st[HCNN_STAT_SUMSQ], st[HCNN_STAT_WSQ], st[HCNN_STAT_VSQ]};
        hcnn_grad_sync_norms(shard, sums, 3);
        st[HCNN_STAT_SUMSQ] = sums[0], st[HCNN_STAT_WSQ] = sums[1], st[HCNN_STAT_VSQ] = sums[2];
    }
    *loss = st[HCNN_STAT_LOSS];
    *correct = (int)st[HCNN_STAT_CORRECT];
    if (r->comm->rank == r->fail_rank && r->step == r->fail_step && !r->fail_collective)
        *loss = NAN;
    return isfinite(*loss) && isfinite(st[HCNN_STAT_SUMSQ]) && isfinite(st[HCNN_STAT_STATE_SUMSQ]);
}

/* This rank's part of the agreement, as MPI_MAX takes it. */
static void agree_local(hcnn_run *r, int finite, int agreed[AGREE_N])
{
    agreed[AGREE_BAD_RANK] = finite ? 0 : r->comm->size - r->comm->rank;
    agreed[AGREE_SIGNAL] = take_stop_signal(r);
    agreed[AGREE_CKPT_FAILED] = r->writer_ready && hcnn_ckpt_writer_failed(&r->writer) != HCNN_OK;
}

/* The data-parallel ranks' agreement rides on the first gradient bucket
 * (grad_sync.h): written as counts that MPI_SUM adds up, just before that
 * bucket starts, in the middle of backward.  What is known then: a signal,
 * the checkpoint writer, this rank's loss and batch-norm statistics.  Its
 * gradients come back summed over the ranks, identical on every one, so
 * their finiteness needs no agreement (step_agree). */
enum { TAIL_SIGTERM, TAIL_SIGUSR1, TAIL_CKPT_FAILED, TAIL_BAD_LOSS };

static void agree_fill(void *arg, float *tail)
{
    hcnn_run *r = arg;
    double st[HCNN_STATS];
    state_sum_sq(r);
    r->be->download(r->be, st, r->stats, sizeof st);
    int agreed[AGREE_N];
    agree_local(r, isfinite(st[HCNN_STAT_LOSS]) && isfinite(st[HCNN_STAT_STATE_SUMSQ]) &&
                       !(r->comm->rank == r->fail_rank &&
                                                     r->step == r->fail_step &&
                                                     !r->fail_collective),
                agreed);
    tail[TAIL_SIGTERM] = agreed[AGREE_SIGNAL] == SIGTERM;
    tail[TAIL_SIGUSR1] = agreed[AGREE_SIGNAL] == SIGUSR1;
    tail[TAIL_CKPT_FAILED] = (float)agreed[AGREE_CKPT_FAILED];
    tail[TAIL_BAD_LOSS] = agreed[AGREE_BAD_RANK] != 0;
}

static void train_fold_agreement(hcnn_run *r)
{
    hcnn_grad_sync *gs = r->strat.sync;
    if (r->cfg->strategy == HCNN_STRATEGY_DATA && gs && gs->tail_off && r->comm->size > 1) {
        gs->agree_fill = agree_fill;
        gs->agree_arg = r;
    }
}

int hcnn_train_prepare(hcnn_run *r)
{
    const hcnn_config *cfg = r->cfg;
    int rc = hcnn_sgd_init(&r->opt, r->be, r->net.nparams, cfg);
    if (rc)
        return rc;
    train_fold_agreement(r);
    hcnn_graphs_setup(r);
    r->perm = hcnn_alloc(sizeof *r->perm * (size_t)r->train.n, "epoch permutation");
    if (!r->perm)
        return HCNN_ENOMEM;
    const int augment = cfg->augment >= 0 ? cfg->augment : r->train.augment_default;
    /* a background thread only helps when a core is left for it */
    const int prefetch =
        cfg->data_prefetch == HCNN_PREFETCH_ON ||
        (cfg->data_prefetch == HCNN_PREFETCH_AUTO &&
         omp_get_max_threads() + r->reserved_core < omp_get_num_procs());
    rc = hcnn_loader_init(&r->loader, r->be, &r->train, cfg->batch_size, r->strat.group, r->strat.ngroups,
                          augment, cfg->seed, prefetch ? 1 : 0);
    if (rc)
        return rc;
    r->loader_ready = 1;
    const char *trace = getenv(HCNN_ENV_TRACE_BATCHES);
    if (trace && trace[0]) {
        char path[HCNN_PATH_MAX + 16];
        snprintf(path, sizeof path, r->comm->size > 1 ? "%s.%d" : "%s", trace, r->comm->rank);
        if (!(r->trace_batches = fopen(path, "a")))
            return hcnn_error_code(HCNN_EIO, "cannot open %s=%s: %s", HCNN_ENV_TRACE_BATCHES, path,
                                   strerror(errno));
    }
    return HCNN_OK;
}

static int step_agree(hcnn_run *r, int finite, int agreed[AGREE_N])
{
    const hcnn_grad_sync *gs = r->strat.sync;
    if (r->comm->size > 1 && gs && gs->agree_fill) {
        /* the sums the first bucket brought back; a non-finite step names
         * its first rank through one more allreduce, only then */
        float tail[HCNN_GRAD_TAIL];
        r->be->download(r->be, tail, r->net.grads + gs->tail_off, sizeof tail);
        agreed[AGREE_SIGNAL] = tail[TAIL_SIGTERM] > 0   ? SIGTERM
                               : tail[TAIL_SIGUSR1] > 0 ? SIGUSR1
                                                        : 0;
        agreed[AGREE_CKPT_FAILED] = tail[TAIL_CKPT_FAILED] > 0;
        agreed[AGREE_BAD_RANK] = 0;
        if (tail[TAIL_BAD_LOSS] > 0 || !finite) {
            agreed[AGREE_BAD_RANK] = finite ? 0 : r->comm->size - r->comm->rank;
            hcnn_watch_context("naming the first rank of a non-finite step %ld", r->step);
            hcnn_trace_push("agreement allreduce");
            HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &agreed[AGREE_BAD_RANK], 1, MPI_INT, MPI_MAX,
                                   r->comm->world));
            hcnn_trace_pop();
            hcnn_watch_context(NULL);
        }
        return HCNN_OK;
    }
    agree_local(r, finite, agreed);
    if (r->comm->size > 1) {
        hcnn_watch_context("the agreement of step %ld (non-finite, signals, checkpoint)", r->step);
        hcnn_trace_push("agreement allreduce");
        HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, agreed, AGREE_N, MPI_INT, MPI_MAX, r->comm->world));
        hcnn_trace_pop();
        hcnn_watch_context(NULL);
    }
    return HCNN_OK;
}

/* After the agreement: stop signals and failed writes are acted on after
 * the step; a non-finite step is dropped on every rank (its batch-norm
 * statistics restored), then skipped or the run stopped.  Returns 1 when
 * the optimiser step is to be skipped. */
static int act_on_agreement(hcnn_run *r, const int agreed[AGREE_N], int epoch, float lr)
{
    const hcnn_config *cfg = r->cfg;
    const int root = run_is_root(r);
    if (agreed[AGREE_SIGNAL] && !r->stop_signal && root && !r->quiet) {
        const int asked = r->opts && r->opts->stop_request && *r->opts->stop_request;
        printf("hcnn: %s: finishing the step, writing a checkpoint, exiting\n",
               asked ? "stop requested"
               : agreed[AGREE_SIGNAL] == SIGTERM ? "SIGTERM received" : "SIGUSR1 received");
        fflush(stdout);
    }
    if (agreed[AGREE_SIGNAL])
        r->stop_signal = agreed[AGREE_SIGNAL];
    if (agreed[AGREE_CKPT_FAILED]) {
        const int stop = cfg->checkpoint_on_error == HCNN_ON_ERROR_STOP;
        if (root) {
            char last[HCNN_FILE_PATH_MAX + 48];
            hcnn_ckpt_line_newest(cfg->checkpoint_dir, r->run_id, last, sizeof last);
            if (!last[0])
                snprintf(last, sizeof last, "none");
            char msg[HCNN_FILE_PATH_MAX * 2 + 256];
            snprintf(msg, sizeof msg,
                     "checkpoint %s could not be written (cause above); the last good "
                     "checkpoint is %s; %s (checkpoint_on_error: %s)",
                     r->writer.path, last,
                     stop ? "stopping after this step"
                          : "training goes on, the next checkpoint tries again",
                     hcnn_on_error_name(cfg->checkpoint_on_error));
            if (stop)
                hcnn_error("%s", msg);
            else
                hcnn_warn("%s", msg);
        }
        if (stop)
            r->stop_error = HCNN_EIO;
    }
    if (!agreed[AGREE_BAD_RANK]) {
        r->skips_in_row = 0;
        return 0;
    }
    if (r->state_before) { /* this step's statistics saw the bad values */
        r->be->copy(r->be, r->net.state, r->state_before, r->net.nstate);
        r->bn_state_agreed = 0;
    }
    const int bad_rank = r->comm->size - agreed[AGREE_BAD_RANK];
    const int skip = cfg->nonfinite == HCNN_NONFINITE_SKIP &&
                     r->skips_in_row < cfg->nonfinite_max_skips;
    if (skip) {
        r->skips_in_row++;
        if (root) {
            printf("hcnn: rank %d%s: non-finite loss or gradient at epoch %d step %ld: step "
                   "skipped on every rank (%d in a row, nonfinite_max_skips %d)\n",
                   bad_rank, r->comm->size > 1 ? " (the first of the ranks that had one)" : "",
                   epoch + 1, r->step,
                   r->skips_in_row, cfg->nonfinite_max_skips);
            fflush(stdout);
        }
        return 1;
    }
    if (root)
        hcnn_error("rank %d%s: non-finite loss or gradient at epoch %d step %ld (lr %g): "
                   "stopping with a checkpoint of the last good state%s; lower lr in %s",
                   bad_rank, r->comm->size > 1 ? " (the first of the ranks that had one)" : "",
                   epoch + 1, r->step, (double)lr,
                   cfg->nonfinite == HCNN_NONFINITE_SKIP ? " after nonfinite_max_skips skips"
                                                         : "",
                   cfg->path);
    r->stop_error = HCNN_ENUMERIC;
    return 1;
}

/* One optimiser step on this rank's shard (n of gn samples, the first at
 * epoch position `first`): the strategy's gradients, then SGD on the
 * blocks this rank owns. */
/* The step's work up to its results (graphs.c's segment 0): gradients
 * zeroed, the batch staged, forward, loss, backward (and, over ranks, the
 * gradients' allreduce). */
typedef struct step_work {
    const float *x;
    const int32_t *y;
    int n, gn;
} step_work;

static int step_segment(hcnn_run *r, void *arg)
{
    step_work *w = arg;
    hcnn_strategy *s = &r->strat;
    /* zero after the last optimiser step, which zeroes what it reads; not
     * after a dropped step, nor in a step captured in graphs (whose work
     * must be the same every time) */
    if (!r->grads_zero || r->graphs.on)
        r->be->fill(r->be, r->net.grads, r->net.nparams, 0.0f);
    r->grads_zero = 0;
    if (r->state_before)
        r->be->copy(r->be, r->state_before, r->net.state, r->net.nstate);
    const float *x = w->x;
    const int32_t *y = w->y;
    hcnn_strategy_stage(s, &x, &y, w->n, 1); /* the loader's batch: read back in this step */
    /* not the last update's sums of squares (keep_decide reads them) */
    r->be->zero(r->be, r->stats, sizeof(double) * HCNN_STATS_STEP);
    return s->ops->step(s, x, y, w->n, w->gn, r->stats);
}

/* the optimiser step on this rank's blocks (segment 1) */
typedef struct sgd_work {
    size_t off, count;
    float lr;
} sgd_work;

static int sgd_segment(hcnn_run *r, void *arg)
{
    const sgd_work *w = arg;
    hcnn_grad_sync *shard = sharded_sync(r);
    if (shard)
        return hcnn_grad_sync_step(shard, &r->opt, w->lr, r->stats);
    hcnn_sgd_step(&r->opt, r->be, r->net.params, r->net.grads, w->off, w->count, w->lr, r->stats);
    return HCNN_OK;
}

/* ---- the last good state ---------------------------------------------------------- */

/* Whether this step's update must keep the state before it.  A state is
 * good when its step's loss and gradients are finite; a non-finite step
 * stops the run with a checkpoint of the last good state, and that is the
 * state before the last update, not after it, when the update is what
 * went wrong: lr 1e10 made weights of 1e31 from a finite step, and the
 * checkpoint the next step's abort wrote gave a NaN loss (eval printed
 * -nan) and could not be resumed.  Copying the state before every update
 * would cost 1.9-2.8 ms a step for ResNet-18 here (2 threads; the update
 * itself 3.3 ms), so it is kept only when the update may change the
 * parameters by more than half their norm, which training that stays
 * finite does not do: ||lr * v'|| <= lr (mu ||v|| + ||g|| + wd ||w||)
 * (Nesterov: lr (||g|| + wd ||w|| + mu that)), the norms of w and v from
 * the last update's sweep (sgd_step's sums of squares; at the first step
 * two sums taken for it), that of g from this step's.  The buffers are
 * allocated the first time a copy is needed (normal training never needs
 * one: ResNet-18 under ulimit -v 2000000 has no room for 89 MB more).  The
 * sums are the same bits on every rank holding the same blocks, so the
 * replicas decide alike; a pipeline's stages may not, and restore only
 * when all of them kept (keep_restore). */
static int keep_decide(const hcnn_run *r, const double st[HCNN_STATS], float lr)
{
    const double w = sqrt(st[HCNN_STAT_WSQ]), v = sqrt(st[HCNN_STAT_VSQ]);
    const double g = sqrt(st[HCNN_STAT_SUMSQ]);
    const double mu = r->opt.momentum, wd = r->opt.weight_decay;
    const double vnew = mu * v + g + wd * w;
    const double step = lr * (r->opt.nesterov ? g + wd * w + mu * vnew : vnew);
    return !(step <= 0.5 * w); /* also for a NaN */
}

static int keep_alloc(hcnn_run *r)
{
    kept_state *k = &r->kept;
    const hcnn_backend *be = r->be;
    if (!k->params)
        k->params = be->alloc(be, sizeof(float) * (r->net.nparams + 1), "the state before an update");
    if (k->params && !k->velocity)
        k->velocity = be->alloc(be, sizeof(float) * (r->net.nparams + 1),
                                "the momentum before an update");
    if (k->velocity && r->net.nstate && !k->state)
        k->state = be->alloc(be, sizeof(float) * r->net.nstate, "the statistics before an update");
    return k->velocity && (k->state || !r->net.nstate) ? HCNN_OK : HCNN_ENOMEM;
}

static void keep_take(hcnn_run *r, size_t off, size_t count, int epoch, int first,
                      const epoch_stats *st)
{
    kept_state *k = &r->kept;
    if (keep_alloc(r) != HCNN_OK) { /* the message named the size; the run goes on */
        k->valid = 0;
        hcnn_warn("the state before step %ld's update is not kept (no memory for it): a "
                  "non-finite step after it stops with the state it started from",
                  r->step);
        return;
    }
    r->be->copy(r->be, k->params + off, r->net.params + off, count);
    r->be->copy(r->be, k->velocity + off, r->opt.velocity + off, count);
    if (r->net.nstate) /* the statistics before this step's forward */
        r->be->copy(r->be, k->state, r->state_before, r->net.nstate);
    k->valid = 1;
    k->step = r->step;
    k->epoch = epoch;
    k->batch = first / r->cfg->batch_size;
    k->loss_sum = st->loss_sum, k->correct = st->correct, k->seen = st->seen;
    k->trained = st->trained;
}

/* The release of r->kept's buffers (allocated when first needed). */
static void train_keep_free(hcnn_run *r)
{
    kept_state *k = &r->kept;
    if (k->params)
        r->be->free(r->be, k->params);
    if (k->velocity)
        r->be->free(r->be, k->velocity);
    if (k->state)
        r->be->free(r->be, k->state);
    memset(k, 0, sizeof *k);
}

/* After a non-finite abort, before the final checkpoint (collective): back
 * to the state before the last update when every rank kept it and it is of
 * this epoch (an earlier epoch's end was reported and checkpointed past
 * it).  Returns 1 when restored: *epoch, *batch and *st are its position. */
static int keep_restore(hcnn_run *r, int *epoch, int *batch, epoch_stats *st)
{
    kept_state *k = &r->kept;
    int all = k->valid && k->epoch == *epoch;
    if (r->comm->size > 1) {
        hcnn_watch_context("whether every rank kept the state before the last update");
        HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, r->comm->world));
        hcnn_watch_context(NULL);
    }
    const long failed = r->step - 1;
    if (!all) {
        if (run_is_root(r)) {
            printf("hcnn: the checkpoint holds the state step %ld started from (the update "
                   "before it was small, or of the last epoch: no earlier state kept)\n", failed);
            fflush(stdout);
        }
        return 0;
    }
    size_t off, count;
    hcnn_net_param_range(&r->net, r->strat.first, r->strat.last, &off, &count);
    r->be->copy(r->be, r->net.params + off, k->params + off, count);
    r->be->copy(r->be, r->opt.velocity + off, k->velocity + off, count);
    if (r->net.nstate) {
        r->be->copy(r->be, r->net.state, k->state, r->net.nstate);
        r->bn_state_agreed = 0; /* each replica's own, from before that step */
    }
    if (run_is_root(r)) {
        printf("hcnn: the checkpoint holds the state before step %ld's update, the last whose "
               "loss was finite (step %ld started from what that update made): resume it with "
               "a lower lr\n", k->step, failed);
        fflush(stdout);
    }
    r->step = k->step;
    *epoch = k->epoch, *batch = k->batch;
    st->loss_sum = k->loss_sum, st->correct = k->correct, st->seen = k->seen;
    st->trained = k->trained;
    return 1;
}

static int train_step(hcnn_run *r, const float *x, const int32_t *y, int n, int gn, int first,
                      int epoch, float lr, epoch_stats *st)
{
    hcnn_strategy *s = &r->strat;
    hcnn_ctx *ctx = &s->scratch.ctx;
    hcnn_watch_step(r->step);
    if (r->fail_collective && r->comm->rank == r->fail_rank && r->step == r->fail_step) {
        hcnn_watch_context("HCNN_FAIL_AT: a barrier the other ranks do not enter");
        HCNN_MPI(MPI_Barrier(r->comm->world));
    }
    ctx->training = 1;
    ctx->step = (uint64_t)r->step;
    /* the weights change only in the optimiser step that ends each step:
     * the calls of one step may share what they derive from them */
    ctx->weights_key = (uint64_t)r->step + 1;
    ctx->first_sample = (uint64_t)epoch * (uint64_t)r->train.n + (uint64_t)first;
    const double w0 = s->sync ? s->sync->wait_s : 0.0;
    step_work work = {.x = x, .y = y, .n = n, .gn = gn};
    int rc = hcnn_graphs_run(r, 0, x, y, n, gn, 0.0f, step_segment, &work);
    if (s->sync)
        st->comm_wait_s += s->sync->wait_s - w0;
    if (rc)
        return rc;
    size_t off, count;
    hcnn_net_param_range(&r->net, s->first, s->last, &off, &count);
    double loss = 0.0, stv[HCNN_STATS];
    int ok = 0;
    const int finite = step_results(r, off, count, &loss, &ok, stv);
    int agreed[AGREE_N];
    if ((rc = step_agree(r, finite, agreed)) != HCNN_OK)
        return rc;
    if (act_on_agreement(r, agreed, epoch, lr))
        return HCNN_OK; /* dropped: no update, no loss counted */
    if (keep_decide(r, stv, lr))
        keep_take(r, off, count, epoch, first, st);
    else
        r->kept.valid = 0;
    const double o0 = hcnn_now(), g0 = s->sync ? s->sync->wait_s : 0.0;
    HCNN_MARKER_START(ctx, "optimizer", 2);
    hcnn_trace_push("optimizer");
    sgd_work sw = {.off = off, .count = count, .lr = lr};
    rc = hcnn_graphs_run(r, 1, NULL, NULL, 0, 0, lr, sgd_segment, &sw);
    hcnn_trace_pop();
    HCNN_MARKER_STOP(ctx, "optimizer", 2);
    /* a sharded step's all-gathers: communication, not the optimiser's */
    const double gathers = s->sync ? s->sync->wait_s - g0 : 0.0;
    st->comm_wait_s += gathers;
    if (r->profiling)
        r->prof.opt_s += hcnn_now() - o0 - gathers;
    if (rc)
        return rc;
    r->kept.have_norms = 1; /* the next step reads this update's sums of squares */
    /* the update zeroed the gradients of this rank's blocks: all it has
     * (sharded: it read and zeroed the summed pieces, not the gradients) */
    r->grads_zero = !sharded_sync(r);
    /* samples are counted where their loss is (a pipeline's last stage) */
    const int counted = s->counts_loss ? n : 0;
    st->loss_sum += loss;
    st->correct += ok;
    st->seen += counted;
    st->trained += counted;
    return HCNN_OK;
}

/* SIGTERM and SIGUSR1 are blocked in every thread (see main) and taken
 * in each step's agreement (step_agree), before the optimiser step, so a
 * step is never interrupted and all ranks stop after the same step, to
 * write one checkpoint together. */
static int stop_requested(const hcnn_run *r) { return r->stop_signal != 0 || r->stop_error != 0; }

int hcnn_train_next_step(hcnn_run *r, int epoch, long steps_per_epoch, epoch_stats *st)
{
    float *x;
    int32_t *y;
    int n, gn, first;
    double wait;
    const double s0 = hcnn_now();
    HCNN_MARKER_START(&r->strat.scratch.ctx, "data_wait", 2);
    hcnn_trace_push("data wait");
    int more = hcnn_loader_next(&r->loader, &x, &y, &n, &gn, &first, &wait);
    hcnn_trace_pop();
    HCNN_MARKER_STOP(&r->strat.scratch.ctx, "data_wait", 2);
    if (!more)
        return 0;
    if (r->trace_batches) { /* the batch as trained on (hcnn.h's batches give the same) */
        const size_t values = (size_t)n * r->train.c * r->train.h * r->train.w;
        fprintf(r->trace_batches, "epoch=%d first=%d n=%d images_crc32=%08lx labels_crc32=%08lx\n",
                epoch, first, n, crc32(0, (const Bytef *)x, (uInt)(sizeof *x * values)),
                crc32(0, (const Bytef *)y, (uInt)(sizeof *y * (size_t)n)));
    }
    st->data_wait_s += wait;
    const float lr = (float)hcnn_lr_at(r->cfg, r->step, steps_per_epoch);
    st->lr = lr;
    const double c0 = st->comm_wait_s, b0 = r->strat.bubble_s;
    /* the whole step's range: forward, backward, communication, optimiser
     * (a replayed CUDA graph's step has no layer ranges inside: graphs.c) */
    hcnn_trace_push("step");
    int rc = train_step(r, x, y, n, gn, first, epoch, lr, st);
    hcnn_trace_pop();
    if (rc)
        return -rc;
    if (r->profiling) {
        r->prof.steps++;
        r->prof.step_s += hcnn_now() - s0;
        r->prof.data_s += wait;
        r->prof.comm_s += st->comm_wait_s - c0;
        r->prof.bubble_s += r->strat.bubble_s - b0;
    }
    r->step++;
    st->steps++;
    r->bn_state_agreed = 0;
    return 1;
}

/* stop: 0 epoch complete, 1 max_steps reached, 2 signal */
static int train_epoch(hcnn_run *r, int epoch, int first_batch, long steps_per_epoch,
                       epoch_stats *st, int *stop, int *batches_done)
{
    const hcnn_config *cfg = r->cfg;
    hcnn_epoch_permutation(r->perm, r->train.n, cfg->seed, epoch, cfg->shuffle);
    hcnn_loader_begin_epoch_at(&r->loader, r->perm, r->train.n, epoch, first_batch);
    const double t0 = hcnn_now();
    double last_print = t0;
    int batch = first_batch;
    for (;;) {
        int rc = hcnn_train_next_step(r, epoch, steps_per_epoch, st);
        if (rc < 0)
            return -rc;
        if (rc == 0)
            break;
        batch++;
        hcnn_report_progress(r, epoch, batch, r->loader.nbatches, st, t0, &last_print);
        hcnn_report_step_to_caller(r, epoch, batch, r->loader.nbatches, st, t0);
        if (cfg->max_steps > 0 && r->step >= cfg->max_steps) {
            *stop = 1;
            break;
        }
        if (stop_requested(r)) {
            *stop = 2;
            break;
        }
    }
    *batches_done = batch;
    /* a sharded optimiser's last all-gathers: evaluation and checkpoints
     * read the parameters */
    hcnn_grad_sync_settle(r->strat.sync);
    if (r->tty && run_is_root(r)) /* end the in-place progress line */
        printf("\r%*s\r", 100, "");
    st->train_s = hcnn_now() - t0;
    st->bubble_s = r->strat.bubble_s;
    st->compute_s = st->train_s - st->data_wait_s - st->comm_wait_s - st->bubble_s;
    return HCNN_OK;
}

int hcnn_train(const hcnn_config *cfg, const hcnn_comm *comm, const hcnn_run_opts *opts)
{
    hcnn_run r;
    const char *resume = opts ? opts->resume : NULL;
    int rc = hcnn_run_setup(&r, cfg, comm, 1);
    r.opts = opts;
    r.quiet = opts && opts->quiet;
    r.tty &= !r.quiet;
    if (!rc)
        rc = hcnn_train_prepare(&r);
    if (!rc && opts && opts->profile)
        rc = hcnn_run_profile_enable(&r);
    if (!rc && r.net.nstate > 0 &&
        !(r.state_before = r.be->alloc(r.be, sizeof(float) * r.net.nstate, "statistics before a step")))
        rc = HCNN_ENOMEM;
    hcnn_ckpt_meta start = {0};
    int resumed = 0;
    if (!rc)
        rc = hcnn_run_open_checkpoints(&r, resume, &start, &resumed);
    if (!rc)
        rc = hcnn_report_csv_open(&r, resumed);
    if (rc) {
        train_keep_free(&r);
        hcnn_run_free(&r);
        return rc;
    }
    const long steps_per_epoch = (r.train.n + cfg->batch_size - 1) / cfg->batch_size;
    hcnn_report_header(&r);
    int stop = 0, done = 0;
    long epoch = start.epoch;
    int first_batch = (int)start.batch;
    epoch_stats st = {0};
    /* Nothing left to train: a resumed checkpoint at or past `epochs` or
     * `max_steps` takes no step, and the final checkpoint is the resumed one
     * written again with its position (inside an epoch too) and that
     * epoch's running sums.  (The loop below would have written it at the
     * epoch's first batch, and a later resume would have replayed the
     * epoch's batches; and max_steps, checked after a step, took one.) */
    const int nothing_left = epoch >= cfg->epochs || (cfg->max_steps > 0 && r.step >= cfg->max_steps);
    if (nothing_left) {
        done = first_batch, stop = 1;
        st.loss_sum = start.loss_sum, st.correct = start.correct, st.seen = start.seen;
        st.lr = start.lr;
        if (run_is_root(&r) && !r.quiet) {
            if (cfg->max_steps > 0 && r.step >= cfg->max_steps)
                printf("hcnn: nothing to train: the checkpoint's step %ld reaches max_steps=%ld", r.step,
                       cfg->max_steps);
            else
                printf("hcnn: nothing to train: the checkpoint has %ld complete epoch%s, epochs=%d",
                       epoch, epoch == 1 ? "" : "s", cfg->epochs);
            printf("%s (epoch %ld, batch %d)\n",
                   cfg->checkpoint_dir[0] ? "; it is written again as it was" : "", epoch + 1,
                   first_batch);
        }
    }
    for (; epoch < cfg->epochs && !stop && !rc; epoch++, first_batch = 0) {
        memset(&st, 0, sizeof st);
        if (first_batch > 0 && run_is_root(&r)) /* the resumed epoch's sums so far */
            st.loss_sum = start.loss_sum, st.correct = start.correct, st.seen = start.seen;
        rc = train_epoch(&r, (int)epoch, first_batch, steps_per_epoch, &st, &stop, &done);
        if (rc)
            break;
        /* a signal inside the epoch: checkpoint where it stands and leave; on
         * its last step the epoch is complete and is evaluated and reported
         * first (its line and CSV row would otherwise be lost for good: the
         * resumed run starts the next epoch) */
        if (stop == 2 && done < (int)steps_per_epoch) {
            /* the ranks' batch-norm statistics, averaged as at an epoch's
             * end (all ranks stop at the same step): the replicas are
             * compared below, and the checkpoint must hold one model
             * (without this, data-parallel batch-norm models stopped by
             * Slurm's USR1 failed "replicas diverged" with no checkpoint) */
            rc = hcnn_run_average_bn_state(&r);
            break;
        }
        rc = hcnn_report_reduce_epoch(&r, &st);
        const double te = hcnn_now();
        if (!rc)
            rc = hcnn_run_average_bn_state(&r);
        if (!rc)
            rc = hcnn_run_evaluate(&r, &st.test_loss, &st.test_acc);
        st.eval_s = hcnn_now() - te;
        if (rc)
            break;
        if ((rc = hcnn_report_epoch(&r, (int)epoch, &st)) ||
            (!r.quiet && (rc = r.strat.ops->report_epoch(&r.strat, st.train_s, stdout))))
            break;
        hcnn_report_epoch_to_caller(&r, (int)epoch, (int)steps_per_epoch, &st);
        const int complete = done >= (int)steps_per_epoch;
        if (r.csv_failed) { /* every rank: the checkpoint of where it stands, then exit 1 */
            epoch += complete; /* else stopped inside it (max_steps): the position is kept */
            break;
        }
        if (!stop && complete && epoch + 1 < cfg->epochs && cfg->checkpoint_every > 0 &&
            (epoch + 1) % cfg->checkpoint_every == 0)
            rc = hcnn_run_save_checkpoint(&r, epoch + 1, 0, &st, 0, 0);
        if (stop && !complete)
            break; /* max_steps inside the epoch: the checkpoint records the position */
    }
    if (!rc)
        rc = hcnn_run_check_replicas(&r);
    if (!rc && r.profiling)
        hcnn_run_profile_print(&r);
    /* the final checkpoint (also after max_steps, a signal or a non-finite
     * step: the last good state, keep_restore); not after a failed write */
    if (!rc && r.stop_error != HCNN_EIO) {
        int ep = (int)epoch;
        if (r.stop_error == HCNN_ENUMERIC && keep_restore(&r, &ep, &done, &st))
            epoch = ep;
        const int inside = nothing_left ? done > 0
                                        : (stop != 0) && done < (int)steps_per_epoch && epoch < cfg->epochs;
        if (stop == 2 && comm->size > 1) { /* partial sums of the epoch, global (collective) */
            double sums[3] = {st.loss_sum, st.correct, st.seen};
            HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, comm->world));
            st.loss_sum = sums[0], st.correct = sums[1], st.seen = sums[2];
        }
        rc = hcnn_run_save_checkpoint(&r, epoch, inside ? done : 0, &st, 1, 1);
    }
    if (!rc && (r.stop_error || r.csv_failed))
        rc = HCNN_EAGREED;
    if (!rc && r.stop_signal)
        rc = HCNN_STOPPED;
    train_keep_free(&r);
    hcnn_run_free(&r);
    return rc;
}
