/* The measurement's cache: one small text file per key, in
 * $XDG_CACHE_HOME/hcnn (else ~/.cache/hcnn), so that only the first run on
 * a node type pays for the measurement.  The key names the CPU model, the
 * library build, the thread count, the environment's OPENBLAS_CORETYPE and
 * the model's GEMM list (src/blas/measure.c); the file carries a magic line
 * with a version and the whole key, checked on reading.  A lock file in the
 * directory makes the ranks of a node (or of a cluster sharing a home
 * directory) wait while one of them measures. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hcnn/common.h"
#include "hcnn/files.h"
#include "internal.h"

#define CACHE_MAGIC "hcnn-blas-kernels"
#define CACHE_VERSION 1

int hcnn_blas_cache_dir(char *buf, int cap, char *why, size_t why_cap)
{
    return hcnn_cache_dir(buf, (size_t)cap, why, why_cap);
}

/* Waits for the lock in slices, taking a stop signal meanwhile: another
 * process's measurement may last minutes. */
int hcnn_blas_cache_lock(const char *dir, int *stop)
{
    *stop = 0;
    char path[HCNN_FILE_PATH_MAX];
    snprintf(path, sizeof path, "%s/blas.lock", dir);
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    const struct timespec slice = {0, 100 * 1000 * 1000};
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return fd;
        if (errno == EINTR)
            continue;
        if (errno != EWOULDBLOCK) /* a file system without locks: go on unlocked */
            break;
        const int sig = sigtimedwait(&set, NULL, &slice); /* the wait itself */
        if (sig > 0) {
            *stop = sig;
            break;
        }
    }
    close(fd);
    return -1;
}

void hcnn_blas_cache_unlock(int fd)
{
    if (fd >= 0)
        close(fd); /* releases the lock */
}

static void cache_path(const char *dir, blas_table *t)
{
    hcnn_cache_file(dir, "blas", t->key, t->cache_path, sizeof t->cache_path);
}

/* The rest of the line after `word ` into out, or 0. */
static int field(const char *line, const char *word, char *out, size_t cap)
{
    const size_t n = strlen(word);
    if (strncmp(line, word, n) || line[n] != ' ')
        return 0;
    snprintf(out, cap, "%s", line + n + 1);
    out[strcspn(out, "\n")] = 0;
    return 1;
}

int hcnn_blas_cache_read(const char *dir, blas_table *t)
{
    cache_path(dir, t);
    /* not blocking on what is not a regular file (a FIFO in the cache
     * directory would hold every run that reads it): measured again */
    const int fd = open(t->cache_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        hcnn_warn("BLAS kernels: %s is not a regular file: not read as the cache", t->cache_path);
        close(fd);
        return 0;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    char line[1200], v[1200];
    int ok = 0, magic = 0, keyok = 0;
    blas_table r = *t;
    r.n = 0, r.choice = r.baseline = -1;
    r.margin = BLAS_KEEP_MARGIN; /* a table written before the margin was kept */
    while (fgets(line, sizeof line, f)) {
        int version;
        if (sscanf(line, CACHE_MAGIC " %d", &version) == 1)
            magic = version == CACHE_VERSION;
        else if (field(line, "key", v, sizeof v))
            keyok = !strcmp(v, t->key);
        else if (field(line, "seconds", v, sizeof v))
            r.measure_s = atof(v);
        else if (field(line, "baseline", v, sizeof v))
            r.baseline = atoi(v);
        else if (field(line, "choice", v, sizeof v))
            r.choice = atoi(v);
        else if (field(line, "margin", v, sizeof v))
            r.margin = atof(v);
        else if (field(line, "candidate", v, sizeof v) && r.n < BLAS_MAX_CANDIDATES) {
            blas_candidate *c = &r.c[r.n];
            memset(c, 0, sizeof *c);
            int used = 0;
            if (sscanf(v, "%31s %31s %lf %n", c->name, c->asked, &c->seconds, &used) != 3)
                break;
            if (!strcmp(c->asked, "-"))
                c->asked[0] = 0;
            snprintf(c->source, sizeof c->source, "%s", v + used);
            r.n++;
        }
    }
    ok = magic && keyok && r.n > 0 && r.choice >= 0 && r.choice < r.n && r.baseline >= 0 &&
         r.baseline < r.n && r.c[r.choice].seconds > 0;
    fclose(f);
    if (ok)
        *t = r;
    return ok;
}

int hcnn_blas_cache_write(const char *dir, blas_table *t, char *why, size_t why_cap)
{
    cache_path(dir, t);
    char buf[8192];
    const time_t now = time(NULL);
    struct tm tm;
    char when[32] = "";
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n = snprintf(buf, sizeof buf,
                     CACHE_MAGIC " %d\n# written by hcnn (blas_kernels: auto, hcnn tune) on %s\n"
                     "key %s\nmodel %s\nseconds %.3f\nbaseline %d\nchoice %d\nmargin %.4f\n",
                     CACHE_VERSION, when, t->key, t->model, t->measure_s, t->baseline, t->choice,
                     t->margin);
    for (int i = 0; i < t->n && n < (int)sizeof buf; i++) {
        const blas_candidate *c = &t->c[i];
        n += snprintf(buf + n, sizeof buf - (size_t)n, "candidate %s %s %.6f %s\n", c->name,
                      c->asked[0] ? c->asked : "-", c->seconds,
                      c->seconds < 0 ? c->failure : c->source);
    }
    if (n >= (int)sizeof buf) {
        snprintf(why, why_cap, "the table is too long for %s", t->cache_path);
        return HCNN_EIO;
    }
    return hcnn_write_file_why(t->cache_path, buf, (size_t)n, why, why_cap);
}
