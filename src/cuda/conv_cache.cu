/* The measured ways of the CUDA convolutions kept on disk
 * (conv_choice.cu measures them): in the measurement cache directory
 * (include/hcnn/files.h: $XDG_CACHE_HOME/hcnn), one file per GPU model,
 * library versions and chunk size, with a magic line, a version and the
 * whole key, one line per shape and batch; a later run on that GPU model
 * reads it and measures nothing, so it chooses as the first did and gives
 * the same bits.  Where it cannot be kept, a warning says so once.  The
 * same lines are what the ranks exchange (conv_choice.cu). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "conv_choice.h"

#define CHOICE_MAGIC "hcnn-cuda-conv"
/* 2: bf16 has cuDNN's graphs among its candidates (a version-1 file's bf16
 * lines were measured without them: measured again); 3: the transposed
 * data gradients among them (by im2col, by cuDNN), five medians a pass;
 * 4: cuDNN's Winograd among them, six */
#define CHOICE_VERSION 4

const char *const hcnn_conv_way_names[HCNN_WAYS] = {
    "im2col", "im2col_image", "cudnn", "transposed", "transposed_cudnn", "winograd_cudnn"};
static const char *const precision_names[] = {"fp32", "tf32", "bf16"};

int hcnn_conv_name_index(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s))
            return i;
    return -1;
}

/* one line: what identifies c, its ways and its medians */
int hcnn_conv_choice_line(const conv_choice *c, char *buf, size_t cap)
{
    const hcnn_conv_geom *g = &c->g;
    const char *const *ways = hcnn_conv_way_names;
    int len = snprintf(buf, cap, "conv %s %s %d %d %d %d %d %d %d %d %d %d %d %s %s %s",
                       precision_names[c->precision], c->layout == HCNN_LAYOUT_NHWC ? "nhwc" : "nchw",
                       g->c, g->h, g->w, c->out_c, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, c->n,
                       ways[c->way[0]], ways[c->way[1]], ways[c->way[2]]);
    for (int p = 0; p < HCNN_PASSES; p++)
        for (int w = 0; w < HCNN_WAYS; w++)
            len += snprintf(buf + (len < (int)cap ? len : (int)cap),
                            len < (int)cap ? cap - (size_t)len : 0, " %.4g", c->ms[p][w]);
    len += snprintf(buf + (len < (int)cap ? len : (int)cap), len < (int)cap ? cap - (size_t)len : 0,
                    "\n");
    return len;
}

/* a line back into c (1), or 0; the output size is worked out from the rest */
int hcnn_conv_choice_parse(const char *line, conv_choice *c)
{
    memset(c, 0, sizeof *c);
    char prec[8], layout[8], ways[HCNN_PASSES][24]; /* way_names: 16 characters at most */
    hcnn_conv_geom *g = &c->g;
    int used = 0;
    if (sscanf(line, "conv %7s %7s %d %d %d %d %d %d %d %d %d %d %d %23s %23s %23s%n", prec,
               layout, &g->c, &g->h, &g->w, &c->out_c, &g->kh, &g->kw, &g->sh, &g->sw, &g->ph,
               &g->pw, &c->n, ways[0], ways[1], ways[2], &used) != 16)
        return 0;
    c->precision = hcnn_conv_name_index(precision_names, 3, prec);
    c->layout = !strcmp(layout, "nhwc") ? HCNN_LAYOUT_NHWC : HCNN_LAYOUT_NCHW;
    const int big = 1 << 20; /* no shape of a real network comes near it */
    const int vals[] = {c->n, g->c, g->h, g->w, c->out_c, g->kh, g->kw, g->sh, g->sw};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        if (vals[i] < 1 || vals[i] > big)
            return 0;
    if (c->precision < 0 || (strcmp(layout, "nhwc") && strcmp(layout, "nchw")) || g->ph < 0 ||
        g->pw < 0 || g->ph > big || g->pw > big || g->h + 2 * g->ph < g->kh ||
        g->w + 2 * g->pw < g->kw)
        return 0;
    for (int p = 0; p < HCNN_PASSES; p++)
        if ((c->way[p] = hcnn_conv_name_index(hcnn_conv_way_names, HCNN_WAYS, ways[p])) < 0)
            return 0;
    g->oh = (g->h + 2 * g->ph - g->kh) / g->sh + 1;
    g->ow = (g->w + 2 * g->pw - g->kw) / g->sw + 1;
    const char *rest = line + used;
    for (int p = 0; p < HCNN_PASSES; p++)
        for (int w = 0; w < HCNN_WAYS; w++) {
            int k = 0;
            if (sscanf(rest, "%lf%n", &c->ms[p][w], &k) != 1)
                return 0;
            rest += k;
        }
    return 1;
}

/* Said once: without the cache every run measures again, and may choose
 * other ways, so other bits. */
static void not_cached(struct hcnn_conv_choices *s, const char *why)
{
    if (!s->warned)
        hcnn_warn("CUDA convolutions: the measured ways are not cached%s%s (%s); the next run "
                  "measures again and may choose other ways, so give other bits (set "
                  "XDG_CACHE_HOME to a writable directory)",
                  s->path[0] ? " in " : "", s->path, why);
    s->warned = 1;
}

/* the cache's file name (once: the directory and the key) */
void hcnn_conv_cache_open(const hcnn_backend *be, struct hcnn_conv_choices *s)
{
    s->cache_opened = 1;
    char dir[HCNN_FILE_PATH_MAX - 64], why[256]; /* room for the file name */
    if (hcnn_cache_dir(dir, sizeof dir, why, sizeof why) != HCNN_OK) {
        not_cached(s, why);
        return;
    }
    /* the chunk size too: it decides what the chunked way does; and
     * HCNN_CUDA_CONV=direct, whose choices leave cuDNN's Winograd out (in
     * one file with auto's, each would measure again over the other's) */
    snprintf(s->key, sizeof s->key, "%s; chunks of %zu floats%s", cuda_of(be)->model_key,
             cuda_of(be)->chunk_floats, cuda_of(be)->conv_direct ? "; direct sums only" : "");
    s->cached = (conv_choice *)hcnn_calloc(sizeof *s->cached * CACHE_SHAPES, "convolution cache");
    if (s->cached)
        hcnn_cache_file(dir, "cuda-conv", s->key, s->path, sizeof s->path);
    else
        not_cached(s, "no memory for its lines");
}

/* The ranks of a node measure one at a time, the others waiting on a lock
 * beside the file and then reading what it measured: the same ways on the
 * node, and no rank's timings disturbed by another's work (ranks that share
 * a GPU).  The wait polls (a stop signal stays pending for the run to take
 * at its next step); after LOCK_WAIT_S, or on a file system without locks,
 * the rank goes on unlocked (the budget is the instance's, not a shape's:
 * a stuck holder delays it once).  Returns the descriptor, or -1. */
#define LOCK_WAIT_S 300
int hcnn_conv_cache_lock(struct hcnn_conv_choices *s)
{
    if (!s->path[0])
        return -1;
    char path[HCNN_FILE_PATH_MAX + 8];
    snprintf(path, sizeof path, "%s.lock", s->path);
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    const struct timespec slice = {0, 50 * 1000 * 1000};
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return fd;
        if ((errno != EWOULDBLOCK && errno != EINTR) || s->lock_waits >= LOCK_WAIT_S * 20)
            break;
        nanosleep(&slice, NULL);
        s->lock_waits++; /* one budget for every shape of the instance */
    }
    close(fd);
    return -1;
}

void hcnn_conv_cache_unlock(int fd)
{
    if (fd >= 0)
        close(fd); /* releases the lock */
}

/* the file's lines for this key (none: another version's or GPU's file,
 * or none yet) */
void hcnn_conv_cache_load(struct hcnn_conv_choices *s)
{
    s->ncached = 0;
    if (!s->path[0])
        return;
    /* not blocking on what is not a regular file (a FIFO there would hold
     * every run that reads it): measured again, as with no file */
    const int fd = open(s->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    FILE *f = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return;
    }
    char line[1024];
    int version = -1, keyok = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (sscanf(line, CHOICE_MAGIC " %d", &version) == 1)
            continue;
        if (!strncmp(line, "key ", 4))
            keyok = !strcmp(line + 4, s->key);
        else if (!strncmp(line, "conv ", 5) && s->ncached < CACHE_SHAPES &&
                 hcnn_conv_choice_parse(line, &s->cached[s->ncached]))
            s->ncached++;
    }
    fclose(f);
    if (version != CHOICE_VERSION || !keyok)
        s->ncached = 0;
}

void hcnn_conv_cache_write(struct hcnn_conv_choices *s, const conv_choice *c)
{
    if (!s->path[0] || !s->cached)
        return; /* said by hcnn_conv_cache_open */
    int i;
    for (i = 0; i < s->ncached; i++) {
        const conv_choice *o = &s->cached[i];
        if (o->n == c->n && o->out_c == c->out_c && o->precision == c->precision &&
            o->layout == c->layout && !memcmp(&o->g, &c->g, sizeof o->g))
            break;
    }
    if (i == CACHE_SHAPES) { /* full: the oldest line goes */
        memmove(s->cached, s->cached + 1, sizeof *s->cached * (CACHE_SHAPES - 1));
        s->ncached = i = CACHE_SHAPES - 1;
    }
    s->cached[i] = *c;
    s->ncached += i == s->ncached;
    const size_t cap = 256 + strlen(s->key) + (size_t)s->ncached * 512;
    char *buf = (char *)malloc(cap);
    if (!buf)
        return;
    char when[32] = "";
    const time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    size_t len = (size_t)snprintf(buf, cap,
                                  CHOICE_MAGIC " %d\n# written by hcnn (HCNN_CUDA_CONV: measured "
                                  "ways, src/cuda/conv_choice.cu) on %s\nkey %s\n",
                                  CHOICE_VERSION, when, s->key);
    for (int k = 0; k < s->ncached && len < cap; k++)
        len += (size_t)hcnn_conv_choice_line(&s->cached[k], buf + len, cap - len);
    char why[512] = "the table is too long";
    if (len >= cap || hcnn_write_file_why(s->path, buf, len, why, sizeof why) != HCNN_OK)
        not_cached(s, why);
    free(buf);
}
