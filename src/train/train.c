/* The training driver: epochs of (load batch, forward, loss, backward,
 * optimiser step), evaluation, progress output, CSV metrics and the final
 * checkpoint.  Everything a run owns lives in one struct passed down. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcnn/blas.h"
#include "hcnn/checkpoint.h"
#include "hcnn/common.h"
#include "hcnn/data.h"
#include "hcnn/net.h"
#include "hcnn/optim.h"
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
    uint32_t *perm;
    float *dlogits;
    FILE *csv;
    int tty;
    long step;               /* optimiser steps taken */
} hcnn_run;

typedef struct epoch_stats {
    double loss_sum;
    long correct, seen;
    double train_s, data_wait_s, eval_s;
    double test_loss, test_acc;
    double lr;
} epoch_stats;

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

static void run_free(hcnn_run *r)
{
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

/* Datasets, model, optimiser and buffers; on error everything allocated so
 * far is released by run_free. */
static int run_setup(hcnn_run *r, const hcnn_config *cfg, const hcnn_comm *comm, int need_train)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->comm = comm;
    r->be = hcnn_backend_cpu();
    r->threads = hcnn_setup_threads(cfg);
    r->tty = isatty(STDOUT_FILENO);
    int rc = hcnn_dataset_open(cfg, &r->train, &r->test);
    if (rc)
        return rc;
    rc = hcnn_net_create(&r->net, &cfg->model, r->be, cfg->path);
    if (rc)
        return rc;
    hcnn_net_init(&r->net, cfg->init, cfg->seed);
    /* one activation arena serves training and evaluation */
    r->eval_batch = cfg->eval_batch_size > 0 ? cfg->eval_batch_size : cfg->batch_size;
    int cap = r->eval_batch;
    if (need_train && cfg->batch_size > cap)
        cap = cfg->batch_size;
    rc = hcnn_acts_alloc(&r->acts, &r->net, 0, r->net.nlayers, cap);
    if (!rc)
        rc = hcnn_scratch_alloc(&r->scratch, &r->net, 0, r->net.nlayers, cap);
    if (rc)
        return rc;
    r->scratch.ctx.seed = cfg->seed;
    if (!need_train)
        return HCNN_OK;
    rc = hcnn_sgd_init(&r->opt, r->be, r->net.nparams, cfg);
    if (rc)
        return rc;
    r->perm = hcnn_alloc(sizeof *r->perm * (size_t)r->train.n, "epoch permutation");
    r->dlogits = hcnn_alloc(sizeof(float) * (size_t)cap * r->net.classes, "logit gradients");
    if (!r->perm || !r->dlogits)
        return HCNN_ENOMEM;
    const int augment = cfg->augment >= 0 ? cfg->augment : r->train.augment_default;
    rc = hcnn_loader_init(&r->loader, &r->train, cfg->batch_size, comm->rank, comm->size, augment,
                          cfg->seed, 1);
    if (rc)
        return rc;
    r->loader_ready = 1;
    return HCNN_OK;
}

/* Loss and accuracy on the test set, in inference mode. */
static int evaluate(hcnn_run *r, double *loss, double *acc)
{
    const hcnn_dataset *ds = &r->test;
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
    double loss_sum = 0.0;
    long correct = 0;
    int rc = HCNN_OK;
    for (int i0 = 0; i0 < ds->n && !rc; i0 += eb) {
        const int n = ds->n - i0 < eb ? ds->n - i0 : eb;
        for (int i = 0; i < n; i++)
            idx[i] = (uint32_t)(i0 + i);
        hcnn_batch_assemble(ds, idx, n, 0, r->cfg->seed, 0, x, y, r->threads);
        rc = hcnn_net_forward(&r->net, &ctx, &r->acts, x, n);
        if (rc)
            break;
        int ok = 0;
        loss_sum += r->be->softmax_xent(hcnn_acts_output(&r->acts), y, n, r->net.classes, 0.0f,
                                        NULL, &ok);
        correct += ok;
    }
    hcnn_free(x), hcnn_free(y), hcnn_free(idx);
    *loss = ds->n ? loss_sum / ds->n : 0.0;
    *acc = ds->n ? (double)correct / ds->n : 0.0;
    return rc;
}

static void progress(const hcnn_run *r, int epoch, int batch, int nbatches,
                     const epoch_stats *st, double t0, double *last_print, int force_line)
{
    const double now = hcnn_now();
    const double every = r->tty ? 0.5 : 10.0;
    const int by_steps = !r->tty && r->cfg->progress_every > 0;
    if (by_steps ? (batch % r->cfg->progress_every != 0) : (now - *last_print < every && !force_line))
        return;
    *last_print = now;
    const double el = now - t0;
    printf("%sepoch %d/%d step %d/%d loss %.4f acc %.2f%% %.0f img/s lr %.4g%s",
           r->tty ? "\r" : "", epoch + 1, r->cfg->epochs, batch, nbatches,
           st->seen ? st->loss_sum / st->seen : 0.0,
           st->seen ? 100.0 * st->correct / st->seen : 0.0, el > 0 ? st->seen / el : 0.0, st->lr,
           r->tty ? "   " : "\n");
    fflush(stdout);
}

static int csv_open(hcnn_run *r)
{
    if (!r->cfg->csv[0])
        return HCNN_OK;
    int rc = hcnn_mkdir_parent(r->cfg->csv);
    if (rc)
        return rc;
    r->csv = fopen(r->cfg->csv, "w");
    if (!r->csv)
        return hcnn_error_code(HCNN_EIO, "cannot create the metrics file %s (key csv in %s)",
                               r->cfg->csv, r->cfg->path);
    fprintf(r->csv, "epoch,step,lr,train_loss,train_acc,test_loss,test_acc,images_per_s,"
                    "epoch_time_s,data_wait_s,eval_time_s,threads,batch_size\n");
    fflush(r->csv);
    return HCNN_OK;
}

static int train_epoch(hcnn_run *r, int epoch, long steps_per_epoch, epoch_stats *st, int *stop)
{
    const hcnn_config *cfg = r->cfg;
    hcnn_ctx *ctx = &r->scratch.ctx;
    hcnn_epoch_permutation(r->perm, r->train.n, cfg->seed, epoch, cfg->shuffle);
    hcnn_loader_begin_epoch(&r->loader, r->perm, r->train.n, epoch);
    const double t0 = hcnn_now();
    double last_print = t0;
    int batch = 0;
    float *x;
    int32_t *y;
    int n, gn, first;
    double wait;
    while (hcnn_loader_next(&r->loader, &x, &y, &n, &gn, &first, &wait)) {
        st->data_wait_s += wait;
        const float lr = (float)hcnn_lr_at(cfg, r->step, steps_per_epoch);
        st->lr = lr;
        r->be->fill(r->net.grads, r->net.nparams, 0.0f);
        ctx->training = 1;
        ctx->step = (uint64_t)r->step;
        ctx->first_sample = (uint64_t)epoch * (uint64_t)r->train.n + (uint64_t)first;
        int rc = hcnn_net_forward(&r->net, ctx, &r->acts, x, n);
        if (rc)
            return rc;
        int ok = 0;
        /* gradient of the mean loss over the global batch */
        const double loss = r->be->softmax_xent(hcnn_acts_output(&r->acts), y, n,
                                                r->net.classes, 1.0f / (float)gn, r->dlogits, &ok);
        if (!isfinite(loss))
            return hcnn_error_code(HCNN_ENUMERIC,
                                   "non-finite loss at epoch %d step %ld (lr %g): lower lr in %s",
                                   epoch + 1, r->step, (double)lr, cfg->path);
        rc = hcnn_net_backward(&r->net, &r->scratch, &r->acts, x, r->dlogits, NULL, n);
        if (rc)
            return rc;
        hcnn_sgd_step(&r->opt, r->be, r->net.params, r->net.grads, 0, r->net.nparams, lr);
        st->loss_sum += loss;
        st->correct += ok;
        st->seen += n;
        r->step++;
        batch++;
        progress(r, epoch, batch, r->loader.nbatches, st, t0, &last_print, 0);
        if (cfg->max_steps > 0 && r->step >= cfg->max_steps) {
            *stop = 1;
            break;
        }
    }
    if (r->tty) /* end the in-place progress line */
        printf("\r%*s\r", 100, "");
    st->train_s = hcnn_now() - t0;
    return HCNN_OK;
}

int hcnn_train(const hcnn_config *cfg, const hcnn_comm *comm)
{
    if (comm->size != 1)
        return hcnn_error("%s: strategy '%s' runs on one rank, but %d were started",
                          cfg->path, hcnn_strategy_name(cfg->strategy), comm->size);
    hcnn_run r;
    int rc = run_setup(&r, cfg, comm, 1);
    if (!rc)
        rc = csv_open(&r);
    if (rc) {
        run_free(&r);
        return rc;
    }
    const long steps_per_epoch = (r.train.n + cfg->batch_size - 1) / cfg->batch_size;
    char blas[256];
    printf("hcnn: model %s: %d blocks, %zu parameters; data %s: %d train / %d test samples; "
           "batch %d; %d threads; backend %s, %s\n",
           cfg->model.name, r.net.nlayers, r.net.nparams, cfg->dataset, r.train.n, r.test.n,
           cfg->batch_size, r.threads, r.be->name, hcnn_blas_describe(blas, sizeof blas));
    fflush(stdout);
    int stop = 0, epoch;
    for (epoch = 0; epoch < cfg->epochs && !stop && !rc; epoch++) {
        epoch_stats st = {0};
        rc = train_epoch(&r, epoch, steps_per_epoch, &st, &stop);
        if (rc)
            break;
        const double te = hcnn_now();
        rc = evaluate(&r, &st.test_loss, &st.test_acc);
        st.eval_s = hcnn_now() - te;
        if (rc)
            break;
        const double ips = st.train_s > 0 ? st.seen / st.train_s : 0.0;
        const double tl = st.seen ? st.loss_sum / st.seen : 0.0;
        const double ta = st.seen ? (double)st.correct / st.seen : 0.0;
        printf("epoch=%d step=%ld train_loss=%.4f train_acc=%.4f test_loss=%.4f test_acc=%.4f "
               "images_per_s=%.1f epoch_time_s=%.3f data_wait_s=%.3f eval_time_s=%.3f\n",
               epoch + 1, r.step, tl, ta, st.test_loss, st.test_acc, ips, st.train_s,
               st.data_wait_s, st.eval_s);
        fflush(stdout);
        if (r.csv) {
            fprintf(r.csv, "%d,%ld,%.6g,%.6f,%.6f,%.6f,%.6f,%.2f,%.4f,%.4f,%.4f,%d,%d\n", epoch + 1,
                    r.step, st.lr, tl, ta, st.test_loss, st.test_acc, ips, st.train_s,
                    st.data_wait_s, st.eval_s, r.threads, cfg->batch_size);
            fflush(r.csv);
        }
    }
    if (!rc && cfg->checkpoint_dir[0]) {
        char path[HCNN_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/final.hcnn", cfg->checkpoint_dir);
        hcnn_ckpt_meta meta = {.epoch = epoch, .step = r.step, .seed = cfg->seed};
        snprintf(meta.model, sizeof meta.model, "%s", cfg->model.name);
        rc = hcnn_mkdir_p(cfg->checkpoint_dir);
        if (!rc)
            rc = hcnn_ckpt_save(path, &r.net, r.opt.velocity, &meta);
        if (!rc)
            printf("checkpoint=%s\n", path);
    }
    run_free(&r);
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
    if (!rc)
        printf("checkpoint=%s epoch=%ld step=%ld test_samples=%d test_loss=%.4f test_acc=%.4f "
               "eval_time_s=%.3f\n",
               checkpoint, meta.epoch, meta.step, r.test.n, loss, acc, hcnn_now() - t0);
    run_free(&r);
    return rc;
}
