/* Checkpoints of a run: written (statistics averaged over the replicas,
 * the model gathered on rank 0, then snapshotted and written in the
 * background) and resumed (any strategy and rank count may resume any
 * checkpoint: the file holds the whole model by name). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "hcnn/common.h"
#include "run.h"

int save_checkpoint(hcnn_run *r, long epochs_done, long batch, const epoch_stats *st, int final,
                    int wait)
{
    const hcnn_config *cfg = r->cfg;
    if (!cfg->checkpoint_dir[0])
        return HCNN_OK;
    int rc = run_average_bn_state(r);
    if (!rc)
        rc = r->strat.ops->gather(&r->strat, r->opt.velocity);
    if (rc || !run_is_root(r))
        return rc;
    if (!r->writer_ready) {
        if ((rc = hcnn_ckpt_writer_init(&r->writer, &r->net, cfg->checkpoint_dir,
                                        cfg->checkpoint_keep)))
            return rc;
        r->writer_ready = 1;
    }
    hcnn_ckpt_meta meta = {.epoch = epochs_done,
                           .batch = batch,
                           .step = r->step,
                           .seed = cfg->seed,
                           .batch_size = cfg->batch_size,
                           .lr = st->lr};
    if (batch > 0) { /* the epoch in progress */
        meta.loss_sum = st->loss_sum, meta.correct = st->correct, meta.seen = st->seen;
    }
    snprintf(meta.model, sizeof meta.model, "%s", cfg->model.name);
    double stall = 0.0;
    rc = hcnn_ckpt_writer_submit(&r->writer, r->opt.velocity, &meta, final, &stall);
    if (rc && cfg->checkpoint_on_error == HCNN_ON_ERROR_CONTINUE) {
        hcnn_warn("the previous checkpoint could not be written (cause above); training goes "
                  "on (checkpoint_on_error: continue)");
        rc = HCNN_OK;
    }
    if (!rc && wait)
        rc = hcnn_ckpt_writer_wait(&r->writer);
    if (!rc) {
        printf("checkpoint=%s epoch=%ld step=%ld stall_s=%.4f%s\n", r->writer.path, epochs_done,
               r->step, stall, wait ? "" : " (written in the background)");
        fflush(stdout);
    }
    return rc;
}

/* Every rank reads the checkpoint: it holds the whole model, whatever
 * layout wrote it. */
int resume_from(hcnn_run *r, const char *resume, hcnn_ckpt_meta *meta)
{
    const hcnn_config *cfg = r->cfg;
    char path[HCNN_FILE_PATH_MAX + 32];
    int rc = HCNN_OK;
    if (!strcmp(resume, "latest")) {
        if (!cfg->checkpoint_dir[0])
            return hcnn_error("--resume latest: %s sets no checkpoint_dir", cfg->path);
        if (run_is_root(r))
            rc = hcnn_ckpt_latest(cfg->checkpoint_dir, path, sizeof path);
        if (r->comm->size > 1) {
            HCNN_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, r->comm->world));
            HCNN_MPI(MPI_Bcast(path, sizeof path, MPI_CHAR, 0, r->comm->world));
        }
        if (rc)
            return rc;
    } else {
        snprintf(path, sizeof path, "%s", resume);
    }
    rc = hcnn_ckpt_load(path, &r->net, r->opt.velocity, meta);
    if (rc)
        return rc;
    if (meta->seed != cfg->seed)
        return hcnn_error("%s: written with seed %llu, %s has seed %llu: the data order would "
                          "differ",
                          path, (unsigned long long)meta->seed, cfg->path,
                          (unsigned long long)cfg->seed);
    if (meta->batch > 0 && meta->batch_size != cfg->batch_size)
        return hcnn_error("%s: stopped inside an epoch with batch_size %d, %s has %d", path,
                          meta->batch_size, cfg->path, cfg->batch_size);
    r->step = meta->step;
    if (run_is_root(r))
        printf("hcnn: resuming from %s: epoch %ld, batch %ld, step %ld\n", path, meta->epoch + 1,
               meta->batch, meta->step);
    return HCNN_OK;
}
