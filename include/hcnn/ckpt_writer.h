/* Asynchronous checkpoint writer.
 *
 * Training must not stall while a checkpoint is written: submit() copies
 * the parameters, statistics and momentum into snapshot buffers (the only
 * time the training thread spends) and a background thread serialises,
 * writes, fsyncs and renames the file, then prunes old checkpoints.  One
 * write is in flight at a time: a submit while the previous write runs
 * waits for it (that wait counts as stall).  Only one rank owns a writer.
 * Pruning keeps the newest `keep` checkpoints of the run's own line. */
#ifndef HCNN_CKPT_WRITER_H
#define HCNN_CKPT_WRITER_H

#include <pthread.h>

#include "hcnn/checkpoint.h"

typedef struct hcnn_ckpt_writer {
    const hcnn_net *net;         /* tensor table and model hash (read-only) */
    float *params, *state, *momentum; /* snapshots */
    hcnn_ckpt_meta meta;
    char dir[HCNN_FILE_PATH_MAX];
    char path[HCNN_FILE_PATH_MAX + 32];
    int keep;                    /* checkpoints of the line kept (older ones are deleted) */
    int tagged;                  /* names carry the run's tag (include/hcnn/ckpt_dir.h) */
    int link_final;              /* also make <dir>/final.hcnn point to it */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started, busy, stop;
    int last_rc;                 /* result of the last write */
    int failure_seen;            /* hcnn_ckpt_writer_failed reported last_rc */
    double last_write_s;         /* background time of the last write */
} hcnn_ckpt_writer;

/* Allocates and touches the snapshot buffers (refusing, with the size, when
 * they cannot be had) and starts the thread; tagged: see hcnn_ckpt_name. */
int hcnn_ckpt_writer_init(hcnn_ckpt_writer *w, const hcnn_net *net, const char *dir, int keep,
                          int tagged);
/* Snapshot and write in the background; *stall_s gets the time taken from
 * the caller.  Returns the result of the previous write (HCNN_OK if none,
 * or if hcnn_ckpt_writer_failed reported it). */
int hcnn_ckpt_writer_submit(hcnn_ckpt_writer *w, const float *momentum, const hcnn_ckpt_meta *meta,
                            int link_final, double *stall_s);
/* Without waiting: the error of the last write if it failed and no earlier
 * call reported it (the path it was writing is w->path), else HCNN_OK. */
int hcnn_ckpt_writer_failed(hcnn_ckpt_writer *w);
/* Wait for the write in flight; 1 if it failed and hcnn_ckpt_writer_failed
 * has not reported it yet (it still will), else 0. */
int hcnn_ckpt_writer_unreported(hcnn_ckpt_writer *w);
/* Wait for the write in flight; returns its result and the path written. */
int hcnn_ckpt_writer_wait(hcnn_ckpt_writer *w);
void hcnn_ckpt_writer_free(hcnn_ckpt_writer *w);

#endif
