/* A run's set-up and release, evaluation, and the checks the replicas
 * agree on (src/train/run.h). */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcnn/common.h"
#include "hcnn/blas.h"
#include "hcnn/env.h"
#include "hcnn/files.h"
#include "hcnn/threads.h"
#include "run.h"

void hcnn_run_free(hcnn_run *r)
{
    hcnn_profile_free(&r->prof); /* also paused (hcnn_run_profile_pause) */
    if (r->trace_batches)
        fclose(r->trace_batches);
    if (r->writer_ready)
        hcnn_ckpt_writer_free(&r->writer);
    hcnn_ckpt_lock_release(&r->lock); /* after the last write */
    if (r->strat_ready)
        hcnn_strategy_free(&r->strat);
    if (r->loader_ready)
        hcnn_loader_free(&r->loader);
    if (r->be) {
        hcnn_sgd_free(&r->opt, r->be);
        r->be->free(r->be, r->state_before);
        r->be->free(r->be, r->stats);
    }
    hcnn_net_free(&r->net);
    hcnn_dataset_free(&r->train);
    hcnn_dataset_free(&r->test);
    hcnn_free(r->perm);
    if (r->csv)
        fclose(r->csv);
    hcnn_backend_destroy(r->own_be); /* last: everything above was its memory */
}

/* Test switches, for tests/integration/test_faults.sh: HCNN_FAIL_AT=rank:step makes
 * that rank fail at that step (a non-finite loss), to test that one
 * failing rank ends the whole job; HCNN_FAIL_AT=rank:step:collective makes
 * it enter a barrier the other ranks never enter, so that the stall
 * watchdog's report of ranks alive in different calls is tested. */
static void read_fault_hook(hcnn_run *r)
{
    r->fail_rank = r->fail_step = -1;
    r->fail_collective = 0;
    const char *f = getenv(HCNN_ENV_FAIL_AT);
    char kind[16] = "";
    const int got = f ? sscanf(f, "%ld:%ld:%15s", &r->fail_rank, &r->fail_step, kind) : 0;
    if (got < 2 || (got == 3 && strcmp(kind, "collective")))
        r->fail_rank = r->fail_step = -1;
    r->fail_collective = got == 3 && r->fail_rank >= 0;
}

/* The ranks that hold the same blocks and allreduce their gradients */
static int grad_replicas(const hcnn_config *cfg, const hcnn_comm *comm)
{
    return cfg->strategy == HCNN_STRATEGY_PIPELINE
               ? comm->size / (cfg->stages > 0 ? cfg->stages : 1)
               : comm->size;
}

/* The backend the configuration's `device` names, on a GPU node the GPU of
 * this rank's place among its node's ranks; HCNN_BACKEND overrides it for
 * the tests (cpu-devmem: the CPU backend behind memory the host cannot
 * touch, tests/integration/test_seam.sh and tests/conformance/test_backend.c). */
static int run_backend(hcnn_run *r)
{
    const char *test = getenv(HCNN_ENV_BACKEND);
    const char *name = test && *test ? test : hcnn_device_name(r->cfg->device);
    int rc = hcnn_backend_create(name, r->comm->local_rank, &r->own_be);
    r->be = r->own_be;
    if (!rc)
        rc = r->own_be->set_precision(r->own_be, r->cfg->precision);
    if (!rc && !r->be->host_memory) {
        /* device memory: MPI in place when the library takes it, else
         * through pinned host buffers (include/hcnn/comm.h) */
        char why[200];
        if (r->cfg->mpi_device_memory == HCNN_MPI_DEVICE_MEMORY_STAGED)
            snprintf(why, sizeof why, "mpi_device_memory: staged");
        else
            r->own_be->mpi_direct = hcnn_mpi_device_aware(r->be, why, sizeof why);
        /* the gradient buckets of allreduce_progress: test go through
         * MPI_Iallreduce, which takes no device memory (comm.h) */
        const int staged_grads = r->be->mpi_direct && grad_replicas(r->cfg, r->comm) > 1 &&
                                 r->cfg->allreduce_progress == HCNN_PROGRESS_TEST;
        snprintf(r->mpi_note, sizeof r->mpi_note, "hcnn: MPI on %s memory: %s (%s)%s\n",
                 r->be->name, r->be->mpi_direct ? "in place" : "through pinned host buffers", why,
                 staged_grads ? "; gradient buckets through pinned host buffers "
                                "(allreduce_progress: test: MPI_Iallreduce takes no device memory)"
                              : "");
    }
    return rc;
}

/* Every rank lays its activations out the same way (include/hcnn/backend.h:
 * HCNN_CUDA_LAYOUT, read by each rank's backend from its own environment,
 * which mpirun does not forward to other nodes without -x): a pipeline
 * stage would read the previous stage's NHWC activations as NCHW and train
 * on, wrong.  Refused on every rank (HCNN_EAGREED after rank 0's message). */
static int check_layout_agreed(const hcnn_run *r)
{
    const hcnn_comm *comm = r->comm;
    if (comm->size == 1)
        return HCNN_OK;
    int lo = (int)r->be->layout, hi = lo;
    HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, comm->world));
    HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, comm->world));
    if (lo == hi)
        return HCNN_OK;
    if (comm->rank == 0)
        hcnn_error("%s: the ranks' %s backends lay out activations differently (some NCHW, some "
                   "NHWC): set HCNN_CUDA_LAYOUT the same for every rank (mpirun -x "
                   "HCNN_CUDA_LAYOUT; srun forwards the environment)",
                   r->cfg->path, r->be->name);
    return HCNN_EAGREED;
}

/* Every rank runs each convolution shape the way the lowest rank that has
 * it chose (include/hcnn/backend.h, conv_choices: the CUDA backend's
 * measured ways): ways differ in summation order, and a rank that measured
 * other winners would give other bits, or be counted slower or faster in
 * a comparison of ranks.  Collective: every rank calls it, rc its set-up's
 * so far; a rank that failed is not waited for (HCNN_EAGREED on the
 * others, after its own message).  The choices' texts are gathered from all
 * ranks and taken in rank order, a shape's first one winning. */
static int agree_conv_choices(hcnn_run *r, int rc)
{
    const hcnn_comm *comm = r->comm;
    if (comm->size == 1)
        return rc;
    int ok = rc == HCNN_OK;
    HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm->world));
    if (!ok)
        return rc ? rc : HCNN_EAGREED;
    const hcnn_backend *be = r->be;
    const int has = be->conv_choices && be->adopt_conv_choices;
    int any = has;
    HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, comm->world));
    if (!any)
        return HCNN_OK;
    const size_t need = has ? be->conv_choices(be, NULL, 0) : 0;
    int len = need < (size_t)INT_MAX / 2 ? (int)need + 1 : 0; /* 0: never so long */
    int *lens = malloc(sizeof(int) * (size_t)comm->size * 2);
    char *mine = len ? malloc((size_t)len) : NULL;
    ok = lens && mine;
    if (mine) {
        mine[0] = '\0';
        if (has)
            be->conv_choices(be, mine, (size_t)len);
    }
    HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm->world));
    if (!ok) {
        free(lens), free(mine);
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the ranks' convolution choices");
    }
    HCNN_MPI(MPI_Allgather(&len, 1, MPI_INT, lens, 1, MPI_INT, comm->world));
    int *displs = lens + comm->size;
    long total = 0;
    for (int j = 0; j < comm->size; j++) {
        displs[j] = (int)total;
        total += lens[j];
    }
    char *all = total < INT_MAX ? malloc((size_t)total) : NULL;
    ok = all != NULL;
    HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm->world));
    if (!ok) {
        free(lens), free(mine), free(all);
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the ranks' convolution choices");
    }
    hcnn_watch_context("comparing the ranks' convolution choices");
    HCNN_MPI(MPI_Allgatherv(mine, len, MPI_CHAR, all, lens, displs, MPI_CHAR, comm->world));
    hcnn_watch_context(NULL);
    int counts[2] = {0, 0}; /* shapes changed; shapes no lower rank's ways could replace */
    rc = HCNN_OK;
    for (int j = 0; j < comm->rank && has && !rc; j++) {
        int changed = 0;
        rc = be->adopt_conv_choices(be, all + displs[j], &changed, &counts[1]);
        counts[0] += changed;
    }
    free(lens), free(mine), free(all);
    int bad = rc != HCNN_OK;
    HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, comm->world));
    if (bad)
        return rc ? rc : HCNN_EAGREED;
    int ranks[2] = {counts[0] > 0, counts[1] > 0};
    HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_INT, MPI_SUM, comm->world));
    HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, ranks, 2, MPI_INT, MPI_SUM, comm->world));
    if (comm->rank == 0 && counts[0]) {
        printf("hcnn: convolution ways: %d rank(s) had measured other ways than a lower rank "
               "(%d shape choice(s) replaced in all); every rank now runs the lowest rank's\n",
               ranks[0], counts[0]);
        fflush(stdout);
    }
    if (comm->rank == 0 && counts[1])
        hcnn_warn("convolution ways: %d rank(s) cannot run any lower rank's ways for %d shape "
                  "choice(s) in all (another GPU model or library: no cuDNN plan) and keep "
                  "their own; their summation order differs",
                  ranks[1], counts[1]);
    return HCNN_OK;
}

void hcnn_run_list_rank(char *list, size_t cap, int *listed, int rank)
{
    const size_t o = strlen(list);
    if ((*listed)++ < 16)
        snprintf(list + o, cap - o, "%s%d", o ? ", " : "", rank);
    else if (*listed == 17)
        snprintf(list + o, cap - o, ", ...");
}

/* Every rank reads the data set from its own node's data_dir: the copies
 * must be the same (sizes, CRCs of fixed blocks: hcnn_dataset_identity).
 * Ranks whose training sets differ in size once trained on mismatched
 * shards until the stall watchdog fired.  Refused on every rank (collective;
 * HCNN_EAGREED after one message from rank 0 naming the ranks and files). */
static int check_data_identity(const hcnn_run *r)
{
    const hcnn_comm *comm = r->comm;
    if (comm->size == 1)
        return HCNN_OK;
    hcnn_data_identity mine[2];
    hcnn_dataset_identity(&r->train, &mine[0]);
    hcnn_dataset_identity(&r->test, &mine[1]);
    hcnn_data_identity *all = malloc(sizeof mine * (size_t)comm->size);
    int ok = all != NULL;
    HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm->world));
    if (!ok) {
        free(all);
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the ranks' data set identities");
    }
    hcnn_watch_context("comparing the ranks' data sets");
    HCNN_MPI(MPI_Allgather(mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE,
                           comm->world));
    hcnn_watch_context(NULL);
    int differ = 0;
    for (int j = 1; j < comm->size; j++)
        differ += memcmp(&all[0], &all[2 * (size_t)j], sizeof mine) != 0;
    if (differ && comm->rank == 0) {
        char ranks[512] = "", first[256] = "";
        for (int j = 1, listed = 0; j < comm->size; j++) {
            if (!memcmp(&all[0], &all[2 * (size_t)j], sizeof mine))
                continue;
            hcnn_run_list_rank(ranks, sizeof ranks, &listed, j);
            if (first[0])
                continue;
            const int s = memcmp(&all[0], &all[2 * (size_t)j], sizeof *all) ? 0 : 1;
            const hcnn_data_identity *a = &all[s], *b = &all[2 * (size_t)j + s];
            snprintf(first, sizeof first,
                     "rank %d's %s set has %d samples of %dx%dx%d, CRC32 images %08x labels "
                     "%08x; rank 0's %d, %08x, %08x",
                     j, s ? "test" : "training", b->n, b->c, b->h, b->w, b->images_crc,
                     b->labels_crc, a->n, a->images_crc, a->labels_crc);
        }
        hcnn_error("the ranks read different copies of data set '%s' (%s on rank 0, each rank "
                   "from its own node's data_dir '%s'): ranks %s differ from rank 0 (%s); make "
                   "every node's copy whole and the same",
                   r->cfg->dataset, r->train.source, r->cfg->data_dir, ranks, first);
    }
    free(all);
    return differ ? HCNN_EAGREED : HCNN_OK;
}

int hcnn_run_setup(hcnn_run *r, const hcnn_config *cfg, const hcnn_comm *comm, int need_train)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->comm = comm;
    int rc = run_backend(r);
    if (!rc)
        rc = check_layout_agreed(r);
    if (rc)
        return rc;
    if ((rc = hcnn_setup_threads(cfg, &r->threads, r->threads_how, sizeof r->threads_how)))
        return rc;
    /* allreduce_progress: thread on a rank that shares gradients: the
     * communication thread gets a core of its own and computes the
     * reductions there (OpenMPI's blocking allreduce polls, and sums on
     * the calling thread), the others compute; the same bits on any
     * thread count */
    if (cfg->allreduce_progress == HCNN_PROGRESS_THREAD && grad_replicas(cfg, comm) > 1 &&
        r->threads > 1) {
        r->threads--;
        r->reserved_core = 1;
        omp_set_num_threads(r->threads);
    }
    if ((rc = hcnn_blas_take_buffers(r->threads))) /* before anything else is allocated */
        return rc;
    /* in-place progress only on a real terminal: mpirun gives its ranks a
     * pseudo-terminal even when its own output goes to a file */
    r->tty = isatty(STDOUT_FILENO) && comm->size == 1 && !getenv("OMPI_COMM_WORLD_SIZE");
    read_fault_hook(r);
    rc = hcnn_dataset_open(cfg, &r->train, &r->test);
    if (!rc)
        rc = check_data_identity(r);
    if (!rc)
        rc = hcnn_net_create(&r->net, &cfg->model, r->be, cfg->path);
    if (!rc)
        rc = hcnn_net_init(&r->net, cfg->init, cfg->seed);
    if (!rc && !(r->stats = r->be->alloc(r->be, sizeof(double) * HCNN_STATS, "step statistics")))
        rc = HCNN_ENOMEM;
    if (rc)
        return rc;
    r->net.chunk_floats = (size_t)(cfg->im2col_mb * 1048576.0 / sizeof(float));
    r->net.conv_algo = cfg->conv_algo;
    /* replicas start identical whatever their seeds: rank 0's parameters */
    if (comm->size > 1) {
        rc = hcnn_bcast_floats(r->be, comm->world, r->net.params, r->net.nparams, 0);
        if (!rc)
            rc = hcnn_bcast_floats(r->be, comm->world, r->net.state, r->net.nstate, 0);
        if (rc)
            return rc;
    }
    r->strat_ready = 1; /* freed whole even when set-up fails half-way */
    rc = hcnn_strategy_init(&r->strat, cfg, comm, &r->net, need_train);
    return agree_conv_choices(r, rc); /* the scratch sized: every shape chosen */
}

int hcnn_run_average_bn_state(hcnn_run *r)
{
    size_t off, count;
    hcnn_net_state_range(&r->net, r->strat.first, r->strat.last, &off, &count);
    if (r->strat.ngroups == 1 || count == 0 || r->bn_state_agreed)
        return HCNN_OK;
    const int rc = hcnn_allreduce_sum_floats(r->be, r->strat.replicas, r->net.state + off, count);
    r->be->scale(r->be, r->net.state + off, count, 1.0f / (float)r->strat.ngroups);
    r->bn_state_agreed = rc == HCNN_OK;
    return rc;
}

int hcnn_run_evaluate(hcnn_run *r, double *loss, double *acc)
{
    const hcnn_dataset *ds = &r->test;
    int lo, hi;
    hcnn_shard(ds->n, r->strat.group, r->strat.ngroups, &lo, &hi);
    const int eb = r->strat.eval_batch;
    const size_t in_sz = (size_t)ds->c * ds->h * ds->w;
    float *x = hcnn_alloc(sizeof(float) * in_sz * eb, "evaluation batch");
    int32_t *y = hcnn_alloc(sizeof(int32_t) * eb, "evaluation labels");
    uint32_t *idx = hcnn_alloc(sizeof(uint32_t) * eb, "evaluation indices");
    if (!x || !y || !idx) {
        hcnn_free(x), hcnn_free(y), hcnn_free(idx);
        return HCNN_ENOMEM;
    }
    double sums[HCNN_STATS]; /* the loss and correct predictions, summed by the backend */
    /* not the sums of squares of the last update: the next step reads them */
    r->be->zero(r->be, r->stats, sizeof(double) * HCNN_STATS_STEP);
    int rc = HCNN_OK;
    for (int i0 = lo; i0 < hi && !rc; i0 += eb) {
        const int n = hi - i0 < eb ? hi - i0 : eb;
        for (int i = 0; i < n; i++)
            idx[i] = (uint32_t)(i0 + i);
        hcnn_batch_assemble(ds, idx, n, 0, r->cfg->seed, 0, x, y, r->threads);
        const float *bx = x;
        const int32_t *by = y;
        hcnn_strategy_stage(&r->strat, &bx, &by, n, 0); /* x is refilled for the next batch */
        rc = r->strat.ops->infer(&r->strat, bx, by, n, r->stats);
    }
    r->be->download(r->be, sums, r->stats, sizeof sums); /* the one read-back */
    hcnn_free(x), hcnn_free(y), hcnn_free(idx);
    if (!rc && r->comm->size > 1)
        HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, r->comm->world));
    *loss = ds->n ? sums[0] / ds->n : 0.0;
    *acc = ds->n ? sums[1] / ds->n : 0.0;
    return rc;
}

/* CRC32 of n floats of backend memory, continuing crc. */
static int crc_floats(const hcnn_backend *be, const float *buf, size_t n, uint32_t *crc)
{
    if (be->host_memory) {
        *crc = hcnn_crc32(*crc, buf, n * sizeof(float));
        return HCNN_OK;
    }
    float *h = hcnn_alloc(sizeof(float) * (n + 1), "checksum copy");
    if (!h)
        return HCNN_ENOMEM;
    be->download(be, h, buf, sizeof(float) * n);
    *crc = hcnn_crc32(*crc, h, n * sizeof(float));
    hcnn_free(h);
    return HCNN_OK;
}

/* After training every replica must hold the same parameters and
 * statistics; a mismatch means a bug or a non-deterministic reduction. */
int hcnn_run_check_replicas(hcnn_run *r)
{
    if (r->strat.ngroups == 1)
        return HCNN_OK;
    size_t po, pc, so, sc;
    hcnn_net_param_range(&r->net, r->strat.first, r->strat.last, &po, &pc);
    hcnn_net_state_range(&r->net, r->strat.first, r->strat.last, &so, &sc);
    uint32_t crc = 0;
    int rc = crc_floats(r->be, r->net.params + po, pc, &crc);
    if (!rc)
        rc = crc_floats(r->be, r->net.state + so, sc, &crc);
    if (rc)
        return rc;
    unsigned long mine = crc, lo = crc, hi = crc;
    HCNN_MPI(MPI_Allreduce(&mine, &lo, 1, MPI_UNSIGNED_LONG, MPI_MIN, r->strat.replicas));
    HCNN_MPI(MPI_Allreduce(&mine, &hi, 1, MPI_UNSIGNED_LONG, MPI_MAX, r->strat.replicas));
    if (lo != hi)
        return hcnn_error_code(HCNN_EMPI,
                               "replicas diverged: parameter CRC32 %08lx on this "
                               "rank, ranks range over %08lx..%08lx",
                               mine, lo, hi);
    if (run_is_root(r) && !r->quiet)
        printf("replica_check=ok replicas=%d params_crc32=%08lx\n", r->strat.ngroups, mine);
    return HCNN_OK;
}

int hcnn_evaluate(const hcnn_config *cfg, const hcnn_comm *comm, const char *checkpoint,
                  hcnn_run_opts *opts)
{
    hcnn_run r;
    int rc = hcnn_run_setup(&r, cfg, comm, 0);
    hcnn_ckpt_meta meta;
    if (!rc)
        rc = hcnn_ckpt_load(checkpoint, &r.net, NULL, &meta);
    double loss = 0.0, acc = 0.0;
    const double t0 = hcnn_now();
    if (!rc)
        rc = hcnn_run_evaluate(&r, &loss, &acc);
    if (!rc && opts)
        opts->test_loss = loss, opts->test_acc = acc;
    if (!rc && run_is_root(&r) && !(opts && opts->quiet))
        printf("checkpoint=%s epoch=%ld step=%ld test_samples=%d test_loss=%.4f test_acc=%.4f "
               "eval_time_s=%.3f\n",
               checkpoint, meta.epoch, meta.step, r.test.n, loss, acc, hcnn_now() - t0);
    /* the same loss on every rank (summed over them): all exit 1 together */
    if (!rc && !isfinite(loss)) {
        if (run_is_root(&r))
            hcnn_error("%s: the model gives a non-finite test loss (%g): its parameters are "
                       "finite (the load checks them) but overflow in the forward pass; resume "
                       "an earlier checkpoint of its run with a lower lr",
                       checkpoint, loss);
        rc = HCNN_EAGREED;
    }
    hcnn_run_free(&r);
    return rc;
}

/* ---- the per-block profile of a run (train --profile, bench) ---------------- */

int hcnn_run_profile_enable(hcnn_run *r)
{
    int rc = hcnn_profile_init(&r->prof, r->net.nids);
    r->profiling = 1;
    r->strat.scratch.ctx.prof_fwd = r->prof.fwd;
    r->strat.scratch.ctx.prof_bwd = r->prof.bwd;
    return rc;
}

/* the per-block timers off and on again (hcnn_run_profile_enable's), the samples kept */
void hcnn_run_profile_pause(hcnn_run *r)
{
    r->profiling = 0;
    r->strat.scratch.ctx.prof_fwd = r->strat.scratch.ctx.prof_bwd = NULL;
}

void hcnn_run_profile_resume(hcnn_run *r)
{
    r->profiling = 1;
    r->strat.scratch.ctx.prof_fwd = r->prof.fwd;
    r->strat.scratch.ctx.prof_bwd = r->prof.bwd;
}

void hcnn_run_profile_sample_reference(hcnn_run *r)
{
    if (!run_is_root(r))
        return;
    const hcnn_strategy *s = &r->strat;
    hcnn_profile_sample_reference(&r->prof, &r->net, &s->scratch.ctx, s->first, s->last,
                                  s->pass_samples);
}

/* Rank 0's table: its blocks, its shard (or micro-batch) size. */
double hcnn_run_profile_print(hcnn_run *r)
{
    if (!run_is_root(r))
        return 0.0;
    const hcnn_strategy *s = &r->strat;
    const double share = hcnn_profile_print(&r->prof, &r->net, &s->scratch.ctx, s->first, s->last,
                                            s->pass_samples, s->passes, stdout);
    fflush(stdout);
    return share;
}
