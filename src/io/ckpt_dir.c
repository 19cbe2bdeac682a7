/* A checkpoint directory's owner and its lines of checkpoints (contract in
 * include/hcnn/ckpt_dir.h). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* gethostname */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hcnn/ckpt_dir.h"
#include "hcnn/common.h"

/* ---- the lock ----------------------------------------------------------- */

/* One "key=value" line of a lock's text into out ("" if absent). */
static void lock_field(const char *text, const char *key, char *out, size_t cap)
{
    out[0] = '\0';
    const size_t k = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (!strncmp(p, key, k) && p[k] == '=') {
            const char *v = p + k + 1;
            const size_t n = strcspn(v, "\n");
            snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), v);
            return;
        }
    }
}

/* The lock file's text and (age not NULL) its age in seconds by the
 * clock of the file system that holds it (hcnn_fs_now: the holder may
 * have written it from a node whose clock differs from this one's);
 * HCNN_EIO if there is none. */
static int lock_read(const char *path, char *text, size_t cap, double *age)
{
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return HCNN_EIO;
    struct stat st;
    ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, text, cap - 1) : -1;
    close(fd);
    text[n > 0 ? n : 0] = '\0';
    if (age) {
        char dir[HCNN_FILE_PATH_MAX + 16];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
        *age = n >= 0 ? difftime(hcnn_fs_now(dir), st.st_mtime) : 0.0;
    }
    return HCNN_OK;
}

/* "run R on host H (pid P, Slurm job J, config C), heartbeat S s ago" */
static void lock_describe(const char *text, double age, char *out, size_t cap)
{
    char run[64], host[256], pid[32], job[64], cfg[512];
    lock_field(text, "run_id", run, sizeof run);
    lock_field(text, "host", host, sizeof host);
    lock_field(text, "pid", pid, sizeof pid);
    lock_field(text, "slurm_job", job, sizeof job);
    lock_field(text, "config", cfg, sizeof cfg);
    snprintf(out, cap, "run %s on host %s (pid %s, Slurm job %s, config %s), heartbeat %.0f s ago",
             run[0] ? run : "?", host[0] ? host : "?", pid[0] ? pid : "?", job[0] ? job : "none",
             cfg[0] ? cfg : "?", age);
}

/* Why the lock text (age seconds old) may be taken over, or NULL: it
 * still has a live holder. */
static const char *lock_stale(const char *text, double age, char *why, size_t cap)
{
    char host[256], pid[32], job[64], me[256] = "";
    lock_field(text, "host", host, sizeof host);
    lock_field(text, "pid", pid, sizeof pid);
    lock_field(text, "slurm_job", job, sizeof job);
    gethostname(me, sizeof me - 1);
    const char *my_job = getenv("SLURM_JOB_ID");
    if (!host[0] || !pid[0]) {
        snprintf(why, cap, "the lock file names no holder");
        return why;
    }
    const long p = atol(pid);
    if (!strcmp(host, me) && p > 0 && kill((pid_t)p, 0) != 0 && errno == ESRCH) {
        snprintf(why, cap, "its process %ld on this host has exited", p);
        return why;
    }
    if (job[0] && my_job && !strcmp(job, my_job)) {
        snprintf(why, cap, "it belongs to this Slurm job (%s): a requeued job", job);
        return why;
    }
    if (age > HCNN_LOCK_STALE_S) {
        snprintf(why, cap, "its heartbeat is %.0f s old (stale after %d s)", age,
                 HCNN_LOCK_STALE_S);
        return why;
    }
    return NULL;
}

/* Removes what killed writers leave in a directory only a training run
 * writes to: checkpoint and final-link temporaries, write probes. */
/* A stall watchdog's heartbeat directory (.hcnn-watch-<pid>-<time>) is
 * left behind by a job that was killed (its ranks remove it as they end).
 * One whose heartbeats have all been still for HCNN_LOCK_STALE_S is of no
 * live job (a live rank rewrites its file every second, and this run's
 * own is fresh; fs_now: the file system's clock, as the lock's): removed
 * with its files.  Returns 1 when removed. */
static int remove_stale_watch_dir(const char *path, time_t fs_now)
{
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    const time_t now = fs_now;
    if (difftime(now, st.st_mtime) < HCNN_LOCK_STALE_S)
        return 0;
    DIR *d = opendir(path);
    if (!d)
        return 0;
    struct dirent *e;
    char file[HCNN_FILE_PATH_MAX + 600];
    int fresh = 0;
    while (!fresh && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        fresh = lstat(file, &st) != 0 || !S_ISREG(st.st_mode) ||
                difftime(now, st.st_mtime) < HCNN_LOCK_STALE_S;
    }
    if (!fresh) {
        rewinddir(d);
        while ((e = readdir(d)) != NULL)
            if (!strncmp(e->d_name, "rank-", 5)) {
                snprintf(file, sizeof file, "%s/%s", path, e->d_name);
                unlink(file);
            }
    }
    closedir(d);
    return !fresh && rmdir(path) == 0;
}

static void clean_leftovers(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    int count = 0, watch = 0;
    double bytes = 0.0;
    struct dirent *e;
    const time_t fs_now = hcnn_fs_now(dir);
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (!strncmp(n, ".hcnn-watch-", 12)) {
            char path[HCNN_FILE_PATH_MAX + 300];
            snprintf(path, sizeof path, "%s/%s", dir, n);
            watch += remove_stale_watch_dir(path, fs_now);
            continue;
        }
        const int tmp = (!strncmp(n, "ckpt-s", 6) || !strncmp(n, "final.hcnn", 10) ||
                         !strncmp(n, ".hcnn-lock.", 11)) &&
                        strstr(n, ".tmp.");
        if (!tmp && strncmp(n, ".hcnn-write-test-", 17))
            continue;
        char path[HCNN_FILE_PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, n);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && unlink(path) == 0)
            count++, bytes += (double)st.st_size;
    }
    closedir(d);
    if (count)
        printf("hcnn: checkpoint_dir %s: removed %d temporary file%s (%.1f MB) left by killed "
               "writers\n",
               dir, count, count > 1 ? "s" : "", bytes / 1e6);
    if (watch)
        printf("hcnn: checkpoint_dir %s: removed %d stall-watchdog director%s (.hcnn-watch-*) "
               "left by killed jobs\n",
               dir, watch, watch > 1 ? "ies" : "y");
}

/* The lock's text into a temporary file beside it; no message. */
static int lock_write_tmp_quiet(hcnn_ckpt_lock *l, char *tmp, size_t cap)
{
    snprintf(tmp, cap, "%s.tmp.%ld", l->path, (long)getpid());
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const size_t n = strlen(l->text);
    const int ok = fd >= 0 && write(fd, l->text, n) == (ssize_t)n;
    const int e = errno;
    if (fd >= 0)
        close(fd);
    if (!ok)
        unlink(tmp);
    errno = e;
    return ok ? HCNN_OK : HCNN_EIO;
}

static int lock_write_tmp(hcnn_ckpt_lock *l, char *tmp, size_t cap)
{
    errno = 0;
    if (lock_write_tmp_quiet(l, tmp, cap) == HCNN_OK)
        return HCNN_OK;
    return hcnn_error_code(HCNN_EIO, "cannot write the lock of checkpoint_dir %s (%s): %s",
                           l->dir, tmp, strerror(errno ? errno : EIO));
}

static void lock_fill_text(hcnn_ckpt_lock *l, const char *run_id, const char *cfg_path)
{
    const char *job = getenv("SLURM_JOB_ID");
    char cfg[512];
    lock_field(l->text, "config", cfg, sizeof cfg); /* kept when the run id changes */
    snprintf(l->text, sizeof l->text,
             "run_id=%s\ntoken=%s\nhost=%.*s\npid=%ld\nslurm_job=%s\nconfig=%s\n", run_id,
             l->token, (int)strcspn(l->token, " "), l->token, (long)getpid(), job ? job : "",
             cfg_path ? cfg_path : cfg);
}

static int is_mine(const hcnn_ckpt_lock *l, const char *text)
{
    char token[128];
    lock_field(text, "token", token, sizeof token);
    return !strcmp(token, l->token);
}

/* A lock file that is gone (deleted by hand, or its directory moved):
 * linked again at once, so that no other run takes the directory while
 * this one lives; HCNN_OK when it is this run's again. */
static int lock_relink(hcnn_ckpt_lock *l)
{
    char tmp[sizeof l->path + 32];
    int rc = lock_write_tmp_quiet(l, tmp, sizeof tmp);
    if (rc == HCNN_OK) {
        rc = link(tmp, l->path) == 0 ? HCNN_OK : HCNN_EIO;
        unlink(tmp);
    }
    return rc;
}

static long long now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (long long)t.tv_sec;
}

/* The heartbeat: touch the lock while it is ours (take it again if it is
 * gone); note when another run holds it. */
static void *lock_beat(void *arg)
{
    hcnn_ckpt_lock *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += HCNN_LOCK_BEAT_S;
        while (!l->stop && pthread_cond_timedwait(&l->cv, &l->mu, &until) != ETIMEDOUT) {
        }
        if (l->stop)
            break;
        char text[1024];
        if (lock_read(l->path, text, sizeof text, NULL) != HCNN_OK) {
            long long expected = 0; /* the first time it is found missing */
            atomic_compare_exchange_strong(&l->gone_at, &expected, now_s());
            if (lock_relink(l) == HCNN_OK)
                atomic_store(&l->last_beat, now_s());
        } else if (is_mine(l, text)) {
            utimensat(AT_FDCWD, l->path, NULL, 0);
            atomic_store(&l->last_beat, now_s());
        } else {
            atomic_store(&l->lost, 1);
        }
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int hcnn_ckpt_lock_take(hcnn_ckpt_lock *l, const char *dir, const char *run_id,
                        const char *cfg_path)
{
    memset(l, 0, sizeof *l);
    snprintf(l->dir, sizeof l->dir, "%s", dir);
    snprintf(l->path, sizeof l->path, "%s/.hcnn-lock", dir);
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    host[strcspn(host, " \n")] = '\0';
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(l->token, sizeof l->token, "%.100s %ld %lld.%09ld", host, (long)getpid(),
             (long long)now.tv_sec, now.tv_nsec);
    lock_fill_text(l, run_id, cfg_path);
    char tmp[sizeof l->path + 32];
    int rc = lock_write_tmp(l, tmp, sizeof tmp);
    /* link() fails when the name exists, also over NFS, where O_EXCL may not */
    for (int attempt = 0; !rc && attempt < 3; attempt++) {
        if (link(tmp, l->path) == 0) {
            l->held = 1;
            break;
        }
        if (errno != EEXIST) {
            rc = hcnn_error_code(HCNN_EIO, "cannot create the lock %s of checkpoint_dir: %s",
                                 l->path, strerror(errno));
            break;
        }
        char text[1024], desc[1024], why[256];
        double age;
        if (lock_read(l->path, text, sizeof text, &age) != HCNN_OK)
            continue; /* released meanwhile: try again */
        lock_describe(text, age, desc, sizeof desc);
        if (!lock_stale(text, age, why, sizeof why)) {
            rc = hcnn_error_code(HCNN_EIO,
                                 "checkpoint_dir %s is in use by %s: one run at a time writes "
                                 "a checkpoint directory; give this run another checkpoint_dir, "
                                 "or wait for that one to end (its lock is taken over once its "
                                 "heartbeat is %d s old)",
                                 dir, desc, HCNN_LOCK_STALE_S);
            break;
        }
        /* remove it only if it is still the stale lock just read: of two
         * runs taking over at once, the second then finds the first's */
        char again[1024];
        double age2;
        if (lock_read(l->path, again, sizeof again, &age2) == HCNN_OK && !strcmp(again, text)) {
            printf("hcnn: checkpoint_dir %s: taking over the lock of %s: %s\n", dir, desc, why);
            fflush(stdout);
            unlink(l->path);
        }
    }
    unlink(tmp);
    if (!rc && !l->held)
        rc = hcnn_error_code(HCNN_EIO, "cannot take the lock %s of checkpoint_dir: it changed "
                                       "hands three times while trying",
                             l->path);
    if (rc)
        return rc;
    clean_leftovers(dir);
    if (pthread_mutex_init(&l->mu, NULL) || pthread_cond_init(&l->cv, NULL) ||
        pthread_create(&l->beat, NULL, lock_beat, l) != 0) {
        hcnn_ckpt_lock_release(l);
        return hcnn_error_code(HCNN_ENOMEM, "cannot start the heartbeat of %s", l->path);
    }
    atomic_store(&l->last_beat, now_s());
    l->beating = 1;
    return HCNN_OK;
}

int hcnn_ckpt_lock_set_run(hcnn_ckpt_lock *l, const char *run_id)
{
    if ((!l->held) || hcnn_ckpt_lock_check(l))
        return HCNN_EIO;
    pthread_mutex_lock(&l->mu); /* the heartbeat writes the text again when the file is gone */
    lock_fill_text(l, run_id, NULL);
    char tmp[sizeof l->path + 32];
    int rc = lock_write_tmp(l, tmp, sizeof tmp);
    if (!rc && rename(tmp, l->path) != 0) {
        rc = hcnn_error_code(HCNN_EIO, "cannot rewrite the lock %s: %s", l->path,
                             strerror(errno));
        unlink(tmp);
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int hcnn_ckpt_lock_check(hcnn_ckpt_lock *l)
{
    if (!l->held)
        return HCNN_OK;
    char text[1024], desc[1024];
    double age;
    if (lock_read(l->path, text, sizeof text, &age) != HCNN_OK) {
        /* gone with its directory (moved, removed, replaced): taken again
         * when the directory is back; until then the checkpoint's own
         * write fails and checkpoint_on_error decides */
        if (lock_relink(l) == HCNN_OK)
            atomic_store(&l->lost, 0);
        return HCNN_OK;
    }
    if (is_mine(l, text)) {
        atomic_store(&l->lost, 0);
        return HCNN_OK;
    }
    lock_describe(text, age, desc, sizeof desc);
    l->held = 0;
    /* what happened, from this run's own heartbeat: another run takes a
     * lock only when its heartbeat is HCNN_LOCK_STALE_S old (or its holder
     * is gone, or of its Slurm job), so a current heartbeat means the lock
     * was removed under this run (once told "must have lapsed") */
    const long long beat_age = now_s() - atomic_load(&l->last_beat);
    const long long gone = atomic_load(&l->gone_at);
    char cause[256];
    if (gone)
        snprintf(cause, sizeof cause, "this run's lock file was deleted (its heartbeat found it "
                                      "missing %lld s ago and made it again), then",
                 now_s() - gone);
    else if (beat_age < HCNN_LOCK_STALE_S)
        snprintf(cause, sizeof cause, "this run's heartbeat was current (%lld s old): its lock "
                                      "file was deleted or replaced by hand, and",
                 beat_age);
    else
        snprintf(cause, sizeof cause, "this run's heartbeat had lapsed (%lld s old, over %d s: "
                                      "the process was stopped or starved), and",
                 beat_age, HCNN_LOCK_STALE_S);
    return hcnn_error_code(HCNN_EIO,
                           "checkpoint_dir %s is no longer this run's: %s %s took it over; no "
                           "more checkpoints are written there",
                           l->dir, cause, desc);
}

void hcnn_ckpt_lock_release(hcnn_ckpt_lock *l)
{
    if (l->beating) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->beat, NULL);
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        l->beating = 0;
    }
    char text[1024];
    if (l->held && lock_read(l->path, text, sizeof text, NULL) == HCNN_OK && is_mine(l, text))
        unlink(l->path);
    l->held = 0;
}

int hcnn_ckpt_lock_probe(const char *dir)
{
    char path[HCNN_FILE_PATH_MAX + 16], text[1024], desc[1024], why[256];
    snprintf(path, sizeof path, "%s/.hcnn-lock", dir);
    double age;
    if (lock_read(path, text, sizeof text, &age) != HCNN_OK || lock_stale(text, age, why, sizeof why))
        return HCNN_OK;
    lock_describe(text, age, desc, sizeof desc);
    return hcnn_error_code(HCNN_EIO, "checkpoint_dir %s is in use by %s", dir, desc);
}

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
