/* A checkpoint directory's lines of checkpoints: their names, the listing,
 * pruning and which one a run resumes (contract in include/hcnn/ckpt_dir.h;
 * the directory's lock is src/io/ckpt_lock.c). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* gethostname */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hcnn/ckpt_dir.h"
#include "hcnn/common.h"

/* ---- the lines ---------------------------------------------------------- */

/* ckpt-s<10 digits>.hcnn or ckpt-s<10 digits>-<tag>.hcnn: the step, or -1 */
static long parse_name(const char *n)
{
    const size_t len = strlen(n);
    if (strncmp(n, "ckpt-s", 6) || (len != 21 && len != 22 + HCNN_RUN_TAG_LEN))
        return -1;
    long step = 0;
    for (int i = 6; i < 16; i++) {
        if (n[i] < '0' || n[i] > '9')
            return -1;
        step = step * 10 + (n[i] - '0');
    }
    const char *rest = n + 16;
    if (len == 21)
        return strcmp(rest, ".hcnn") ? -1 : step;
    if (rest[0] != '-' || strcmp(rest + 1 + HCNN_RUN_TAG_LEN, ".hcnn"))
        return -1;
    for (int i = 1; i <= HCNN_RUN_TAG_LEN; i++)
        if (!((rest[i] >= '0' && rest[i] <= '9') || (rest[i] >= 'a' && rest[i] <= 'f')))
            return -1;
    return step;
}

static int by_order(const void *a, const void *b)
{
    const hcnn_ckpt_entry *x = a, *y = b;
    if (x->order != y->order)
        return x->order < y->order ? -1 : 1;
    return x->meta.step < y->meta.step ? -1 : x->meta.step > y->meta.step;
}

int hcnn_ckpt_list_dir(const char *dir, hcnn_ckpt_list *list)
{
    memset(list, 0, sizeof *list);
    DIR *d = opendir(dir);
    if (!d)
        return HCNN_OK;
    int cap = 0;
    struct dirent *e;
    int rc = HCNN_OK;
    while ((e = readdir(d)) != NULL) {
        const long step = parse_name(e->d_name);
        if (step < 0)
            continue;
        if (list->n == cap) {
            cap = cap ? 2 * cap : 16;
            hcnn_ckpt_entry *grown = realloc(list->e, sizeof *grown * (size_t)cap);
            if (!grown) {
                rc = hcnn_error_code(HCNN_ENOMEM, "cannot list the checkpoints of %s", dir);
                break;
            }
            list->e = grown;
        }
        hcnn_ckpt_entry *en = &list->e[list->n];
        memset(en, 0, sizeof *en);
        snprintf(en->path, sizeof en->path, "%s/%s", dir, e->d_name);
        en->unreadable = hcnn_ckpt_read_meta(en->path, &en->meta, 1) != HCNN_OK;
        if (en->unreadable)
            en->meta.step = step;
        struct stat st;
        const double mtime = stat(en->path, &st) == 0 ? (double)st.st_mtime : 0.0;
        en->order = en->meta.written > 0 ? en->meta.written : mtime;
        list->n++;
    }
    closedir(d);
    if (rc) {
        hcnn_ckpt_list_free(list);
        return rc;
    }
    if (list->n > 1) /* e is NULL for an empty directory */
        qsort(list->e, (size_t)list->n, sizeof *list->e, by_order);
    return HCNN_OK;
}

void hcnn_ckpt_list_free(hcnn_ckpt_list *list)
{
    free(list->e);
    memset(list, 0, sizeof *list);
}

const char *hcnn_run_tag(const char *run_id)
{
    const size_t n = strlen(run_id);
    return n >= HCNN_RUN_TAG_LEN ? run_id + n - HCNN_RUN_TAG_LEN : run_id;
}

void hcnn_run_id_new(char *id, size_t cap, const hcnn_ckpt_list *list)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    /* a hash of what tells two starts apart: host, pid, the nanosecond */
    uint64_t h = 0xcbf29ce484222325ull;
    const long long v[3] = {(long long)getpid(), (long long)now.tv_sec, (long long)now.tv_nsec};
    for (size_t i = 0; i < strlen(host); i++)
        h = (h ^ (unsigned char)host[i]) * 0x100000001b3ull;
    for (int attempt = 0;; attempt++) {
        uint64_t x = h;
        const unsigned char *p = (const unsigned char *)v;
        for (size_t i = 0; i < sizeof v; i++)
            x = (x ^ p[i]) * 0x100000001b3ull;
        x = (x ^ (uint64_t)attempt) * 0x100000001b3ull;
        struct tm tmv;
        const time_t t = now.tv_sec;
        gmtime_r(&t, &tmv);
        char ts[32];
        strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", &tmv);
        snprintf(id, cap, "%s-%06" PRIx64, ts, (x ^ (x >> 29)) & 0xffffff);
        int clash = 0;
        for (int i = 0; list && i < list->n && !clash; i++)
            clash = !strcmp(hcnn_run_tag(list->e[i].meta.run_id), hcnn_run_tag(id));
        if (!clash)
            return;
    }
}

int hcnn_ckpt_others_present(const hcnn_ckpt_list *list, const char *run_id)
{
    for (int i = 0; i < list->n; i++)
        if (strcmp(list->e[i].meta.run_id, run_id) || !run_id[0])
            return 1;
    return 0;
}

void hcnn_ckpt_name(char *buf, size_t cap, const char *dir, long step, const char *tag)
{
    if (tag && tag[0])
        snprintf(buf, cap, "%s/ckpt-s%010ld-%s.hcnn", dir, step, tag);
    else
        snprintf(buf, cap, "%s/ckpt-s%010ld.hcnn", dir, step);
}

/* The entries of run_id's line, by step (their indices into list) */
static int line_entries(const hcnn_ckpt_list *list, const char *run_id, int *idx)
{
    int n = 0;
    for (int i = 0; i < list->n; i++)
        if (run_id[0] && !list->e[i].unreadable && !strcmp(list->e[i].meta.run_id, run_id))
            idx[n++] = i;
    for (int i = 1; i < n; i++) /* insertion sort by step */
        for (int j = i; j > 0 && list->e[idx[j - 1]].meta.step > list->e[idx[j]].meta.step; j--) {
            const int t = idx[j];
            idx[j] = idx[j - 1], idx[j - 1] = t;
        }
    return n;
}

void hcnn_ckpt_line_newest(const char *dir, const char *run_id, char *buf, size_t cap)
{
    buf[0] = '\0';
    hcnn_ckpt_list list;
    if (hcnn_ckpt_list_dir(dir, &list) != HCNN_OK)
        return;
    int *idx = malloc(sizeof *idx * (size_t)(list.n + 1));
    const int n = idx ? line_entries(&list, run_id, idx) : 0;
    if (n > 0)
        snprintf(buf, cap, "%s", list.e[idx[n - 1]].path);
    free(idx);
    hcnn_ckpt_list_free(&list);
}

void hcnn_ckpt_prune_line(const char *dir, const char *run_id, int keep)
{
    hcnn_ckpt_list list;
    if (!run_id[0] || hcnn_ckpt_list_dir(dir, &list) != HCNN_OK)
        return;
    int *idx = malloc(sizeof *idx * (size_t)(list.n + 1));
    const int n = idx ? line_entries(&list, run_id, idx) : 0;
    for (int i = 0; i < n - keep; i++)
        unlink(list.e[idx[i]].path);
    free(idx);
    hcnn_ckpt_list_free(&list);
}

/* ---- which checkpoint a run resumes ------------------------------------- */

static void ident_text(const hcnn_ckpt_meta *m, char *out, size_t cap)
{
    snprintf(out, cap, "run %s, model '%s' (hash %016" PRIx64 "%s), data set %s (%ld training "
                       "samples), seed %" PRIu64,
             m->run_id[0] ? m->run_id : "(written before run ids)", m->model, m->model_hash,
             m->hash_version < 2 ? ", version 1" : "", m->dataset[0] ? m->dataset : "?",
             m->train_samples, m->seed);
}

/* What of want differs in meta (NULL: it is want's run) */
static const char *ident_differs(const hcnn_ckpt_meta *meta, const hcnn_run_ident *want)
{
    if (!hcnn_ckpt_meta_matches_model(meta, want->net))
        return "model";
    if (meta->dataset[0] && strcmp(meta->dataset, want->dataset))
        return "data set";
    if (meta->train_samples > 0 && meta->train_samples != want->train_samples)
        return "number of training samples";
    if (meta->seed != want->seed)
        return "seed";
    return NULL;
}

/* One message: what (the checkpoint, as the caller words it) belongs to
 * another run, both named, and what differs. */
static int refuse_ident(const char *what, const hcnn_ckpt_meta *meta, const hcnn_run_ident *want,
                        const char *differs)
{
    char have[512];
    ident_text(meta, have, sizeof have);
    return hcnn_error("%s belongs to another run (%s); %s has model '%s' (hash %016" PRIx64
                      "), data set %s (%ld training samples), seed %" PRIu64
                      ": they differ in the %s; resume it with that run's configuration, or "
                      "give this run another checkpoint_dir",
                      what, have, want->cfg_path, want->model, want->net->model_hash,
                      want->dataset, want->train_samples, want->seed, differs);
}

int hcnn_ckpt_check_ident(const char *path, const hcnn_ckpt_meta *meta,
                          const hcnn_run_ident *want)
{
    const char *differs = ident_differs(meta, want);
    return differs ? refuse_ident(path, meta, want, differs) : HCNN_OK;
}

/* The tag in a checkpoint's file name (ckpt-s<step>-<tag>.hcnn), "" for none */
static const char *name_tag(const char *path, char *tag)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    tag[0] = '\0';
    if (strlen(base) == 22 + HCNN_RUN_TAG_LEN)
        snprintf(tag, HCNN_RUN_TAG_LEN + 1, "%s", base + 17);
    return tag;
}

/* Why a checkpoint's META cannot be read, without blocking on it (a FIFO
 * given a checkpoint's name: "hcnn diff on it", once advised here, hung) */
static const char *why_unreadable(const char *path, char *buf, size_t cap)
{
    struct stat st;
    hcnn_ckpt_meta meta;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && stat(path, &st) != 0)
        snprintf(buf, cap, "a symbolic link to nothing: %s", strerror(errno));
    else if (stat(path, &st) != 0)
        snprintf(buf, cap, "%s", strerror(errno));
    else if (!S_ISREG(st.st_mode))
        snprintf(buf, cap, "it is %s, not a regular file", hcnn_file_kind(st.st_mode));
    else if (hcnn_ckpt_read_meta(path, &meta, 1) == HCNN_EFORMAT)
        snprintf(buf, cap, "not an hcnn checkpoint of version %u, or its META section is torn "
                           "or damaged",
                 HCNN_CKPT_VERSION);
    else
        snprintf(buf, cap, "%s", access(path, R_OK) ? strerror(errno) : "it cannot be opened");
    return buf;
}

/* The checkpoint of list.e[pick]'s line to resume: its highest step.  A
 * line's checkpoints follow one another in steps whatever the clocks of
 * the nodes that wrote them: a segment on a node whose clock ran an hour
 * ahead must not make the next one resume that segment's older step (and
 * start a roll-back line).  A file past it that cannot be read and may be
 * the line's (its name's tag is the line's, or it has none) is the pick,
 * so that it is refused, not skipped. */
static int line_head(const hcnn_ckpt_list *list, int pick)
{
    const hcnn_ckpt_meta *m = &list->e[pick].meta;
    if (list->e[pick].unreadable || !m->run_id[0])
        return pick;
    const char *line = m->run_id;
    char tag[HCNN_RUN_TAG_LEN + 1];
    int head = pick;
    for (int i = 0; i < list->n; i++) {
        const hcnn_ckpt_entry *e = &list->e[i];
        const int mine = e->unreadable ? (!name_tag(e->path, tag)[0] ||
                                          !strcmp(tag, hcnn_run_tag(line)))
                                       : !strcmp(e->meta.run_id, line);
        if (mine && e->meta.step > list->e[head].meta.step)
            head = i;
    }
    return head;
}

int hcnn_ckpt_pick_resume(const char *dir, const hcnn_run_ident *want, int required, char *path,
                          size_t cap)
{
    path[0] = '\0';
    hcnn_ckpt_list list;
    int rc = hcnn_ckpt_list_dir(dir, &list);
    if (rc)
        return rc;
    const char *how = required ? "--resume latest" : "--resume auto";
    /* the line: that of the newest checkpoint written (the only use of a
     * clock: which of several runs sharing the directory wrote last) */
    int pick = list.n - 1;
    /* a requeued Slurm job resumes its own line, whoever wrote since */
    for (int i = list.n - 1; i >= 0 && want->slurm_job[0]; i--)
        if (!list.e[i].unreadable && !strcmp(list.e[i].meta.slurm_job, want->slurm_job)) {
            pick = i;
            break;
        }
    if (pick >= 0) /* within the line, by step */
        pick = line_head(&list, pick);
    if (pick < 0) {
        if (required)
            rc = hcnn_error_code(HCNN_EIO, "%s: no checkpoint (ckpt-s*.hcnn) in '%s' (key "
                                           "checkpoint_dir)",
                                 how, dir);
    } else if (list.e[pick].unreadable) {
        char why[160];
        rc = hcnn_error_code(HCNN_EFORMAT,
                             "%s: the newest checkpoint in %s, %s, cannot be read (%s): move "
                             "it away, or resume a named checkpoint with --resume FILE",
                             how, dir, list.e[pick].path,
                             why_unreadable(list.e[pick].path, why, sizeof why));
    } else {
        const hcnn_ckpt_entry *en = &list.e[pick];
        const char *differs = ident_differs(&en->meta, want);
        if (differs) { /* never another run's weights under this configuration */
            char what[HCNN_FILE_PATH_MAX + 128];
            snprintf(what, sizeof what, "%s: the newest checkpoint in %s, %s,", how, dir,
                     en->path);
            rc = refuse_ident(what, &en->meta, want, differs);
        } else {
            snprintf(path, cap, "%s", en->path);
        }
    }
    hcnn_ckpt_list_free(&list);
    return rc;
}
