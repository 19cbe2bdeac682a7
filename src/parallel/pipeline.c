/* Pipeline model parallelism: partition, schedules, point-to-point
 * transfers (see include/hcnn/pipeline.h). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/pipeline.h"

/* ---- configuration checks ---------------------------------------------- */

int hcnn_pipe_check(const hcnn_config *cfg, const hcnn_comm *comm)
{
    const int root = comm->rank == 0;
#define FAIL(...)                                                                              \
    do {                                                                                       \
        if (root)                                                                              \
            hcnn_error(__VA_ARGS__);                                                           \
        return HCNN_EINVAL;                                                                    \
    } while (0)
    if (cfg->strategy != HCNN_STRATEGY_PIPELINE) {
        if (cfg->stages != 1 || cfg->microbatches != 1 || cfg->npartition != 0)
            FAIL("%s: stages, microbatches and partition apply to strategy 'pipeline' (strategy "
                 "is '%s')",
                 cfg->path, hcnn_strategy_name(cfg->strategy));
        return HCNN_OK;
    }
    const int S = cfg->stages, W = comm->size, nb = cfg->model.nblocks;
    if (S > nb)
        FAIL("%s: stages %d is larger than the number of blocks %d of model '%s'", cfg->path, S,
             nb, cfg->model.name);
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
            FAIL("%s: partition.0 is %d, expected 0 (stage 0 starts at the first block)",
                 cfg->path, cfg->partition[0]);
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
    hcnn_acts a;
    hcnn_scratch s;
    const int nl = net->nlayers;
    int rc = hcnn_acts_alloc(&a, net, 0, nl, cap);
    if (rc)
        return rc;
    rc = hcnn_scratch_alloc(&s, net, 0, nl, cap);
    const size_t in_sz = (size_t)net->in_c * net->in_h * net->in_w * cap;
    const size_t out_sz = (size_t)net->classes * cap;
    float *x = hcnn_alloc(sizeof(float) * in_sz, "warm-up input");
    float *dy = hcnn_alloc(sizeof(float) * out_sz, "warm-up gradient");
    float *state = hcnn_alloc(sizeof(float) * (net->nstate + 1), "statistics copy");
    if (rc || !x || !dy || !state) {
        hcnn_free(x), hcnn_free(dy), hcnn_free(state);
        hcnn_acts_free(&a);
        hcnn_scratch_free(&s);
        return rc ? rc : HCNN_ENOMEM;
    }
    hcnn_rng rng;
    hcnn_rng_seed(&rng, 1, 2);
    for (size_t i = 0; i < in_sz; i++)
        x[i] = hcnn_rng_normal(&rng);
    for (size_t i = 0; i < out_sz; i++)
        dy[i] = 0.01f * hcnn_rng_normal(&rng);
    memcpy(state, net->state, sizeof(float) * net->nstate);
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
    memcpy(net->state, state, sizeof(float) * net->nstate);
    net->be->fill(net->grads, net->nparams, 0.0f);
    hcnn_free(x), hcnn_free(dy), hcnn_free(state);
    hcnn_acts_free(&a);
    hcnn_scratch_free(&s);
    return rc;
}

/* Contiguous split of n costs into S non-empty groups minimising the
 * largest group (dynamic programming, O(S n^2)). */
static void balance(const double *cost, int n, int S, int *bounds)
{
    double pre[HCNN_MAX_BLOCKS + 1];
    static double best[HCNN_MAX_BLOCKS + 1][HCNN_MAX_BLOCKS + 1];
    static int cut[HCNN_MAX_BLOCKS + 1][HCNN_MAX_BLOCKS + 1];
    pre[0] = 0.0;
    for (int i = 0; i < n; i++)
        pre[i + 1] = pre[i] + cost[i];
    for (int j = 1; j <= n; j++)
        best[1][j] = pre[j], cut[1][j] = 0;
    for (int k = 2; k <= S; k++)
        for (int j = k; j <= n; j++) {
            best[k][j] = INFINITY;
            for (int i = k - 1; i < j; i++) {
                double v = fmax(best[k - 1][i], pre[j] - pre[i]);
                if (v < best[k][j])
                    best[k][j] = v, cut[k][j] = i;
            }
        }
    bounds[S] = n;
    for (int k = S, j = n; k >= 1; k--) {
        bounds[k - 1] = cut[k][j];
        j = cut[k][j];
    }
}

/* ---- set-up ------------------------------------------------------------- */

static void pipe_poll(void *arg);

int hcnn_pipe_init(hcnn_pipe *p, const hcnn_config *cfg, const hcnn_comm *comm, hcnn_net *net,
                   hcnn_scratch *scratch)
{
    memset(p, 0, sizeof *p);
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
    if (MPI_Comm_split(comm->world, p->replica, p->stage, &p->pipe_comm) != MPI_SUCCESS ||
        MPI_Comm_split(comm->world, p->stage, p->replica, &p->stage_comm) != MPI_SUCCESS)
        return hcnn_error_code(HCNN_EMPI, "MPI_Comm_split for the pipeline failed");
    p->prev = p->stage > 0 ? p->stage - 1 : MPI_PROC_NULL;
    p->next = p->stage < p->S - 1 ? p->stage + 1 : MPI_PROC_NULL;

    /* partition: explicit, or balanced from rank 0's measured block costs */
    const int nl = net->nlayers;
    double cost[HCNN_MAX_BLOCKS];
    int rc = HCNN_OK;
    if (comm->rank == 0)
        rc = measure_costs(net, p->micro_cap, cost);
    MPI_Bcast(&rc, 1, MPI_INT, 0, comm->world);
    if (rc)
        return rc;
    MPI_Bcast(cost, nl, MPI_DOUBLE, 0, comm->world);
    if (cfg->npartition) {
        for (int s = 0; s < p->S; s++)
            p->bounds[s] = cfg->partition[s];
        p->bounds[p->S] = nl;
    } else {
        balance(cost, nl, p->S, p->bounds);
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
    const int inflight = p->schedule == HCNN_PIPE_GPIPE ? p->M
                                                         : (p->M < p->S - p->stage ? p->M
                                                                                   : p->S - p->stage);
    p->nslots = inflight + (p->stage > 0 ? 1 : 0);
    p->slots = hcnn_calloc(sizeof *p->slots * (size_t)p->nslots, "pipeline slots");
    if (!p->slots)
        return HCNN_ENOMEM;
    const size_t cap = (size_t)p->micro_cap;
    for (int k = 0; k < p->nslots; k++) {
        hcnn_pipe_slot *sl = &p->slots[k];
        sl->micro = -1;
        sl->recv = sl->send = MPI_REQUEST_NULL;
        rc = hcnn_acts_alloc(&sl->acts, net, p->first, p->last, p->micro_cap);
        if (rc)
            return rc;
        if (p->stage > 0 && !(sl->x = hcnn_alloc(sizeof(float) * p->in_sz * cap, "stage input")))
            return HCNN_ENOMEM;
    }
    p->slot_bytes = sizeof(float) * (p->slots[0].acts.floats + (p->stage > 0 ? p->in_sz * cap : 0));
    for (int j = 0; j < 2; j++) {
        p->dy_req[j] = p->dx_req[j] = MPI_REQUEST_NULL;
        if (p->next != MPI_PROC_NULL &&
            !(p->dy[j] = hcnn_alloc(sizeof(float) * p->out_sz * cap, "stage output gradient")))
            return HCNN_ENOMEM;
        if (p->prev != MPI_PROC_NULL &&
            !(p->dx[j] = hcnn_alloc(sizeof(float) * p->in_sz * cap, "stage input gradient")))
            return HCNN_ENOMEM;
    }
    if (p->next == MPI_PROC_NULL &&
        !(p->dlogits = hcnn_alloc(sizeof(float) * (size_t)p->classes * cap, "logit gradients")))
        return HCNN_ENOMEM;
    rc = hcnn_scratch_alloc(scratch, net, p->first, p->last, p->micro_cap);
    if (rc)
        return rc;
    if (p->R > 1) {
        rc = hcnn_grad_sync_init(&p->sync, p->stage_comm, net, p->first, p->last, cfg->bucket_mb,
                                 cfg->allreduce_progress);
        if (rc)
            return rc;
        p->sync_ready = 1;
    }
    scratch->ctx.poll = pipe_poll;
    scratch->ctx.poll_arg = p;
    return HCNN_OK;
}

void hcnn_pipe_free(hcnn_pipe *p)
{
    if (p->sync_ready)
        hcnn_grad_sync_free(&p->sync);
    for (int k = 0; p->slots && k < p->nslots; k++) {
        hcnn_acts_free(&p->slots[k].acts);
        hcnn_free(p->slots[k].x);
    }
    hcnn_free(p->slots);
    for (int j = 0; j < 2; j++) {
        hcnn_free(p->dy[j]);
        hcnn_free(p->dx[j]);
    }
    hcnn_free(p->dlogits);
    if (p->pipe_comm != MPI_COMM_NULL)
        MPI_Comm_free(&p->pipe_comm);
    if (p->stage_comm != MPI_COMM_NULL)
        MPI_Comm_free(&p->stage_comm);
    memset(p, 0, sizeof *p);
}

/* ---- one step ------------------------------------------------------------- */

/* Drive outstanding transfers (and the replicas' allreduce) during compute. */
static void pipe_poll(void *arg)
{
    hcnn_pipe *p = arg;
    int flag;
    for (int k = 0; k < p->nslots; k++) {
        if (p->slots[k].recv != MPI_REQUEST_NULL)
            MPI_Test(&p->slots[k].recv, &flag, MPI_STATUS_IGNORE);
        if (p->slots[k].send != MPI_REQUEST_NULL)
            MPI_Test(&p->slots[k].send, &flag, MPI_STATUS_IGNORE);
    }
    for (int j = 0; j < 2; j++) {
        if (p->dy_req[j] != MPI_REQUEST_NULL)
            MPI_Test(&p->dy_req[j], &flag, MPI_STATUS_IGNORE);
        if (p->dx_req[j] != MPI_REQUEST_NULL)
            MPI_Test(&p->dx_req[j], &flag, MPI_STATUS_IGNORE);
    }
    if (p->sync_ready)
        hcnn_grad_sync_poll(&p->sync);
}

/* MPI_Wait, counted as pipeline bubble. */
static int wait_bubble(hcnn_pipe *p, MPI_Request *req, const char *what)
{
    if (*req == MPI_REQUEST_NULL)
        return HCNN_OK;
    const double t0 = hcnn_now();
    int rc = MPI_Wait(req, MPI_STATUS_IGNORE);
    p->st.bubble_s += hcnn_now() - t0;
    if (rc != MPI_SUCCESS)
        return hcnn_error_code(HCNN_EMPI, "stage %d: waiting for %s failed", p->stage, what);
    return HCNN_OK;
}

static hcnn_pipe_slot *slot_of(hcnn_pipe *p, int micro)
{
    for (int k = 0; k < p->nslots; k++)
        if (p->slots[k].micro == micro)
            return &p->slots[k];
    return NULL;
}

static hcnn_pipe_slot *free_slot(hcnn_pipe *p)
{
    return slot_of(p, -1);
}

/* Post the receive of micro-batch m's input if a slot is free. */
static int post_input(hcnn_pipe *p, int m, int lo, int hi)
{
    hcnn_pipe_slot *sl = free_slot(p);
    if (!sl)
        return 0;
    sl->micro = m;
    sl->forwarded = 0;
    if (MPI_Irecv(sl->x, (int)(p->in_sz * (size_t)(hi - lo)), MPI_FLOAT, p->prev, 2 * m,
                  p->pipe_comm, &sl->recv) != MPI_SUCCESS) {
        hcnn_error_code(HCNN_EMPI, "stage %d: MPI_Irecv of micro-batch %d failed", p->stage, m);
        return -1;
    }
    return 1;
}

static int on_block_done(void *arg, int block)
{
    hcnn_pipe *p = arg;
    return hcnn_grad_sync_block_done(&p->sync, block);
}

int hcnn_pipe_step(hcnn_pipe *p, hcnn_net *net, hcnn_scratch *s, const float *x,
                   const int32_t *y, int n, int gn, double *loss, int *correct)
{
    const int M = n < p->M ? n : p->M;
    const uint64_t base = s->ctx.first_sample;
    int lo[HCNN_MAX_BLOCKS + 1];
    /* micro-batch m is samples [lo[m], lo[m+1]) of the shard */
    for (int m = 0; m <= M; m++)
        lo[m] = (int)((long)n * m / (M ? M : 1));
    /* the schedule: op k is micro-batch ops[k] >= 0 forward, -1-m backward */
    int ops[2 * HCNN_MAX_BLOCKS + 2], nops = 0;
    if (p->schedule == HCNN_PIPE_GPIPE) {
        for (int m = 0; m < M; m++)
            ops[nops++] = m;
        for (int m = 0; m < M; m++)
            ops[nops++] = -1 - m;
    } else {
        int warm = p->S - p->stage - 1;
        if (warm > M)
            warm = M;
        int f = 0, b = 0;
        for (; f < warm; f++)
            ops[nops++] = f;
        for (; f < M; f++, b++) {
            ops[nops++] = f;
            ops[nops++] = -1 - b;
        }
        for (; b < M; b++)
            ops[nops++] = -1 - b;
    }
    *loss = 0.0;
    *correct = 0;
    int rc = HCNN_OK, inflight = 0, next_input = 0, bk = 0;
    if (p->sync_ready)
        hcnn_grad_sync_begin(&p->sync);
    if (p->prev != MPI_PROC_NULL)
        while (next_input < M && (rc = post_input(p, next_input, lo[next_input], lo[next_input + 1])) == 1)
            next_input++;
    if (rc < 0)
        return HCNN_EMPI;
    if (p->next != MPI_PROC_NULL && M > 0 &&
        MPI_Irecv(p->dy[0], (int)(p->out_sz * (size_t)(lo[1] - lo[0])), MPI_FLOAT, p->next, 1,
                  p->pipe_comm, &p->dy_req[0]) != MPI_SUCCESS)
        return hcnn_error_code(HCNN_EMPI, "stage %d: MPI_Irecv of a gradient failed", p->stage);
    for (int k = 0; k < nops; k++) {
        const int fwd = ops[k] >= 0, m = fwd ? ops[k] : -1 - ops[k];
        const int nm = lo[m + 1] - lo[m];
        hcnn_pipe_slot *sl = p->prev != MPI_PROC_NULL || !fwd ? slot_of(p, m) : free_slot(p);
        if (!sl)
            return hcnn_error_code(HCNN_EINVAL, "stage %d: no activation slot for micro-batch %d",
                                   p->stage, m);
        const float *in = p->prev == MPI_PROC_NULL ? x + (size_t)lo[m] * p->in_sz : sl->x;
        if (fwd) {
            if ((rc = wait_bubble(p, &sl->recv, "activations")))
                return rc;
            sl->micro = m;
            s->ctx.first_sample = base + (uint64_t)lo[m];
            const double t0 = hcnn_now();
            rc = hcnn_net_forward(net, &s->ctx, &sl->acts, in, nm);
            p->st.compute_s += hcnn_now() - t0;
            if (rc)
                return rc;
            sl->forwarded = 1;
            if (++inflight > p->st.peak_micro)
                p->st.peak_micro = inflight;
            if (p->next != MPI_PROC_NULL &&
                MPI_Isend(hcnn_acts_output(&sl->acts), (int)(p->out_sz * (size_t)nm), MPI_FLOAT,
                          p->next, 2 * m, p->pipe_comm, &sl->send) != MPI_SUCCESS)
                return hcnn_error_code(HCNN_EMPI, "stage %d: MPI_Isend failed", p->stage);
            continue;
        }
        /* backward of micro-batch m */
        const float *dy;
        if (p->next != MPI_PROC_NULL) {
            if ((rc = wait_bubble(p, &p->dy_req[bk & 1], "gradients")))
                return rc;
            dy = p->dy[bk & 1];
            if (m + 1 < M &&
                MPI_Irecv(p->dy[(bk + 1) & 1], (int)(p->out_sz * (size_t)(lo[m + 2] - lo[m + 1])),
                          MPI_FLOAT, p->next, 2 * (m + 1) + 1, p->pipe_comm,
                          &p->dy_req[(bk + 1) & 1]) != MPI_SUCCESS)
                return hcnn_error_code(HCNN_EMPI, "stage %d: MPI_Irecv failed", p->stage);
        } else {
            const double t0 = hcnn_now();
            int ok = 0;
            *loss += net->be->softmax_xent(hcnn_acts_output(&sl->acts), y + lo[m], nm,
                                           p->classes, 1.0f / (float)gn, p->dlogits, &ok);
            *correct += ok;
            p->st.compute_s += hcnn_now() - t0;
            dy = p->dlogits;
        }
        float *dx = NULL;
        if (p->prev != MPI_PROC_NULL) {
            if ((rc = wait_bubble(p, &p->dx_req[bk & 1], "a gradient send")))
                return rc;
            dx = p->dx[bk & 1];
        }
        const int last_op = k == nops - 1;
        s->ctx.first_sample = base + (uint64_t)lo[m];
        const double t0 = hcnn_now();
        rc = hcnn_net_backward(net, s, &sl->acts, in, dy, dx, nm,
                               last_op && p->sync_ready ? on_block_done : NULL, p);
        p->st.compute_s += hcnn_now() - t0;
        if (rc)
            return rc;
        if (dx && MPI_Isend(dx, (int)(p->in_sz * (size_t)nm), MPI_FLOAT, p->prev, 2 * m + 1,
                            p->pipe_comm, &p->dx_req[bk & 1]) != MPI_SUCCESS)
            return hcnn_error_code(HCNN_EMPI, "stage %d: MPI_Isend failed", p->stage);
        bk++;
        /* the slot is free once its output has left */
        if ((rc = wait_bubble(p, &sl->send, "an activation send")))
            return rc;
        sl->micro = -1;
        sl->forwarded = 0;
        inflight--;
        if (p->prev != MPI_PROC_NULL && next_input < M) {
            int posted = post_input(p, next_input, lo[next_input], lo[next_input + 1]);
            if (posted < 0)
                return HCNN_EMPI;
            next_input += posted;
        }
    }
    for (int j = 0; j < 2; j++)
        if ((rc = wait_bubble(p, &p->dx_req[j], "a gradient send")))
            return rc;
    s->ctx.first_sample = base;
    if (p->sync_ready)
        return hcnn_grad_sync_finish(&p->sync);
    return HCNN_OK;
}

/* ---- inference and gathering ------------------------------------------------ */

int hcnn_pipe_infer(hcnn_pipe *p, hcnn_net *net, hcnn_scratch *s, const float *x,
                    const int32_t *y, int n, double *loss, int *correct)
{
    hcnn_ctx ctx = s->ctx;
    ctx.training = 0;
    ctx.poll = NULL;
    hcnn_pipe_slot *sl = &p->slots[0];
    *loss = 0.0;
    *correct = 0;
    for (int i0 = 0; i0 < n; i0 += p->micro_cap) {
        const int nm = n - i0 < p->micro_cap ? n - i0 : p->micro_cap;
        const float *in = x + (size_t)i0 * p->in_sz;
        if (p->prev != MPI_PROC_NULL) {
            if (MPI_Recv(sl->x, (int)(p->in_sz * (size_t)nm), MPI_FLOAT, p->prev, 0, p->pipe_comm,
                         MPI_STATUS_IGNORE) != MPI_SUCCESS)
                return hcnn_error_code(HCNN_EMPI, "stage %d: MPI_Recv failed", p->stage);
            in = sl->x;
        }
        int rc = hcnn_net_forward(net, &ctx, &sl->acts, in, nm);
        if (rc)
            return rc;
        if (p->next != MPI_PROC_NULL) {
            if (MPI_Send(hcnn_acts_output(&sl->acts), (int)(p->out_sz * (size_t)nm), MPI_FLOAT,
                         p->next, 0, p->pipe_comm) != MPI_SUCCESS)
                return hcnn_error_code(HCNN_EMPI, "stage %d: MPI_Send failed", p->stage);
        } else {
            int ok = 0;
            *loss += net->be->softmax_xent(hcnn_acts_output(&sl->acts), y + i0, nm, p->classes,
                                           0.0f, NULL, &ok);
            *correct += ok;
        }
    }
    return HCNN_OK;
}

int hcnn_pipe_gather(hcnn_pipe *p, const hcnn_comm *comm, hcnn_net *net, float *momentum)
{
    (void)comm;
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
            int rc = p->stage == 0
                         ? MPI_Recv(bufs[b], (int)counts[b], MPI_FLOAT, s, 100 + b, p->pipe_comm,
                                    MPI_STATUS_IGNORE)
                         : MPI_Send(bufs[b], (int)counts[b], MPI_FLOAT, 0, 100 + b, p->pipe_comm);
            if (rc != MPI_SUCCESS)
                return hcnn_error_code(HCNN_EMPI, "gathering stage %d's model failed", s);
        }
    }
    return HCNN_OK;
}
