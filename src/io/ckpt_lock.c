/* A checkpoint directory's owner: the lock a training run holds on it, its
 * heartbeat and its take-over (contract in include/hcnn/ckpt_lock.h). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* gethostname */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hcnn/ckpt_lock.h"
#include "hcnn/common.h"
#include "hcnn/files.h"
#include "hcnn/watchdog.h"

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
            watch += hcnn_watchdog_remove_stale_dir(path, fs_now, 0);
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
        /* not a lock hcnn takes over: a directory cannot be unlinked, a
         * link (dangling: unreadable) read as released; each was tried
         * three times, then "it changed hands three times" */
        struct stat st;
        if (lstat(l->path, &st) == 0 && (S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode))) {
            rc = hcnn_error_code(HCNN_EIO,
                                 "the lock %s of checkpoint_dir is %s (expected hcnn's lock, a "
                                 "regular file): remove it if no run is using %s",
                                 l->path, hcnn_file_kind(st.st_mode), dir);
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
