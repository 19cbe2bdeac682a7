/* hcnn bench: training steps on synthetic data of the model's input shape,
 * timed in repeats after a warm-up, with the raw-GEMM reference of the
 * per-block profile (include/hcnn/profile.h) sampled between the repeats;
 * and hcnn plan's per-block times. */
#include <stdio.h>
#include <stdlib.h>

#include "hcnn/blas.h"
#include "hcnn/common.h"
#include "run.h"

int hcnn_bench(const hcnn_config *cfg_in, const hcnn_comm *comm, hcnn_run_opts *opts)
{
    const int warmup = opts->warmup, repeats = opts->repeats, steps = opts->steps;
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the configuration");
    /* synthetic data of the model's input shape, exactly enough batches */
    *cfg = *cfg_in;
    snprintf(cfg->dataset, sizeof cfg->dataset, "synthetic");
    /* warm-up, timed repeats, and the profiled steps of a run whose timed
     * steps are CUDA graphs (below) */
    const long long samples =
        (long long)cfg->batch_size * (warmup + (long long)repeats * steps + steps);
    if (samples > HCNN_MAX_SAMPLES) {
        free(cfg);
        return hcnn_error("%s: batch_size %d x (%d warm-up + %d x %d timed + %d profiled steps) = "
                          "%lld samples, more than %d: fewer steps or a smaller batch",
                          cfg_in->path, cfg_in->batch_size, warmup, repeats, steps, steps, samples,
                          HCNN_MAX_SAMPLES);
    }
    cfg->synthetic_train = (int)samples;
    cfg->synthetic_test = cfg->batch_size;
    cfg->epochs = 1;
    cfg->max_steps = 0;
    cfg->csv[0] = cfg->checkpoint_dir[0] = '\0';
    hcnn_run r;
    const double t_setup = hcnn_now();
    int rc = hcnn_run_setup(&r, cfg, comm, 1);
    if (!rc)
        rc = hcnn_train_prepare(&r);
    if (!rc)
        rc = hcnn_run_profile_enable(&r);
    const double setup_s = hcnn_now() - t_setup;
    double rate[64];
    int nrate = 0;
    if (!rc) {
        const long spe = (r.train.n + cfg->batch_size - 1) / cfg->batch_size;
        epoch_stats st = {0};
        hcnn_epoch_permutation(r.perm, r.train.n, cfg->seed, 0, cfg->shuffle);
        hcnn_loader_begin_epoch(&r.loader, r.perm, r.train.n, 0);
        if (run_is_root(&r) && !opts->quiet) {
            char blas[256];
            printf("hcnn bench: model %s, strategy %s on %d rank%s x %d threads, global batch %d, "
                   "%d warm-up steps, %d repeats of %d steps; %s\n",
                   cfg->model.name, hcnn_strategy_name(cfg->strategy), comm->size,
                   comm->size > 1 ? "s" : "", r.threads, cfg->batch_size, warmup, repeats, steps,
                   hcnn_blas_describe(blas, sizeof blas));
            /* the backend as train's header names it: on the GPU its
             * precision and activation layout (bench/compare.sh checks
             * that the layout it asked for is the one that ran) */
            char where[512];
            r.be->describe(r.be, where, sizeof where);
            printf("hcnn: device: %s\n", where);
            hcnn_report_compute_setup(&r);
            fflush(stdout);
        }
        /* CUDA graphs replay whole steps, and the per-block timers wait for
         * the device inside them: the timed steps run as graphs without the
         * timers, and the table comes from `steps` more steps with them */
        const int graphs = r.graphs.on;
        if (graphs)
            hcnn_run_profile_pause(&r);
        const double t_warmup = hcnn_now();
        for (int i = 0; i < warmup && !rc; i++)
            rc = hcnn_train_next_step(&r, 0, spe, &st) < 0 ? HCNN_EINVAL : HCNN_OK;
        if (!rc)
            r.be->sync(r.be);
        /* what the set-up and the first steps cost before the timed ones: the
         * data, the model, the buffers, the backend's plans (on a GPU cuDNN's,
         * and HCNN_CUDA_CONV=auto's measurements where nothing is cached) */
        if (run_is_root(&r) && !opts->quiet && !rc)
            printf("# setup_ms=%.1f warmup_ms=%.1f (the run's set-up; its %d warm-up steps)\n",
                   setup_s * 1e3, (hcnn_now() - t_warmup) * 1e3, warmup);
        hcnn_profile_reset(&r.prof);
        for (int k = 0; k < repeats && !rc && nrate < 64; k++) {
            if (comm->size > 1)
                HCNN_MPI(MPI_Barrier(comm->world));
            r.be->sync(r.be); /* a step reads its results back: each ends synchronised */
            if (r.be->trace_region) /* a profiler's capture range: the timed steps only */
                r.be->trace_region(r.be, 1);
            const double t0 = hcnn_now();
            for (int i = 0; i < steps && !rc; i++) {
                int got = hcnn_train_next_step(&r, 0, spe, &st);
                rc = got < 0 ? -got : got == 0 ? hcnn_error("bench: ran out of batches") : HCNN_OK;
            }
            double el = hcnn_now() - t0;
            if (r.be->trace_region)
                r.be->trace_region(r.be, 0);
            if (comm->size > 1) /* the global rate is set by the slowest rank */
                HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &el, 1, MPI_DOUBLE, MPI_MAX, comm->world));
            rate[nrate++] = el > 0 ? (double)cfg->batch_size * steps / el : 0.0;
            if (run_is_root(&r) && !opts->quiet) {
                printf("repeat=%d images_per_s=%.1f step_ms=%.3f\n", k + 1, rate[nrate - 1],
                       el / steps * 1e3);
                fflush(stdout);
            }
            hcnn_run_profile_sample_reference(&r); /* alternately with the timed steps */
        }
        if (graphs && !rc) {
            hcnn_run_profile_resume(&r);
            for (int i = 0; i < steps && !rc; i++) {
                int got = hcnn_train_next_step(&r, 0, spe, &st);
                rc = got < 0 ? -got : got == 0 ? hcnn_error("bench: ran out of batches") : HCNN_OK;
            }
            if (run_is_root(&r) && !opts->quiet)
                printf("# the timed steps ran as CUDA graphs (%ld captured, %ld replayed, %ld "
                       "graphs); the profile below is of %d more steps without them\n",
                       r.graphs.captures, r.graphs.replays, r.graphs.graphs, steps);
        }
    }
    if (!rc) {
        const double share = opts->quiet ? 0.0 : hcnn_run_profile_print(&r);
        const double median = hcnn_median(rate, nrate);
        opts->images_per_s = median;
        if (run_is_root(&r) && !opts->quiet) {
            printf("gemm_share=%.3f\n", share);
            printf("images_per_s=%.1f\n", median);
        }
    }
    hcnn_run_free(&r);
    free(cfg);
    return rc;
}

/* The part of block l's measured time outside GEMM layers (hcnn_block_times). */
static double outside_gemms(const hcnn_layer *l, const double *t)
{
    if (hcnn_layer_is_gemm(l))
        return 0.0;
    double s = t[l->id];
    for (int j = 0; j < l->nchildren; j++)
        if (hcnn_layer_is_gemm(&l->children[j]))
            s -= t[l->children[j].id];
    return s > 0.0 ? s : 0.0;
}

/* hcnn plan's compute input (include/hcnn/train.h).  What a step spends
 * outside the blocks' passes (optimiser, loss, the finiteness check, the
 * batch hand-over) is counted with the optimiser: opt_s. */
int hcnn_block_times(const hcnn_config *cfg_in, int n, int steps, double *fwd, double *bwd,
                     double *fwd_mem, double *bwd_mem, double *opt_s)
{
    enum { WARMUP = 2, MAX_STEPS = 64 };
    if (steps < 1 || steps > MAX_STEPS)
        return hcnn_error("hcnn_block_times: steps %d outside 1..%d", steps, MAX_STEPS);
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the configuration");
    *cfg = *cfg_in;
    snprintf(cfg->dataset, sizeof cfg->dataset, "synthetic");
    cfg->strategy = HCNN_STRATEGY_SERIAL;
    cfg->batch_size = n;
    cfg->synthetic_train = n * (WARMUP + steps);
    cfg->synthetic_test = n;
    cfg->epochs = 1;
    cfg->max_steps = 0;
    cfg->csv[0] = cfg->checkpoint_dir[0] = '\0';
    /* a process of its own: whatever launched hcnn plan, the measurement is serial */
    const hcnn_comm self = {.rank = 0, .size = 1, .world = MPI_COMM_SELF};
    hcnn_run r;
    int rc = hcnn_run_setup(&r, cfg, &self, 1);
    if (!rc)
        rc = hcnn_train_prepare(&r);
    if (!rc)
        rc = hcnn_run_profile_enable(&r);
    const int nl = rc ? 0 : r.net.nlayers;
    const int cols = 4 * nl + 1; /* fwd, bwd, fwd outside GEMMs, bwd outside, the rest */
    double *v = rc ? NULL : hcnn_calloc(sizeof(double) * (size_t)cols * MAX_STEPS, "block times");
    if (!rc && !v)
        rc = HCNN_ENOMEM;
    if (!rc) {
        const long spe = WARMUP + steps;
        epoch_stats st = {0};
        hcnn_epoch_permutation(r.perm, r.train.n, cfg->seed, 0, cfg->shuffle);
        hcnn_loader_begin_epoch(&r.loader, r.perm, r.train.n, 0);
        for (int i = 0; i < WARMUP + steps && !rc; i++) {
            hcnn_profile_reset(&r.prof);
            const double t0 = hcnn_now();
            const int got = hcnn_train_next_step(&r, 0, spe, &st);
            const double el = hcnn_now() - t0;
            rc = got < 0 ? -got : got == 0 ? hcnn_error("block times: ran out of batches") : 0;
            if (rc || i < WARMUP)
                continue;
            double *row = v + (size_t)(i - WARMUP) * cols;
            double passes = 0.0;
            for (int b = 0; b < nl; b++) {
                const hcnn_layer *l = &r.net.layers[b];
                row[b] = r.prof.fwd[l->id];
                row[nl + b] = r.prof.bwd[l->id];
                row[2 * nl + b] = outside_gemms(l, r.prof.fwd);
                row[3 * nl + b] = outside_gemms(l, r.prof.bwd);
                passes += row[b] + row[nl + b];
            }
            row[4 * nl] = el > passes ? el - passes : 0.0;
        }
    }
    if (!rc) {
        double col[MAX_STEPS];
        for (int k = 0; k < cols; k++) {
            for (int i = 0; i < steps; i++)
                col[i] = v[(size_t)i * cols + k];
            const double m = hcnn_median(col, steps);
            if (k < nl)
                fwd[k] = m;
            else if (k < 2 * nl)
                bwd[k - nl] = m;
            else if (k < 3 * nl) {
                if (fwd_mem)
                    fwd_mem[k - 2 * nl] = m;
            } else if (k < 4 * nl) {
                if (bwd_mem)
                    bwd_mem[k - 3 * nl] = m;
            } else
                *opt_s = m;
        }
    }
    free(v);
    hcnn_run_free(&r);
    free(cfg);
    return rc;
}
