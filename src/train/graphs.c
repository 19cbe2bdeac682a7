/* CUDA graphs of the training step (src/train/run.h): a small GPU network
 * spends its step launching kernels from the host (LeNet-5 at batch 256 on
 * an H200: 2.27 ms a step, of which its kernels' forward and backward 0.98
 * ms); a captured step is one launch.  The work of a step is the same from
 * one step to the next but for what the key names: the loader's pinned
 * buffer the batch is uploaded from (two, alternating), the batch's shape,
 * and the learning rate of the optimiser step (unless the backend's captured
 * optimiser step reads it at each launch, sgd_replay_lr: a schedule changes
 * it every step).  A key is run directly the
 * first time it is seen (a first step may still grow buffers, which a
 * capture cannot), captured and launched the second time, replayed after.
 * Dropout masks depend on the step (a kernel argument): a network with
 * dropout is not captured, nor a run over several ranks (MPI calls sit
 * inside the step), nor a step whose per-block profile is taken (its
 * timers wait for the device).  A capture that fails turns graphs off for
 * the run, and the step runs directly: nothing of a failed capture ran. */
#include <stdio.h>
#include <string.h>

#include "hcnn/common.h"
#include "run.h"

static int has_dropout(const hcnn_layer *l, int n)
{
    for (int i = 0; i < n; i++)
        if (l[i].kind == HCNN_BLOCK_DROPOUT || has_dropout(l[i].children, l[i].nchildren))
            return 1;
    return 0;
}

void graphs_setup(hcnn_run *r)
{
    step_graphs *g = &r->graphs;
    memset(g, 0, sizeof *g);
    const char *off = NULL;
    if (!r->be->graph_begin)
        off = "off (the backend has none)";
    else if (r->cfg->cuda_graphs == HCNN_CUDA_GRAPHS_OFF)
        off = "off (cuda_graphs: off)";
    else if (r->comm->size > 1)
        off = "off (MPI calls inside the step: one rank only)";
    else if (has_dropout(r->net.layers, r->net.nlayers))
        off = "off (dropout masks change every step)";
    if (off) {
        snprintf(g->why, sizeof g->why, "%s", off);
        return;
    }
    g->on = 1;
    snprintf(g->why, sizeof g->why, "%s",
             r->be->sgd_replay_lr
                 ? "the step and the optimiser step captured once per batch buffer and shape, "
                   "then replayed (the optimiser's at each step's learning rate)"
                 : "the step and the optimiser step captured once per batch buffer, shape and "
                   "learning rate, then replayed");
}

/* any_lr: the backend's captured optimiser step reads its rate at each
 * launch (sgd_replay_lr): one graph serves every rate */
static int same_key(const step_graph *k, int segment, const void *x, const void *y, int n, int gn,
                    float lr, int any_lr)
{
    if (k->state == 0 || k->segment != segment)
        return 0;
    if (segment == 0)
        return k->x == x && k->y == y && k->n == n && k->gn == gn;
    return any_lr || memcmp(&k->lr, &lr, sizeof lr) == 0;
}

/* graph_launch, with this step's rate for the optimiser's */
static int launch(const hcnn_backend *be, int slot, int segment, float lr)
{
    if (segment == 1 && be->sgd_replay_lr)
        be->sgd_replay_lr(be, lr);
    return be->graph_launch(be, slot);
}

int graphs_run(hcnn_run *r, int segment, const void *x, const void *y, int n, int gn, float lr,
               int (*seg)(hcnn_run *r, void *arg), void *arg)
{
    step_graphs *g = &r->graphs;
    if (!g->on || r->profiling)
        return seg(r, arg);
    const hcnn_backend *be = r->be;
    g->uses++;
    int slot = -1, lru = 0;
    for (int i = 0; i < HCNN_GRAPH_SLOTS; i++) {
        if (same_key(&g->slot[i], segment, x, y, n, gn, lr, be->sgd_replay_lr != NULL))
            slot = i;
        if (g->slot[i].last_use < g->slot[lru].last_use)
            lru = i;
    }
    if (slot >= 0 && g->slot[slot].state == 2) { /* replay */
        g->slot[slot].last_use = g->uses;
        if (launch(be, slot, segment, lr)) {
            g->replays++;
            return HCNN_OK;
        }
        g->slot[slot].state = 1; /* the backend dropped it: seen, run directly */
        return seg(r, arg);
    }
    if (slot < 0) { /* first sight: run directly, remember the key */
        g->slot[lru] = (step_graph){.segment = segment, .x = x, .y = y, .n = n, .gn = gn,
                                    .lr = lr, .state = 1, .last_use = g->uses};
        return seg(r, arg);
    }
    /* second sight: capture, then launch what was captured */
    step_graph *k = &g->slot[slot];
    k->last_use = g->uses;
    int rc = be->graph_begin(be);
    if (rc == HCNN_OK) {
        const int seg_rc = seg(r, arg);
        rc = be->graph_end(be, slot);
        if (rc == HCNN_OK) {
            if (seg_rc != HCNN_OK)
                return seg_rc; /* recorded, not run: nothing to launch */
            k->state = 2;
            g->captures++;
            if (launch(be, slot, segment, lr))
                return HCNN_OK;
            k->state = 1; /* dropped at once (cannot happen: nothing grows in between) */
            return seg(r, arg);
        }
    }
    g->on = 0;
    snprintf(g->why, sizeof g->why, "off after a failed capture at step %ld", r->step);
    if (run_is_root(r)) {
        hcnn_warn("CUDA graphs: the capture of the step failed; the run goes on without them");
    }
    return seg(r, arg);
}
