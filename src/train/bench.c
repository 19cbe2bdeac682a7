/* hcnn bench, and the per-block profile of a run (train --profile):
 * training steps on synthetic data of the model's input shape, timed in
 * repeats after a warm-up, with the raw-GEMM reference sampled between the
 * repeats (include/hcnn/profile.h). */
#include <stdio.h>
#include <stdlib.h>

#include "hcnn/blas.h"
#include "hcnn/common.h"
#include "run.h"

int profile_enable(hcnn_run *r)
{
    int rc = hcnn_profile_init(&r->prof, r->net.nids);
    r->profiling = 1;
    r->strat.scratch.ctx.prof_fwd = r->prof.fwd;
    r->strat.scratch.ctx.prof_bwd = r->prof.bwd;
    return rc;
}

void profile_sample_reference(hcnn_run *r)
{
    if (!run_is_root(r))
        return;
    const hcnn_strategy *s = &r->strat;
    hcnn_profile_sample_reference(&r->prof, &r->net, &s->scratch.ctx, s->first, s->last,
                                  s->pass_samples);
}

/* Rank 0's table: its blocks, its shard (or micro-batch) size. */
double profile_print(hcnn_run *r)
{
    if (!run_is_root(r))
        return 0.0;
    const hcnn_strategy *s = &r->strat;
    const double share = hcnn_profile_print(&r->prof, &r->net, &s->scratch.ctx, s->first, s->last,
                                            s->pass_samples, s->passes, stdout);
    fflush(stdout);
    return share;
}

int hcnn_bench(const hcnn_config *cfg_in, const hcnn_comm *comm, const hcnn_run_opts *opts)
{
    const int warmup = opts->warmup, repeats = opts->repeats, steps = opts->steps;
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the configuration");
    /* synthetic data of the model's input shape, exactly enough batches */
    *cfg = *cfg_in;
    snprintf(cfg->dataset, sizeof cfg->dataset, "synthetic");
    const long long samples = (long long)cfg->batch_size * (warmup + (long long)repeats * steps);
    if (samples > HCNN_MAX_SAMPLES) {
        free(cfg);
        return hcnn_error("%s: batch_size %d x (%d warm-up + %d x %d timed steps) = %lld samples, "
                          "more than %d: fewer steps or a smaller batch",
                          cfg_in->path, cfg_in->batch_size, warmup, repeats, steps, samples,
                          HCNN_MAX_SAMPLES);
    }
    cfg->synthetic_train = (int)samples;
    cfg->synthetic_test = cfg->batch_size;
    cfg->epochs = 1;
    cfg->max_steps = 0;
    cfg->csv[0] = cfg->checkpoint_dir[0] = '\0';
    hcnn_run r;
    int rc = run_setup(&r, cfg, comm, 1);
    if (!rc)
        rc = profile_enable(&r);
    double rate[64];
    int nrate = 0;
    if (!rc) {
        const long spe = (r.train.n + cfg->batch_size - 1) / cfg->batch_size;
        epoch_stats st = {0};
        hcnn_epoch_permutation(r.perm, r.train.n, cfg->seed, 0, cfg->shuffle);
        hcnn_loader_begin_epoch(&r.loader, r.perm, r.train.n, 0);
        if (run_is_root(&r)) {
            char blas[256];
            printf("hcnn bench: model %s, strategy %s on %d rank%s x %d threads, global batch %d, "
                   "%d warm-up steps, %d repeats of %d steps; %s\n",
                   cfg->model.name, hcnn_strategy_name(cfg->strategy), comm->size,
                   comm->size > 1 ? "s" : "", r.threads, cfg->batch_size, warmup, repeats, steps,
                   hcnn_blas_describe(blas, sizeof blas));
            report_compute_setup(&r);
            fflush(stdout);
        }
        for (int i = 0; i < warmup && !rc; i++)
            rc = train_next_step(&r, 0, spe, &st) < 0 ? HCNN_EINVAL : HCNN_OK;
        hcnn_profile_reset(&r.prof);
        for (int k = 0; k < repeats && !rc && nrate < 64; k++) {
            if (comm->size > 1)
                HCNN_MPI(MPI_Barrier(comm->world));
            const double t0 = hcnn_now();
            for (int i = 0; i < steps && !rc; i++) {
                int got = train_next_step(&r, 0, spe, &st);
                rc = got < 0 ? -got : got == 0 ? hcnn_error("bench: ran out of batches") : HCNN_OK;
            }
            double el = hcnn_now() - t0;
            if (comm->size > 1) /* the global rate is set by the slowest rank */
                HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &el, 1, MPI_DOUBLE, MPI_MAX, comm->world));
            rate[nrate++] = el > 0 ? (double)cfg->batch_size * steps / el : 0.0;
            if (run_is_root(&r)) {
                printf("repeat=%d images_per_s=%.1f step_ms=%.3f\n", k + 1, rate[nrate - 1],
                       el / steps * 1e3);
                fflush(stdout);
            }
            profile_sample_reference(&r); /* alternately with the timed steps */
        }
    }
    if (!rc) {
        const double share = profile_print(&r);
        const double median = hcnn_median(rate, nrate);
        if (run_is_root(&r)) {
            printf("gemm_share=%.3f\n", share);
            printf("images_per_s=%.1f\n", median);
        }
    }
    run_free(&r);
    free(cfg);
    return rc;
}
