/* Checkpoints of a run: written (statistics averaged over the replicas,
 * the model gathered on rank 0, then snapshotted and written in the
 * background) and resumed (any strategy and rank count may resume any
 * checkpoint: the file holds the whole model by name). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hcnn/ckpt_dir.h"
#include "hcnn/ckpt_lock.h"
#include "hcnn/common.h"
#include "hcnn/files.h"
#include "run.h"

/* A checkpoint directory that cannot be written is found before training,
 * not at the first checkpoint (checkpoint_dir=/dev/null/ck used to lose
 * the whole run): create it, write, sync and remove a file.  Rank 0's. */
int hcnn_run_check_checkpoint_dir(const hcnn_config *cfg)
{
    const char *dir = cfg->checkpoint_dir;
    if (!dir[0])
        return HCNN_OK;
    char what[HCNN_PATH_MAX + 64];
    snprintf(what, sizeof what, "key checkpoint_dir in %s", cfg->path);
    int rc = hcnn_mkdir_p_for(dir, what);
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

/* What a line of checkpoints must match to be this run's. */
static hcnn_run_ident run_ident(const hcnn_config *cfg, const hcnn_net *net, long train_samples)
{
    const char *job = getenv("SLURM_JOB_ID");
    return (hcnn_run_ident){.net = net,
                            .model = cfg->model.name,
                            .dataset = cfg->dataset,
                            .train_samples = train_samples,
                            .seed = cfg->seed,
                            .slurm_job = job ? job : "",
                            .cfg_path = cfg->path};
}

/* The checkpoint --resume names: a file, or for "latest" (must exist) and
 * "auto" (none: *path = "") the one hcnn_ckpt_pick_resume chooses. */
static int find_resume(const hcnn_config *cfg, const hcnn_run_ident *want, const char *resume,
                       char *path, size_t cap)
{
    path[0] = '\0';
    const int automatic = !strcmp(resume, "auto");
    if (!automatic && strcmp(resume, "latest")) {
        snprintf(path, cap, "%s", resume);
        /* held to the same match as auto and latest (exit 2, naming both
         * runs), not only to the model's hash as it loads (exit 1) */
        hcnn_ckpt_meta meta;
        const int rc = hcnn_ckpt_read_meta(path, &meta, 0);
        return rc ? rc : hcnn_ckpt_check_ident(path, &meta, want);
    }
    if (!cfg->checkpoint_dir[0])
        return hcnn_error("--resume %s: %s sets no checkpoint_dir (key checkpoint_dir, or "
                          "--set checkpoint_dir=DIR)",
                          resume, cfg->path);
    return hcnn_ckpt_pick_resume(cfg->checkpoint_dir, want, !automatic, path, cap);
}

int hcnn_check_resume(const hcnn_config *cfg, const char *resume, long train_samples,
                      char *path, size_t cap, hcnn_ckpt_meta *meta)
{
    hcnn_net net; /* the model's hash, to match the checkpoint to this run */
    int rc = hcnn_net_create(&net, &cfg->model, hcnn_backend_cpu(), cfg->path);
    if (rc)
        return rc;
    const hcnn_run_ident want = run_ident(cfg, &net, train_samples);
    rc = find_resume(cfg, &want, resume, path, cap);
    hcnn_ckpt_file ck = {0};
    if (!rc && path[0] && !(rc = hcnn_ckpt_read(path, &ck))) { /* magic, version, CRCs */
        *meta = ck.meta;
        hcnn_ckpt_close(&ck);
        rc = hcnn_ckpt_check_ident(path, meta, &want);
    }
    hcnn_net_free(&net);
    return rc;
}

int hcnn_run_save_checkpoint(hcnn_run *r, long epochs_done, long batch, const epoch_stats *st,
                             int final, int wait)
{
    const hcnn_config *cfg = r->cfg;
    if (!cfg->checkpoint_dir[0])
        return HCNN_OK;
    int rc = hcnn_run_average_bn_state(r);
    if (!rc)
        rc = r->strat.ops->gather(&r->strat, r->opt.velocity);
    if (rc || !run_is_root(r))
        return rc;
    if ((rc = hcnn_ckpt_lock_check(&r->lock))) /* another run owns the directory now */
        return rc;
    /* The previous write failed after the last step's agreement looked (the
     * writer outlasted the steps since: a loaded machine; rank 0 then ended
     * the job alone, without the agreement's message): the next step's
     * agreement reports it on every rank, as any failed write, and this
     * checkpoint is not taken.  A final one has no next step: submit
     * returns the failure. */
    if (!final && hcnn_ckpt_writer_unreported(&r->writer))
        return HCNN_OK;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    hcnn_ckpt_meta meta = {.epoch = epochs_done,
                           .batch = batch,
                           .step = r->step,
                           .seed = cfg->seed,
                           .batch_size = cfg->batch_size,
                           .lr = st->lr,
                           .parent_step = r->parent_step,
                           .train_samples = r->train.n,
                           .written = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec};
    if (batch > 0) { /* the epoch in progress */
        meta.loss_sum = st->loss_sum, meta.correct = st->correct, meta.seen = st->seen;
    }
    snprintf(meta.model, sizeof meta.model, "%s", cfg->model.name);
    snprintf(meta.run_id, sizeof meta.run_id, "%s", r->run_id);
    snprintf(meta.parent_run, sizeof meta.parent_run, "%s", r->parent_run);
    snprintf(meta.dataset, sizeof meta.dataset, "%s", cfg->dataset);
    const char *job = getenv("SLURM_JOB_ID");
    snprintf(meta.slurm_job, sizeof meta.slurm_job, "%s", job ? job : "");
    double stall = 0.0;
    rc = hcnn_ckpt_writer_submit(&r->writer, r->opt.velocity, &meta, final, &stall);
    if (rc && cfg->checkpoint_on_error == HCNN_ON_ERROR_CONTINUE) {
        hcnn_warn("the previous checkpoint could not be written (cause above); training goes "
                  "on (checkpoint_on_error: continue)");
        rc = HCNN_OK;
    }
    if (!rc && wait)
        rc = hcnn_ckpt_writer_wait(&r->writer);
    if (!rc && !r->quiet) {
        printf("checkpoint=%s epoch=%ld step=%ld stall_s=%.4f%s\n", r->writer.path, epochs_done,
               r->step, stall, wait ? "" : " (written in the background)");
        fflush(stdout);
    }
    return rc;
}

/* 1 when checkpoint_dir, or the directory of path, holds a later
 * checkpoint of meta's line than meta's own step: resuming meta then rolls
 * the line back. */
static int line_has_later(const hcnn_config *cfg, const char *path, const hcnn_ckpt_meta *meta)
{
    char dir[HCNN_FILE_PATH_MAX], newest[HCNN_FILE_PATH_MAX + 48];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    const char *dirs[2] = {cfg->checkpoint_dir, dir};
    for (int k = 0; k < 2; k++) {
        hcnn_ckpt_meta m;
        if (!dirs[k][0])
            continue;
        hcnn_ckpt_line_newest(dirs[k], meta->run_id, newest, sizeof newest);
        if (newest[0] && hcnn_ckpt_read_meta(newest, &m, 1) == HCNN_OK && m.step > meta->step)
            return 1;
    }
    return 0;
}

/* Rank 0, after the resume: which line this run writes, the lock and the
 * checkpoint writer (its memory reserved now), one line saying so. */
static int open_line(hcnn_run *r, const char *path, const hcnn_ckpt_meta *meta)
{
    const hcnn_config *cfg = r->cfg;
    const char *dir = cfg->checkpoint_dir;
    hcnn_ckpt_list list = {0};
    int rc = dir[0] ? hcnn_ckpt_list_dir(dir, &list) : HCNN_OK;
    if (rc)
        return rc;
    char how[512];
    if (path[0] && meta->run_id[0] && !line_has_later(cfg, path, meta)) {
        snprintf(r->run_id, sizeof r->run_id, "%s", meta->run_id); /* continues its line */
        snprintf(r->parent_run, sizeof r->parent_run, "%s", meta->parent_run);
        r->parent_step = meta->parent_step;
        snprintf(how, sizeof how, "continues its line from step %ld", meta->step);
    } else {
        hcnn_run_id_new(r->run_id, sizeof r->run_id, &list);
        if (path[0]) { /* from a checkpoint that is not its line's newest */
            snprintf(r->parent_run, sizeof r->parent_run, "%s", meta->run_id);
            r->parent_step = meta->step;
            snprintf(how, sizeof how,
                     "a new line from step %ld of %s (%s; its checkpoints are kept)", meta->step,
                     meta->run_id[0] ? meta->run_id : "a run without a run id",
                     meta->run_id[0] ? "a roll back: that line has later checkpoints"
                                     : "written before run ids");
        } else {
            snprintf(how, sizeof how, "a new run");
        }
    }
    if (!dir[0]) /* `checkpoint_dir: ~` (YAML's null) also ends here: say so */
        snprintf(r->ckpt_note, sizeof r->ckpt_note,
                 "hcnn: checkpoints: off (checkpoint_dir is empty: no checkpoint will be "
                 "written, and a stopped run cannot be resumed; %s); run %s\n",
                 cfg->path, r->run_id);
    if (dir[0]) {
        r->tagged = hcnn_ckpt_others_present(&list, r->run_id);
        int others = 0;
        for (int i = 0; i < list.n; i++)
            others += strcmp(list.e[i].meta.run_id, r->run_id) || !r->run_id[0];
        char name[HCNN_FILE_PATH_MAX + 48], note[96] = "";
        hcnn_ckpt_name(name, sizeof name, dir, 0, r->tagged ? hcnn_run_tag(r->run_id) : NULL);
        char *pattern = strrchr(name, '/') + 1;
        memcpy(pattern + 6, "<step>", 6); /* ckpt-s<step>[-tag].hcnn */
        memmove(pattern + 12, pattern + 16, strlen(pattern + 16) + 1);
        if (others)
            snprintf(note, sizeof note, "; %d checkpoint%s of other runs left as they are",
                     others, others > 1 ? "s" : "");
        char every[96];
        if (cfg->checkpoint_every > 0)
            snprintf(every, sizeof every, "every %d epoch%s", cfg->checkpoint_every,
                     cfg->checkpoint_every == 1 ? "" : "s");
        else /* checkpoint_every: 0 once read "every 0 epochs" */
            snprintf(every, sizeof every, "at the end and on SIGTERM/SIGUSR1 only: "
                                          "checkpoint_every 0");
        snprintf(r->ckpt_note, sizeof r->ckpt_note,
               "hcnn: checkpoints: run %s, %s; written to %s/%s (%s, the newest %d of this run "
               "kept)%s\n",
               r->run_id, how, dir, pattern, every, cfg->checkpoint_keep, note);
        rc = hcnn_ckpt_lock_set_run(&r->lock, r->run_id);
        if (!rc)
            rc = hcnn_ckpt_writer_init(&r->writer, &r->net, dir, cfg->checkpoint_keep,
                                       r->tagged);
        if (!rc)
            r->writer_ready = 1;
    }
    hcnn_ckpt_list_free(&list);
    fflush(stdout);
    return rc;
}

/* The checkpoint at path loaded into the network and momentum and checked
 * to be this run's (seed, identity, a position that exists here). */
static int load_resumed(hcnn_run *r, const char *path, const hcnn_run_ident *want,
                        hcnn_ckpt_meta *meta)
{
    const hcnn_config *cfg = r->cfg;
    int rc = hcnn_ckpt_load(path, &r->net, r->opt.velocity, meta);
    if (rc)
        return rc;
    const long per_epoch = (r->train.n + cfg->batch_size - 1) / cfg->batch_size;
    if (meta->seed != cfg->seed)
        return hcnn_error("%s: written with seed %llu, %s has seed %llu: the data order would "
                          "differ",
                          path, (unsigned long long)meta->seed, cfg->path,
                          (unsigned long long)cfg->seed);
    if ((rc = hcnn_ckpt_check_ident(path, meta, want)))
        return rc;
    if (meta->batch > 0 && meta->batch_size != cfg->batch_size)
        return hcnn_error("%s: stopped inside an epoch with batch_size %d, %s has %d", path,
                          meta->batch_size, cfg->path, cfg->batch_size);
    if (meta->batch >= per_epoch)
        return hcnn_error("%s: stopped after batch %ld of an epoch, but an epoch of %s has %ld "
                          "batches (%d training samples, batch_size %d): the position does not "
                          "exist in this run",
                          path, meta->batch, cfg->path, per_epoch, r->train.n, cfg->batch_size);
    return HCNN_OK;
}

/* Every rank loads the checkpoint rank 0 found from its own file system (a
 * node-local checkpoint_dir, a path relative to each rank's working
 * directory): the copies must be one checkpoint, the same tensors and
 * position.  Different copies once trained on without a word: a pipeline's
 * stages each continued another checkpoint's blocks (a hybrid model, exit
 * 0), data parallelism failed "replicas diverged" at the end, copies at
 * other steps stalled until the watchdog fired.  Collective, rc this rank's
 * load: a rank that failed is not waited for (HCNN_EAGREED on the others,
 * after its own message); different copies are refused on every rank
 * (HCNN_EAGREED after one message from rank 0 naming the ranks). */
static int agree_on_resumed(const hcnn_run *r, const char *path, const hcnn_ckpt_meta *meta,
                            int rc)
{
    const hcnn_comm *comm = r->comm;
    long long *all = rc ? NULL : malloc(3 * sizeof *all * (size_t)comm->size);
    int ok = all != NULL;
    HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm->world));
    if (!ok) {
        const int no_memory = !rc && !all;
        free(all);
        if (rc)
            return rc;
        return no_memory ? hcnn_error_code(HCNN_ENOMEM, "cannot allocate the ranks' checkpoint "
                                                        "identities")
                         : HCNN_EAGREED;
    }
    const long long mine[3] = {(long long)meta->content_crc, meta->step, meta->batch};
    hcnn_watch_context("comparing the ranks' checkpoints");
    HCNN_MPI(MPI_Allgather(mine, 3, MPI_LONG_LONG, all, 3, MPI_LONG_LONG, comm->world));
    hcnn_watch_context(NULL);
    int differ = 0;
    char ranks[256] = "", first[192] = "";
    for (int j = 1; j < comm->size; j++) {
        const long long *o = all + 3 * (size_t)j;
        if (!memcmp(o, all, sizeof mine))
            continue;
        hcnn_run_list_rank(ranks, sizeof ranks, &differ, j);
        if (!first[0])
            snprintf(first, sizeof first,
                     "rank %d's is at step %lld with content CRC32 %08llx, rank 0's at step %lld "
                     "with %08llx",
                     j, o[1], (unsigned long long)o[0], all[1], (unsigned long long)all[0]);
    }
    if (differ && comm->rank == 0)
        hcnn_error("the ranks loaded different copies of checkpoint %s (each rank reads it from "
                   "its own file system): rank%s %s differ%s from rank 0 (%s); give every rank "
                   "the same file (a checkpoint_dir shared by the nodes, or the file copied to "
                   "each)",
                   path, differ > 1 ? "s" : "", ranks, differ > 1 ? "" : "s", first);
    free(all);
    return differ ? HCNN_EAGREED : HCNN_OK;
}

/* The checkpoint directory taken (rank 0), the checkpoint to resume found
 * and loaded (every rank: it holds the whole model, whatever layout wrote
 * it), the line this run writes opened (rank 0).  Collective. */
int hcnn_run_open_checkpoints(hcnn_run *r, const char *resume, hcnn_ckpt_meta *meta, int *resumed)
{
    const hcnn_config *cfg = r->cfg;
    char path[HCNN_FILE_PATH_MAX + 48] = "";
    int rc = HCNN_OK;
    *resumed = 0;
    memset(meta, 0, sizeof *meta);
    const hcnn_run_ident want = run_ident(cfg, &r->net, r->train.n);
    if (run_is_root(r)) {
        rc = hcnn_run_check_checkpoint_dir(cfg);
        /* the lock before anything in the directory is read */
        if (!rc && cfg->checkpoint_dir[0]) {
            char provisional[HCNN_RUN_ID_MAX];
            hcnn_run_id_new(provisional, sizeof provisional, NULL);
            rc = hcnn_ckpt_lock_take(&r->lock, cfg->checkpoint_dir, provisional, cfg->path);
        }
        if (!rc && resume)
            rc = find_resume(cfg, &want, resume, path, sizeof path);
    }
    if (r->comm->size > 1) {
        HCNN_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, r->comm->world));
        HCNN_MPI(MPI_Bcast(path, sizeof path, MPI_CHAR, 0, r->comm->world));
    }
    if (rc)
        return rc;
    if (resume && !path[0] && run_is_root(r)) /* --resume auto, nothing written yet */
        printf("hcnn: --resume auto: no checkpoint (ckpt-s*.hcnn) in %s yet: a new run\n",
               cfg->checkpoint_dir);
    if (path[0]) {
        rc = load_resumed(r, path, &want, meta);
        if (r->comm->size > 1)
            rc = agree_on_resumed(r, path, meta, rc);
        if (rc)
            return rc;
        r->step = meta->step;
        r->bn_state_agreed = 1; /* one checkpoint on every rank (agree_on_resumed) */
        *resumed = 1;
        if (run_is_root(r) && !r->quiet)
            printf("hcnn: resuming from %s: epoch %ld, batch %ld, step %ld\n", path,
                   meta->epoch + 1, meta->batch, meta->step);
    }
    if (run_is_root(r))
        rc = open_line(r, path, meta);
    return rc;
}
