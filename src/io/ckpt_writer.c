/* Asynchronous checkpoint writer (see include/hcnn/ckpt_writer.h): the
 * snapshot is the backend's download of the model into host buffers. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
            hcnn_ckpt_prune(w->dir, w->keep);
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

int hcnn_ckpt_writer_init(hcnn_ckpt_writer *w, const hcnn_net *net, const char *dir, int keep)
{
    memset(w, 0, sizeof *w);
    w->net = net;
    w->keep = keep;
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    int rc = hcnn_mkdir_p(dir);
    if (rc)
        return rc;
    /* touched now, so that the first snapshot does not pay the page faults */
    w->params = hcnn_calloc(sizeof(float) * (net->nparams + 1), "checkpoint snapshot");
    w->momentum = hcnn_calloc(sizeof(float) * (net->nparams + 1), "checkpoint snapshot");
    w->state = hcnn_calloc(sizeof(float) * (net->nstate + 1), "checkpoint snapshot");
    if (!w->params || !w->momentum || !w->state)
        return HCNN_ENOMEM;
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
    net->be->download(w->params, net->params, sizeof(float) * net->nparams);
    net->be->download(w->state, net->state, sizeof(float) * net->nstate);
    net->be->download(w->momentum, momentum, sizeof(float) * net->nparams);
    w->meta = *meta;
    w->link_final = link_final_too;
    hcnn_ckpt_name(w->path, sizeof w->path, w->dir, meta->step);
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
    hcnn_free(w->params);
    hcnn_free(w->state);
    hcnn_free(w->momentum);
    memset(w, 0, sizeof *w);
}
