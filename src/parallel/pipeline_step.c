/* The pipeline's schedules (GPipe and 1F1B) for a training step, as a plan
 * of device work and transfers, and inference through the stages
 * (src/parallel/pipeline.h).  Transfers are posted ahead of use and
 * progressed by MPI_Test while the stage computes; every receive is
 * uploaded (staged backends) where it is waited for. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "hcnn/common.h"
#include "pipeline.h"
#include "../core/trace.h"

/* ---- one step ------------------------------------------------------------- */

static void test_request(MPI_Request *req)
{
    int flag;
    if (*req != MPI_REQUEST_NULL)
        HCNN_MPI(MPI_Test(req, &flag, MPI_STATUS_IGNORE));
}

/* Drive outstanding transfers (and the replicas' allreduce) during compute. */
void hcnn_pipe_poll(void *arg)
{
    hcnn_pipe *p = arg;
    if (p->cut) /* no MPI inside a capture; a replay has no polls (comm.h) */
        return;
    for (int k = 0; k < p->nslots; k++) {
        test_request(&p->slots[k].recv);
        test_request(&p->slots[k].send);
    }
    for (int j = 0; j < 2; j++) {
        test_request(&p->dy_req[j]);
        test_request(&p->dx_req[j]);
    }
    if (p->sync_ready)
        hcnn_grad_sync_poll(&p->sync);
}

/* MPI_Wait, counted as pipeline bubble.  Its range is pushed at every wait
 * of the plan, a transfer the polls already completed included (an empty
 * range, as "allreduce wait" is): a step's ranges are then the same
 * whatever the timing, so two steps' timelines line up in Nsight. */
static void wait_bubble(hcnn_pipe *p, MPI_Request *req)
{
    hcnn_trace_push("pipeline wait");
    if (*req == MPI_REQUEST_NULL) {
        hcnn_trace_pop();
        return;
    }
    const double t0 = hcnn_now();
    hcnn_watch_context("pipeline stage %d: activations or gradients from or to rank %d / %d",
                       p->stage, p->prev, p->next);
    HCNN_MPI(MPI_Wait(req, MPI_STATUS_IGNORE));
    hcnn_trace_pop();
    hcnn_watch_context(NULL);
    const double dt = hcnn_now() - t0;
    p->st.bubble_s += dt;
    if (p->bubble_total)
        *p->bubble_total += dt;
}

/* ---- the step's plan ---------------------------------------------------------
 * A step is a plan, decided once for a shard of n samples by the schedule
 * and the slots' use: device work (a micro-batch's forward, its loss, its
 * backward) and the host actions between (transfers posted, waited for,
 * uploaded).  The step runs the device work and, at each run of
 * consecutive actions, one communication point (hcnn_comm_point, comm.h)
 * whose function runs those actions from the plan alone.  So in a step
 * captured in CUDA graphs each stretch of device work is a graph, and a
 * replay, which runs only the points' functions, runs the same transfers
 * (the first point's function carries n and plans again if it changed). */
enum {
    /* device work */
    OP_FORWARD,   /* micro-batch m on slot */
    OP_LOSS,      /* last stage: m's loss and its gradient */
    OP_BACKWARD,  /* m on slot, into dx[m & 1] unless the first stage */
    /* host actions */
    OP_BEGIN,     /* the step's counts */
    OP_POST_X,    /* receive m's input into slot */
    OP_POST_DY,   /* receive m's output gradient */
    OP_WAIT_X,    /* slot's input arrived: uploaded */
    OP_SEND_Y,    /* slot's output sent on */
    OP_WAIT_DY,   /* m's output gradient arrived: uploaded; the next one posted */
    OP_WAIT_DX,   /* the input-gradient buffer m's backward writes is free */
    OP_SEND_DX,   /* m's input gradient sent back */
    OP_WAIT_SEND, /* slot's output has left */
    OP_END        /* the input gradients' sends done */
};

static int is_action(const hcnn_pipe_op *op) { return op->kind >= OP_BEGIN; }

static int add_op(hcnn_pipe *p, int kind, int m, int slot)
{
    if (p->nplan >= p->plan_cap)
        return hcnn_error_code(HCNN_EINVAL, "stage %d: the step's plan exceeds its %d entries",
                               p->stage, p->plan_cap);
    p->plan[p->nplan++] = (hcnn_pipe_op){.kind = kind, .m = m, .slot = slot};
    return HCNN_OK;
}

/* the slot holding micro-batch m (-1: a free one), or -1 */
static int slot_holding(const hcnn_pipe *p, int m)
{
    for (int k = 0; k < p->nslots; k++)
        if (p->slot_micro[k] == m)
            return k;
    return -1;
}

/* Plan the receive of the next input into a free slot, if there is one. */
static int plan_post_input(hcnn_pipe *p, int *next_input, int *posted)
{
    *posted = 0;
    const int k = slot_holding(p, -1);
    if (k < 0 || *next_input >= p->plan_M)
        return HCNN_OK;
    p->slot_micro[k] = *next_input;
    *posted = 1;
    return add_op(p, OP_POST_X, (*next_input)++, k);
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        const int rc_ = (call);                                                                    \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

static int plan_step(hcnn_pipe *p, int n)
{
    if (n == p->plan_n)
        return HCNN_OK;
    p->plan_n = -1;
    p->nplan = 0;
    const int M = n < p->M ? n : p->M;
    p->plan_M = M;
    for (int m = 0; m <= M; m++)
        p->lo[m] = (int)((long)n * m / (M ? M : 1));
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
    const int first = p->prev == MPI_PROC_NULL, last = p->next == MPI_PROC_NULL;
    for (int k = 0; k < p->nslots; k++)
        p->slot_micro[k] = -1;
    int next_input = 0, posted = 1, inflight = 0;
    p->plan_peak = 0;
    TRY(add_op(p, OP_BEGIN, 0, -1));
    while (!first && posted)
        TRY(plan_post_input(p, &next_input, &posted));
    if (!last && M > 0)
        TRY(add_op(p, OP_POST_DY, 0, -1));
    for (int k = 0; k < nops; k++) {
        const int fwd = ops[k] >= 0, m = fwd ? ops[k] : -1 - ops[k];
        /* a later stage's input has its slot since its receive was posted */
        const int slot = slot_holding(p, fwd && first ? -1 : m);
        if (slot < 0)
            return hcnn_error_code(HCNN_EINVAL, "stage %d: no activation slot for micro-batch %d",
                                   p->stage, m);
        if (fwd) {
            if (!first)
                TRY(add_op(p, OP_WAIT_X, m, slot));
            p->slot_micro[slot] = m;
            TRY(add_op(p, OP_FORWARD, m, slot));
            if (++inflight > p->plan_peak)
                p->plan_peak = inflight;
            if (!last)
                TRY(add_op(p, OP_SEND_Y, m, slot));
            continue;
        }
        TRY(add_op(p, last ? OP_LOSS : OP_WAIT_DY, m, slot));
        if (!first)
            TRY(add_op(p, OP_WAIT_DX, m, slot));
        TRY(add_op(p, OP_BACKWARD, m, slot));
        p->plan[p->nplan - 1].last = k == nops - 1;
        if (!first)
            TRY(add_op(p, OP_SEND_DX, m, slot));
        if (!last) /* the slot is free once its output has left */
            TRY(add_op(p, OP_WAIT_SEND, m, slot));
        p->slot_micro[slot] = -1;
        inflight--;
        if (!first)
            TRY(plan_post_input(p, &next_input, &posted));
    }
    TRY(add_op(p, OP_END, 0, -1));
    p->plan_n = n;
    return HCNN_OK;
}

/* One host action of the plan. */
static void run_action(hcnn_pipe *p, const hcnn_pipe_op *op)
{
    const int m = op->m;
    const size_t nm = (size_t)(p->lo[m + 1] - p->lo[m]);
    hcnn_pipe_slot *sl = op->slot >= 0 ? &p->slots[op->slot] : NULL;
    switch (op->kind) {
    case OP_BEGIN:
        if (p->sync_ready)
            hcnn_grad_sync_begin(&p->sync);
        if (p->plan_peak > p->st.peak_micro)
            p->st.peak_micro = p->plan_peak;
        break;
    case OP_POST_X:
        HCNN_MPI(MPI_Irecv(hcnn_mpi_recv_ptr(&sl->xbuf, 0), (int)(p->in_sz * nm), MPI_FLOAT,
                           p->prev, 2 * m, p->pipe_comm, &sl->recv));
        break;
    case OP_POST_DY:
        HCNN_MPI(MPI_Irecv(hcnn_mpi_recv_ptr(&p->dybuf[m & 1], 0), (int)(p->out_sz * nm),
                           MPI_FLOAT, p->next, 2 * m + 1, p->pipe_comm, &p->dy_req[m & 1]));
        break;
    case OP_WAIT_X:
        wait_bubble(p, &sl->recv);
        hcnn_mpi_recv_done(&sl->xbuf, 0, p->in_sz * nm);
        break;
    case OP_SEND_Y:
        HCNN_MPI(MPI_Isend(hcnn_mpi_send_ptr(&sl->obuf, 0, p->out_sz * nm),
                           (int)(p->out_sz * nm), MPI_FLOAT, p->next, 2 * m, p->pipe_comm,
                           &sl->send));
        break;
    case OP_WAIT_DY:
        wait_bubble(p, &p->dy_req[m & 1]);
        hcnn_mpi_recv_done(&p->dybuf[m & 1], 0, p->out_sz * nm);
        if (m + 1 < p->plan_M) {
            const hcnn_pipe_op next = {.kind = OP_POST_DY, .m = m + 1, .slot = -1};
            run_action(p, &next);
        }
        break;
    case OP_WAIT_DX:
        wait_bubble(p, &p->dx_req[m & 1]);
        break;
    case OP_SEND_DX:
        HCNN_MPI(MPI_Isend(hcnn_mpi_send_ptr(&p->dxbuf[m & 1], 0, p->in_sz * nm),
                           (int)(p->in_sz * nm), MPI_FLOAT, p->prev, 2 * m + 1, p->pipe_comm,
                           &p->dx_req[m & 1]));
        break;
    case OP_WAIT_SEND:
        wait_bubble(p, &sl->send);
        break;
    case OP_END:
        for (int j = 0; j < 2; j++)
            wait_bubble(p, &p->dx_req[j]);
        break;
    }
}

/* The communication point's function (hcnn_comm_fn): the plan's actions
 * from entry i up to the next device work; i < 0: the step's first, for a
 * shard of -1 - i samples. */
static int run_actions(void *arg, int i)
{
    hcnn_pipe *p = arg;
    if (i < 0) {
        TRY(plan_step(p, -1 - i));
        i = 0;
    }
    /* one range for the run of transfers (posts, sends, waits, uploads) */
    hcnn_trace_push("pipeline transfers");
    for (; i < p->nplan && is_action(&p->plan[i]); i++)
        run_action(p, &p->plan[i]);
    hcnn_trace_pop();
    return HCNN_OK;
}

/* One entry of device work. */
static int run_device(hcnn_pipe *p, hcnn_net *net, hcnn_scratch *s, const hcnn_pipe_op *op,
                      const float *x, const int32_t *y, int gn, double *stats, uint64_t base)
{
    const int m = op->m, nm = p->lo[m + 1] - p->lo[m];
    hcnn_pipe_slot *sl = &p->slots[op->slot];
    const float *in = p->prev == MPI_PROC_NULL ? x + (size_t)p->lo[m] * p->in_sz : sl->x;
    s->ctx.first_sample = base + (uint64_t)p->lo[m];
    const double t0 = hcnn_now();
    int rc = HCNN_OK;
    if (op->kind == OP_FORWARD) {
        rc = hcnn_net_forward(net, &s->ctx, &sl->acts, in, nm);
    } else if (op->kind == OP_LOSS) {
        net->be->softmax_xent(net->be, hcnn_acts_output(&sl->acts), y + p->lo[m], nm, p->classes,
                              1.0f / (float)gn, p->dlogits, stats);
    } else {
        const float *dy = p->next != MPI_PROC_NULL ? p->dy[m & 1] : p->dlogits;
        float *dx = p->prev != MPI_PROC_NULL ? p->dx[m & 1] : NULL;
        rc = hcnn_net_backward(net, s, &sl->acts, in, dy, dx, nm,
                               op->last && p->sync_ready ? hcnn_grad_sync_block_done : NULL,
                               &p->sync);
    }
    p->st.compute_s += hcnn_now() - t0;
    return rc;
}

int hcnn_pipe_step(hcnn_pipe *p, hcnn_net *net, hcnn_scratch *s, const float *x, const int32_t *y,
                   int n, int gn, double *stats)
{
    if (p->sync_ready)
        p->sync.cut = p->cut;
    TRY(plan_step(p, n));
    const uint64_t base = s->ctx.first_sample;
    int rc = HCNN_OK;
    for (int e = 0; e < p->nplan && !rc; e++) {
        if (!is_action(&p->plan[e])) {
            rc = run_device(p, net, s, &p->plan[e], x, y, gn, stats, base);
            continue;
        }
        /* the actions up to the next device work: one point (entry 0, the
         * begin, carries the shard's size for a replay) */
        rc = hcnn_comm_point(p->cut, run_actions, p, e == 0 ? -1 - n : e);
        while (e + 1 < p->nplan && is_action(&p->plan[e + 1]))
            e++;
    }
    s->ctx.first_sample = base;
    if (!rc && p->sync_ready)
        rc = hcnn_grad_sync_finish(&p->sync);
    return rc;
}

/* ---- inference and gathering ------------------------------------------------ */

int hcnn_pipe_infer(hcnn_pipe *p, hcnn_net *net, hcnn_scratch *s, const float *x, const int32_t *y,
                    int n, double *stats)
{
    hcnn_ctx ctx = s->ctx;
    ctx.training = 0;
    ctx.weights_key = 0; /* not the weights of the last step's calls */
    ctx.poll = NULL;
    hcnn_pipe_slot *sl = &p->slots[0];
    for (int i0 = 0; i0 < n; i0 += p->micro_cap) {
        const int nm = n - i0 < p->micro_cap ? n - i0 : p->micro_cap;
        const float *in = x + (size_t)i0 * p->in_sz;
        if (p->prev != MPI_PROC_NULL) {
            hcnn_watch_context("pipeline stage %d (evaluation): receive from rank %d", p->stage,
                               p->prev);
            HCNN_MPI(MPI_Recv(hcnn_mpi_recv_ptr(&sl->xbuf, 0), (int)(p->in_sz * (size_t)nm),
                              MPI_FLOAT, p->prev, 0, p->pipe_comm, MPI_STATUS_IGNORE));
            hcnn_mpi_recv_done(&sl->xbuf, 0, p->in_sz * (size_t)nm);
            in = sl->x;
        }
        int rc = hcnn_net_forward(net, &ctx, &sl->acts, in, nm);
        if (rc)
            return rc;
        if (p->next != MPI_PROC_NULL) {
            HCNN_MPI(MPI_Send(hcnn_mpi_send_ptr(&sl->obuf, 0, p->out_sz * (size_t)nm),
                              (int)(p->out_sz * (size_t)nm), MPI_FLOAT, p->next, 0, p->pipe_comm));
        } else {
            net->be->softmax_xent(net->be, hcnn_acts_output(&sl->acts), y + i0, nm, p->classes,
                                  0.0f, NULL, stats);
        }
    }
    return HCNN_OK;
}
