/* Stall watchdog (contract and design in include/hcnn/watchdog.h). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hcnn/comm.h"
#include "hcnn/common.h"
#include "hcnn/files.h"
#include "hcnn/watchdog.h"

#define HEARTBEAT_S 1    /* the thread's period: checks and heartbeat writes */
#define STALE_S 3        /* a heartbeat older than this: the rank is stopped or dead */

/* One MPI call in progress, per thread kind: the thread that started the
 * watchdog (the trainer) and any other (the communication thread of
 * allreduce_progress: thread, in MPI beside the trainer's pipeline
 * transfers in a pipeline's replicas: each thread kind has its mark). */
typedef struct mark {
    _Atomic(const char *) call, file;
    atomic_int line;
    atomic_llong since_ns; /* 0: not inside MPI */
} mark;

static struct watchdog {
    atomic_int running;
    pthread_t thread, owner;
    double timeout_s;
    int rank, size, thread_level;
    char dir[HCNN_FILE_PATH_MAX + 64];
    int beats; /* 1: dir is the job's heartbeat directory (else no side channel) */
    atomic_long step;
    mark marks[2];
    char context[2][96];   /* written by the marked thread, read after a stall */
    /* the period's wait, which hcnn_watchdog_stop cuts short: with a plain
     * sleep the stop waited out the thread's second, about 0.9 s at the
     * end of every multi-rank run.  A 2-step data-parallel run of
     * configs/synthetic_small.yaml on 2 ranks: 1.42 s before, 0.42 s after
     * (MPI_Init and MPI_Finalize alone: 0.37 s); test_data_parallel.sh,
     * test_pipeline.sh and test_seam.sh together 71.1 s before, 37.4 s
     * after (medians of 7 alternated rounds, 2-core AMD EPYC, 2026-12-03) */
    pthread_mutex_t lock;
    pthread_cond_t wake;
} W;

/* One watchdog a process: taken by the run that starts it, from that
 * run's thread (owns_watchdog), until it stops it.  A multi-rank run at the
 * same time in the same process (the C API allows runs on other threads)
 * goes without one of its own, and says so. */
static atomic_int watchdog_taken;
static _Thread_local int owns_watchdog;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int slot(void) { return pthread_equal(pthread_self(), W.owner) ? 0 : 1; }

/* One period (HEARTBEAT_S), or less when hcnn_watchdog_stop wakes it. */
static void wait_period(void)
{
    struct timespec until;
    if (clock_gettime(CLOCK_MONOTONIC, &until) != 0) {
        const struct timespec period = {HEARTBEAT_S, 0};
        nanosleep(&period, NULL);
        return;
    }
    until.tv_sec += HEARTBEAT_S;
    pthread_mutex_lock(&W.lock);
    /* (a spurious wake-up waits again, to the same end; ETIMEDOUT, or any
     * other error, ends the wait) */
    int rc = 0;
    while (rc == 0 && atomic_load(&W.running))
        rc = pthread_cond_timedwait(&W.wake, &W.lock, &until);
    pthread_mutex_unlock(&W.lock);
}

/* The period's wait, timed on CLOCK_MONOTONIC (a clock set back must not
 * stretch it); 0, or the error and the call that failed in *what. */
static int wait_init(const char **what)
{
    pthread_condattr_t attr;
    int err = pthread_condattr_init(&attr);
    if (err) {
        *what = "pthread_condattr_init";
        return err;
    }
    if ((err = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)) != 0)
        *what = "pthread_condattr_setclock";
    else if ((err = pthread_cond_init(&W.wake, &attr)) != 0)
        *what = "pthread_cond_init";
    pthread_condattr_destroy(&attr);
    if (!err && (err = pthread_mutex_init(&W.lock, NULL)) != 0) {
        *what = "pthread_mutex_init";
        pthread_cond_destroy(&W.wake);
    }
    return err;
}

static void wait_destroy(void)
{
    pthread_cond_destroy(&W.wake);
    pthread_mutex_destroy(&W.lock);
}

void hcnn_watch_enter(const char *call, const char *file, int line)
{
    if (!atomic_load_explicit(&W.running, memory_order_relaxed))
        return;
    mark *m = &W.marks[slot()];
    /* the stores below stay after the leave that cleared since_ns (the
     * watchdog's copy of them is checked against since_ns again) */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&m->call, call, memory_order_relaxed);
    atomic_store_explicit(&m->file, file, memory_order_relaxed);
    atomic_store_explicit(&m->line, line, memory_order_relaxed);
    atomic_store_explicit(&m->since_ns, now_ns(), memory_order_release);
}

void hcnn_watch_leave(void)
{
    if (atomic_load_explicit(&W.running, memory_order_relaxed))
        atomic_store_explicit(&W.marks[slot()].since_ns, 0, memory_order_release);
}

void hcnn_watch_step(long step) { atomic_store_explicit(&W.step, step, memory_order_relaxed); }

void hcnn_watch_context(const char *fmt, ...)
{
    if (!atomic_load_explicit(&W.running, memory_order_relaxed))
        return;
    /* the watchdog copies the context while the call after it runs and
     * checks since_ns again after (describe_self, report_stall): the writes
     * below stay after the leave that cleared since_ns */
    atomic_thread_fence(memory_order_release);
    char *ctx = W.context[slot()];
    if (!fmt) {
        ctx[0] = '\0';
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof W.context[0], fmt, ap);
    va_end(ap);
}

/* ---- the side channel -------------------------------------------------- */

static void heartbeat_path(char *buf, size_t cap, int rank)
{
    snprintf(buf, cap, "%s/rank-%d", W.dir, rank);
}

/* What this rank is doing, for the others' reports: one line
 * "<step>\t<inside MPI for ms, -1: not in MPI>\t<call>\t<file:line>\t<context>",
 * written to a temporary file and renamed over the heartbeat every second
 * (the rename is the heartbeat: its mtime).  Rewritten in place, it was read
 * half-written: a rank was reported at step -1 while it reported step 32. */
static void describe_self(char *text, size_t cap)
{
    const long step = atomic_load(&W.step);
    for (int s = 0; s < 2; s++) {
        const mark *m = &W.marks[s];
        const long long since = atomic_load_explicit(&m->since_ns, memory_order_acquire);
        if (!since)
            continue;
        /* the marked thread writes its context only outside MPI: a copy
         * taken while the same call is in progress is whole */
        char ctx[sizeof W.context[0]];
        memcpy(ctx, W.context[s], sizeof ctx);
        ctx[sizeof ctx - 1] = '\0';
        const char *call = atomic_load(&m->call), *file = atomic_load(&m->file);
        const int line = atomic_load(&m->line);
        atomic_thread_fence(memory_order_acquire); /* the copy above before the check */
        if (atomic_load_explicit(&m->since_ns, memory_order_acquire) != since)
            continue; /* it left the call meanwhile: not inside it now */
        for (char *c = ctx; *c; c++)
            if (*c == '\t' || *c == '\n')
                *c = ' ';
        snprintf(text, cap, "%ld\t%lld\t%s\t%s:%d\t%s\n", step, (now_ns() - since) / 1000000,
                 call ? call : "?", file ? file : "?", line, ctx);
        return;
    }
    snprintf(text, cap, "%ld\t-1\t\t\t\n", step);
}

static void write_heartbeat(void)
{
    if (!W.beats)
        return;
    char path[sizeof W.dir + 32], tmp[sizeof W.dir + 40], text[256];
    heartbeat_path(path, sizeof path, W.rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    describe_self(text, sizeof text);
    /* never through a link (O_NOFOLLOW), never blocked by a FIFO (O_NONBLOCK) */
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                        0644);
    FILE *fp = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!fp) {
        if (fd >= 0)
            close(fd);
        return; /* the side channel is best effort: the timeout still fires */
    }
    const int ok = fputs(text, fp) >= 0;
    if (fclose(fp) == 0 && ok)
        rename(tmp, path);
}

/* A rank's heartbeat, read back */
typedef struct beat {
    long step;
    long long inside_ms; /* -1: not in MPI */
    char call[64], where[192], context[96];
    double age;          /* seconds since it was written */
} beat;

static int read_beat(int j, beat *b, time_t fs_now)
{
    char path[sizeof W.dir + 32], text[256];
    heartbeat_path(path, sizeof path, j);
    struct stat st;
    memset(b, 0, sizeof *b);
    FILE *fp = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? fopen(path, "r") : NULL;
    if (!fp)
        return 0;
    const int got = fgets(text, sizeof text, fp) != NULL;
    fclose(fp);
    char *f[5] = {text, NULL, NULL, NULL, NULL};
    for (int k = 1; got && k < 5 && f[k - 1]; k++) {
        f[k] = strchr(f[k - 1], '\t');
        if (f[k])
            *f[k]++ = '\0';
    }
    if (!got || !f[4])
        return 0;
    f[4][strcspn(f[4], "\n")] = '\0';
    b->step = atol(f[0]);
    b->inside_ms = atoll(f[1]);
    snprintf(b->call, sizeof b->call, "%s", f[2]);
    snprintf(b->where, sizeof b->where, "%s", f[3]);
    snprintf(b->context, sizeof b->context, "%s", f[4]);
    b->age = difftime(fs_now, st.st_mtime);
    return 1;
}

/* "at step S, in MPI_X at file:line (context) for T s" or "at step S, not in MPI" */
static void beat_text(const beat *b, char *out, size_t cap)
{
    if (b->inside_ms < 0)
        snprintf(out, cap, "at step %ld, not in MPI (computing)", b->step);
    else
        snprintf(out, cap, "at step %ld, in %s at %s%s%s%s for %.0f s", b->step, b->call, b->where,
                 b->context[0] ? " (" : "", b->context, b->context[0] ? ")" : "",
                 (double)b->inside_ms / 1000.0);
}

static void append(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...)
{
    const size_t o = strlen(buf);
    if (o >= cap - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + o, cap - o, fmt, ap);
    va_end(ap);
}

/* The stalled call, copied once (the trainer may leave it and start another
 * meanwhile: the copy is whole when `since` is unchanged after it, as in
 * describe_self). */
typedef struct stalled {
    long long since;
    char call[64], file[192], context[sizeof W.context[0]];
    int line;
} stalled;

/* What every other rank is doing, from its heartbeat, against this rank's
 * call at `step`: those not in this call at this step (behind, stopped,
 * computing, in another call) have not arrived.  Returns 1 when the survey
 * is settled: some rank has not arrived, or every rank waiting in the same
 * call beat within the last period (a deadlock, then).  Unsettled: a rank
 * seen in the same call has missed a beat (its heartbeat 2 s old or more,
 * in the whole seconds of the file system's clock: a live rank's is 1 s at
 * most, read as 2 at a second's edge), so it may be stopped there and will
 * read as stopped once its heartbeat is over STALE_S old. */
static int survey(long step, const stalled *c, char *missing, size_t mcap, char *waiting,
                  size_t wcap, int *other_call, int *computing)
{
    missing[0] = waiting[0] = '\0';
    *other_call = *computing = 0;
    if (!W.beats) {
        snprintf(missing, mcap, "unknown (no heartbeat directory: see this rank's warning at "
                                "start)");
        return 1;
    }
    int late = 0;
    /* heartbeat ages by the clock of the file system that holds them: the
     * other ranks' nodes wrote them, and clocks differ between nodes */
    const time_t fs_now = hcnn_fs_now(W.dir);
    for (int j = 0; j < W.size; j++) {
        if (j == W.rank)
            continue;
        beat b;
        char what[512];
        if (!read_beat(j, &b, fs_now)) {
            append(missing, mcap, "%s%d (no heartbeat file: another node with no "
                                  "shared directory, or it never started)",
                   missing[0] ? "; " : "", j);
            continue;
        }
        beat_text(&b, what, sizeof what);
        if (b.age > STALE_S) {
            append(missing, mcap, "%s%d (no heartbeat for %.0f s: stopped or dead; "
                                  "last seen %s)",
                   missing[0] ? "; " : "", j, b.age, what);
        } else if (b.step == step && b.inside_ms >= 0 && !strcmp(b.call, c->call) &&
                   !strcmp(b.context, c->context)) {
            const int missed = b.age >= HEARTBEAT_S + 1;
            append(waiting, wcap, "%s%d", waiting[0] ? ", " : "", j);
            if (missed)
                append(waiting, wcap, " (heartbeat %.0f s old)", b.age);
            late |= missed;
        } else {
            *other_call += b.inside_ms >= 0;
            *computing += b.inside_ms < 0;
            append(missing, mcap, "%s%d (%s%s)", missing[0] ? "; " : "", j,
                   b.step < step ? "behind, " : "", what);
        }
    }
    return missing[0] || !late;
}

/* the call of mark m is still the one stalled since c->since, and the
 * watchdog has not been stopped */
static int still_stalled(const mark *m, const stalled *c)
{
    return atomic_load(&W.running) &&
           atomic_load_explicit(&m->since_ns, memory_order_acquire) == c->since;
}

/* Reports the stall of m's call (in it since `since`, with `context`) and
 * ends the job; returns without a report if the call ends, or the watchdog
 * is stopped, before the report is made. */
static void report_stall(const mark *m, const char *context, long long since)
{
    const long step = atomic_load(&W.step);
    stalled c = {.since = since, .line = atomic_load(&m->line)};
    const char *call = atomic_load(&m->call), *file = atomic_load(&m->file);
    snprintf(c.call, sizeof c.call, "%s", call ? call : "");
    snprintf(c.file, sizeof c.file, "%s", file ? file : "?");
    memcpy(c.context, context, sizeof c.context);
    c.context[sizeof c.context - 1] = '\0';
    atomic_thread_fence(memory_order_acquire); /* the copy above before the check */
    if (!still_stalled(m, &c))
        return;
    char missing[2048], waiting[1024];
    int other_call, computing;
    /* a rank stopped inside this same call looks like one waiting here until
     * its heartbeat is over STALE_S old: a survey that would call the stall
     * a deadlock on such evidence is taken again each period, STALE_S + 2
     * periods at most (this rank's own heartbeat kept current meanwhile) */
    int settled;
    for (int t = 0; !(settled = survey(step, &c, missing, sizeof missing, waiting,
                                       sizeof waiting, &other_call, &computing)) &&
                    t < STALE_S + 2;
         t++) {
        wait_period();
        if (!still_stalled(m, &c))
            return;
        write_heartbeat();
    }
    if (!still_stalled(m, &c))
        return;
    const double waited = (double)(now_ns() - since) * 1e-9;
    fprintf(stderr,
            "hcnn: rank %d of %d: error: stalled %.0f s (stall_timeout_s %g) in %s at %s:%d%s%s%s "
            "at step %ld; ranks that have not arrived: %s%s%s%s%s; ending the job\n",
            W.rank, W.size, waited, W.timeout_s, c.call, c.file, c.line,
            c.context[0] ? " (" : "", c.context, c.context[0] ? ")" : "", step,
            missing[0] ? missing
            : settled  ? "none found (all heartbeats current: a deadlock)"
                       : "none found (a rank waiting in the same call has missed heartbeats: "
                         "stopped there, or a deadlock)",
            waiting[0] ? "; waiting in the same call: " : "", waiting,
            other_call ? "; ranks alive in another MPI call took another path than this one"
                       : "",
            !other_call && computing ? "; a rank alive and computing is slower than "
                                       "stall_timeout_s allows for this step"
                                     : "");
    fflush(stderr);
    fflush(stdout);
    /* from this thread while another is inside MPI: only MULTIPLE allows it;
     * below, the rank ends alone, and the other ranks, stalled too, end by
     * their own watchdogs (or the launcher, seeing a rank gone) */
    if (W.thread_level >= MPI_THREAD_MULTIPLE)
        MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

static void *watch(void *arg)
{
    (void)arg;
    while (atomic_load(&W.running)) {
        write_heartbeat();
        for (int s = 0; s < 2; s++) {
            const long long since = atomic_load_explicit(&W.marks[s].since_ns, memory_order_acquire);
            const double waited = since ? (double)(now_ns() - since) * 1e-9 : 0.0;
            if (since && waited > W.timeout_s)
                report_stall(&W.marks[s], W.context[s], since);
        }
        wait_period();
    }
    return NULL;
}

/* a file a heartbeat directory holds: a rank's heartbeat (rank-N, and its
 * rank-N.tmp while written) or a clock probe (.hcnn-clock-PID, hcnn_fs_now) */
static int heartbeat_file(const char *name)
{
    return !strncmp(name, "rank-", 5) || !strncmp(name, ".hcnn-clock-", 12);
}

int hcnn_watchdog_remove_stale_dir(const char *path, time_t fs_now, int mine_only)
{
    /* through a descriptor of the directory itself (never a link: a shared
     * TMPDIR that is not sticky lets others swap names), its entries by
     * name relative to it */
    const int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || (mine_only && st.st_uid != getuid()) ||
        difftime(fs_now, st.st_mtime) < HCNN_WATCH_DIR_STALE_S) {
        close(fd);
        return 0;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 0;
    }
    /* first pass: only heartbeat files, regular, all still: else untouched */
    struct dirent *e;
    int keep = 0;
    while (!keep && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        keep = !heartbeat_file(e->d_name) ||
               fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
               difftime(fs_now, st.st_mtime) < HCNN_WATCH_DIR_STALE_S;
    }
    if (!keep) {
        rewinddir(d);
        while ((e = readdir(d)) != NULL)
            if (heartbeat_file(e->d_name))
                unlinkat(fd, e->d_name, 0);
    }
    closedir(d); /* closes fd */
    return !keep && rmdir(path) == 0;
}

/* The heartbeat directories killed jobs left in tmp (hcnn-watch-*) that
 * belong to this user: removed, with one line when there were any.  Every
 * rank sweeps its node's tmp (node-local: the ranks of other nodes cannot;
 * its age by this node's clock); ranks sharing a node race harmlessly (one
 * removes, the others find it gone; each says what it removed). */
static void sweep_tmp(const char *tmp, int rank)
{
    DIR *d = opendir(tmp);
    if (!d)
        return;
    const time_t now = time(NULL);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "hcnn-watch-", 11))
            continue;
        char path[HCNN_FILE_PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", tmp, e->d_name);
        removed += hcnn_watchdog_remove_stale_dir(path, now, 1);
    }
    closedir(d);
    if (removed)
        printf("hcnn: rank %d: %s: removed %d stall-watchdog director%s (hcnn-watch-*) left by "
               "killed jobs\n",
               rank, tmp, removed, removed > 1 ? "ies" : "y");
}

/* The job's heartbeat directory in a shared tmp, under a name others can
 * guess: made by this user alone (mode 0700; the job's other ranks on this
 * node find it so), never one another user made first, nor a link (the
 * files in such a one could be links to this user's files, which the
 * heartbeats would overwrite).  Returns 1 when path is usable, else 0 with
 * why. */
static int own_tmp_dir(const char *path, char *why, size_t cap)
{
    struct stat st;
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        snprintf(why, cap, "%s: %s", path, strerror(errno));
        return 0;
    }
    if (lstat(path, &st) != 0) {
        snprintf(why, cap, "%s: %s", path, strerror(errno));
        return 0;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) {
        snprintf(why, cap, "%s: %s, owner uid %ld, mode %03o: expected a directory owned by "
                           "this user alone (uid %ld) with mode 700",
                 path, hcnn_file_kind(st.st_mode), (long)st.st_uid,
                 (unsigned)(st.st_mode & 0777), (long)getuid());
        return 0;
    }
    return 1;
}

/* This rank's heartbeat files, and the job's directory when it is the
 * last rank out */
static void remove_heartbeat(void)
{
    if (!W.beats)
        return;
    char path[sizeof W.dir + 32];
    heartbeat_path(path, sizeof path, W.rank);
    unlink(path);
    strncat(path, ".tmp", sizeof path - strlen(path) - 1);
    unlink(path);
    rmdir(W.dir);
}

int hcnn_watchdog_start(const hcnn_comm *c, double timeout_s, const char *dir)
{
    if (timeout_s <= 0.0 || c->size < 2)
        return HCNN_OK;
    /* one name for the job's heartbeat directory: rank 0's pid and time */
    long token[2] = {(long)getpid(), (long)time(NULL)};
    HCNN_MPI(MPI_Bcast(token, 2, MPI_LONG, 0, c->world));
    int none_running = 0;
    if (!atomic_compare_exchange_strong(&watchdog_taken, &none_running, 1)) {
        fprintf(stderr, "hcnn: rank %d: warning: another run of this process has the stall "
                        "watchdog (one a process): this run has none of its own\n",
                c->rank);
        return HCNN_OK;
    }
    memset(&W, 0, sizeof W);
    const char *what = "";
    int err = wait_init(&what);
    if (err) {
        atomic_store(&watchdog_taken, 0);
        return hcnn_error_code(HCNN_ENOMEM, "cannot start the stall watchdog: %s: %s", what,
                               strerror(err));
    }
    /* the job's own directory: two jobs on one checkpoint_dir (the second
     * refused by its lock, or before it) must not read each other's
     * heartbeats as their own ranks' */
    char why[sizeof W.dir + 128];
    if (dir && dir[0]) {
        snprintf(W.dir, sizeof W.dir, "%s/.hcnn-watch-%ld-%ld", dir, token[0], token[1]);
        W.beats = hcnn_mkdir_p_why(W.dir, why, sizeof why) == HCNN_OK;
    } else {
        const char *tmp = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
        sweep_tmp(tmp, c->rank);
        snprintf(W.dir, sizeof W.dir, "%s/hcnn-watch-%ld-%ld", tmp, token[0], token[1]);
        W.beats = hcnn_mkdir_p_why(tmp, why, sizeof why) == HCNN_OK &&
                  own_tmp_dir(W.dir, why, sizeof why);
    }
    if (!W.beats)
        fprintf(stderr, "hcnn: rank %d: warning: the stall watchdog has no heartbeat directory "
                        "(%s): it will not name the ranks that stall\n",
                c->rank, why);
    W.timeout_s = timeout_s;
    W.rank = c->rank, W.size = c->size, W.thread_level = c->thread_level;
    W.owner = pthread_self();
    atomic_store(&W.running, 1);
    write_heartbeat();
    if ((err = pthread_create(&W.thread, NULL, watch, NULL)) != 0) {
        atomic_store(&W.running, 0);
        wait_destroy();
        remove_heartbeat();
        atomic_store(&watchdog_taken, 0);
        return hcnn_error_code(HCNN_ENOMEM, "cannot start the stall watchdog thread: %s",
                               strerror(err));
    }
    owns_watchdog = 1;
    return HCNN_OK;
}

void hcnn_watchdog_stop(void)
{
    /* the thread of the run that started it, once (a run that started
     * none, or found it taken, has none to stop) */
    if (!owns_watchdog)
        return;
    owns_watchdog = 0;
    /* cleared under the lock: the thread checks it there before it waits,
     * so the signal cannot fall between its check and its wait */
    pthread_mutex_lock(&W.lock);
    atomic_store(&W.running, 0);
    pthread_cond_signal(&W.wake);
    pthread_mutex_unlock(&W.lock);
    pthread_join(W.thread, NULL);
    wait_destroy();
    remove_heartbeat();
    atomic_store(&watchdog_taken, 0);
}
