/* Stall watchdog (contract and design in include/hcnn/watchdog.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
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
    atomic_long step;
    mark marks[2];
    char context[2][96];   /* written by the marked thread, read after a stall */
} W;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int slot(void) { return pthread_equal(pthread_self(), W.owner) ? 0 : 1; }

void hcnn_watch_enter(const char *call, const char *file, int line)
{
    if (!atomic_load_explicit(&W.running, memory_order_relaxed))
        return;
    mark *m = &W.marks[slot()];
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

/* "<step> <inside MPI: 0|1>": rewritten in place every second; its mtime
 * is the heartbeat. */
static void write_heartbeat(void)
{
    char path[sizeof W.dir + 32], text[64];
    heartbeat_path(path, sizeof path, W.rank);
    const int inside =
        atomic_load(&W.marks[0].since_ns) != 0 || atomic_load(&W.marks[1].since_ns) != 0;
    int len = snprintf(text, sizeof text, "%ld %d\n", atomic_load(&W.step), inside);
    FILE *fp = fopen(path, "w");
    if (!fp)
        return; /* the side channel is best effort: the timeout still fires */
    fwrite(text, 1, (size_t)len, fp);
    fclose(fp);
}

/* Appends to buf what rank j's heartbeat says, if it has not arrived. */
static void describe_rank(int j, long my_step, char *buf, size_t cap)
{
    char path[sizeof W.dir + 32];
    heartbeat_path(path, sizeof path, j);
    struct stat st;
    long step = -1;
    int inside = 0;
    size_t o = strlen(buf);
    if (o >= cap - 1)
        return;
    FILE *fp = stat(path, &st) == 0 ? fopen(path, "r") : NULL;
    if (!fp) {
        snprintf(buf + o, cap - o, "%s%d (no heartbeat file: another node with no shared "
                                   "directory, or it never started)",
                 o ? "; " : "", j);
        return;
    }
    if (fscanf(fp, "%ld %d", &step, &inside) != 2)
        step = -1;
    fclose(fp);
    const double age = difftime(time(NULL), st.st_mtime);
    if (age > STALE_S)
        snprintf(buf + o, cap - o, "%s%d (no heartbeat for %.0f s: stopped or dead, at step %ld)",
                 o ? "; " : "", j, age, step);
    else if (step < my_step)
        snprintf(buf + o, cap - o, "%s%d (behind, at step %ld)", o ? "; " : "", j, step);
    else if (!inside)
        snprintf(buf + o, cap - o, "%s%d (at step %ld, not in MPI)", o ? "; " : "", j, step);
}

static _Noreturn void report_stall(const mark *m, const char *context, double waited)
{
    const long step = atomic_load(&W.step);
    char missing[1536] = "";
    for (int j = 0; j < W.size; j++)
        if (j != W.rank)
            describe_rank(j, step, missing, sizeof missing);
    fprintf(stderr,
            "hcnn: rank %d of %d: error: stalled %.0f s (stall_timeout_s %g) in %s at %s:%d%s%s%s "
            "at step %ld; ranks that have not arrived: %s; ending the job\n",
            W.rank, W.size, waited, W.timeout_s, atomic_load(&m->call), atomic_load(&m->file),
            atomic_load(&m->line), context[0] ? " (" : "", context, context[0] ? ")" : "", step,
            missing[0] ? missing : "none found (all heartbeats current: a deadlock)");
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
                report_stall(&W.marks[s], W.context[s], waited);
        }
        struct timespec period = {HEARTBEAT_S, 0};
        nanosleep(&period, NULL);
    }
    return NULL;
}

int hcnn_watchdog_start(const hcnn_comm *c, double timeout_s, const char *dir)
{
    if (timeout_s <= 0.0 || c->size < 2)
        return HCNN_OK;
    /* one name for the job's heartbeat directory: rank 0's pid and time */
    long token[2] = {(long)getpid(), (long)time(NULL)};
    HCNN_MPI(MPI_Bcast(token, 2, MPI_LONG, 0, c->world));
    memset(&W, 0, sizeof W);
    /* the job's own directory: two jobs on one checkpoint_dir (the second
     * refused by its lock, or before it) must not read each other's
     * heartbeats as their own ranks' */
    if (dir && dir[0])
        snprintf(W.dir, sizeof W.dir, "%s/.hcnn-watch-%ld-%ld", dir, token[0], token[1]);
    else
        snprintf(W.dir, sizeof W.dir, "%s/hcnn-watch-%ld-%ld",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", token[0], token[1]);
    if (hcnn_mkdir_p(W.dir) != HCNN_OK)
        fprintf(stderr, "hcnn: rank %d: the stall watchdog has no heartbeat directory (%s): it "
                        "will not name the ranks that stall\n",
                c->rank, W.dir);
    W.timeout_s = timeout_s;
    W.rank = c->rank, W.size = c->size, W.thread_level = c->thread_level;
    W.owner = pthread_self();
    atomic_store(&W.running, 1);
    write_heartbeat();
    if (pthread_create(&W.thread, NULL, watch, NULL) != 0) {
        atomic_store(&W.running, 0);
        return hcnn_error_code(HCNN_ENOMEM, "cannot start the stall watchdog thread: %s",
                               strerror(errno));
    }
    return HCNN_OK;
}

void hcnn_watchdog_stop(void)
{
    if (!atomic_exchange(&W.running, 0))
        return;
    pthread_join(W.thread, NULL);
    char path[sizeof W.dir + 32];
    heartbeat_path(path, sizeof path, W.rank);
    unlink(path);
    rmdir(W.dir); /* the last rank out removes it */
}
