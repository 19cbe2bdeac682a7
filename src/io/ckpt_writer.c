/* Asynchronous checkpoint writer (see include/hcnn/ckpt_writer.h): the
 * snapshot is the backend's download of the model into host buffers. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcnn/ckpt_dir.h"
#include "hcnn/ckpt_writer.h"
#include "hcnn/common.h"

/* <dir>/final.hcnn becomes another name of the file just written (a hard
 * link, renamed into place so that it is never missing or torn). */
static void link_final(const hcnn_ckpt_writer *w)
{
    char tmp[HCNN_FILE_PATH_MAX + 48], fin[HCNN_FILE_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s/final.hcnn.tmp.%ld", w->dir, (long)getpid());
    snprintf(fin, sizeof fin, "%s/final.hcnn", w->dir);
    unlink(tmp);
    if (link(w->path, tmp) != 0 || rename(tmp, fin) != 0) {
        unlink(tmp);
        hcnn_warn("cannot link %s to %s", fin, w->path);
    }
}

static void *writer_main(void *arg)
{
    hcnn_ckpt_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && !w->busy)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->busy && w->stop)
            break;
        pthread_mutex_unlock(&w->mu);
        const double t0 = hcnn_now();
        int rc = hcnn_ckpt_save_buffers(w->path, w->net, w->params, w->state, w->momentum,
                                        &w->meta);
        if (!rc) {
            if (w->link_final)
                link_final(w);
            hcnn_ckpt_prune_line(w->dir, w->meta.run_id, w->keep);
        }
        pthread_mutex_lock(&w->mu);
        w->last_rc = rc;
        w->last_write_s = hcnn_now() - t0;
        w->busy = 0;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int hcnn_ckpt_writer_init(hcnn_ckpt_writer *w, const hcnn_net *net, const char *dir, int keep,
                          int tagged)
{
    memset(w, 0, sizeof *w);
    w->net = net;
    w->keep = keep;
    w->tagged = tagged;
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    int rc = hcnn_mkdir_p(dir);
    if (rc)
        return rc;
    /* everything a checkpoint needs, before the first step (a run that
     * trained for hours must not find at its first checkpoint that the
     * memory is not there); the pages touched, so that a limit on resident
     * memory shows now too, and the first snapshot does not pay the faults */
    const size_t np = net->nparams + 1, bytes = sizeof(float) * (2 * np + net->nstate + 1);
    void *block = NULL;
    if (posix_memalign(&block, 64, bytes) != 0 || !block)
        return hcnn_error_code(HCNN_ENOMEM,
                               "checkpoint_dir %s: checkpoints need %.1f MB of host memory for "
                               "their snapshot (parameters, momentum, statistics), reserved "
                               "before the first step; it could not be allocated: raise the "
                               "memory limit (ulimit -v, the job's memory) or set no "
                               "checkpoint_dir",
                               dir, (double)bytes / 1e6);
    memset(block, 0, bytes);
    w->params = block;
    w->momentum = w->params + np;
    w->state = w->momentum + np;
    if (pthread_mutex_init(&w->mu, NULL) || pthread_cond_init(&w->cv, NULL))
        return hcnn_error_code(HCNN_ENOMEM, "cannot create the checkpoint writer's lock");
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0)
        return hcnn_error_code(HCNN_ENOMEM, "cannot start the checkpoint writer thread");
    w->started = 1;
    return HCNN_OK;
}

int hcnn_ckpt_writer_wait(hcnn_ckpt_writer *w)
{
    if (!w->started)
        return HCNN_OK;
    pthread_mutex_lock(&w->mu);
    while (w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    int rc = w->last_rc;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int hcnn_ckpt_writer_unreported(hcnn_ckpt_writer *w)
{
    if (!w->started)
        return 0;
    pthread_mutex_lock(&w->mu);
    while (w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    const int pending = w->last_rc != HCNN_OK && !w->failure_seen;
    pthread_mutex_unlock(&w->mu);
    return pending;
}

int hcnn_ckpt_writer_failed(hcnn_ckpt_writer *w)
{
    if (!w->started)
        return HCNN_OK;
    pthread_mutex_lock(&w->mu);
    int rc = !w->busy && !w->failure_seen ? w->last_rc : HCNN_OK;
    if (rc)
        w->failure_seen = 1;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int hcnn_ckpt_writer_submit(hcnn_ckpt_writer *w, const float *momentum, const hcnn_ckpt_meta *meta,
                            int link_final_too, double *stall_s)
{
    const double t0 = hcnn_now();
    int rc = hcnn_ckpt_writer_wait(w); /* the previous write, unless already reported */
    if (w->failure_seen)
        rc = HCNN_OK;
    const hcnn_net *net = w->net;
    net->be->download(net->be, w->params, net->params, sizeof(float) * net->nparams);
    net->be->download(net->be, w->state, net->state, sizeof(float) * net->nstate);
    net->be->download(net->be, w->momentum, momentum, sizeof(float) * net->nparams);
    w->meta = *meta;
    w->link_final = link_final_too;
    /* this line's name, unless another line's checkpoint has it (a file
     * copied in since the run started): the tagged name then */
    hcnn_ckpt_name(w->path, sizeof w->path, w->dir, meta->step,
                   w->tagged ? hcnn_run_tag(meta->run_id) : NULL);
    hcnn_ckpt_meta there;
    if (!w->tagged && hcnn_ckpt_read_meta(w->path, &there, 1) == HCNN_OK &&
        strcmp(there.run_id, meta->run_id))
        hcnn_ckpt_name(w->path, sizeof w->path, w->dir, meta->step, hcnn_run_tag(meta->run_id));
    pthread_mutex_lock(&w->mu);
    w->busy = 1;
    w->failure_seen = 0;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (stall_s)
        *stall_s = hcnn_now() - t0;
    return rc;
}

void hcnn_ckpt_writer_free(hcnn_ckpt_writer *w)
{
    if (w->started) {
        hcnn_ckpt_writer_wait(w);
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
    }
    free(w->params); /* the one block of the three snapshots */
    memset(w, 0, sizeof *w);
}
