/* hcnn plan's per-pass pricing from the pieces a pass offers the threads
 * (src/plan/model.c, the backends' pass_pieces): the model's structure and
 * invariants on fixed, made-up measurements.  No duration is measured and
 * no prediction is held against a run here (bench/validate_threads.sh does
 * that).  Through include/hcnn/ only: the CPU backend's pass_pieces against
 * its own plans is tests/unit/test_cpu.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/config.h"
#include "hcnn/net.h"
#include "net_fixture.h"
#include "hcnn/node.h"
#include "hcnn/plan.h"
#include "hcnn/strategy.h"

/* ---- a backend whose every pass is one phase of `pieces` equal pieces --------------- */

typedef struct fake_cut {
    long pieces;
    double largest; /* of the phase's work (0: pieces equal) */
} fake_cut;

static void fake_pass_pieces(const hcnn_backend *be, const hcnn_op *op, const hcnn_exec *ex,
                             int n, int nt, hcnn_pieces *fwd, hcnn_pieces *bwd)
{
    (void)op, (void)ex, (void)nt;
    const fake_cut *f = be->state;
    fwd->nphases = bwd->nphases = 0;
    hcnn_pieces_push(fwd, "forward", f->pieces, 1.0 * n, f->largest * n, 1);
    hcnn_pieces_push(bwd, "backward", f->pieces, 2.0 * n, f->largest * 2.0 * n, 1);
}

/* A node whose core is this "machine's" (core_ratio 1) and whose memory
 * never bounds a pass: the price is the pieces' arithmetic alone. */
static const hcnn_node NODE = {.name = "test", .cores = 64, .peak_gflops = 64 * 100.0,
                               .bandwidth_gbs = 1e9, .core_bandwidth_gbs = 1e9,
                               .llc_mib = 1e9, .barrier_us = 0.0, .assumed = 1};

static int has_gemm(const hcnn_layer *l)
{
    int g = hcnn_layer_is_gemm(l);
    for (int j = 0; j < l->nchildren; j++)
        g |= has_gemm(&l->children[j]);
    return g;
}

/* made-up times of a pass of n samples measured on one thread: each block
 * 1 ms forward and 2 ms backward x its index + 1, split between its GEMM
 * layers (3/4 if it has any) and the others (what is left: all of a block
 * without GEMM layers; a convolution alone has none) */
static hcnn_pass_measured measured(const hcnn_net *net, int n, double *total)
{
    hcnn_pass_measured m;
    memset(&m, 0, sizeof m);
    m.n = n, m.threads = 1, m.core_gflops = 100.0;
    *total = 0.0;
    for (int i = 0; i < net->nlayers; i++) {
        const hcnn_layer *l = &net->layers[i];
        m.fwd[i] = 1e-3 * (i + 1), m.bwd[i] = 2e-3 * (i + 1);
        const double other = hcnn_layer_is_gemm(l) ? 0.0 : has_gemm(l) ? 0.25 : 1.0;
        m.fwd_mem[i] = other * m.fwd[i], m.bwd_mem[i] = other * m.bwd[i];
        *total += m.fwd[i] + m.bwd[i];
    }
    return m;
}

static double pass_seconds(const hcnn_net *net, const hcnn_pass_cost *c)
{
    double s = 0.0;
    for (int i = 0; i < net->nlayers; i++)
        s += c->fwd[i] + c->bwd[i];
    return s;
}

/* The priced passes of n samples on `threads` threads when every pass
 * offers cut->pieces pieces */
static double priced(hcnn_backend *be, model *m, fake_cut *cut, int n, int threads,
                     double barrier_s, double *work, hcnn_pass_cost *c)
{
    be->state = cut;
    hcnn_plan_cuts here, there;
    assert_int_equal(hcnn_plan_cuts_make(&m->net, n, 1, &here), 0);
    assert_int_equal(hcnn_plan_cuts_make(&m->net, n, threads, &there), 0);
    const hcnn_pass_measured pm = measured(&m->net, n, work);
    assert_int_equal(hcnn_price_pass(&m->net, &NODE, threads, &pm, &here, &there, barrier_s, c), 0);
    return pass_seconds(&m->net, c);
}

static hcnn_backend *fake_backend(void)
{
    hcnn_backend *be = malloc(sizeof *be);
    assert_non_null(be);
    *be = *hcnn_backend_cpu();
    be->pass_pieces = fake_pass_pieces;
    return be;
}

/* 16 samples on 64 threads: a pass offering fewer pieces than threads is
 * priced slower than one offering as many; the threads take whole pieces
 * (72 pieces: two rounds, as slow as 36); 64 pieces or more spread the
 * measured work over all threads; on the measurement's own thread count the
 * price is the measurement. */
static void test_fewer_pieces_priced_slower(void **state)
{
    (void)state;
    hcnn_backend *be = fake_backend();
    model *m = model_load("configs/synthetic_resnet.yaml", be);
    hcnn_pass_cost *c = malloc(sizeof *c);
    assert_non_null(c);
    const long counts[] = {8, 16, 36, 64, 72, 256};
    double t[6], work = 0.0;
    for (int k = 0; k < 6; k++) {
        fake_cut cut = {counts[k], 0.0};
        t[k] = priced(be, m, &cut, 16, 64, 0.0, &work, c);
        printf("  %3ld pieces: %.6f s (measured on one thread %.6f s)\n", counts[k], t[k], work);
        assert_true(c->below_threads);
    }
    assert_true(t[0] > t[1] && t[1] > t[2] && t[2] > t[3]);
    assert_true(fabs(t[0] / t[3] - 8.0) < 1e-9); /* 8 of 64 threads at work */
    assert_true(fabs(t[4] / t[2] - 1.0) < 1e-9); /* 72 pieces take two rounds, as 36 do one */
    assert_true(fabs(t[3] - work / 64) < 1e-12 * work);
    assert_true(fabs(t[5] - t[3]) < 1e-12 * work);
    fake_cut one = {64, 0.0};
    assert_true(fabs(priced(be, m, &one, 16, 1, 0.0, &work, c) - work) < 1e-12 * work);
    free(c);
    model_free(m);
    free(be);
}

/* A pass whose largest piece holds half its work takes at least that half,
 * whatever the threads */
static void test_largest_piece_bounds(void **state)
{
    (void)state;
    hcnn_backend *be = fake_backend();
    model *m = model_load("configs/synthetic_resnet.yaml", be);
    hcnn_pass_cost *c = malloc(sizeof *c);
    assert_non_null(c);
    double work = 0.0;
    fake_cut cut = {65, 0.5};
    const double t64 = priced(be, m, &cut, 16, 64, 0.0, &work, c),
                 t256 = priced(be, m, &cut, 16, 256, 0.0, &work, c);
    assert_true(fabs(t64 - 0.5 * work) < 1e-12 * work);
    assert_true(fabs(t256 - 0.5 * work) < 1e-12 * work);
    free(c);
    model_free(m);
    free(be);
}

/* The pass of n samples is priced from that pass's own measurement: not
 * from another n (the former model priced fewer samples than threads as
 * one image a thread scaled by n / T) */
static void test_priced_from_its_own_pass(void **state)
{
    (void)state;
    hcnn_backend *be = fake_backend();
    model *m = model_load("configs/synthetic_resnet.yaml", be);
    fake_cut cut = {64, 0.0};
    be->state = &cut;
    hcnn_plan_cuts here, there;
    assert_int_equal(hcnn_plan_cuts_make(&m->net, 16, 1, &here), 0);
    assert_int_equal(hcnn_plan_cuts_make(&m->net, 16, 64, &there), 0);
    double work;
    hcnn_pass_measured one_image = measured(&m->net, 1, &work);
    hcnn_pass_cost *c = malloc(sizeof *c);
    assert_non_null(c);
    assert_int_not_equal(
        hcnn_price_pass(&m->net, &NODE, 64, &one_image, &here, &there, 0.0, c), 0);
    free(c);
    model_free(m);
    free(be);
}

/* Each phase's barrier there is added once per phase; the barriers here
 * are taken out of the measured time before it is spread */
static void test_barriers_counted(void **state)
{
    (void)state;
    hcnn_backend *be = fake_backend();
    model *m = model_load("configs/synthetic_resnet.yaml", be);
    hcnn_pass_cost *c = malloc(sizeof *c);
    assert_non_null(c);
    fake_cut cut = {64, 0.0};
    double work;
    const double plain = priced(be, m, &cut, 16, 64, 0.0, &work, c);
    const double with = priced(be, m, &cut, 16, 64, 1e-6, &work, c);
    int phases = 0;
    for (int i = 0; i < m->net.nlayers; i++)
        for (int g = 0; g < HCNN_CUTS; g++)
            phases += c->cuts.phases[i][g];
    assert_true(phases > 0);
    assert_true(fabs(with - plain - phases * 1e-6) < 1e-12 * work);
    assert_true(fabs(c->barrier_s - phases * 1e-6) < 1e-15 * phases);
    free(c);
    model_free(m);
    free(be);
}

/* Whole-network execution: every block's passes are the units' (one unit a
 * thread), LeNet-5 at 256 samples on 16 threads among them */
static void test_units_cut_whole_passes(void **state)
{
    (void)state;
    model *m = model_load("configs/mnist_lenet.yaml", hcnn_backend_cpu());
    const int n = 256, threads = 16, unit = m->net.be->unit_images(m->net.be, n);
    assert_true(unit > 0);
    const int units = (n + unit - 1) / unit;
    hcnn_plan_cuts c;
    assert_int_equal(hcnn_plan_cuts_make(&m->net, n, threads, &c), 0);
    assert_int_equal(c.units, units);
    const double share = (double)((units + threads - 1) / threads) / units;
    printf("  LeNet-5, %d samples: %d units of %d; %d threads do %.3f of the work each\n", n,
           units, unit, threads, share);
    for (int i = 0; i < m->net.nlayers; i++)
        for (int g = 0; g < HCNN_CUTS; g++)
            assert_true(fabs(c.share[i][g] - share) < 1e-15);
    model_free(m);
}

/* optimizer_sharding: ranks in the step model (model.c): the optimiser on
 * 1/P of the parameters, the agreement no longer on the first bucket, the
 * all-gathers waited for in the next forward (MPI_Test progress) or after
 * the update (the communication thread, a pipeline's replicas), and
 * nothing changed on one rank */
static void test_sharded_step_priced(void **state)
{
    (void)state;
    hcnn_backend *be = fake_backend();
    model *m = model_load("configs/synthetic_resnet.yaml", be);
    hcnn_pass_cost *c = calloc(1, sizeof *c);
    assert_non_null(c);
    for (int i = 0; i < m->net.nlayers; i++)
        c->fwd[i] = c->bwd[i] = 1e-3;
    c->opt_s = 8e-3;
    const hcnn_network nw = {.alpha_s = 2e-6, .beta_s = 1.0 / 20e9, .gamma_s = 1.0 / 8e9,
                             .p2p_alpha_s = 2e-6, .contention = 1.0, .iallreduce = 3};
    hcnn_comm_setup test = {.fold_agreement = 1}, test_sh = test;
    test_sh.sharded = 1;
    hcnn_comm_setup thread_sh = test_sh;
    thread_sh.reserved_core = 1;
    hcnn_step_model none, ranks, ranks_thread, one_none, one_ranks, p_none, p_ranks;
    const hcnn_layout data4 = {.nodes = 4, .stages = 1, .replicas = 4, .microbatches = 1,
                               .global_batch = 64, .pass_samples = 16};
    const hcnn_layout data1 = {.nodes = 1, .stages = 1, .replicas = 1, .microbatches = 1,
                               .global_batch = 16, .pass_samples = 16};
    const hcnn_layout pipe = {.nodes = 4, .stages = 2, .replicas = 2, .microbatches = 2,
                              .global_batch = 64, .pass_samples = 16};
    /* a bucket of every block (bucket_mb tiny): the gathers' order matters */
    const double mb = 1e-9;
    assert_int_equal(hcnn_plan_step(&m->net, &data4, c, &nw, &test, mb, 64, 0, &none), 0);
    assert_int_equal(hcnn_plan_step(&m->net, &data4, c, &nw, &test_sh, mb, 64, 0, &ranks), 0);
    assert_int_equal(hcnn_plan_step(&m->net, &data4, c, &nw, &thread_sh, mb, 64, 0, &ranks_thread),
                     0);
    assert_int_equal(hcnn_plan_step(&m->net, &data1, c, &nw, &test, mb, 64, 0, &one_none), 0);
    assert_int_equal(hcnn_plan_step(&m->net, &data1, c, &nw, &test_sh, mb, 64, 0, &one_ranks), 0);
    assert_int_equal(hcnn_plan_step(&m->net, &pipe, c, &nw, &test, mb, 64, 0, &p_none), 0);
    assert_int_equal(hcnn_plan_step(&m->net, &pipe, c, &nw, &test_sh, mb, 64, 0, &p_ranks), 0);
    assert_true(fabs(ranks.opt_s - none.opt_s / 4) < 1e-12);
    assert_true(ranks.sync_s > 0.0 && none.sync_s == 0.0); /* not folded; the norms */
    assert_true(ranks.gather_s > 0.0 && ranks.gather_s <= ranks_thread.gather_s);
    assert_true(ranks.gather_s <= ranks.allreduce_s && ranks.allreduce_s <= ranks.allreduce_total_s);
    /* the forward reaches the last bucket after the earlier blocks' time */
    assert_true(ranks.gather_s < ranks_thread.gather_s);
    assert_true(one_ranks.step_s == one_none.step_s && one_ranks.gather_s == 0.0);
    assert_true(fabs(p_ranks.opt_s - p_none.opt_s / 2) < 1e-12);
    assert_true(p_ranks.gather_s > 0.0);
    free(c);
    model_free(m);
    free(be);
}

/* The measured partition never starts a stage at a batch-norm right after
 * its convolution (that cut moves bits: the convolution no longer gathers
 * the statistics); with the cost of the small ResNet's conv1 alone larger
 * than all the rest, the best split is [0, 1] without the rule, [0, 2]
 * with it; where no split keeps to the rule, the best split is taken. */
static void test_partition_keeps_conv_with_bn(void **state)
{
    (void)state;
    model *m = model_load("configs/synthetic_resnet.yaml", hcnn_backend_cpu());
    const hcnn_net *net = &m->net;
    assert_true(net->nlayers >= 4);
    assert_int_equal(net->layers[0].kind, HCNN_BLOCK_CONV);
    assert_int_equal(net->layers[1].kind, HCNN_BLOCK_BN);
    unsigned char no_cut[HCNN_MAX_BLOCKS];
    hcnn_pipe_no_cut(net, no_cut);
    int marked = 0;
    for (int i = 0; i < net->nlayers; i++)
        marked += no_cut[i];
    assert_int_equal(no_cut[1], 1);
    assert_int_equal(marked, 1); /* the other convolutions are inside residual blocks */
    double cost[HCNN_MAX_BLOCKS];
    for (int i = 0; i < net->nlayers; i++)
        cost[i] = i == 0 ? 100.0 : 1.0;
    int bounds[3];
    assert_int_equal(hcnn_pipe_balance(cost, net->nlayers, 2, NULL, bounds), 0);
    assert_int_equal(bounds[1], 1);
    assert_int_equal(hcnn_pipe_balance(cost, net->nlayers, 2, no_cut, bounds), 0);
    assert_int_equal(bounds[0], 0);
    assert_int_equal(bounds[1], 2);
    assert_int_equal(bounds[2], net->nlayers);
    /* two blocks, two stages, the only cut refused: taken anyway */
    const unsigned char refuse[2] = {0, 1};
    assert_int_equal(hcnn_pipe_balance(cost, 2, 2, refuse, bounds), 0);
    assert_int_equal(bounds[1], 1);
    /* conv, bn, conv, bn, conv, bn in 4 stages: places 2 and 4 allowed, the
     * first refusal (1) dropped; the stages start at 1, 2 and 4 whatever
     * the costs (timed costs must not choose which refusal goes) */
    const unsigned char pairs[6] = {0, 1, 0, 1, 0, 1};
    const double costs[2][6] = {{1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 50, 50}};
    int b4[5];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(hcnn_pipe_balance(costs[k], 6, 4, pairs, b4), 0);
        assert_int_equal(b4[0], 0);
        assert_int_equal(b4[1], 1);
        assert_int_equal(b4[2], 2);
        assert_int_equal(b4[3], 4);
        assert_int_equal(b4[4], 6);
    }
    /* more stages than blocks: refused, never read from unset tables */
    int b3[4];
    assert_int_equal(hcnn_pipe_balance(cost, 2, 3, NULL, b3), HCNN_EINVAL);
    model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fewer_pieces_priced_slower),
        cmocka_unit_test(test_largest_piece_bounds),
        cmocka_unit_test(test_priced_from_its_own_pass),
        cmocka_unit_test(test_barriers_counted),
        cmocka_unit_test(test_units_cut_whole_passes),
        cmocka_unit_test(test_sharded_step_priced),
        cmocka_unit_test(test_partition_keeps_conv_with_bn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
