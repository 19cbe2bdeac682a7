/* Checkpoints of a run: written (statistics averaged over the replicas,
 * the model gathered on rank 0, then snapshotted and written in the
 * background) and resumed (any strategy and rank count may resume any
 * checkpoint: the file holds the whole model by name). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hcnn/common.h"
#include "hcnn/data.h"
#include "hcnn/files.h"
#include "run.h"

/* A checkpoint directory that cannot be written is found before training,
 * not at the first checkpoint (checkpoint_dir=/dev/null/ck used to lose
 * the whole run): create it, write, sync and remove a file.  Rank 0's. */
int run_check_checkpoint_dir(const hcnn_config *cfg)
{
    const char *dir = cfg->checkpoint_dir;
    if (!dir[0])
        return HCNN_OK;
    int rc = hcnn_mkdir_p(dir); /* its message names the directory */
    if (rc)
        return rc;
    char probe[HCNN_FILE_PATH_MAX + 64];
    snprintf(probe, sizeof probe, "%s/.hcnn-write-test-%ld", dir, (long)getpid());
    const int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
    const int ok = fd >= 0 && write(fd, "", 1) == 1 && fsync(fd) == 0;
    const int err = errno;
    if (fd >= 0) {
        close(fd);
        unlink(probe);
    }
    if (!ok)
        return hcnn_error_code(HCNN_EIO, "checkpoint_dir '%s' (%s) is not writable: %s",
                               dir, cfg->path, strerror(err));
    return HCNN_OK;
}

/* The checkpoint --resume names: a file, "latest" (must exist) or "auto"
 * (none: *path = ""). */
static int find_resume(const hcnn_config *cfg, const char *resume, char *path, size_t cap)
{
    path[0] = '\0';
    const int automatic = !strcmp(resume, "auto");
    if (!automatic && strcmp(resume, "latest")) {
        snprintf(path, cap, "%s", resume);
        return HCNN_OK;
    }
    if (!cfg->checkpoint_dir[0])
        return hcnn_error("--resume %s: %s sets no checkpoint_dir (key checkpoint_dir, or "
                          "--set checkpoint_dir=DIR)",
                          resume, cfg->path);
    if (!automatic)
        return hcnn_ckpt_latest(cfg->checkpoint_dir, path, cap);
    if (hcnn_ckpt_latest_quiet(cfg->checkpoint_dir, path, cap) != HCNN_OK)
        path[0] = '\0';
    return HCNN_OK;
}

/* hcnn train --check: what a job needs before it asks for nodes, without
 * training: the data sets read and checked against the model, the
 * checkpoint directory writable, the checkpoint to resume present and
 * whole, the CSV a regular file (if it exists) in a writable directory.
 * Serial, no MPI peers needed. */
int hcnn_train_check(const hcnn_config *cfg, const char *resume)
{
    hcnn_dataset train = {0}, test = {0};
    int rc = hcnn_dataset_open(cfg, &train, &test);
    const long ntrain = train.n, ntest = test.n;
    hcnn_dataset_free(&train);
    hcnn_dataset_free(&test);
    if (rc)
        return rc;
    if ((rc = run_check_checkpoint_dir(cfg)))
        return rc;
    if ((rc = report_csv_check(cfg)))
        return rc;
    if (cfg->csv[0]) {
        char dir[HCNN_FILE_PATH_MAX];
        snprintf(dir, sizeof dir, "%s", cfg->csv);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
        if (slash && (rc = hcnn_mkdir_p(dir)))
            return rc;
        struct stat sb;
        errno = 0;
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK) != 0)
            return hcnn_error_code(HCNN_EIO, "csv '%s' (%s): '%s' is not a writable directory%s%s",
                                   cfg->csv, cfg->path, dir, errno ? ": " : "",
                                   errno ? strerror(errno) : "");
    }
    char path[HCNN_FILE_PATH_MAX + 32] = "";
    hcnn_ckpt_file ck = {0};
    if (resume && (rc = find_resume(cfg, resume, path, sizeof path)))
        return rc;
    if (path[0] && (rc = hcnn_ckpt_read(path, &ck))) /* magic, version, CRCs */
        return rc;
    const hcnn_ckpt_meta meta = ck.meta;
    if (path[0])
        hcnn_ckpt_close(&ck);
    printf("hcnn: check: ok (%s: %ld training and %ld test samples of %s; checkpoint_dir %s; %s)\n",
           cfg->path, ntrain, ntest, cfg->dataset,
           cfg->checkpoint_dir[0] ? cfg->checkpoint_dir : "none (no checkpoints)",
           path[0] ? "resumes from the checkpoint" : resume ? "no checkpoint yet: a new run"
                                                           : "a new run");
    if (path[0])
        printf("hcnn: check: resume from %s: epoch %ld, batch %ld, step %ld\n", path,
               meta.epoch + 1, meta.batch, meta.step);
    return HCNN_OK;
}

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
int resume_from(hcnn_run *r, const char *resume, hcnn_ckpt_meta *meta, int *resumed)
{
    const hcnn_config *cfg = r->cfg;
    char path[HCNN_FILE_PATH_MAX + 32] = "";
    int rc = HCNN_OK;
    *resumed = 0;
    /* rank 0 looks in the directory: every rank then opens the same file */
    if (run_is_root(r))
        rc = find_resume(cfg, resume, path, sizeof path);
    if (r->comm->size > 1) {
        HCNN_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, r->comm->world));
        HCNN_MPI(MPI_Bcast(path, sizeof path, MPI_CHAR, 0, r->comm->world));
    }
    if (rc)
        return rc;
    if (!path[0]) { /* --resume auto, nothing written yet */
        if (run_is_root(r))
            printf("hcnn: --resume auto: no checkpoint (ckpt-s*.hcnn) in %s yet: a new run\n",
                   cfg->checkpoint_dir);
        return HCNN_OK;
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
    *resumed = 1;
    if (run_is_root(r))
        printf("hcnn: resuming from %s: epoch %ld, batch %ld, step %ld\n", path, meta->epoch + 1,
               meta->batch, meta->step);
    return HCNN_OK;
}
