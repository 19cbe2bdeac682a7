/* A checkpoint directory's owner: one run at a time.
 *
 * A training run that writes checkpoints takes <dir>/.hcnn-lock
 * before it reads or writes anything there (created whole under a
 * temporary name and hard-linked into place: of two runs starting at once,
 * one gets it) and removes it at the end.  The file names the holder
 * (run id, host, pid, Slurm job, config, start time); its modification
 * time is the holder's heartbeat, refreshed every HCNN_LOCK_BEAT_S seconds
 * by a thread of the holder.  A lock is stale, and taken over with a note,
 * when its holder's process has exited (same host), when it belongs to the
 * same Slurm job (a requeued job may restart on another host), or when its
 * heartbeat is older than HCNN_LOCK_STALE_S; otherwise the run refuses to
 * start, naming the holder.  Taking the directory removes the temporary
 * files killed writers left (ckpt-s*.tmp.*, about 89 MB each for
 * ResNet-18).  The holder checks that the lock is still its own before
 * each checkpoint. */
#ifndef HCNN_CKPT_LOCK_H
#define HCNN_CKPT_LOCK_H

#include <pthread.h>
#include <stdatomic.h>

#include "hcnn/files.h"

#define HCNN_LOCK_BEAT_S 5   /* the holder touches its lock this often */
#define HCNN_LOCK_STALE_S 60 /* a lock not touched for this long is stale */

/* The lock a run holds on its checkpoint directory. */
typedef struct hcnn_ckpt_lock {
    char dir[HCNN_FILE_PATH_MAX];
    char path[HCNN_FILE_PATH_MAX + 16];
    char token[128];     /* "host pid start-time": which process holds it */
    char text[1024];     /* the lock file's content */
    pthread_t beat;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int beating, stop, held;
    atomic_int lost;     /* the heartbeat found another holder */
    atomic_llong last_beat; /* when the heartbeat last touched it (seconds, CLOCK_REALTIME) */
    atomic_llong gone_at;   /* when the heartbeat first found it missing, 0: never */
} hcnn_ckpt_lock;

/* Takes dir for run_id (rank 0, before anything in dir is read or
 * written); notes a take-over and the temporary files removed; refuses
 * (HCNN_EIO) naming a live holder. */
int hcnn_ckpt_lock_take(hcnn_ckpt_lock *l, const char *dir, const char *run_id,
                        const char *cfg_path);
/* The run id the lock names (after the resume decided the line). */
int hcnn_ckpt_lock_set_run(hcnn_ckpt_lock *l, const char *run_id);
/* HCNN_OK while the lock is this process's; else HCNN_EIO naming who holds
 * it now. */
int hcnn_ckpt_lock_check(hcnn_ckpt_lock *l);
/* Stops the heartbeat and removes the lock if it is still this process's. */
void hcnn_ckpt_lock_release(hcnn_ckpt_lock *l);
/* hcnn train --check: HCNN_OK when dir has no live holder; else the
 * message lock_take would print. */
int hcnn_ckpt_lock_probe(const char *dir);

#endif
