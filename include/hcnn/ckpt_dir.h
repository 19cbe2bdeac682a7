/* A checkpoint directory: its owner, one run at a time, and the lines of
 * checkpoints it holds.
 *
 * Owner.  A training run that writes checkpoints takes <dir>/.hcnn-lock
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
 * each checkpoint.
 *
 * Lines.  Every checkpoint's META names its run (run_id), the line of
 * checkpoints it belongs to; a run that resumes its line's newest
 * checkpoint continues the line, one that resumes an older one (a roll
 * back) starts a new line recording its parent (run and step).  Pruning
 * (checkpoint_keep) deletes only the run's own line; --resume auto|latest
 * takes the line of the newest checkpoint written in the directory (by its
 * META's write time), or of the newest of this Slurm job's if it has any,
 * and in that line the checkpoint of the highest step (never the write
 * time: nodes' clocks differ), and refuses one of another model, data set
 * or seed, naming both.
 *
 * Names.  ckpt-s<step, 10 digits>.hcnn; a line that starts where other
 * lines' checkpoints are names its files ckpt-s<step>-<tag>.hcnn, tag =
 * the last 6 characters of its run id, so that no line overwrites
 * another's. */
#ifndef HCNN_CKPT_DIR_H
#define HCNN_CKPT_DIR_H

#include <pthread.h>
#include <stdatomic.h>

#include "hcnn/checkpoint.h"

#define HCNN_LOCK_BEAT_S 5   /* the holder touches its lock this often */
#define HCNN_LOCK_STALE_S 60 /* a lock not touched for this long is stale */
#define HCNN_RUN_TAG_LEN 6

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

/* The checkpoints of a directory with their META, oldest write first. */
typedef struct hcnn_ckpt_entry {
    char path[HCNN_FILE_PATH_MAX + 48];
    hcnn_ckpt_meta meta;
    double order;        /* META's write time, else the file's mtime */
    int unreadable;      /* its META could not be read */
} hcnn_ckpt_entry;

typedef struct hcnn_ckpt_list {
    hcnn_ckpt_entry *e;
    int n;
} hcnn_ckpt_list;

int hcnn_ckpt_list_dir(const char *dir, hcnn_ckpt_list *list);
void hcnn_ckpt_list_free(hcnn_ckpt_list *list);

/* A fresh run id, "<UTC time>-<6 hex digits>", whose tag no checkpoint of
 * list carries. */
void hcnn_run_id_new(char *id, size_t cap, const hcnn_ckpt_list *list);
/* The tag of a run id in file names (its last HCNN_RUN_TAG_LEN characters). */
const char *hcnn_run_tag(const char *run_id);
/* Whether list holds checkpoints of lines other than run_id (then run_id's
 * files are named with its tag). */
int hcnn_ckpt_others_present(const hcnn_ckpt_list *list, const char *run_id);
/* dir/ckpt-s<step>.hcnn, or dir/ckpt-s<step>-<tag>.hcnn when tag is set. */
void hcnn_ckpt_name(char *buf, size_t cap, const char *dir, long step, const char *tag);
/* The newest checkpoint of run_id's line in dir ("" if none). */
void hcnn_ckpt_line_newest(const char *dir, const char *run_id, char *buf, size_t cap);
/* Deletes all but the newest `keep` checkpoints of run_id's line; never a
 * file of another line or one without a run id. */
void hcnn_ckpt_prune_line(const char *dir, const char *run_id, int keep);

/* What a line must match to be resumed: the model, the data set, the seed. */
typedef struct hcnn_run_ident {
    const hcnn_net *net;
    const char *model;      /* its name in the configuration */
    const char *dataset;
    long train_samples;
    uint64_t seed;
    const char *slurm_job;  /* "" outside Slurm */
    const char *cfg_path;
} hcnn_run_ident;

/* --resume auto (required 0) or latest (required 1): the checkpoint to
 * resume into path, "" for auto when dir holds none; refuses (HCNN_EINVAL)
 * when the chosen one belongs to another model, data set or seed, naming
 * both. */
int hcnn_ckpt_pick_resume(const char *dir, const hcnn_run_ident *want, int required, char *path,
                          size_t cap);
/* The same test for a checkpoint the user named: HCNN_EINVAL with one
 * message when meta's data set or seed differ from want's (the model is
 * checked by the load). */
int hcnn_ckpt_check_ident(const char *path, const hcnn_ckpt_meta *meta,
                          const hcnn_run_ident *want);

#endif
