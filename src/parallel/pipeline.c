/* The pipeline strategy's set-up: layout checks, the partition (explicit,
 * or balanced from measured block costs), communicators and buffers,
 * gathering the model on rank 0, the per-stage report, and its entry in
 * the strategy table (src/parallel/pipeline.h; the schedules are in
 * pipeline_step.c). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/strategy.h"
#include "pipeline.h"

/* ---- configuration checks ---------------------------------------------- */

int hcnn_pipe_check(const hcnn_config *cfg, const hcnn_comm *comm)
{
    const int root = comm->rank == 0;
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        if (root)                                                                                  \
            hcnn_error(__VA_ARGS__);                                                               \
        return HCNN_EINVAL;                                                                        \
    } while (0)
    const int S = cfg->stages, W = comm->size, nb = cfg->model.nblocks;
    if (S > nb)
        FAIL("%s: stages %d is larger than the number of blocks %d of model '%s'", cfg->path, S, nb,
             cfg->model.name);
    if (W % S != 0)
        FAIL("%s: the world size %d is not divisible by stages %d (ranks = replicas x stages)",
             cfg->path, W, S);
    const int R = W / S;
    if (cfg->microbatches > HCNN_MAX_BLOCKS)
        FAIL("%s: microbatches %d is larger than %d", cfg->path, cfg->microbatches,
             HCNN_MAX_BLOCKS);
    if (cfg->batch_size / R < cfg->microbatches)
        FAIL("%s: a micro-batch would be smaller than one sample: batch_size %d over %d "
             "replica%s gives %d samples per replica, fewer than microbatches %d",
             cfg->path, cfg->batch_size, R, R > 1 ? "s" : "", cfg->batch_size / R,
             cfg->microbatches);
    if (cfg->npartition) {
        if (cfg->npartition != S)
            FAIL("%s: partition has %d entries, expected one per stage (%d)", cfg->path,
                 cfg->npartition, S);
        if (cfg->partition[0] != 0)
            FAIL("%s: partition.0 is %d, expected 0 (stage 0 starts at the first block)", cfg->path,
                 cfg->partition[0]);
        for (int s = 1; s < S; s++)
            if (cfg->partition[s] <= cfg->partition[s - 1] || cfg->partition[s] >= nb)
                FAIL("%s: partition.%d is %d: stage starts must be increasing and below the "
                     "number of blocks %d",
                     cfg->path, s, cfg->partition[s], nb);
    }
    return HCNN_OK;
#undef FAIL
}

/* ---- partition ---------------------------------------------------------- */

/* Seconds of forward + backward of each block on one micro-batch, measured
 * on this rank (a short warm-up: two passes, the second timed).  Leaves the
 * parameters, statistics and gradients as they were. */
static int measure_costs(hcnn_net *net, int cap, double *cost)
{
    const hcnn_backend *be = net->be;
    hcnn_acts a;
    hcnn_scratch s;
    const int nl = net->nlayers;
    int rc = hcnn_acts_alloc(&a, net, 0, nl, cap);
    if (rc)
        return rc;
    rc = hcnn_scratch_alloc(&s, net, 0, nl, cap);
    const size_t in_sz = (size_t)net->in_c * net->in_h * net->in_w * cap;
    const size_t out_sz = (size_t)net->classes * cap;
    float *hx = hcnn_alloc(sizeof(float) * (in_sz + out_sz), "warm-up input");
    float *x = be->alloc(be, sizeof(float) * (in_sz + out_sz), "warm-up input");
    float *state = be->alloc(be, sizeof(float) * (net->nstate + 1), "statistics copy");
    if (rc || !hx || !x || !state) {
        hcnn_free(hx), be->free(be, x), be->free(be, state);
        hcnn_acts_free(&a);
        hcnn_scratch_free(&s);
        return rc ? rc : HCNN_ENOMEM;
    }
    hcnn_rng rng;
    hcnn_rng_seed(&rng, 1, 2);
    for (size_t i = 0; i < in_sz; i++)
        hx[i] = hcnn_rng_normal(&rng);
    for (size_t i = 0; i < out_sz; i++)
        hx[in_sz + i] = 0.01f * hcnn_rng_normal(&rng);
    be->upload(be, x, hx, sizeof(float) * (in_sz + out_sz));
    const float *dy = x + in_sz;
    be->copy(be, state, net->state, net->nstate);
    s.ctx.training = 1;
    for (int rep = 0; rep < 2 && !rc; rep++) {
        const float *in = x;
        for (int i = 0; i < nl && !rc; i++) {
            double t0 = hcnn_now();
            rc = hcnn_layer_forward(&net->layers[i], &s.ctx, in, a.y[i], a.aux[i], cap);
            cost[i] = hcnn_now() - t0;
            in = a.y[i];
        }
        const float *cur = dy;
        for (int i = nl - 1; i >= 0 && !rc; i--) {
            float *out = i > 0 ? s.g[(nl - 1 - i) & 1] : NULL;
            double t0 = hcnn_now();
            rc = hcnn_layer_backward(&net->layers[i], &s.ctx, i ? a.y[i - 1] : x, a.y[i], a.aux[i],
                                     cur, out, cap);
            cost[i] += hcnn_now() - t0;
            cur = out;
        }
    }
    be->copy(be, net->state, state, net->nstate);
    be->fill(be, net->grads, net->nparams, 0.0f);
    hcnn_free(hx), be->free(be, x), be->free(be, state);
    hcnn_acts_free(&a);
    hcnn_scratch_free(&s);
    return rc;
}

void hcnn_pipe_no_cut(const hcnn_net *net, unsigned char *no_cut)
{
    for (int i = 0; i < net->nlayers; i++)
        no_cut[i] = i > 0 && net->layers[i - 1].kind == HCNN_BLOCK_CONV &&
                    net->layers[i].kind == HCNN_BLOCK_BN;
}

/* The dynamic programme of hcnn_pipe_balance with stage starts at blocks
 * no_cut marks refused (NULL: none), 1 <= S <= n; 0 when no partition
 * keeps to them (a cost not finite). */
static int balance(const double *cost, int n, int S, const unsigned char *no_cut,
                   double *best_cells, int *cut_cells, int *bounds)
{
    /* best[k][j]: the least largest stage of blocks [0, j) in k stages;
     * cut[k][j]: where its last stage starts (tables of the call's own) */
#define best(k, j) best_cells[(size_t)(k) * (size_t)(n + 1) + (size_t)(j)]
#define cut(k, j) cut_cells[(size_t)(k) * (size_t)(n + 1) + (size_t)(j)]
    double pre[HCNN_MAX_BLOCKS + 1];
    pre[0] = 0.0;
    for (int i = 0; i < n; i++)
        pre[i + 1] = pre[i] + cost[i];
    for (int j = 1; j <= n; j++)
        best(1, j) = pre[j], cut(1, j) = 0;
    for (int k = 2; k <= S; k++)
        for (int j = k; j <= n; j++) {
            best(k, j) = INFINITY, cut(k, j) = -1;
            for (int i = k - 1; i < j; i++) {
                if ((no_cut && no_cut[i]) || cut(k - 1, i) < 0)
                    continue;
                double v = fmax(best(k - 1, i), pre[j] - pre[i]);
                if (v < best(k, j))
                    best(k, j) = v, cut(k, j) = i;
            }
        }
    if (cut(S, n) < 0)
        return 0;
    bounds[S] = n;
    for (int k = S, j = n; k >= 1; k--) {
        bounds[k - 1] = cut(k, j);
        j = cut(k, j);
    }
#undef best
#undef cut
    return 1;
}

int hcnn_pipe_balance(const double *cost, int n, int S, const unsigned char *no_cut, int *bounds)
{
    if (S < 1 || S > n || n > HCNN_MAX_BLOCKS)
        return hcnn_error_code(HCNN_EINVAL, "no partition of %d blocks into %d stages (1 to "
                                            "min(blocks, %d) stages)",
                               n, S, HCNN_MAX_BLOCKS);
    const size_t cells = (size_t)(S + 1) * (size_t)(n + 1);
    double *best_cells = malloc(sizeof(double) * cells);
    int *cut_cells = malloc(sizeof(int) * cells);
    if (!best_cells || !cut_cells) {
        free(best_cells), free(cut_cells);
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the pipeline partition's tables "
                                            "(%d stages, %d blocks)",
                               S, n);
    }
    /* With more stages than places to cut, refused places are allowed again
     * from the network's start until there are S - 1: the partition is then
     * every allowed place, the same whatever the measured costs (a cost-led
     * choice of which refusal to drop would make the bits depend on timing). */
    unsigned char relaxed[HCNN_MAX_BLOCKS];
    if (no_cut) {
        int places = 0;
        for (int i = 1; i < n; i++)
            places += !no_cut[i];
        for (int i = 0; i < n; i++) {
            relaxed[i] = no_cut[i];
            if (i > 0 && relaxed[i] && places < S - 1)
                relaxed[i] = 0, places++;
        }
        no_cut = relaxed;
    }
    const int found = balance(cost, n, S, no_cut, best_cells, cut_cells, bounds);
    free(best_cells), free(cut_cells);
    if (!found)
        return hcnn_error_code(HCNN_EINVAL, "no partition of %d blocks into %d stages by their "
                                            "costs (a cost not finite)",
                               n, S);
    return HCNN_OK;
}

/* ---- set-up ------------------------------------------------------------- */

int hcnn_pipe_init(hcnn_pipe *p, const hcnn_config *cfg, const hcnn_comm *comm, hcnn_net *net,
                   hcnn_scratch *scratch)
{
    memset(p, 0, sizeof *p);
    p->be = net->be;
    p->pipe_comm = p->stage_comm = MPI_COMM_NULL;
    p->S = cfg->stages;
    p->R = comm->size / p->S;
    p->M = cfg->microbatches;
    p->stage = comm->rank % p->S;
    p->replica = comm->rank / p->S;
    p->schedule = cfg->pipeline_schedule;
    p->classes = net->classes;
    const int shard_cap = (cfg->batch_size + p->R - 1) / p->R;
    p->micro_cap = (shard_cap + p->M - 1) / p->M;
    HCNN_MPI(MPI_Comm_split(comm->world, p->replica, p->stage, &p->pipe_comm));
    HCNN_MPI(MPI_Comm_split(comm->world, p->stage, p->replica, &p->stage_comm));
    p->prev = p->stage > 0 ? p->stage - 1 : MPI_PROC_NULL;
    p->next = p->stage < p->S - 1 ? p->stage + 1 : MPI_PROC_NULL;

    /* partition: explicit, or balanced from rank 0's measured block costs */
    const int nl = net->nlayers;
    double cost[HCNN_MAX_BLOCKS];
    int rc = HCNN_OK;
    if (comm->rank == 0)
        rc = measure_costs(net, p->micro_cap, cost);
    HCNN_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, comm->world));
    if (rc)
        return rc;
    HCNN_MPI(MPI_Bcast(cost, nl, MPI_DOUBLE, 0, comm->world));
    if (cfg->npartition) {
        for (int s = 0; s < p->S; s++)
            p->bounds[s] = cfg->partition[s];
        p->bounds[p->S] = nl;
    } else {
        unsigned char no_cut[HCNN_MAX_BLOCKS];
        hcnn_pipe_no_cut(net, no_cut);
        if ((rc = hcnn_pipe_balance(cost, nl, p->S, no_cut, p->bounds)))
            return rc;
    }
    for (int s = 0; s < p->S; s++) {
        p->est_s[s] = 0.0;
        for (int i = p->bounds[s]; i < p->bounds[s + 1]; i++)
            p->est_s[s] += cost[i] * p->M;
    }
    p->first = p->bounds[p->stage];
    p->last = p->bounds[p->stage + 1];
    p->in_sz = hcnn_layer_in_size(&net->layers[p->first]);
    p->out_sz = hcnn_layer_out_size(&net->layers[p->last - 1]);

    /* buffers: in-flight micro-batches (+1 to receive ahead) */
    const int inflight =
        p->schedule == HCNN_PIPE_GPIPE ? p->M : (p->M < p->S - p->stage ? p->M : p->S - p->stage);
    p->nslots = inflight + (p->stage > 0 ? 1 : 0);
    p->slots = hcnn_calloc(sizeof *p->slots * (size_t)p->nslots, "pipeline slots");
    if (!p->slots)
        return HCNN_ENOMEM;
    const hcnn_backend *be = net->be;
    const size_t cap = (size_t)p->micro_cap;
    for (int k = 0; k < p->nslots; k++) {
        hcnn_pipe_slot *sl = &p->slots[k];
        sl->recv = sl->send = MPI_REQUEST_NULL;
        rc = hcnn_acts_alloc(&sl->acts, net, p->first, p->last, p->micro_cap);
        if (rc)
            return rc;
        if (p->stage > 0 && !(sl->x = be->alloc(be, sizeof(float) * p->in_sz * cap, "stage input")))
            return HCNN_ENOMEM;
        float *out = p->next != MPI_PROC_NULL ? (float *)hcnn_acts_output(&sl->acts) : NULL;
        if (hcnn_mpi_buf_init(&sl->xbuf, be, sl->x, p->in_sz * cap,
                              HCNN_MPI_P2P_OR_BLOCKING, "stage input staging") ||
            hcnn_mpi_buf_init(&sl->obuf, be, out, p->out_sz * cap,
                              HCNN_MPI_P2P_OR_BLOCKING, "stage output staging"))
            return HCNN_ENOMEM;
    }
    p->slot_bytes = sizeof(float) * (p->slots[0].acts.floats + (p->stage > 0 ? p->in_sz * cap : 0));
    for (int j = 0; j < 2; j++) {
        p->dy_req[j] = p->dx_req[j] = MPI_REQUEST_NULL;
        if (p->next != MPI_PROC_NULL &&
            !(p->dy[j] = be->alloc(be, sizeof(float) * p->out_sz * cap, "stage output gradient")))
            return HCNN_ENOMEM;
        if (p->prev != MPI_PROC_NULL &&
            !(p->dx[j] = be->alloc(be, sizeof(float) * p->in_sz * cap, "stage input gradient")))
            return HCNN_ENOMEM;
        if (hcnn_mpi_buf_init(&p->dybuf[j], be, p->dy[j], p->out_sz * cap,
                              HCNN_MPI_P2P_OR_BLOCKING, "gradient staging") ||
            hcnn_mpi_buf_init(&p->dxbuf[j], be, p->dx[j], p->in_sz * cap,
                              HCNN_MPI_P2P_OR_BLOCKING, "gradient staging"))
            return HCNN_ENOMEM;
    }
    if (p->next == MPI_PROC_NULL &&
        !(p->dlogits = be->alloc(be, sizeof(float) * (size_t)p->classes * cap, "logit gradients")))
        return HCNN_ENOMEM;
    rc = hcnn_scratch_alloc(scratch, net, p->first, p->last, p->micro_cap);
    if (rc)
        return rc;
    /* the plan (pipeline_step.c): a begin, the first receives, 3 entries a
     * forward, 6 a backward, an end, with room to spare */
    p->plan_cap = 4 + p->nslots + 10 * p->M;
    p->plan = hcnn_calloc(sizeof *p->plan * (size_t)p->plan_cap, "pipeline step plan");
    p->slot_micro = hcnn_calloc(sizeof *p->slot_micro * (size_t)p->nslots, "pipeline slot plan");
    if (!p->plan || !p->slot_micro)
        return HCNN_ENOMEM;
    p->plan_n = -1;
    if (p->R > 1) {
        p->sync_ready = 1; /* freed whole even when set-up fails half-way */
        rc = hcnn_grad_sync_init(&p->sync, p->stage_comm, net, p->first, p->last, cfg->bucket_mb,
                                 cfg->allreduce_progress, cfg->optimizer_sharding);
        if (rc)
            return rc;
    }
    scratch->ctx.poll = hcnn_pipe_poll;
    scratch->ctx.poll_arg = p;
    return HCNN_OK;
}

void hcnn_pipe_free(hcnn_pipe *p)
{
    const hcnn_backend *be = p->be;
    if (p->sync_ready)
        hcnn_grad_sync_free(&p->sync);
    for (int k = 0; p->slots && k < p->nslots; k++) {
        hcnn_pipe_slot *sl = &p->slots[k];
        hcnn_acts_free(&sl->acts);
        hcnn_mpi_buf_free(&sl->xbuf);
        hcnn_mpi_buf_free(&sl->obuf);
        be->free(be, sl->x);
    }
    hcnn_free(p->slots);
    hcnn_free(p->plan);
    hcnn_free(p->slot_micro);
    for (int j = 0; be && j < 2; j++) {
        hcnn_mpi_buf_free(&p->dybuf[j]);
        hcnn_mpi_buf_free(&p->dxbuf[j]);
        be->free(be, p->dy[j]);
        be->free(be, p->dx[j]);
    }
    if (be)
        be->free(be, p->dlogits);
    if (p->pipe_comm != MPI_COMM_NULL)
        HCNN_MPI(MPI_Comm_free(&p->pipe_comm));
    if (p->stage_comm != MPI_COMM_NULL)
        HCNN_MPI(MPI_Comm_free(&p->stage_comm));
    memset(p, 0, sizeof *p);
}

/* ---- gathering, reporting ---------------------------------------------------- */

int hcnn_pipe_gather(hcnn_pipe *p, hcnn_net *net, float *momentum)
{
    if (p->replica != 0)
        return HCNN_OK;
    for (int s = 1; s < p->S; s++) {
        if (p->stage != 0 && p->stage != s)
            continue;
        size_t po, pc, so, sc;
        hcnn_net_param_range(net, p->bounds[s], p->bounds[s + 1], &po, &pc);
        hcnn_net_state_range(net, p->bounds[s], p->bounds[s + 1], &so, &sc);
        float *bufs[3] = {net->params + po, momentum ? momentum + po : NULL, net->state + so};
        size_t counts[3] = {pc, momentum ? pc : 0, sc};
        for (int b = 0; b < 3; b++) {
            if (counts[b] == 0)
                continue;
            const int rc =
                p->stage == 0
                    ? hcnn_recv_floats(p->be, p->pipe_comm, bufs[b], counts[b], s, 100 + b)
                    : hcnn_send_floats(p->be, p->pipe_comm, bufs[b], counts[b], 0, 100 + b);
            if (rc)
                return rc;
        }
    }
    return HCNN_OK;
}

void hcnn_pipe_print_layout(const hcnn_pipe *p, const hcnn_net *net, int explicit, FILE *out)
{
    fprintf(out,
            "hcnn: pipeline: %d stage%s x %d replica%s, %d micro-batches of <= %d samples, "
            "schedule %s, partition [",
            p->S, p->S > 1 ? "s" : "", p->R, p->R > 1 ? "s" : "", p->M, p->micro_cap,
            hcnn_pipe_schedule_name(p->schedule));
    for (int s = 0; s < p->S; s++)
        fprintf(out, "%s%d", s ? ", " : "", p->bounds[s]);
    fprintf(out, "] (%s)\n", explicit ? "explicit" : "balanced from a measured warm-up");
    for (int s = 0; s < p->S; s++)
        fprintf(out, "hcnn: stage %d: blocks %d-%d (%s .. %s), estimated %.4f s per step\n", s,
                p->bounds[s], p->bounds[s + 1] - 1, net->layers[p->bounds[s]].name,
                net->layers[p->bounds[s + 1] - 1].name, p->est_s[s]);
}

/* The share of a stage's time spent waiting is taken on each rank against
 * its own epoch time, then averaged over the stage's replicas: each rank's
 * waits lie inside its own epoch, so the share cannot exceed 1.  (Divided
 * by rank 0's epoch time, as before, it read 1.213 in a LeNet 8x4 run:
 * ranks do not start and end their epochs at the same instant.) */
int hcnn_pipe_report(hcnn_pipe *p, MPI_Comm world, int rank, double epoch_s, FILE *out)
{
    enum { K = 5 };
    double v[K * HCNN_MAX_BLOCKS] = {0}, sum[K * HCNN_MAX_BLOCKS];
    v[K * p->stage] = p->st.compute_s / p->R;
    v[K * p->stage + 1] = p->st.bubble_s / p->R;
    v[K * p->stage + 2] = (double)p->st.peak_micro / p->R;
    v[K * p->stage + 3] = (double)p->st.peak_micro * (double)p->slot_bytes / p->R;
    v[K * p->stage + 4] = (epoch_s > 0 ? p->st.bubble_s / epoch_s : 0.0) / p->R;
    HCNN_MPI(MPI_Reduce(v, sum, K * p->S, MPI_DOUBLE, MPI_SUM, 0, world));
    memset(&p->st, 0, sizeof p->st);
    if (rank != 0)
        return HCNN_OK;
    double bubble = 0.0;
    for (int s = 0; s < p->S; s++) {
        const double c = sum[K * s], b = sum[K * s + 1], peak = sum[K * s + 2];
        const double share = sum[K * s + 4];
        bubble += share / p->S;
        fprintf(out,
                "stage=%d blocks=%d-%d compute_s=%.3f bubble_s=%.3f bubble_share=%.3f "
                "peak_stored_microbatches=%.0f peak_activation_mb=%.2f\n",
                s, p->bounds[s], p->bounds[s + 1] - 1, c, b, share, peak,
                sum[K * s + 3] / 1048576.0);
    }
    fprintf(out, "pipeline_bubble_share=%.3f theoretical=%.3f\n", bubble,
            (double)(p->S - 1) / (p->M + p->S - 1));
    fflush(out);
    return HCNN_OK;
}

/* ---- the strategy ------------------------------------------------------------ */

static int pipe_check(const hcnn_config *cfg, const hcnn_comm *comm)
{
    return hcnn_pipe_check(cfg, comm);
}

static int pipe_init(hcnn_strategy *s, int need_train)
{
    hcnn_pipe *p = hcnn_calloc(sizeof *p, "pipeline strategy");
    if (!p)
        return HCNN_ENOMEM;
    s->impl = p;
    const int rc = hcnn_pipe_init(p, s->cfg, s->comm, s->net, &s->scratch);
    if (rc)
        return rc;
    s->first = p->first, s->last = p->last;
    s->group = p->replica, s->ngroups = p->R;
    s->replicas = p->stage_comm;
    const int shard = (s->cfg->batch_size + p->R - 1) / p->R;
    s->eval_batch = s->cfg->eval_batch_size > 0 ? s->cfg->eval_batch_size : shard;
    s->pass_samples = p->micro_cap, s->passes = p->M;
    /* samples are counted where their loss is: the last stage */
    s->counts_loss = p->next == MPI_PROC_NULL;
    s->sync = p->sync_ready ? &p->sync : NULL;
    s->cuts_at_comm = 1; /* every transfer of the step (pipeline_step.c) */
    p->bubble_total = &s->bubble_s;
    if (need_train && s->sync)
        s->allreduce_s = hcnn_grad_sync_calibrate(s->sync, 3);
    return HCNN_OK;
}

static int pipe_step(hcnn_strategy *s, const float *x, const int32_t *y, int n, int gn,
                     double *stats)
{
    hcnn_pipe *p = s->impl;
    p->cut = s->cut;
    return hcnn_pipe_step(p, s->net, &s->scratch, x, y, n, gn, stats);
}

static int pipe_infer(hcnn_strategy *s, const float *x, const int32_t *y, int n, double *stats)
{
    return hcnn_pipe_infer(s->impl, s->net, &s->scratch, x, y, n, stats);
}

static int pipe_gather(hcnn_strategy *s, float *momentum)
{
    if (s->sync && s->sync->sharded && momentum) { /* replica 0 sends it whole */
        const int rc = hcnn_grad_sync_gather_momentum(s->sync, momentum);
        if (rc)
            return rc;
    }
    return hcnn_pipe_gather(s->impl, s->net, momentum);
}

static void pipe_report_header(const hcnn_strategy *s, FILE *out)
{
    hcnn_pipe_print_layout(s->impl, s->net, s->cfg->npartition != 0, out);
    if (s->sync)
        hcnn_grad_sync_print(s->sync, s->cfg->bucket_mb, s->allreduce_s, out);
    else if (s->cfg->optimizer_sharding != HCNN_SHARDING_NONE)
        fprintf(out, "hcnn: optimizer_sharding: %s: one replica of each stage, nothing to "
                     "shard\n",
                hcnn_sharding_name(s->cfg->optimizer_sharding));
}

static int pipe_report_epoch(hcnn_strategy *s, double epoch_s, FILE *out)
{
    const int rc = hcnn_pipe_report(s->impl, s->comm->world, s->comm->rank, epoch_s, out);
    s->bubble_s = 0.0;
    return rc;
}

static void pipe_free(hcnn_strategy *s)
{
    if (s->impl) {
        hcnn_pipe_free(s->impl);
        hcnn_free(s->impl);
    }
    hcnn_scratch_free(&s->scratch);
}

const hcnn_strategy_ops hcnn_strategy_pipeline = {
    .name = "pipeline",
    .check = pipe_check,
    .init = pipe_init,
    .step = pipe_step,
    .infer = pipe_infer,
    .gather = pipe_gather,
    .report_header = pipe_report_header,
    .report_epoch = pipe_report_epoch,
    .free = pipe_free,
};
