/* CUDA graphs of the training step (src/train/run.h): a small GPU network
 * spends its step launching kernels from the host (LeNet-5 at batch 256 on
 * an H200: 2.27 ms a step, of which its kernels' forward and backward 0.98
 * ms); a captured step is one launch.  The work of a step is the same from
 * one step to the next but for what the key names: the loader's pinned
 * buffer the batch is uploaded from (two, alternating), the batch's shape,
 * and the learning rate of the optimiser step (unless the backend's captured
 * optimiser step reads it at each launch, sgd_replay_lr: a schedule changes
 * it every step).  A key is run directly the first time it is seen (a first
 * step may still grow buffers, which a capture cannot), captured and
 * launched the second time, replayed after.
 *
 * Over several ranks the step's MPI calls cannot be captured: the strategy
 * makes each of them a communication point (include/hcnn/comm.h; the
 * gradient buckets' starts and their wait, grad_sync.h; a pipeline stage's
 * transfers, pipeline_step.c), and the step is a program: a graph, the
 * host function of the point, the next graph, and so on.  The first sight
 * counts the points; the capture ends a graph at each, launches it and
 * runs the function; a replay launches the graphs and runs the functions
 * between them, and nothing else of the step's host code.  So a bucket's
 * allreduce runs while the device runs the next graph, as it runs while
 * the next kernels run in a direct step, and the host's launches between
 * points become one.  (At each point the device waits: the host copies
 * the bucket out, then launches the next graph; that gap is there in a
 * direct step too.)
 *
 * Not captured: the step of a network with dropout (its masks depend on
 * the step, a kernel argument), the step of a strategy whose MPI calls are
 * not all communication points (strategy.h: cuts_at_comm), a step whose
 * per-block profile is taken (its timers wait for the device).  The
 * optimiser step is captured in the first two.  A capture that fails
 * before any of it ran (up to its first point included) turns graphs off
 * for the run, and the step runs directly; one that fails after a point's
 * function has run ends the run (part of the step has run and cannot be
 * redone). */
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

static int graph_point(hcnn_comm_cut *cut, hcnn_comm_fn fn, void *arg, int i);

void hcnn_graphs_setup(hcnn_run *r)
{
    step_graphs *g = &r->graphs;
    memset(g, 0, sizeof *g);
    memset(g->slot_owner, -1, sizeof g->slot_owner);
    g->cut.point = graph_point;
    g->be = r->be;
    const char *off = NULL;
    if (!r->be->graph_begin)
        off = "off (the backend has none)";
    else if (r->cfg->cuda_graphs == HCNN_CUDA_GRAPHS_OFF)
        off = "off (cuda_graphs: off)";
    if (off) {
        snprintf(g->why, sizeof g->why, "%s", off);
        return;
    }
    g->on = 1;
    const char *lr = r->be->sgd_replay_lr ? "at each step's learning rate"
                                          : "one graph per learning rate";
    char step_off[96] = "";
    if (r->comm->size > 1 && !r->strat.cuts_at_comm)
        snprintf(step_off, sizeof step_off,
                 "strategy %s: its MPI calls are not cut into communication points",
                 r->strat.ops->name);
    else if (has_dropout(r->net.layers, r->net.nlayers))
        snprintf(step_off, sizeof step_off, "dropout masks change every step");
    if (step_off[0] && r->strat.sync && r->strat.sync->sharded) {
        /* the sharded optimiser step's all-gathers are points of a cut step */
        g->on = 0;
        snprintf(g->why, sizeof g->why, "off (%s; optimizer_sharding: ranks)", step_off);
        return;
    }
    if (step_off[0]) {
        snprintf(g->why, sizeof g->why,
                 "the optimiser step captured and replayed (%s); the step runs directly (%s)", lr,
                 step_off);
        return;
    }
    g->step_on = 1;
    char cuts[96] = "";
    if (r->comm->size > 1) {
        r->strat.cut = &g->cut;
        snprintf(cuts, sizeof cuts, "; the step cut at its MPI calls");
        if (r->strat.sync)
            snprintf(cuts, sizeof cuts, "; the step cut at its MPI calls (%d gradient bucket%s)",
                     r->strat.sync->nbuckets, r->strat.sync->nbuckets == 1 ? "" : "s");
    }
    snprintf(g->why, sizeof g->why,
             "the step and the optimiser step captured once per batch buffer and shape, then "
             "replayed (the optimiser's %s)%s",
             lr, cuts);
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

/* Program q's graph slots given up (the backend's graphs stay until a
 * capture replaces them). */
static void release_slots(step_graphs *g, int q)
{
    for (int s = 0; s < HCNN_GRAPH_SLOTS; s++)
        if (g->slot_owner[s] == q)
            g->slot_owner[s] = -1;
}

/* The last backend slot is no program's: a capture that failed is closed
 * into it, so that no program's graph is replaced by a partial one. */
#define SCRATCH_SLOT (HCNN_GRAPH_SLOTS - 1)

/* A free backend slot for program q: when none is, the least recently
 * used other captured program gives up its graphs (run again directly,
 * captured again at its next sight).  -1: none. */
static int take_slot(step_graphs *g, int q)
{
    for (;;) {
        for (int s = 0; s < SCRATCH_SLOT; s++)
            if (g->slot_owner[s] < 0) {
                g->slot_owner[s] = (signed char)q;
                return s;
            }
        int victim = -1;
        for (int v = 0; v < HCNN_GRAPH_PROGRAMS; v++)
            if (v != q && g->prog[v].state == 2 &&
                (victim < 0 || g->prog[v].last_use < g->prog[victim].last_use))
                victim = v;
        if (victim < 0)
            return -1;
        release_slots(g, victim);
        g->prog[victim].state = 1;
    }
}

/* The capture under way ends as the program's next piece, which is
 * launched at once; fn (NULL at the end) runs after it in every replay. */
static int end_piece(step_graphs *g, hcnn_comm_fn fn, void *arg, int i)
{
    step_graph *p = g->recording;
    const int q = (int)(p - g->prog);
    const int k = g->pieces;
    /* a slot is found while the program holds fewer than all of them; its
     * pieces were counted at first sight, at most HCNN_GRAPH_PIECES */
    const int slot = take_slot(g, q);
    g->open = 0;
    int rc = g->be->graph_end(g->be, slot >= 0 ? slot : SCRATCH_SLOT);
    if (rc == HCNN_OK && k >= HCNN_GRAPH_PIECES)
        rc = hcnn_error_code(HCNN_EIO, "CUDA graphs: the step has more communication points "
                                       "than its first run counted: set cuda_graphs: off");
    else if (rc == HCNN_OK && slot < 0)
        rc = hcnn_error_code(HCNN_EIO, "CUDA graphs: no graph slot is free for piece %d of the "
                                       "step: set cuda_graphs: off",
                             k + 1);
    if (rc == HCNN_OK && !g->be->graph_launch(g->be, slot))
        rc = hcnn_error_code(HCNN_EIO, "CUDA graphs: piece %d of the step, just captured, "
                                       "cannot be launched",
                             k + 1);
    if (rc != HCNN_OK)
        return rc;
    p->slot[k] = slot;
    p->fn[k] = fn;
    p->fn_arg[k] = arg;
    p->fn_i[k] = i;
    g->pieces++;
    return HCNN_OK;
}

/* hcnn_comm_cut's point (comm.h) */
static int graph_point(hcnn_comm_cut *cut, hcnn_comm_fn fn, void *arg, int i)
{
    step_graphs *g = (step_graphs *)cut;
    if (!g->recording || !g->capturing) {
        if (g->recording)
            g->recording->npieces++; /* first sight: counted */
        return fn(arg, i);
    }
    const int first = g->pieces == 0;
    int rc = end_piece(g, fn, arg, i);
    if (rc != HCNN_OK) {
        g->failed_unrun = first; /* nothing of the step has run */
        return rc;
    }
    rc = fn(arg, i);
    if (rc == HCNN_OK && (rc = g->be->graph_begin(g->be)) != HCNN_OK)
        hcnn_error("CUDA graphs: the capture of the step's piece %d cannot begin: set "
                   "cuda_graphs: off",
                   g->pieces + 1);
    g->open = rc == HCNN_OK;
    return rc;
}

/* The program's graphs launched in order, each point's function after
 * its graph (this step's rate set for the optimiser's).  1: launched, 0:
 * the backend dropped the graphs (memory they use moved): nothing ran,
 * -code: an error. */
static int replay(step_graphs *g, step_graph *p, float lr)
{
    const hcnn_backend *be = g->be;
    for (int k = 0; k < p->npieces; k++) {
        if (p->segment == 1 && k == 0 && be->sgd_replay_lr)
            be->sgd_replay_lr(be, lr);
        if (!be->graph_launch(be, p->slot[k])) {
            if (k == 0)
                return 0;
            /* the backend drops graphs only when a buffer grows, which
             * nothing between the pieces does */
            return -hcnn_error_code(HCNN_EIO, "CUDA graphs: graph %d of the step's %d was "
                                              "dropped during its replay",
                                    k + 1, p->npieces);
        }
        if (p->fn[k]) {
            const int rc = p->fn[k](p->fn_arg[k], p->fn_i[k]);
            if (rc != HCNN_OK)
                return -rc;
        }
    }
    return 1;
}

static void graphs_off(hcnn_run *r)
{
    r->graphs.on = 0;
    snprintf(r->graphs.why, sizeof r->graphs.why, "off after a failed capture at step %ld",
             r->step);
    r->strat.cut = NULL; /* the strategy's next step reads it */
    if (run_is_root(r))
        hcnn_warn("CUDA graphs: the capture of the step failed; the run goes on without them");
}

/* Second sight: captured piece by piece, each piece launched. */
static int capture(hcnn_run *r, step_graph *p, int (*seg)(hcnn_run *r, void *arg), void *arg)
{
    step_graphs *g = &r->graphs;
    const int q = (int)(p - g->prog);
    release_slots(g, q);
    if (g->be->graph_begin(g->be) != HCNN_OK) {
        graphs_off(r);
        return seg(r, arg);
    }
    g->recording = p;
    g->capturing = 1;
    g->open = 1;
    g->pieces = 0;
    g->failed_unrun = 0;
    int rc = seg(r, arg);
    g->capturing = 0;
    if (rc == HCNN_OK) { /* the last piece; a one-piece step ran nothing before it */
        g->failed_unrun = g->pieces == 0;
        rc = end_piece(g, NULL, NULL, 0);
    }
    g->recording = NULL;
    if (rc != HCNN_OK) { /* the error said why */
        if (g->open) { /* recorded, not run: dropped */
            g->open = 0;
            (void)g->be->graph_end(g->be, SCRATCH_SLOT);
        }
        release_slots(g, q);
        p->state = 0;
        if (!g->failed_unrun)
            return rc; /* the step failed, or part of it ran: not redone */
        g->failed_unrun = 0;
        graphs_off(r); /* nothing of it ran: run it again, directly */
        return seg(r, arg);
    }
    p->npieces = g->pieces;
    p->state = 2;
    g->captures++;
    g->graphs += p->npieces;
    return HCNN_OK;
}

int hcnn_graphs_run(hcnn_run *r, int segment, const void *x, const void *y, int n, int gn, float lr,
                    int (*seg)(hcnn_run *r, void *arg), void *arg)
{
    step_graphs *g = &r->graphs;
    if (!g->on || r->profiling || (segment == 0 && !g->step_on))
        return seg(r, arg);
    g->uses++;
    step_graph *p = NULL;
    int lru = 0;
    for (int q = 0; q < HCNN_GRAPH_PROGRAMS; q++) {
        step_graph *k = &g->prog[q];
        if (same_key(k, segment, x, y, n, gn, lr, g->be->sgd_replay_lr != NULL))
            p = k;
        if (k->last_use < g->prog[lru].last_use)
            lru = q;
    }
    if (p && p->state == 3) {
        p->last_use = g->uses;
        return seg(r, arg);
    }
    if (p && p->state == 2) { /* replay */
        p->last_use = g->uses;
        const int got = replay(g, p, lr);
        if (got > 0) {
            g->replays++;
            return HCNN_OK;
        }
        if (got < 0)
            return -got;
        release_slots(g, (int)(p - g->prog));
        p->state = 1; /* dropped: run directly, captured at the next sight */
        return seg(r, arg);
    }
    if (!p) { /* first sight: run directly, its communication points counted */
        release_slots(g, lru);
        p = &g->prog[lru];
        *p = (step_graph){.segment = segment, .x = x, .y = y, .n = n, .gn = gn, .lr = lr,
                          .state = 1, .last_use = g->uses};
        g->recording = p;
        g->capturing = 0;
        const int rc = seg(r, arg);
        g->recording = NULL;
        p->npieces++;
        if (rc != HCNN_OK)
            p->state = 0;
        else if (p->npieces > HCNN_GRAPH_PIECES)
            p->state = 3;
        return rc;
    }
    p->last_use = g->uses;
    return capture(r, p, seg, arg);
}
