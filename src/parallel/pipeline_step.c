/* The pipeline's schedules (GPipe and 1F1B) for a training step, and
 * inference through the stages (src/parallel/pipeline.h).  Transfers are
 * posted ahead of use and progressed by MPI_Test while the stage computes;
 * every receive is uploaded (staged backends) where it is waited for. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "hcnn/common.h"
#include "pipeline.h"

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

/* MPI_Wait, counted as pipeline bubble. */
static void wait_bubble(hcnn_pipe *p, MPI_Request *req)
{
    if (*req == MPI_REQUEST_NULL)
        return;
    const double t0 = hcnn_now();
    hcnn_watch_context("pipeline stage %d: activations or gradients from or to rank %d / %d",
                       p->stage, p->prev, p->next);
    HCNN_MPI(MPI_Wait(req, MPI_STATUS_IGNORE));
    hcnn_watch_context(NULL);
    p->st.bubble_s += hcnn_now() - t0;
}

static hcnn_pipe_slot *slot_of(hcnn_pipe *p, int micro)
{
    for (int k = 0; k < p->nslots; k++)
        if (p->slots[k].micro == micro)
            return &p->slots[k];
    return NULL;
}

static hcnn_pipe_slot *free_slot(hcnn_pipe *p) { return slot_of(p, -1); }

/* Post the receive of micro-batch m's input if a slot is free; 1 if posted. */
static int post_input(hcnn_pipe *p, int m, int lo, int hi)
{
    hcnn_pipe_slot *sl = free_slot(p);
    if (!sl)
        return 0;
    sl->micro = m;
    sl->forwarded = 0;
    HCNN_MPI(MPI_Irecv(hcnn_mpi_recv_ptr(&sl->xbuf, 0), (int)(p->in_sz * (size_t)(hi - lo)),
                       MPI_FLOAT, p->prev, 2 * m, p->pipe_comm, &sl->recv));
    return 1;
}

int hcnn_pipe_step(hcnn_pipe *p, hcnn_net *net, hcnn_scratch *s, const float *x, const int32_t *y,
                   int n, int gn, double *stats)
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
    int rc = HCNN_OK, inflight = 0, next_input = 0, bk = 0;
    if (p->sync_ready)
        hcnn_grad_sync_begin(&p->sync);
    if (p->prev != MPI_PROC_NULL)
        while (next_input < M && post_input(p, next_input, lo[next_input], lo[next_input + 1]))
            next_input++;
    if (p->next != MPI_PROC_NULL && M > 0)
        HCNN_MPI(MPI_Irecv(hcnn_mpi_recv_ptr(&p->dybuf[0], 0),
                           (int)(p->out_sz * (size_t)(lo[1] - lo[0])), MPI_FLOAT, p->next, 1,
                           p->pipe_comm, &p->dy_req[0]));
    for (int k = 0; k < nops; k++) {
        const int fwd = ops[k] >= 0, m = fwd ? ops[k] : -1 - ops[k];
        const int nm = lo[m + 1] - lo[m];
        hcnn_pipe_slot *sl = p->prev != MPI_PROC_NULL || !fwd ? slot_of(p, m) : free_slot(p);
        if (!sl)
            return hcnn_error_code(HCNN_EINVAL, "stage %d: no activation slot for micro-batch %d",
                                   p->stage, m);
        const float *in = p->prev == MPI_PROC_NULL ? x + (size_t)lo[m] * p->in_sz : sl->x;
        if (fwd) {
            wait_bubble(p, &sl->recv);
            if (p->prev != MPI_PROC_NULL)
                hcnn_mpi_recv_done(&sl->xbuf, 0, p->in_sz * (size_t)nm);
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
            if (p->next != MPI_PROC_NULL)
                HCNN_MPI(MPI_Isend(hcnn_mpi_send_ptr(&sl->obuf, 0, p->out_sz * (size_t)nm),
                                   (int)(p->out_sz * (size_t)nm), MPI_FLOAT, p->next, 2 * m,
                                   p->pipe_comm, &sl->send));
            continue;
        }
        /* backward of micro-batch m */
        const float *dy;
        if (p->next != MPI_PROC_NULL) {
            wait_bubble(p, &p->dy_req[bk & 1]);
            hcnn_mpi_recv_done(&p->dybuf[bk & 1], 0, p->out_sz * (size_t)nm);
            dy = p->dy[bk & 1];
            if (m + 1 < M)
                HCNN_MPI(MPI_Irecv(hcnn_mpi_recv_ptr(&p->dybuf[(bk + 1) & 1], 0),
                                   (int)(p->out_sz * (size_t)(lo[m + 2] - lo[m + 1])), MPI_FLOAT,
                                   p->next, 2 * (m + 1) + 1, p->pipe_comm,
                                   &p->dy_req[(bk + 1) & 1]));
        } else {
            const double t0 = hcnn_now();
            net->be->softmax_xent(net->be, hcnn_acts_output(&sl->acts), y + lo[m], nm,
                                  p->classes, 1.0f / (float)gn, p->dlogits, stats);
            p->st.compute_s += hcnn_now() - t0;
            dy = p->dlogits;
        }
        float *dx = NULL;
        if (p->prev != MPI_PROC_NULL) {
            wait_bubble(p, &p->dx_req[bk & 1]);
            dx = p->dx[bk & 1];
        }
        const int last_op = k == nops - 1;
        s->ctx.first_sample = base + (uint64_t)lo[m];
        const double t0 = hcnn_now();
        rc = hcnn_net_backward(net, s, &sl->acts, in, dy, dx, nm,
                               last_op && p->sync_ready ? hcnn_grad_sync_block_done : NULL,
                               &p->sync);
        p->st.compute_s += hcnn_now() - t0;
        if (rc)
            return rc;
        if (dx)
            HCNN_MPI(MPI_Isend(hcnn_mpi_send_ptr(&p->dxbuf[bk & 1], 0, p->in_sz * (size_t)nm),
                               (int)(p->in_sz * (size_t)nm), MPI_FLOAT, p->prev, 2 * m + 1,
                               p->pipe_comm, &p->dx_req[bk & 1]));
        bk++;
        /* the slot is free once its output has left */
        wait_bubble(p, &sl->send);
        sl->micro = -1;
        sl->forwarded = 0;
        inflight--;
        if (p->prev != MPI_PROC_NULL && next_input < M)
            next_input += post_input(p, next_input, lo[next_input], lo[next_input + 1]);
    }
    for (int j = 0; j < 2; j++)
        wait_bubble(p, &p->dx_req[j]);
    s->ctx.first_sample = base;
    if (p->sync_ready)
        return hcnn_grad_sync_finish(&p->sync);
    return HCNN_OK;
}

/* ---- inference and gathering ------------------------------------------------ */

int hcnn_pipe_infer(hcnn_pipe *p, hcnn_net *net, hcnn_scratch *s, const float *x, const int32_t *y,
                    int n, double *stats)
{
    hcnn_ctx ctx = s->ctx;
    ctx.training = 0;
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
