/* The training driver: epochs of (load batch, forward, loss, backward,
 * gradient allreduce, optimiser step), evaluation, progress output, CSV
 * metrics and the final checkpoint.  Everything a run owns lives in one
 * struct passed down.
 *
 * Strategies: `serial` is one rank; `data` gives every rank a full replica
 * and a contiguous shard of each global batch (same permutation on every
 * rank); gradients are summed across ranks by the bucketed, overlapped
 * allreduce of grad_sync.c, so every rank takes the same optimiser step as
 * a serial run of the global batch.  With one rank both are the same code
 * path.  `pipeline` splits the blocks over stages (pipeline.c); a replica
 * of S stages then plays the part of one data-parallel rank. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcnn/blas.h"
#include "hcnn/checkpoint.h"
#include "hcnn/ckpt_writer.h"
#include "config.h"
#include "hcnn/common.h"
#include "hcnn/data.h"
#include "hcnn/grad_sync.h"
#include "hcnn/net.h"
#include "hcnn/optim.h"
#include "hcnn/pipeline.h"
#include "hcnn/profile.h"
#include "hcnn/markers.h"
#include "hcnn/train.h"

typedef struct hcnn_run {
    const hcnn_config *cfg;
    const hcnn_comm *comm;
    const hcnn_backend *be;
    int threads;
    int eval_batch;
    hcnn_dataset train, test;
    hcnn_net net;
    hcnn_sgd opt;
    hcnn_acts acts;
    hcnn_scratch scratch;
    hcnn_loader loader;
    int loader_ready;
    hcnn_grad_sync sync;
    int sync_ready;
    hcnn_pipe pipe;          /* strategy pipeline */
    int pipe_ready;
    int first, last;         /* blocks this rank computes and updates */
    int group, ngroups;      /* data shard: replica index and count (rank, ranks if no pipeline) */
    MPI_Comm replicas;       /* ranks holding the same blocks: gradient sums, statistics */
    double allreduce_s;      /* calibrated time of one blocking gradient allreduce */
    uint32_t *perm;
    float *dlogits;
    FILE *csv;
    int tty;
    long step;               /* optimiser steps taken */
    long fail_rank, fail_step; /* HCNN_FAIL_AT test hook, -1: none */
    hcnn_ckpt_writer writer;  /* rank 0, when checkpoint_dir is set */
    int writer_ready;
    int stop_signal;          /* SIGTERM/SIGUSR1 received (agreed by all ranks) */
    hcnn_profile prof;        /* --profile and bench */
    int profiling;
    char run_id[64];
} hcnn_run;

typedef struct epoch_stats {
    double loss_sum, correct, seen;  /* summed over ranks at the end of the epoch */
    double trained;                  /* samples trained by this process run (throughput) */
    double train_s, data_wait_s, comm_wait_s, compute_s, bubble_s, eval_s;
    /* min / mean / max over ranks of compute, comm wait, data wait, bubble */
    double lo[4], mean[4], hi[4];
    double peak_rss_mb;
    double test_loss, test_acc;
    double lr;
    long steps;
} epoch_stats;

static int is_root(const hcnn_run *r) { return r->comm->rank == 0; }

int hcnn_setup_threads(const hcnn_config *cfg)
{
    int t = cfg->threads;
    if (t <= 0) {
        const char *env = getenv("OMP_NUM_THREADS");
        t = env && atoi(env) > 0 ? omp_get_max_threads() : omp_get_num_procs();
    }
    if (t < 1)
        t = 1;
    omp_set_num_threads(t);
    /* OpenBLAS's OpenMP variant follows omp_set_num_threads; set it
     * explicitly as well so that both agree whatever the variant. */
    openblas_set_num_threads(t);
    return t;
}

int hcnn_check_layout(const hcnn_config *cfg, const hcnn_comm *comm)
{
    const int root = comm->rank == 0;
    if (cfg->strategy == HCNN_STRATEGY_SERIAL && comm->size != 1) {
        if (root)
            hcnn_error("%s: strategy 'serial' runs on one rank, but %d ranks were started "
                       "(use --set strategy=data)",
                       cfg->path, comm->size);
        return HCNN_EINVAL;
    }
    int rc = hcnn_pipe_check(cfg, comm);
    if (rc)
        return rc;
    if (cfg->strategy != HCNN_STRATEGY_PIPELINE && cfg->batch_size < comm->size) {
        if (root)
            hcnn_error("%s: batch_size %d is smaller than the number of ranks %d: every rank "
                       "needs at least one sample of each global batch",
                       cfg->path, cfg->batch_size, comm->size);
        return HCNN_EINVAL;
    }
    if (cfg->allreduce_progress == HCNN_PROGRESS_THREAD && comm->size > 1 &&
        comm->thread_level < MPI_THREAD_SERIALIZED) {
        if (root)
            hcnn_error("%s: allreduce_progress 'thread' needs MPI_THREAD_SERIALIZED, this MPI "
                       "provides level %d",
                       cfg->path, comm->thread_level);
        return HCNN_EINVAL;
    }
    return HCNN_OK;
}

static void run_free(hcnn_run *r)
{
    if (r->profiling)
        hcnn_profile_free(&r->prof);
    if (r->writer_ready)
        hcnn_ckpt_writer_free(&r->writer);
    if (r->pipe_ready)
        hcnn_pipe_free(&r->pipe);
    if (r->sync_ready)
        hcnn_grad_sync_free(&r->sync);
    if (r->loader_ready)
        hcnn_loader_free(&r->loader);
    hcnn_acts_free(&r->acts);
    hcnn_scratch_free(&r->scratch);
    hcnn_sgd_free(&r->opt);
    hcnn_net_free(&r->net);
    hcnn_dataset_free(&r->train);
    hcnn_dataset_free(&r->test);
    hcnn_free(r->perm);
    hcnn_free(r->dlogits);
    if (r->csv)
        fclose(r->csv);
}

/* HCNN_FAIL_AT=rank:step makes that rank fail at that step (a non-finite
 * loss), to test that one failing rank ends the whole job. */
static void read_fault_hook(hcnn_run *r)
{
    r->fail_rank = r->fail_step = -1;
    const char *f = getenv("HCNN_FAIL_AT");
    if (f && sscanf(f, "%ld:%ld", &r->fail_rank, &r->fail_step) != 2)
        r->fail_rank = r->fail_step = -1;
}

/* Datasets, model, optimiser and buffers; on error everything allocated so
 * far is released by run_free. */
static int run_setup(hcnn_run *r, const hcnn_config *cfg, const hcnn_comm *comm, int need_train)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->comm = comm;
    r->be = hcnn_backend_cpu();
    r->threads = hcnn_setup_threads(cfg);
    /* in-place progress only on a real terminal: mpirun gives its ranks a
     * pseudo-terminal even when its own output goes to a file */
    r->tty = isatty(STDOUT_FILENO) && comm->size == 1 && !getenv("OMPI_COMM_WORLD_SIZE");
    read_fault_hook(r);
    int rc = hcnn_dataset_open(cfg, &r->train, &r->test);
    if (rc)
        return rc;
    rc = hcnn_net_create(&r->net, &cfg->model, r->be, cfg->path);
    if (rc)
        return rc;
    hcnn_net_init(&r->net, cfg->init, cfg->seed);
    r->net.chunk_floats = (size_t)(cfg->im2col_mb * 1048576.0 / sizeof(float));
    r->net.conv_algo = cfg->conv_algo;
    /* replicas start identical whatever their seeds: rank 0's parameters */
    if (comm->size > 1) {
        rc = hcnn_bcast_floats(comm->world, r->net.params, r->net.nparams, 0);
        if (!rc)
            rc = hcnn_bcast_floats(comm->world, r->net.state, r->net.nstate, 0);
        if (rc)
            return rc;
    }
    r->first = 0, r->last = r->net.nlayers;
    r->group = comm->rank, r->ngroups = comm->size;
    r->replicas = comm->world;
    int shard = (cfg->batch_size + comm->size - 1) / comm->size;
    int cap = 0;
    if (cfg->strategy == HCNN_STRATEGY_PIPELINE) {
        rc = hcnn_pipe_init(&r->pipe, cfg, comm, &r->net, &r->scratch);
        r->pipe_ready = 1;
        if (rc)
            return rc;
        r->first = r->pipe.first, r->last = r->pipe.last;
        r->group = r->pipe.replica, r->ngroups = r->pipe.R;
        r->replicas = r->pipe.stage_comm;
        shard = (cfg->batch_size + r->ngroups - 1) / r->ngroups;
        r->eval_batch = cfg->eval_batch_size > 0 ? cfg->eval_batch_size : shard;
    } else {
        /* one activation arena serves training and evaluation */
        r->eval_batch = cfg->eval_batch_size > 0 ? cfg->eval_batch_size : shard;
        cap = r->eval_batch;
        if (need_train && shard > cap)
            cap = shard;
        rc = hcnn_acts_alloc(&r->acts, &r->net, 0, r->net.nlayers, cap);
        if (!rc)
            rc = hcnn_scratch_alloc(&r->scratch, &r->net, 0, r->net.nlayers, cap);
        if (rc)
            return rc;
    }
    r->scratch.ctx.seed = cfg->seed;
    if (!need_train)
        return HCNN_OK;
    rc = hcnn_sgd_init(&r->opt, r->be, r->net.nparams, cfg);
    if (rc)
        return rc;
    r->perm = hcnn_alloc(sizeof *r->perm * (size_t)r->train.n, "epoch permutation");
    r->dlogits = hcnn_alloc(sizeof(float) * ((size_t)cap + 1) * r->net.classes, "logit gradients");
    if (!r->perm || !r->dlogits)
        return HCNN_ENOMEM;
    const int augment = cfg->augment >= 0 ? cfg->augment : r->train.augment_default;
    /* a background thread only helps when a core is left for it */
    const int prefetch = cfg->data_prefetch == HCNN_PREFETCH_ON ||
                         (cfg->data_prefetch == HCNN_PREFETCH_AUTO &&
                          omp_get_max_threads() < omp_get_num_procs());
    rc = hcnn_loader_init(&r->loader, &r->train, cfg->batch_size, r->group, r->ngroups, augment,
                          cfg->seed, prefetch ? 1 : 0);
    if (rc)
        return rc;
    r->loader_ready = 1;
    if (r->pipe_ready) {
        if (r->pipe.sync_ready)
            r->allreduce_s = hcnn_grad_sync_calibrate(&r->pipe.sync, 3);
    } else if (comm->size > 1) {
        rc = hcnn_grad_sync_init(&r->sync, comm->world, &r->net, 0, r->net.nlayers,
                                 cfg->bucket_mb, cfg->allreduce_progress);
        if (rc)
            return rc;
        r->sync_ready = 1;
        r->allreduce_s = hcnn_grad_sync_calibrate(&r->sync, 3);
        if (cfg->allreduce_progress == HCNN_PROGRESS_TEST) {
            r->scratch.ctx.poll = hcnn_grad_sync_poll;
            r->scratch.ctx.poll_arg = &r->sync;
        }
    }
    return HCNN_OK;
}

/* Batch-norm running statistics are per replica during training (each sees
 * its own shard); average them before they are used or saved. */
static int average_bn_state(hcnn_run *r)
{
    size_t off, count;
    hcnn_net_state_range(&r->net, r->first, r->last, &off, &count);
    if (r->ngroups == 1 || count == 0)
        return HCNN_OK;
    int rc = hcnn_allreduce_sum_floats(r->replicas, r->net.state + off, count);
    const float inv = 1.0f / (float)r->ngroups;
    for (size_t i = 0; i < count; i++)
        r->net.state[off + i] *= inv;
    return rc;
}

static int sum_doubles(const hcnn_run *r, double *v, int n)
{
    if (r->comm->size == 1)
        return HCNN_OK;
    if (MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, r->comm->world) != MPI_SUCCESS)
        return hcnn_error_code(HCNN_EMPI, "MPI_Allreduce of the epoch statistics failed");
    return HCNN_OK;
}

/* Loss and accuracy on the test set, in inference mode; each rank takes a
 * contiguous share of the samples and the sums are reduced. */
static int evaluate(hcnn_run *r, double *loss, double *acc)
{
    const hcnn_dataset *ds = &r->test;
    int lo, hi;
    hcnn_shard(ds->n, r->group, r->ngroups, &lo, &hi);
    const int eb = r->eval_batch;
    const size_t in_sz = (size_t)ds->c * ds->h * ds->w;
    float *x = hcnn_alloc(sizeof(float) * in_sz * eb, "evaluation batch");
    int32_t *y = hcnn_alloc(sizeof(int32_t) * eb, "evaluation labels");
    uint32_t *idx = hcnn_alloc(sizeof(uint32_t) * eb, "evaluation indices");
    if (!x || !y || !idx) {
        hcnn_free(x), hcnn_free(y), hcnn_free(idx);
        return HCNN_ENOMEM;
    }
    hcnn_ctx ctx = r->scratch.ctx;
    ctx.training = 0;
    ctx.poll = NULL;
    double sums[2] = {0.0, 0.0}; /* loss, correct */
    int rc = HCNN_OK;
    for (int i0 = lo; i0 < hi && !rc; i0 += eb) {
        const int n = hi - i0 < eb ? hi - i0 : eb;
        for (int i = 0; i < n; i++)
            idx[i] = (uint32_t)(i0 + i);
        hcnn_batch_assemble(ds, idx, n, 0, r->cfg->seed, 0, x, y, r->threads);
        int ok = 0;
        double l = 0.0;
        if (r->pipe_ready) {
            rc = hcnn_pipe_infer(&r->pipe, &r->net, &r->scratch, x, y, n, &l, &ok);
        } else {
            rc = hcnn_net_forward(&r->net, &ctx, &r->acts, x, n);
            if (!rc)
                l = r->be->softmax_xent(hcnn_acts_output(&r->acts), y, n, r->net.classes, 0.0f,
                                        NULL, &ok);
        }
        sums[0] += l;
        sums[1] += ok;
    }
    hcnn_free(x), hcnn_free(y), hcnn_free(idx);
    if (!rc)
        rc = sum_doubles(r, sums, 2);
    *loss = ds->n ? sums[0] / ds->n : 0.0;
    *acc = ds->n ? sums[1] / ds->n : 0.0;
    return rc;
}

static void progress(const hcnn_run *r, int epoch, int batch, int nbatches,
                     const epoch_stats *st, double t0, double *last_print)
{
    if (!is_root(r))
        return;
    const double now = hcnn_now();
    const int by_steps = !r->tty && r->cfg->progress_every > 0;
    if (by_steps ? (batch % r->cfg->progress_every != 0) : (now - *last_print < (r->tty ? 0.5 : 10.0)))
        return;
    *last_print = now;
    const double el = now - t0;
    /* rank 0's shard: the epoch line has the global figures */
    printf("%sepoch %d/%d step %d/%d loss %.4f acc %.2f%% %.0f img/s lr %.4g%s",
           r->tty ? "\r" : "", epoch + 1, r->cfg->epochs, batch, nbatches,
           st->seen ? st->loss_sum / st->seen : 0.0,
           st->seen ? 100.0 * st->correct / st->seen : 0.0,
           el > 0 ? st->seen * r->comm->size / el : 0.0, st->lr, r->tty ? "   " : "\n");
    fflush(stdout);
}

#define CSV_HEADER                                                                             \
    "run_id,git_commit,timestamp,strategy,ranks,stages,replicas,threads,batch_size,"          \
    "microbatches,epoch,step,lr,train_loss,train_acc,test_loss,test_acc,images_per_s,"       \
    "epoch_time_s,eval_time_s,compute_s,compute_s_min,compute_s_max,comm_wait_s,"            \
    "comm_wait_s_min,comm_wait_s_max,data_wait_s,data_wait_s_min,data_wait_s_max,bubble_s,"  \
    "bubble_s_min,bubble_s_max,allreduce_hidden,peak_rss_mb"

/* The per-epoch metrics file (rank 0), and the configuration beside it
 * (<csv minus .csv>.config.yaml) so that any row can be reproduced.  A
 * resumed run appends to the file it continues. */
static int csv_open(hcnn_run *r, int append)
{
    if (!r->cfg->csv[0] || !is_root(r))
        return HCNN_OK;
    int rc = hcnn_mkdir_parent(r->cfg->csv);
    if (rc)
        return rc;
    char cfgpath[HCNN_PATH_MAX + 16];
    snprintf(cfgpath, sizeof cfgpath, "%s", r->cfg->csv);
    char *dot = strrchr(cfgpath, '.');
    if (dot && !strchr(dot, '/'))
        *dot = '\0';
    strncat(cfgpath, ".config.yaml", sizeof cfgpath - strlen(cfgpath) - 1);
    if ((rc = hcnn_config_write(r->cfg, cfgpath)))
        return rc;
    FILE *old = append ? fopen(r->cfg->csv, "r") : NULL;
    int has_header = 0;
    if (old) {
        char line[64];
        has_header = fgets(line, sizeof line, old) != NULL && !strncmp(line, "run_id,", 7);
        fclose(old);
    }
    r->csv = fopen(r->cfg->csv, append && has_header ? "a" : "w");
    if (!r->csv)
        return hcnn_error_code(HCNN_EIO, "cannot create the metrics file %s (key csv in %s)",
                               r->cfg->csv, r->cfg->path);
    if (!(append && has_header))
        fprintf(r->csv, "%s\n", CSV_HEADER);
    fflush(r->csv);
    return HCNN_OK;
}

static int on_block_done(void *arg, int block)
{
    hcnn_run *r = arg;
    return hcnn_grad_sync_block_done(&r->sync, block);
}

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

/* Gradients of this step: forward, loss, backward with the bucketed
 * allreduce overlapped (serial and data strategies). */
static int local_gradients(hcnn_run *r, const float *x, const int32_t *y, int n, int gn,
                           int epoch, float lr, double *loss, int *ok, epoch_stats *st)
{
    hcnn_ctx *ctx = &r->scratch.ctx;
    int rc;
    if (n > 0) {
        if ((rc = hcnn_net_forward(&r->net, ctx, &r->acts, x, n)))
            return rc;
        /* gradient of the mean loss over the global batch */
        *loss = r->be->softmax_xent(hcnn_acts_output(&r->acts), y, n, r->net.classes,
                                    1.0f / (float)gn, r->dlogits, ok);
    }
    if ((rc = check_loss(r, *loss, epoch, lr)))
        return rc;
    if (r->sync_ready)
        hcnn_grad_sync_begin(&r->sync);
    if (n > 0 && (rc = hcnn_net_backward(&r->net, &r->scratch, &r->acts, x, r->dlogits, NULL, n,
                                         r->sync_ready ? on_block_done : NULL, r)))
        return rc;
    if (r->sync_ready) {
        const double w0 = r->sync.wait_s;
        HCNN_MARKER_START(ctx, "comm_wait", 2);
        rc = hcnn_grad_sync_finish(&r->sync);
        HCNN_MARKER_STOP(ctx, "comm_wait", 2);
        st->comm_wait_s += r->sync.wait_s - w0;
    }
    return rc;
}

/* Gradients of this step through the pipeline (replicas summed inside). */
static int pipeline_gradients(hcnn_run *r, const float *x, const int32_t *y, int n, int gn,
                              int epoch, float lr, double *loss, int *ok, epoch_stats *st)
{
    const double c0 = r->pipe.sync_ready ? r->pipe.sync.wait_s : 0.0;
    int rc = hcnn_pipe_step(&r->pipe, &r->net, &r->scratch, x, y, n, gn, loss, ok);
    if (!rc)
        rc = check_loss(r, *loss, epoch, lr);
    if (r->pipe.sync_ready)
        st->comm_wait_s += r->pipe.sync.wait_s - c0;
    return rc;
}

/* One optimiser step on this rank's shard (n of gn samples): gradients,
 * then SGD on the blocks this rank owns. */
static int train_step(hcnn_run *r, const float *x, const int32_t *y, int n, int gn, int first,
                      int epoch, float lr, epoch_stats *st)
{
    hcnn_ctx *ctx = &r->scratch.ctx;
    r->be->fill(r->net.grads, r->net.nparams, 0.0f);
    ctx->training = 1;
    ctx->step = (uint64_t)r->step;
    ctx->first_sample = (uint64_t)epoch * (uint64_t)r->train.n + (uint64_t)first;
    double loss = 0.0;
    int ok = 0;
    int rc = r->pipe_ready ? pipeline_gradients(r, x, y, n, gn, epoch, lr, &loss, &ok, st)
                           : local_gradients(r, x, y, n, gn, epoch, lr, &loss, &ok, st);
    if (rc)
        return rc;
    size_t off, count;
    hcnn_net_param_range(&r->net, r->first, r->last, &off, &count);
    const double o0 = hcnn_now();
    HCNN_MARKER_START(ctx, "optimizer", 2);
    hcnn_sgd_step(&r->opt, r->be, r->net.params, r->net.grads, off, count, lr);
    HCNN_MARKER_STOP(ctx, "optimizer", 2);
    if (r->profiling)
        r->prof.opt_s += hcnn_now() - o0;
    /* samples are counted where their loss is: the last stage of a pipeline */
    const int counted = r->pipe_ready && r->pipe.next != MPI_PROC_NULL ? 0 : n;
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
        MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, r->comm->world);
    if (any && !r->stop_signal && is_root(r)) {
        printf("hcnn: %s received: finishing the step, writing a checkpoint, exiting\n",
               any == SIGTERM ? "SIGTERM" : "SIGUSR1");
        fflush(stdout);
    }
    if (any)
        r->stop_signal = any;
    return any != 0;
}

/* Take the next batch of the epoch and train on it.  Returns 1 after a
 * step, 0 at the end of the epoch, -code on error. */
static int next_step(hcnn_run *r, int epoch, long steps_per_epoch, epoch_stats *st)
{
    float *x;
    int32_t *y;
    int n, gn, first;
    double wait;
    const double s0 = hcnn_now();
    HCNN_MARKER_START(&r->scratch.ctx, "data_wait", 2);
    int more = hcnn_loader_next(&r->loader, &x, &y, &n, &gn, &first, &wait);
    HCNN_MARKER_STOP(&r->scratch.ctx, "data_wait", 2);
    if (!more)
        return 0;
    st->data_wait_s += wait;
    const float lr = (float)hcnn_lr_at(r->cfg, r->step, steps_per_epoch);
    st->lr = lr;
    const double c0 = st->comm_wait_s, b0 = r->pipe_ready ? r->pipe.st.bubble_s : 0.0;
    int rc = train_step(r, x, y, n, gn, first, epoch, lr, st);
    if (rc)
        return -rc;
    if (r->profiling) {
        r->prof.steps++;
        r->prof.step_s += hcnn_now() - s0;
        r->prof.data_s += wait;
        r->prof.comm_s += st->comm_wait_s - c0;
        if (r->pipe_ready)
            r->prof.bubble_s += r->pipe.st.bubble_s - b0;
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
        int rc = next_step(r, epoch, steps_per_epoch, st);
        if (rc < 0)
            return -rc;
        if (rc == 0)
            break;
        batch++;
        progress(r, epoch, batch, r->loader.nbatches, st, t0, &last_print);
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
    if (r->tty && is_root(r)) /* end the in-place progress line */
        printf("\r%*s\r", 100, "");
    st->train_s = hcnn_now() - t0;
    if (r->pipe_ready)
        st->bubble_s = r->pipe.st.bubble_s;
    st->compute_s = st->train_s - st->data_wait_s - st->comm_wait_s - st->bubble_s;
    return HCNN_OK;
}

/* After training: every replica must hold the same parameters and
 * statistics; a mismatch means a bug or a non-deterministic reduction. */
static int check_replicas(hcnn_run *r)
{
    if (r->ngroups == 1)
        return HCNN_OK;
    size_t po, pc, so, sc;
    hcnn_net_param_range(&r->net, r->first, r->last, &po, &pc);
    hcnn_net_state_range(&r->net, r->first, r->last, &so, &sc);
    uint32_t crc = hcnn_crc32(0, r->net.params + po, pc * sizeof(float));
    crc = hcnn_crc32(crc, r->net.state + so, sc * sizeof(float));
    unsigned long mine = crc, lo = crc, hi = crc;
    MPI_Allreduce(&mine, &lo, 1, MPI_UNSIGNED_LONG, MPI_MIN, r->replicas);
    MPI_Allreduce(&mine, &hi, 1, MPI_UNSIGNED_LONG, MPI_MAX, r->replicas);
    if (lo != hi)
        return hcnn_error_code(HCNN_EMPI, "replicas diverged: parameter CRC32 %08lx on this "
                                          "rank, ranks range over %08lx..%08lx",
                               mine, lo, hi);
    if (is_root(r))
        printf("replica_check=ok replicas=%d params_crc32=%08lx\n", r->ngroups, mine);
    return HCNN_OK;
}

/* Write a checkpoint of the current state: batch-norm statistics averaged
 * over replicas and (pipeline) every stage gathered on rank 0 first —
 * collective, so every rank calls it — then rank 0 snapshots and its
 * background thread writes.  wait: block until the file is on disk. */
static int save_checkpoint(hcnn_run *r, long epochs_done, long batch, const epoch_stats *st,
                           int final, int wait)
{
    const hcnn_config *cfg = r->cfg;
    if (!cfg->checkpoint_dir[0])
        return HCNN_OK;
    int rc = average_bn_state(r);
    if (!rc && r->pipe_ready)
        rc = hcnn_pipe_gather(&r->pipe, r->comm, &r->net, r->opt.velocity);
    if (rc || !is_root(r))
        return rc;
    if (!r->writer_ready) {
        if ((rc = hcnn_ckpt_writer_init(&r->writer, &r->net, cfg->checkpoint_dir,
                                        cfg->checkpoint_keep)))
            return rc;
        r->writer_ready = 1;
    }
    hcnn_ckpt_meta meta = {.epoch = epochs_done, .batch = batch, .step = r->step,
                           .seed = cfg->seed, .batch_size = cfg->batch_size, .lr = st->lr};
    if (batch > 0) { /* the epoch in progress */
        meta.loss_sum = st->loss_sum, meta.correct = st->correct, meta.seen = st->seen;
    }
    snprintf(meta.model, sizeof meta.model, "%s", cfg->model.name);
    double stall = 0.0;
    rc = hcnn_ckpt_writer_submit(&r->writer, r->opt.velocity, &meta, final, &stall);
    if (!rc && wait)
        rc = hcnn_ckpt_writer_wait(&r->writer);
    if (!rc) {
        printf("checkpoint=%s epoch=%ld step=%ld stall_s=%.4f%s\n", r->writer.path, epochs_done,
               r->step, stall, wait ? "" : " (written in the background)");
        fflush(stdout);
    }
    return rc;
}

/* Per-stage pipeline metrics of the epoch, averaged over replicas, printed
 * by rank 0: compute, bubble (waiting for neighbours), stored activations. */
static int report_stages(hcnn_run *r, double epoch_s)
{
    hcnn_pipe *p = &r->pipe;
    enum { K = 4 };
    double v[K * HCNN_MAX_BLOCKS] = {0}, sum[K * HCNN_MAX_BLOCKS];
    v[K * p->stage] = p->st.compute_s / p->R;
    v[K * p->stage + 1] = p->st.bubble_s / p->R;
    v[K * p->stage + 2] = (double)p->st.peak_micro / p->R;
    v[K * p->stage + 3] = (double)p->st.peak_micro * (double)p->slot_bytes / p->R;
    if (MPI_Reduce(v, sum, K * p->S, MPI_DOUBLE, MPI_SUM, 0, r->comm->world) != MPI_SUCCESS)
        return hcnn_error_code(HCNN_EMPI, "MPI_Reduce of the stage metrics failed");
    memset(&p->st, 0, sizeof p->st);
    if (!is_root(r))
        return HCNN_OK;
    double bubble = 0.0;
    for (int s = 0; s < p->S; s++) {
        const double c = sum[K * s], b = sum[K * s + 1], peak = sum[K * s + 2];
        const double share = epoch_s > 0 ? b / epoch_s : 0.0;
        bubble += share / p->S;
        printf("stage=%d blocks=%d-%d compute_s=%.3f bubble_s=%.3f bubble_share=%.3f "
               "peak_stored_microbatches=%.0f peak_activation_mb=%.2f\n",
               s, p->bounds[s], p->bounds[s + 1] - 1, c, b, share, peak,
               sum[K * s + 3] / 1048576.0);
    }
    printf("pipeline_bubble_share=%.3f theoretical=%.3f\n", bubble,
           (double)(p->S - 1) / (p->M + p->S - 1));
    fflush(stdout);
    return HCNN_OK;
}

static void report_epoch(hcnn_run *r, int epoch, const epoch_stats *st)
{
    if (!is_root(r))
        return;
    const double ips = st->train_s > 0 ? st->trained / st->train_s : 0.0;
    const double tl = st->seen ? st->loss_sum / st->seen : 0.0;
    const double ta = st->seen ? st->correct / st->seen : 0.0;
    /* share of the allreduce hidden behind backward: 1 - blocked / cost */
    double hidden = 0.0;
    if (r->sync_ready && r->allreduce_s > 0 && st->steps > 0) {
        hidden = 1.0 - (st->comm_wait_s / st->steps) / r->allreduce_s;
        hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
    }
    printf("epoch=%d step=%ld train_loss=%.4f train_acc=%.4f test_loss=%.4f test_acc=%.4f "
           "images_per_s=%.1f epoch_time_s=%.3f data_wait_s=%.3f eval_time_s=%.3f",
           epoch + 1, r->step, tl, ta, st->test_loss, st->test_acc, ips, st->train_s,
           st->data_wait_s, st->eval_s);
    if (r->comm->size > 1)
        printf(" compute_s=%.3f comm_wait_s=%.3f comm_wait_share=%.3f allreduce_s=%.4f "
               "allreduce_hidden=%.3f",
               st->compute_s, st->comm_wait_s,
               st->train_s > 0 ? st->comm_wait_s / st->train_s : 0.0, r->allreduce_s, hidden);
    printf("\n");
    fflush(stdout);
    if (r->csv) {
        char ts[32];
        time_t now = time(NULL);
        struct tm tmv;
        gmtime_r(&now, &tmv);
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tmv);
        const int stages = r->pipe_ready ? r->pipe.S : 1;
        fprintf(r->csv, "%s,%s,%s,%s,%d,%d,%d,%d,%d,%d,%d,%ld,%.6g,%.6f,%.6f,%.6f,%.6f,%.2f,%.4f,%.4f",
                r->run_id, HCNN_GIT_COMMIT, ts, hcnn_strategy_name(r->cfg->strategy),
                r->comm->size, stages, r->comm->size / stages, r->threads, r->cfg->batch_size,
                r->pipe_ready ? r->pipe.M : 1, epoch + 1, r->step, st->lr, tl, ta, st->test_loss,
                st->test_acc, ips, st->train_s, st->eval_s);
        for (int k = 0; k < 4; k++)
            fprintf(r->csv, ",%.4f,%.4f,%.4f", st->mean[k], st->lo[k], st->hi[k]);
        fprintf(r->csv, ",%.4f,%.1f\n", hidden, st->peak_rss_mb);
        fflush(r->csv);
    }
}

/* Sums over ranks of the epoch's counts; min / mean / max of its phase
 * times (as HPL reports its timers), so a slow node shows in the metrics. */
static int reduce_epoch(hcnn_run *r, epoch_stats *st)
{
    double sums[4] = {st->loss_sum, st->correct, st->seen, st->trained};
    double t[4] = {st->compute_s, st->comm_wait_s, st->data_wait_s, st->bubble_s};
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss = (double)ru.ru_maxrss / 1024.0;
    for (int k = 0; k < 4; k++)
        st->lo[k] = st->hi[k] = st->mean[k] = t[k];
    st->peak_rss_mb = rss;
    if (r->comm->size == 1)
        return HCNN_OK;
    MPI_Comm w = r->comm->world;
    if (MPI_Allreduce(MPI_IN_PLACE, sums, 4, MPI_DOUBLE, MPI_SUM, w) != MPI_SUCCESS ||
        MPI_Allreduce(t, st->lo, 4, MPI_DOUBLE, MPI_MIN, w) != MPI_SUCCESS ||
        MPI_Allreduce(t, st->hi, 4, MPI_DOUBLE, MPI_MAX, w) != MPI_SUCCESS ||
        MPI_Allreduce(t, st->mean, 4, MPI_DOUBLE, MPI_SUM, w) != MPI_SUCCESS ||
        MPI_Allreduce(&rss, &st->peak_rss_mb, 1, MPI_DOUBLE, MPI_MAX, w) != MPI_SUCCESS)
        return hcnn_error_code(HCNN_EMPI, "MPI_Allreduce of the epoch statistics failed");
    st->loss_sum = sums[0], st->correct = sums[1], st->seen = sums[2], st->trained = sums[3];
    for (int k = 0; k < 4; k++)
        st->mean[k] /= r->comm->size;
    st->compute_s = st->mean[0], st->comm_wait_s = st->mean[1];
    st->data_wait_s = st->mean[2], st->bubble_s = st->mean[3];
    return HCNN_OK;
}

/* Load a checkpoint to continue from (every rank reads it: it holds the
 * whole model, whatever layout wrote it). */
static int resume_from(hcnn_run *r, const char *resume, hcnn_ckpt_meta *meta)
{
    const hcnn_config *cfg = r->cfg;
    char path[HCNN_PATH_MAX + 32];
    int rc = HCNN_OK;
    if (!strcmp(resume, "latest")) {
        if (!cfg->checkpoint_dir[0])
            return hcnn_error("--resume latest: %s sets no checkpoint_dir", cfg->path);
        if (is_root(r))
            rc = hcnn_ckpt_latest(cfg->checkpoint_dir, path, sizeof path);
        if (r->comm->size > 1) {
            MPI_Bcast(&rc, 1, MPI_INT, 0, r->comm->world);
            MPI_Bcast(path, sizeof path, MPI_CHAR, 0, r->comm->world);
        }
        if (rc)
            return rc;
    } else {
        snprintf(path, sizeof path, "%s", resume);
    }
    rc = hcnn_ckpt_load(path, &r->net, r->opt.velocity, meta);
    if (rc)
        return rc;
    if (meta->seed != cfg->seed)
        return hcnn_error("%s: written with seed %llu, %s has seed %llu: the data order would "
                          "differ",
                          path, (unsigned long long)meta->seed, cfg->path,
                          (unsigned long long)cfg->seed);
    if (meta->batch > 0 && meta->batch_size != cfg->batch_size)
        return hcnn_error("%s: stopped inside an epoch with batch_size %d, %s has %d",
                          path, meta->batch_size, cfg->path, cfg->batch_size);
    r->step = meta->step;
    if (is_root(r))
        printf("hcnn: resuming from %s: epoch %ld, batch %ld, step %ld\n", path, meta->epoch + 1,
               meta->batch, meta->step);
    return HCNN_OK;
}

static int enable_profile(hcnn_run *r)
{
    int rc = hcnn_profile_init(&r->prof, r->net.nids);
    r->profiling = 1;
    r->scratch.ctx.prof_fwd = r->prof.fwd;
    r->scratch.ctx.prof_bwd = r->prof.bwd;
    return rc;
}

/* The samples per pass of this rank's blocks: its shard, or its
 * micro-batch and passes per step in a pipeline. */
static int profile_pass(const hcnn_run *r, int *passes)
{
    *passes = r->pipe_ready ? r->pipe.M : 1;
    return r->pipe_ready ? r->pipe.micro_cap
                         : (r->cfg->batch_size + r->ngroups - 1) / r->ngroups;
}

/* One sample of rank 0's raw-GEMM reference (the rank that prints). */
static void sample_reference(hcnn_run *r)
{
    if (!is_root(r))
        return;
    int passes;
    const int n = profile_pass(r, &passes);
    hcnn_profile_sample_reference(&r->prof, &r->net, &r->scratch.ctx, r->first, r->last, n);
}

/* Rank 0's profile table: its blocks, its shard (or micro-batch) size. */
static double print_profile(hcnn_run *r)
{
    if (!is_root(r))
        return 0.0;
    int passes;
    const int n = profile_pass(r, &passes);
    double share = hcnn_profile_print(&r->prof, &r->net, &r->scratch.ctx, r->first, r->last, n,
                                      passes, stdout);
    fflush(stdout);
    return share;
}

/* The run header's line on how convolutions and batch assembly run. */
static void print_compute_setup(const hcnn_run *r, const hcnn_config *cfg)
{
    printf("hcnn: convolutions: conv_algo %s; data_prefetch %s; batch assembly: %s\n",
           hcnn_conv_algo_name(cfg->conv_algo), hcnn_prefetch_name(cfg->data_prefetch),
           r->loader.thread_started ? "background thread" : "by the training threads");
}

int hcnn_train(const hcnn_config *cfg, const hcnn_comm *comm, const hcnn_run_opts *opts)
{
    hcnn_run r;
    const char *resume = opts ? opts->resume : NULL;
    int rc = run_setup(&r, cfg, comm, 1);
    if (!rc && opts && opts->profile)
        rc = enable_profile(&r);
    hcnn_ckpt_meta start = {0};
    if (!rc && resume)
        rc = resume_from(&r, resume, &start);
    if (!rc)
        rc = csv_open(&r, resume != NULL);
    if (rc) {
        run_free(&r);
        return rc;
    }
    {
        char ts[32];
        time_t now = time(NULL);
        struct tm tmv;
        gmtime_r(&now, &tmv);
        strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", &tmv);
        snprintf(r.run_id, sizeof r.run_id, "%s-%ld", ts, (long)getpid());
    }
    const long steps_per_epoch = (r.train.n + cfg->batch_size - 1) / cfg->batch_size;
    if (is_root(&r)) {
        char blas[256];
        printf("hcnn: model %s: %d blocks, %zu parameters; data %s: %d train / %d test samples; "
               "strategy %s on %d rank%s x %d threads; global batch %d; %s\n",
               cfg->model.name, r.net.nlayers, r.net.nparams, cfg->dataset, r.train.n, r.test.n,
               hcnn_strategy_name(cfg->strategy), comm->size, comm->size > 1 ? "s" : "",
               r.threads, cfg->batch_size, hcnn_blas_describe(blas, sizeof blas));
        print_compute_setup(&r, cfg);
        if (r.pipe_ready) {
            const hcnn_pipe *p = &r.pipe;
            printf("hcnn: pipeline: %d stage%s x %d replica%s, %d micro-batches of <= %d samples, "
                   "schedule %s, partition [",
                   p->S, p->S > 1 ? "s" : "", p->R, p->R > 1 ? "s" : "", p->M, p->micro_cap,
                   hcnn_pipe_schedule_name(p->schedule));
            for (int s = 0; s < p->S; s++)
                printf("%s%d", s ? ", " : "", p->bounds[s]);
            printf("] (%s)\n", cfg->npartition ? "explicit" : "balanced from a measured warm-up");
            for (int s = 0; s < p->S; s++)
                printf("hcnn: stage %d: blocks %d-%d (%s .. %s), estimated %.4f s per step\n", s,
                       p->bounds[s], p->bounds[s + 1] - 1, r.net.layers[p->bounds[s]].name,
                       r.net.layers[p->bounds[s + 1] - 1].name, p->est_s[s]);
        }
        const hcnn_grad_sync *gs = r.sync_ready                        ? &r.sync
                                   : r.pipe_ready && r.pipe.sync_ready ? &r.pipe.sync
                                                                       : NULL;
        if (gs)
            printf("hcnn: gradient allreduce: %d bucket%s of <= %g MiB, progress by %s; "
                   "blocking allreduce of all gradients: %.4f s\n",
                   gs->nbuckets, gs->nbuckets == 1 ? "" : "s", cfg->bucket_mb,
                   cfg->allreduce_progress == HCNN_PROGRESS_TEST ? "MPI_Test polling"
                                                                 : "a communication thread",
                   r.allreduce_s);
        fflush(stdout);
    }
    int stop = 0, done = 0;
    long epoch = start.epoch;
    int first_batch = (int)start.batch;
    epoch_stats st = {0};
    for (; epoch < cfg->epochs && !stop && !rc; epoch++, first_batch = 0) {
        memset(&st, 0, sizeof st);
        if (first_batch > 0 && is_root(&r)) /* the resumed epoch's sums so far */
            st.loss_sum = start.loss_sum, st.correct = start.correct, st.seen = start.seen;
        rc = train_epoch(&r, (int)epoch, first_batch, steps_per_epoch, &st, &stop, &done);
        if (rc)
            break;
        if (stop == 2) /* signal: checkpoint where we are and leave */
            break;
        rc = reduce_epoch(&r, &st);
        const double te = hcnn_now();
        if (!rc)
            rc = average_bn_state(&r);
        if (!rc)
            rc = evaluate(&r, &st.test_loss, &st.test_acc);
        st.eval_s = hcnn_now() - te;
        if (rc)
            break;
        report_epoch(&r, (int)epoch, &st);
        if (r.pipe_ready && (rc = report_stages(&r, st.train_s)))
            break;
        const int complete = done >= (int)steps_per_epoch;
        if (!stop && complete && epoch + 1 < cfg->epochs && cfg->checkpoint_every > 0 &&
            (epoch + 1) % cfg->checkpoint_every == 0)
            rc = save_checkpoint(&r, epoch + 1, 0, &st, 0, 0);
        if (stop && !complete)
            break; /* max_steps inside the epoch: the checkpoint records the position */
    }
    if (!rc)
        rc = check_replicas(&r);
    if (!rc && r.profiling)
        print_profile(&r);
    /* the final checkpoint (also after max_steps or a signal) */
    if (!rc) {
        const int inside = (stop != 0) && done < (int)steps_per_epoch && epoch < cfg->epochs;
        if (stop == 2 && comm->size > 1) { /* partial sums of the epoch, global (collective) */
            double sums[3] = {st.loss_sum, st.correct, st.seen};
            MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, comm->world);
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

int hcnn_bench(const hcnn_config *cfg_in, const hcnn_comm *comm, const hcnn_run_opts *opts)
{
    const int warmup = opts->warmup, repeats = opts->repeats, steps = opts->steps;
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the configuration");
    /* synthetic data of the model's input shape, exactly enough batches */
    *cfg = *cfg_in;
    snprintf(cfg->dataset, sizeof cfg->dataset, "synthetic");
    cfg->synthetic_train = cfg->batch_size * (warmup + repeats * steps);
    cfg->synthetic_test = cfg->batch_size;
    cfg->epochs = 1;
    cfg->max_steps = 0;
    cfg->csv[0] = cfg->checkpoint_dir[0] = '\0';
    hcnn_run r;
    int rc = run_setup(&r, cfg, comm, 1);
    if (!rc)
        rc = enable_profile(&r);
    double rate[64];
    int nrate = 0;
    if (!rc) {
        const long spe = (r.train.n + cfg->batch_size - 1) / cfg->batch_size;
        epoch_stats st = {0};
        hcnn_epoch_permutation(r.perm, r.train.n, cfg->seed, 0, cfg->shuffle);
        hcnn_loader_begin_epoch(&r.loader, r.perm, r.train.n, 0);
        if (is_root(&r)) {
            char blas[256];
            printf("hcnn bench: model %s, strategy %s on %d rank%s x %d threads, global batch %d, "
                   "%d warm-up steps, %d repeats of %d steps; %s\n",
                   cfg->model.name, hcnn_strategy_name(cfg->strategy), comm->size,
                   comm->size > 1 ? "s" : "", r.threads, cfg->batch_size, warmup, repeats, steps,
                   hcnn_blas_describe(blas, sizeof blas));
            print_compute_setup(&r, cfg);
            fflush(stdout);
        }
        for (int i = 0; i < warmup && !rc; i++)
            rc = next_step(&r, 0, spe, &st) < 0 ? HCNN_EINVAL : HCNN_OK;
        hcnn_profile_reset(&r.prof);
        for (int k = 0; k < repeats && !rc && nrate < 64; k++) {
            if (comm->size > 1)
                MPI_Barrier(comm->world);
            const double t0 = hcnn_now();
            for (int i = 0; i < steps && !rc; i++) {
                int got = next_step(&r, 0, spe, &st);
                rc = got < 0 ? -got : got == 0 ? hcnn_error("bench: ran out of batches") : HCNN_OK;
            }
            double el = hcnn_now() - t0;
            if (comm->size > 1) /* the global rate is set by the slowest rank */
                MPI_Allreduce(MPI_IN_PLACE, &el, 1, MPI_DOUBLE, MPI_MAX, comm->world);
            rate[nrate++] = el > 0 ? (double)cfg->batch_size * steps / el : 0.0;
            if (is_root(&r)) {
                printf("repeat=%d images_per_s=%.1f step_ms=%.3f\n", k + 1, rate[nrate - 1],
                       el / steps * 1e3);
                fflush(stdout);
            }
            sample_reference(&r); /* alternately with the timed steps */
        }
    }
    if (!rc) {
        double share = print_profile(&r);
        const double median = hcnn_median(rate, nrate);
        if (is_root(&r)) {
            printf("gemm_share=%.3f\n", share);
            printf("images_per_s=%.1f\n", median);
        }
    }
    run_free(&r);
    free(cfg);
    return rc;
}

int hcnn_evaluate(const hcnn_config *cfg, const hcnn_comm *comm, const char *checkpoint)
{
    hcnn_run r;
    int rc = run_setup(&r, cfg, comm, 0);
    hcnn_ckpt_meta meta;
    if (!rc)
        rc = hcnn_ckpt_load(checkpoint, &r.net, NULL, &meta);
    double loss = 0.0, acc = 0.0;
    const double t0 = hcnn_now();
    if (!rc)
        rc = evaluate(&r, &loss, &acc);
    if (!rc && is_root(&r))
        printf("checkpoint=%s epoch=%ld step=%ld test_samples=%d test_loss=%.4f test_acc=%.4f "
               "eval_time_s=%.3f\n",
               checkpoint, meta.epoch, meta.step, r.test.n, loss, acc, hcnn_now() - t0);
    run_free(&r);
    return rc;
}
