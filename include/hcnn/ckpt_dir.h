/* A checkpoint directory: the lines of checkpoints it holds (its owner,
 * one run at a time, is include/hcnn/ckpt_lock.h).
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

#include "hcnn/checkpoint.h"

#define HCNN_RUN_TAG_LEN 6

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
