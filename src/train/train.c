/* The training driver: epochs of (load batch, the strategy's step, the
 * optimiser on this rank's blocks), evaluation, progress, metrics and
 * checkpoints.  Everything a run owns lives in one struct passed down
 * (src/train/run.h); how the ranks share a step is the strategy's. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hcnn/common.h"
#include "hcnn/markers.h"
#include "run.h"

/* A non-finite loss (or the HCNN_FAIL_AT test hook) fails this rank. */
static int check_loss(const hcnn_run *r, double loss, int epoch, float lr)
{
    if (r->comm->rank == r->fail_rank && r->step == r->fail_step)
        loss = NAN;
    if (isfinite(loss))
        return HCNN_OK;
    return hcnn_error_code(HCNN_ENUMERIC,
                           "non-finite loss at epoch %d step %ld (lr %g): lower lr in %s",
                           epoch + 1, r->step, (double)lr, r->cfg->path);
}

/* One optimiser step on this rank's shard (n of gn samples, the first at
 * epoch position `first`): the strategy's gradients, then SGD on the
 * blocks this rank owns. */
static int train_step(hcnn_run *r, const float *x, const int32_t *y, int n, int gn, int first,
                      int epoch, float lr, epoch_stats *st)
{
    hcnn_strategy *s = &r->strat;
    hcnn_ctx *ctx = &s->scratch.ctx;
    r->be->fill(r->net.grads, r->net.nparams, 0.0f);
    ctx->training = 1;
    ctx->step = (uint64_t)r->step;
    ctx->first_sample = (uint64_t)epoch * (uint64_t)r->train.n + (uint64_t)first;
    hcnn_strategy_stage(s, &x, &y, n);
    double loss = 0.0;
    int ok = 0;
    const double w0 = s->sync ? s->sync->wait_s : 0.0;
    int rc = s->ops->step(s, x, y, n, gn, &loss, &ok);
    if (s->sync)
        st->comm_wait_s += s->sync->wait_s - w0;
    if (!rc)
        rc = check_loss(r, loss, epoch, lr);
    if (rc)
        return rc;
    size_t off, count;
    hcnn_net_param_range(&r->net, s->first, s->last, &off, &count);
    const double o0 = hcnn_now();
    HCNN_MARKER_START(ctx, "optimizer", 2);
    hcnn_sgd_step(&r->opt, r->be, r->net.params, r->net.grads, off, count, lr);
    HCNN_MARKER_STOP(ctx, "optimizer", 2);
    if (r->profiling)
        r->prof.opt_s += hcnn_now() - o0;
    /* samples are counted where their loss is (a pipeline's last stage) */
    const int counted = s->counts_loss ? n : 0;
    st->loss_sum += loss;
    st->correct += ok;
    st->seen += counted;
    st->trained += counted;
    return HCNN_OK;
}

/* SIGTERM and SIGUSR1 are blocked in every thread (see main) and taken
 * here, between steps, so a step is never interrupted; all ranks agree on
 * stopping so that they write one checkpoint together. */
static int stop_requested(hcnn_run *r)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    const struct timespec zero = {0, 0};
    int got = sigtimedwait(&set, NULL, &zero);
    int local = got > 0 ? got : 0, any = local;
    if (r->comm->size > 1)
        HCNN_MPI(MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, r->comm->world));
    if (any && !r->stop_signal && run_is_root(r)) {
        printf("hcnn: %s received: finishing the step, writing a checkpoint, exiting\n",
               any == SIGTERM ? "SIGTERM" : "SIGUSR1");
        fflush(stdout);
    }
    if (any)
        r->stop_signal = any;
    return any != 0;
}

int train_next_step(hcnn_run *r, int epoch, long steps_per_epoch, epoch_stats *st)
{
    float *x;
    int32_t *y;
    int n, gn, first;
    double wait;
    const double s0 = hcnn_now();
    HCNN_MARKER_START(&r->strat.scratch.ctx, "data_wait", 2);
    int more = hcnn_loader_next(&r->loader, &x, &y, &n, &gn, &first, &wait);
    HCNN_MARKER_STOP(&r->strat.scratch.ctx, "data_wait", 2);
    if (!more)
        return 0;
    st->data_wait_s += wait;
    const float lr = (float)hcnn_lr_at(r->cfg, r->step, steps_per_epoch);
    st->lr = lr;
    const double c0 = st->comm_wait_s, b0 = r->strat.bubble_s;
    int rc = train_step(r, x, y, n, gn, first, epoch, lr, st);
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
        int rc = train_next_step(r, epoch, steps_per_epoch, st);
        if (rc < 0)
            return -rc;
        if (rc == 0)
            break;
        batch++;
        report_progress(r, epoch, batch, r->loader.nbatches, st, t0, &last_print);
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
    int rc = run_setup(&r, cfg, comm, 1);
    if (!rc && opts && opts->profile)
        rc = profile_enable(&r);
    hcnn_ckpt_meta start = {0};
    if (!rc && resume)
        rc = resume_from(&r, resume, &start);
    if (!rc)
        rc = report_csv_open(&r, resume != NULL);
    if (rc) {
        run_free(&r);
        return rc;
    }
    char ts[32];
    const time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", &tmv);
    snprintf(r.run_id, sizeof r.run_id, "%s-%ld", ts, (long)getpid());
    const long steps_per_epoch = (r.train.n + cfg->batch_size - 1) / cfg->batch_size;
    report_header(&r);
    int stop = 0, done = 0;
    long epoch = start.epoch;
    int first_batch = (int)start.batch;
    epoch_stats st = {0};
    for (; epoch < cfg->epochs && !stop && !rc; epoch++, first_batch = 0) {
        memset(&st, 0, sizeof st);
        if (first_batch > 0 && run_is_root(&r)) /* the resumed epoch's sums so far */
            st.loss_sum = start.loss_sum, st.correct = start.correct, st.seen = start.seen;
        rc = train_epoch(&r, (int)epoch, first_batch, steps_per_epoch, &st, &stop, &done);
        if (rc)
            break;
        if (stop == 2) /* signal: checkpoint where we are and leave */
            break;
        rc = report_reduce_epoch(&r, &st);
        const double te = hcnn_now();
        if (!rc)
            rc = run_average_bn_state(&r);
        if (!rc)
            rc = run_evaluate(&r, &st.test_loss, &st.test_acc);
        st.eval_s = hcnn_now() - te;
        if (rc)
            break;
        report_epoch(&r, (int)epoch, &st);
        if ((rc = r.strat.ops->report_epoch(&r.strat, st.train_s, stdout)))
            break;
        const int complete = done >= (int)steps_per_epoch;
        if (!stop && complete && epoch + 1 < cfg->epochs && cfg->checkpoint_every > 0 &&
            (epoch + 1) % cfg->checkpoint_every == 0)
            rc = save_checkpoint(&r, epoch + 1, 0, &st, 0, 0);
        if (stop && !complete)
            break; /* max_steps inside the epoch: the checkpoint records the position */
    }
    if (!rc)
        rc = run_check_replicas(&r);
    if (!rc && r.profiling)
        profile_print(&r);
    /* the final checkpoint (also after max_steps or a signal) */
    if (!rc) {
        const int inside = (stop != 0) && done < (int)steps_per_epoch && epoch < cfg->epochs;
        if (stop == 2 && comm->size > 1) { /* partial sums of the epoch, global (collective) */
            double sums[3] = {st.loss_sum, st.correct, st.seen};
            HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, comm->world));
            st.loss_sum = sums[0], st.correct = sums[1], st.seen = sums[2];
        }
        /* a signal at the very end of an epoch leaves the loop before it counts */
        const long epochs_done = stop == 2 && !inside ? epoch + 1 : epoch;
        rc = save_checkpoint(&r, inside ? epoch : epochs_done, inside ? done : 0, &st, 1, 1);
    }
    if (!rc && r.stop_signal)
        rc = HCNN_STOPPED;
    run_free(&r);
    return rc;
}
