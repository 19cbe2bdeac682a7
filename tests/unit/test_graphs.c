/* Unit test of src/train/graphs.c: includes the private header
 * src/train/run.h (hcnn_run, hcnn_graphs_setup, hcnn_graphs_run).
 *
 * The CUDA graphs' programs (src/train/graphs.c) against a backend that
 * records: whatever graphs.c does (count, capture, replay, evict, drop,
 * fail), each step must run the same device work and the same host
 * functions in the same order as the step run directly, and no host
 * function may run inside a capture.  The fake device keeps one timeline:
 * work items as they would run (queued directly, or as a launched graph's
 * copy of what its capture recorded) and the host functions at the moment
 * they run (a function waits for the device, so the order is the one the
 * device sees).  Runs on any build: no GPU, no CUDA. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "../../src/train/run.h"
#include "hcnn/common.h"

#define MAX_ITEMS 1024  /* of one step */
#define GRAPH_ITEMS 8   /* of one graph */
#define FN_ID 100000 /* a host function in the timeline: FN_ID + its argument */

typedef struct fake_device {
    int capturing;
    int cap[GRAPH_ITEMS], ncap;
    int graph[HCNN_GRAPH_SLOTS][GRAPH_ITEMS], ngraph[HCNN_GRAPH_SLOTS];
    int live[HCNN_GRAPH_SLOTS];    /* the slot holds a graph */
    int timeline[8192], nt;
    int fn_in_capture;             /* host functions run inside a capture */
    int begin_fails;               /* the next begin fails */
    int ends_until_fail;           /* > 0: the end that brings it to 0 fails */
    long begins, launches;
} fake_device;

static fake_device *dev_of(const hcnn_backend *be) { return be->state; }

static void timeline_add(fake_device *d, int item)
{
    if (d->nt < (int)(sizeof d->timeline / sizeof *d->timeline))
        d->timeline[d->nt++] = item;
}

static int fake_begin(const hcnn_backend *be)
{
    fake_device *d = dev_of(be);
    d->begins++;
    if (d->begin_fails) {
        d->begin_fails = 0;
        return HCNN_EIO;
    }
    d->capturing = 1;
    d->ncap = 0;
    return HCNN_OK;
}

static int fake_end(const hcnn_backend *be, int slot)
{
    fake_device *d = dev_of(be);
    assert_true(d->capturing);
    assert_true(slot >= 0 && slot < HCNN_GRAPH_SLOTS);
    d->capturing = 0;
    d->live[slot] = 0;
    if (d->ends_until_fail > 0 && --d->ends_until_fail == 0)
        return HCNN_EIO; /* nothing of the capture ran, the slot is empty */
    memcpy(d->graph[slot], d->cap, sizeof(int) * (size_t)d->ncap);
    d->ngraph[slot] = d->ncap;
    d->live[slot] = 1;
    return HCNN_OK;
}

static int fake_launch(const hcnn_backend *be, int slot)
{
    fake_device *d = dev_of(be);
    assert_false(d->capturing);
    if (!d->live[slot])
        return 0;
    d->launches++;
    for (int k = 0; k < d->ngraph[slot]; k++)
        timeline_add(d, d->graph[slot][k]);
    return 1;
}

/* device work: recorded in a capture, else run */
static void queue(fake_device *d, int item)
{
    if (d->capturing) {
        assert_true(d->ncap < GRAPH_ITEMS);
        d->cap[d->ncap++] = item;
    } else
        timeline_add(d, item);
}

/* the backend dropping its graphs (a buffer it grew) */
static void drop_all(fake_device *d) { memset(d->live, 0, sizeof d->live); }

typedef struct fixture {
    fake_device dev;
    hcnn_backend be;
    hcnn_config cfg;
    hcnn_comm comm;
    hcnn_grad_sync gs;
    hcnn_run r;
} fixture;

static void setup(fixture *f, int ranks)
{
    memset(f, 0, sizeof *f);
    f->be.name = "fake";
    f->be.state = &f->dev;
    f->be.graph_begin = fake_begin;
    f->be.graph_end = fake_end;
    f->be.graph_launch = fake_launch;
    f->cfg.cuda_graphs = HCNN_CUDA_GRAPHS_AUTO;
    f->comm.size = ranks;
    f->gs.nbuckets = 3;
    f->r.be = &f->be;
    f->r.cfg = &f->cfg;
    f->r.comm = &f->comm;
    f->r.strat.cuts_at_comm = 1;
    f->r.strat.sync = ranks > 1 ? &f->gs : NULL;
    hcnn_graphs_setup(&f->r);
}

/* A step of `key` with `points` communication points: work items
 * key * 1000 + piece, then the point's function (its argument key * 1000
 * + point), as grad_sync does through its cut. */
typedef struct step_arg {
    fixture *f;
    int key, points;
} step_arg;

static int point_fn(void *arg, int i)
{
    fake_device *d = arg;
    if (d->capturing)
        d->fn_in_capture++;
    timeline_add(d, FN_ID + i);
    return HCNN_OK;
}

static int step_seg(hcnn_run *r, void *arg)
{
    const step_arg *a = arg;
    fake_device *d = &a->f->dev;
    (void)r;
    for (int p = 0; p <= a->points; p++) {
        queue(d, a->key * 1000 + 2 * p);
        queue(d, a->key * 1000 + 2 * p + 1);
        if (p < a->points) {
            const int rc = hcnn_comm_point(a->f->r.strat.cut, point_fn, d, a->key * 1000 + p);
            if (rc)
                return rc;
        }
    }
    return HCNN_OK;
}

/* distinct loader buffers: their addresses are the key */
static int buffers[64];

/* Runs one step of key through hcnn_graphs_run; checks that the timeline it
 * added is the direct step's. */
static void run_step(fixture *f, int key, int points)
{
    step_arg a = {.f = f, .key = key, .points = points};
    const int t0 = f->dev.nt;
    const int rc =
        hcnn_graphs_run(&f->r, 0, &buffers[key], &buffers[key], 8, 16, 0.0f, step_seg, &a);
    assert_int_equal(rc, HCNN_OK);
    int want[MAX_ITEMS], nw = 0;
    for (int p = 0; p <= points; p++) {
        want[nw++] = key * 1000 + 2 * p;
        want[nw++] = key * 1000 + 2 * p + 1;
        if (p < points)
            want[nw++] = FN_ID + key * 1000 + p;
    }
    assert_int_equal(f->dev.nt - t0, nw);
    assert_memory_equal(f->dev.timeline + t0, want, sizeof(int) * (size_t)nw);
    assert_int_equal(f->dev.fn_in_capture, 0);
    assert_false(f->dev.capturing);
    if (f->dev.nt > 4096) /* room for the next steps */
        f->dev.nt = 0;
}

/* Two loader buffers, three bucket points: the first two steps direct,
 * the next two captured piece by piece, then replays; 5 graphs a step. */
static void test_program_replays_in_order(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 2);
    assert_true(f.r.graphs.on && f.r.graphs.step_on);
    assert_ptr_equal(f.r.strat.cut, &f.r.graphs.cut);
    assert_non_null(strstr(f.r.graphs.why, "cut at its MPI calls (3 gradient buckets)"));
    for (int s = 0; s < 8; s++)
        run_step(&f, s % 2, 3);
    assert_int_equal(f.r.graphs.captures, 2);
    assert_int_equal(f.r.graphs.graphs, 2 * 4);
    assert_int_equal(f.r.graphs.replays, 4);
    assert_int_equal(f.dev.begins, 2 * 4);
}

/* One rank: no cut installed, one graph a step. */
static void test_one_rank_one_graph(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 1);
    assert_null(f.r.strat.cut);
    for (int s = 0; s < 6; s++)
        run_step(&f, 0, 0);
    assert_int_equal(f.r.graphs.captures, 1);
    assert_int_equal(f.r.graphs.graphs, 1);
    assert_int_equal(f.r.graphs.replays, 4);
}

/* A strategy that does not cut its step at its MPI calls, over ranks:
 * the step runs directly every time, the optimiser step is captured. */
static int opt_seg(hcnn_run *r, void *arg)
{
    (void)r;
    queue(arg, 7);
    return HCNN_OK;
}

static void test_uncut_strategy_captures_the_optimiser_only(void **state)
{
    (void)state;
    fixture f;
    const hcnn_strategy_ops ops = {.name = "uncut"};
    setup(&f, 2);
    f.r.strat.cuts_at_comm = 0;
    f.r.strat.ops = &ops;
    f.r.strat.cut = NULL;
    hcnn_graphs_setup(&f.r);
    assert_true(f.r.graphs.on);
    assert_false(f.r.graphs.step_on);
    assert_null(f.r.strat.cut);
    assert_non_null(strstr(f.r.graphs.why, "the step runs directly (strategy uncut"));
    for (int s = 0; s < 4; s++) {
        run_step(&f, 0, 2);
        const int t0 = f.dev.nt;
        assert_int_equal(hcnn_graphs_run(&f.r, 1, NULL, NULL, 0, 0, 0.1f, opt_seg, &f.dev),
                         HCNN_OK);
        assert_int_equal(f.dev.nt - t0, 1);
        assert_int_equal(f.dev.timeline[t0], 7);
    }
    assert_int_equal(f.r.graphs.captures, 1);
    assert_int_equal(f.r.graphs.replays, 2);
}

/* More points than a program holds: always run directly, never captured. */
static void test_too_many_points_run_directly(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 2);
    for (int s = 0; s < 4; s++)
        run_step(&f, 0, HCNN_GRAPH_PIECES);
    assert_int_equal(f.dev.begins, 0);
    assert_int_equal(f.r.graphs.captures, 0);
    /* one point fewer fits: captured */
    for (int s = 0; s < 4; s++)
        run_step(&f, 1, HCNN_GRAPH_PIECES - 1);
    assert_int_equal(f.r.graphs.captures, 1);
    assert_int_equal(f.r.graphs.graphs, HCNN_GRAPH_PIECES);
    assert_int_equal(f.r.graphs.replays, 2);
}

/* More graphs than the backend's slots hold: the least recently used
 * program gives its graphs up and is captured again at its next sight; no
 * replay launches another program's graphs (run_step's timeline check). */
static void test_slot_pressure_evicts(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 2);
    /* 3 programs fill all but (at most 3 of) the slots */
    const int points = HCNN_GRAPH_SLOTS / 3 - 1;
    for (int round = 0; round < 4; round++)
        for (int k = 0; k < 3; k++)
            run_step(&f, k, points);
    assert_int_equal(f.r.graphs.captures, 3);
    assert_int_equal(f.r.graphs.replays, 6);
    for (int s = 0; s < 3; s++) /* a fourth: key 0, the least recent, gives way */
        run_step(&f, 3, points);
    assert_int_equal(f.r.graphs.captures, 4);
    assert_int_equal(f.r.graphs.replays, 7);
    run_step(&f, 1, points); /* still held */
    run_step(&f, 2, points);
    assert_int_equal(f.r.graphs.replays, 9);
    run_step(&f, 0, points); /* seen before: captured again */
    assert_int_equal(f.r.graphs.captures, 5);
    assert_int_equal(f.r.graphs.replays, 9);
    run_step(&f, 0, points);
    assert_int_equal(f.r.graphs.replays, 10);
    /* more programs than HCNN_GRAPH_PROGRAMS: still the direct step's work */
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < HCNN_GRAPH_PROGRAMS + 2; k++)
            run_step(&f, 10 + k, 1);
}

/* Graphs the backend dropped: that step runs directly, the next captures. */
static void test_dropped_graphs_run_directly(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 2);
    for (int s = 0; s < 3; s++)
        run_step(&f, 0, 2);
    assert_int_equal(f.r.graphs.replays, 1);
    drop_all(&f.dev);
    const long launches = f.dev.launches;
    run_step(&f, 0, 2); /* direct */
    assert_int_equal(f.dev.launches, launches);
    run_step(&f, 0, 2); /* captured again */
    run_step(&f, 0, 2); /* replayed */
    assert_int_equal(f.r.graphs.captures, 2);
    assert_int_equal(f.r.graphs.replays, 2);
}

/* A step seen once, then its capture failing as the device is told
 * (begin_fails, ends_until_fail): graphs off, the strategy uncut. */
static void fail_second_sight(fixture *f, int points, int begin_fails, int ends_until_fail)
{
    run_step(f, 0, points);
    f->dev.begin_fails = begin_fails;
    f->dev.ends_until_fail = ends_until_fail;
    run_step(f, 0, points);
    assert_false(f->r.graphs.on);
    assert_null(f->r.strat.cut);
}

/* A capture that cannot begin: graphs off, the step run once, directly. */
static void test_failed_begin_turns_graphs_off(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 2);
    fail_second_sight(&f, 2, 1, 0);
    assert_non_null(strstr(f.r.graphs.why, "off after a failed capture"));
    run_step(&f, 0, 2);
    assert_int_equal(f.r.graphs.captures, 0);
}

/* Graphs dropped give their slots up: two programs holding all but the
 * scratch slot, dropped, leave room for a third. */
static void test_dropped_graphs_free_their_slots(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 2);
    const int points = (HCNN_GRAPH_SLOTS - 1) / 2 - 1;
    for (int s = 0; s < 3; s++) {
        run_step(&f, 0, points);
        run_step(&f, 1, points);
    }
    assert_int_equal(f.r.graphs.captures, 2);
    run_step(&f, 2, points); /* seen */
    drop_all(&f.dev);
    run_step(&f, 0, points); /* dropped: direct */
    run_step(&f, 1, points);
    run_step(&f, 2, points); /* captured in the slots they gave up */
    run_step(&f, 2, points);
    assert_int_equal(f.r.graphs.captures, 3);
    assert_int_equal(f.r.graphs.replays, 3);
}

/* A capture that fails at its first point: nothing of the step has run
 * (neither the graph nor the point's function), so it runs again directly
 * (once); graphs off. */
static void test_failed_first_point_reruns(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 2);
    fail_second_sight(&f, 2, 0, 1);
    run_step(&f, 0, 2);
}

/* A one-graph step whose capture fails at its end: nothing of it ran, so
 * it runs again directly (once); graphs off. */
static void test_failed_end_of_one_graph_reruns(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 1);
    fail_second_sight(&f, 0, 0, 1);
}

/* A capture that fails after a communication point has run cannot be
 * redone: the step returns an error, having run its first piece and point
 * and nothing after. */
static void test_failed_piece_after_a_point_is_an_error(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 2);
    run_step(&f, 0, 2);
    f.dev.ends_until_fail = 2; /* the second piece's */
    step_arg a = {.f = &f, .key = 0, .points = 2};
    const int t0 = f.dev.nt;
    assert_int_not_equal(
        hcnn_graphs_run(&f.r, 0, &buffers[0], &buffers[0], 8, 16, 0.0f, step_seg, &a), HCNN_OK);
    const int want[] = {0, 1, FN_ID + 0};
    assert_int_equal(f.dev.nt - t0, 3);
    assert_memory_equal(f.dev.timeline + t0, want, sizeof want);
    assert_false(f.dev.capturing);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_program_replays_in_order),
        cmocka_unit_test(test_one_rank_one_graph),
        cmocka_unit_test(test_uncut_strategy_captures_the_optimiser_only),
        cmocka_unit_test(test_too_many_points_run_directly),
        cmocka_unit_test(test_slot_pressure_evicts),
        cmocka_unit_test(test_dropped_graphs_run_directly),
        cmocka_unit_test(test_failed_begin_turns_graphs_off),
        cmocka_unit_test(test_dropped_graphs_free_their_slots),
        cmocka_unit_test(test_failed_first_point_reruns),
        cmocka_unit_test(test_failed_end_of_one_graph_reruns),
        cmocka_unit_test(test_failed_piece_after_a_point_is_an_error),
    };
    return cmocka_run_group_tests_name("graphs", tests, NULL, NULL);
}
