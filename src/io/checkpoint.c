/* Checkpoint writer and reader (format in include/hcnn/checkpoint.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hcnn/checkpoint.h"
#include "hcnn/common.h"
#include "hcnn/config.h"
#include "hcnn/files.h"

enum { SEC_META = 1, SEC_TENSORS = 2 };
enum { ROLE_PARAM = 0, ROLE_STATE = 1, ROLE_MOMENTUM = 2 };
static const char MAGIC[8] = {'H', 'C', 'N', 'N', 'C', 'K', 'P', 'T'};
#define BOM 0x01020304u

/* ---- writing ---------------------------------------------------------- */

typedef struct wbuf {
    unsigned char *p;
    size_t n, cap;
    int failed;
} wbuf;

static void put(wbuf *b, const void *data, size_t n)
{
    if (b->failed)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}
static void put_u8(wbuf *b, uint8_t v) { put(b, &v, 1); }
static void put_u16(wbuf *b, uint16_t v) { put(b, &v, 2); }
static void put_u32(wbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(wbuf *b, uint64_t v) { put(b, &v, 8); }

static void put_tensor(wbuf *b, const char *name, int role, const hcnn_tensor_info *t,
                       const float *data)
{
    size_t len = strlen(name);
    put_u16(b, (uint16_t)len);
    put(b, name, len);
    put_u8(b, (uint8_t)role);
    put_u8(b, (uint8_t)t->ndim);
    for (int d = 0; d < t->ndim; d++)
        put_u32(b, (uint32_t)t->dims[d]);
    put_u64(b, t->count);
    put(b, data, t->count * sizeof(float));
}

static void put_section(wbuf *file, uint32_t kind, const wbuf *payload)
{
    put_u32(file, kind);
    put_u32(file, 0);
    put_u64(file, payload->n);
    put(file, payload->p, payload->n);
    put_u32(file, hcnn_crc32(0, payload->p, payload->n));
}

int hcnn_ckpt_save(const char *path, const hcnn_net *net, const float *momentum,
                   const hcnn_ckpt_meta *meta)
{
    const hcnn_backend *be = net->be;
    if (be->host_memory)
        return hcnn_ckpt_save_buffers(path, net, net->params, net->state, momentum, meta);
    /* host copies of the backend's buffers */
    const size_t np = net->nparams, ns = net->nstate;
    float *h = hcnn_alloc(sizeof(float) * (2 * np + ns + 1), "checkpoint copy");
    if (!h)
        return HCNN_ENOMEM;
    be->download(h, net->params, sizeof(float) * np);
    be->download(h + np, net->state, sizeof(float) * ns);
    if (momentum)
        be->download(h + np + ns, momentum, sizeof(float) * np);
    const int rc = hcnn_ckpt_save_buffers(path, net, h, h + np, momentum ? h + np + ns : NULL,
                                          meta);
    hcnn_free(h);
    return rc;
}

int hcnn_ckpt_save_buffers(const char *path, const hcnn_net *net, const float *params,
                           const float *state, const float *momentum, const hcnn_ckpt_meta *meta)
{
    wbuf file = {0}, sec = {0};
    char text[1024];
    int len = snprintf(text, sizeof text,
                       "model_hash=%016" PRIx64 "\nmodel=%s\nepoch=%ld\nbatch=%ld\nstep=%ld\n"
                       "seed=%" PRIu64 "\nbatch_size=%d\nlr=%.17g\nloss_sum=%.17g\n"
                       "correct=%.17g\nseen=%.17g\n",
                       net->model_hash, meta->model, meta->epoch, meta->batch, meta->step,
                       meta->seed, meta->batch_size, meta->lr, meta->loss_sum, meta->correct,
                       meta->seen);
    put(&file, MAGIC, sizeof MAGIC);
    put_u32(&file, HCNN_CKPT_VERSION);
    put_u32(&file, BOM);
    put_u32(&file, 2);
    put(&sec, text, (size_t)len);
    put_section(&file, SEC_META, &sec);
    sec.n = 0;
    put_u32(&sec, (uint32_t)(net->ntensors * (momentum ? 2 : 1)));
    for (int i = 0; i < net->ntensors; i++) {
        const hcnn_tensor_info *t = &net->tensors[i];
        put_tensor(&sec, t->name, t->is_state ? ROLE_STATE : ROLE_PARAM, t,
                   (t->is_state ? state : params) + t->offset);
    }
    for (int i = 0; momentum && i < net->ntensors; i++) {
        const hcnn_tensor_info *t = &net->tensors[i];
        if (!t->is_state)
            put_tensor(&sec, t->name, ROLE_MOMENTUM, t, momentum + t->offset);
    }
    if (momentum) { /* count was written for all tensors; fix it to the real one */
        uint32_t cnt = 0;
        for (int i = 0; i < net->ntensors; i++)
            cnt += net->tensors[i].is_state ? 1u : 2u;
        if (!sec.failed)
            memcpy(sec.p, &cnt, 4);
    }
    put_section(&file, SEC_TENSORS, &sec);
    int rc;
    if (file.failed || sec.failed)
        rc = hcnn_error_code(HCNN_ENOMEM, "cannot allocate the checkpoint image for %s", path);
    else
        rc = hcnn_write_file(path, file.p, file.n);
    free(file.p);
    free(sec.p);
    return rc;
}

void hcnn_ckpt_name(char *buf, size_t cap, const char *dir, long step)
{
    snprintf(buf, cap, "%s/ckpt-s%010ld.hcnn", dir, step);
}

/* Steps of the checkpoints in dir, sorted ascending; returns the count. */
static int list_steps(const char *dir, long *steps, int cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long step;
        char tail[8];
        /* exactly ckpt-sNNNNNNNNNN.hcnn: temporary files do not match */
        if (strlen(e->d_name) == 21 && sscanf(e->d_name, "ckpt-s%10ld.%5s", &step, tail) == 2 &&
            !strcmp(tail, "hcnn") && n < cap)
            steps[n++] = step;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort: a handful of files */
        for (int j = i; j > 0 && steps[j - 1] > steps[j]; j--) {
            long t = steps[j];
            steps[j] = steps[j - 1], steps[j - 1] = t;
        }
    return n;
}

int hcnn_ckpt_latest(const char *dir, char *buf, size_t cap)
{
    if (hcnn_ckpt_latest_quiet(dir, buf, cap) != HCNN_OK)
        return hcnn_error_code(HCNN_EIO, "--resume latest: no checkpoint (ckpt-s*.hcnn) in '%s' "
                                         "(key checkpoint_dir)",
                               dir);
    return HCNN_OK;
}

int hcnn_ckpt_latest_quiet(const char *dir, char *buf, size_t cap)
{
    long steps[4096];
    int n = list_steps(dir, steps, 4096);
    if (n == 0)
        return HCNN_EIO;
    hcnn_ckpt_name(buf, cap, dir, steps[n - 1]);
    return HCNN_OK;
}

void hcnn_ckpt_prune(const char *dir, int keep)
{
    long steps[4096];
    int n = list_steps(dir, steps, 4096);
    for (int i = 0; i < n - keep; i++) {
        char path[HCNN_FILE_PATH_MAX + 32];
        hcnn_ckpt_name(path, sizeof path, dir, steps[i]);
        unlink(path);
    }
}

/* ---- reading ---------------------------------------------------------- */

const char *hcnn_ckpt_role_name(int role)
{
    return role == ROLE_PARAM ? "parameter" : role == ROLE_STATE ? "statistic" : "momentum";
}

typedef struct rbuf {
    const unsigned char *p;
    size_t n, off;
} rbuf;

static int get(rbuf *b, void *dst, size_t n)
{
    if (n > b->n - b->off)
        return -1;
    memcpy(dst, b->p + b->off, n);
    b->off += n;
    return 0;
}

static int read_file(const char *path, unsigned char **data, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return hcnn_error_code(HCNN_EIO, "cannot open checkpoint %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return hcnn_error_code(HCNN_EIO, "%s: not a regular file", path);
    }
    *n = (size_t)st.st_size;
    *data = malloc(*n + 1);
    if (!*data) {
        fclose(f);
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate %zu bytes to read %s", *n, path);
    }
    size_t got = fread(*data, 1, *n, f);
    fclose(f);
    if (got != *n) {
        free(*data);
        *data = NULL;
        return hcnn_error_code(HCNN_EIO, "cannot read %s", path);
    }
    return HCNN_OK;
}

/* One META value: the whole text a number in [lo, hi] (a file whose CRCs
 * are valid can still claim step 2^63-1 or epoch -5). */
static int meta_long(const char *path, const char *key, const char *v, long lo, long hi,
                     long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return hcnn_error_code(HCNN_EFORMAT, "%s: META %s=%s: expected an integer in [%ld, %ld]",
                               path, key, v, lo, hi);
    *out = x;
    return HCNN_OK;
}

static int meta_double(const char *path, const char *key, const char *v, double lo, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < lo)
        return hcnn_error_code(HCNN_EFORMAT, "%s: META %s=%s: expected a finite number >= %g", path,
                               key, v, lo);
    *out = x;
    return HCNN_OK;
}

static int meta_u64(const char *path, const char *key, const char *v, int base, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, base);
    if (errno || end == v || *end || *v == '-' || *v == '+' || *v == ' ')
        return hcnn_error_code(HCNN_EFORMAT, "%s: META %s=%s: expected an unsigned %s integer",
                               path, key, v, base == 16 ? "hexadecimal" : "decimal");
    *out = (uint64_t)x;
    return HCNN_OK;
}

static int parse_meta(const char *path, const unsigned char *p, size_t n, hcnn_ckpt_meta *m)
{
    char text[4096];
    if (n >= sizeof text)
        return hcnn_error_code(HCNN_EFORMAT, "%s: META section too large (%zu bytes)", path, n);
    memcpy(text, p, n);
    text[n] = '\0';
    int have_hash = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        const char *v = eq + 1;
        long batch_size = 0;
        int rc = HCNN_OK;
        if (!strcmp(line, "model_hash"))
            rc = meta_u64(path, line, v, 16, &m->model_hash), have_hash = 1;
        else if (!strcmp(line, "model"))
            snprintf(m->model, sizeof m->model, "%s", v);
        else if (!strcmp(line, "epoch"))
            rc = meta_long(path, line, v, 0, HCNN_MAX_EPOCHS, &m->epoch);
        else if (!strcmp(line, "step"))
            rc = meta_long(path, line, v, 0, (long)HCNN_MAX_STEPS, &m->step);
        else if (!strcmp(line, "seed"))
            rc = meta_u64(path, line, v, 10, &m->seed);
        else if (!strcmp(line, "batch"))
            rc = meta_long(path, line, v, 0, (long)HCNN_MAX_STEPS, &m->batch);
        else if (!strcmp(line, "batch_size")) {
            rc = meta_long(path, line, v, 0, HCNN_MAX_BATCH, &batch_size);
            m->batch_size = (int)batch_size;
        } else if (!strcmp(line, "lr"))
            rc = meta_double(path, line, v, 0.0, &m->lr);
        else if (!strcmp(line, "loss_sum"))
            rc = meta_double(path, line, v, 0.0, &m->loss_sum);
        else if (!strcmp(line, "correct"))
            rc = meta_double(path, line, v, 0.0, &m->correct);
        else if (!strcmp(line, "seen"))
            rc = meta_double(path, line, v, 0.0, &m->seen);
        if (rc)
            return rc;
    }
    if (!have_hash)
        return hcnn_error_code(HCNN_EFORMAT, "%s: META section has no model_hash", path);
    if (m->batch > m->step || m->correct > m->seen)
        return hcnn_error_code(HCNN_EFORMAT,
                               "%s: META is inconsistent: batch %ld of step %ld, %.0f correct of "
                               "%.0f seen (expected batch <= step, correct <= seen)",
                               path, m->batch, m->step, m->correct, m->seen);
    return HCNN_OK;
}

static int index_tensors(const char *path, const unsigned char *p, size_t n, hcnn_ckpt_file *f)
{
    rbuf b = {p, n, 0};
    uint32_t count;
    if (get(&b, &count, 4))
        return hcnn_error_code(HCNN_EFORMAT, "%s: TENSORS section truncated", path);
    /* every tensor takes at least 12 bytes: a bound on count before allocating */
    if (count > n / 12 + 1)
        return hcnn_error_code(HCNN_EFORMAT, "%s: TENSORS section claims %u tensors in %zu bytes",
                               path, count, n);
    f->tensors = calloc(count + 1, sizeof *f->tensors);
    if (!f->tensors)
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the tensor index of %s", path);
    for (uint32_t k = 0; k < count; k++) {
        hcnn_ckpt_tensor *t = &f->tensors[k];
        uint16_t len;
        uint8_t role, ndim;
        uint64_t cnt;
        if (get(&b, &len, 2) || len >= sizeof t->name || get(&b, t->name, len))
            return hcnn_error_code(HCNN_EFORMAT, "%s: tensor %u: bad name", path, k);
        t->name[len] = '\0';
        if (get(&b, &role, 1) || get(&b, &ndim, 1) || ndim > 4 || role > ROLE_MOMENTUM)
            return hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s: bad header", path, t->name);
        t->role = role, t->ndim = ndim;
        uint64_t prod = 1;
        for (int d = 0; d < 4; d++) {
            uint32_t v = 1;
            if (d < ndim && get(&b, &v, 4))
                return hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s truncated", path, t->name);
            /* dims are ints in memory; the product is bounded by the section
             * before it is used (it cannot wrap around to match a small count) */
            if (v > (uint32_t)INT_MAX || (v && prod > (b.n / sizeof(float)) / v))
                return hcnn_error_code(HCNN_EFORMAT,
                                       "%s: tensor %s: dimension %d is %u (expected at most %d, "
                                       "and a product of the dimensions that the %zu-byte "
                                       "section can hold)",
                                       path, t->name, d, v, INT_MAX, n);
            t->dims[d] = (int)v;
            prod *= v;
        }
        if (get(&b, &cnt, 8) || cnt > (b.n - b.off) / sizeof(float) || cnt != prod)
            return hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s: data truncated or size mismatch",
                                   path, t->name);
        t->count = (size_t)cnt;
        t->data = (const float *)(const void *)(b.p + b.off);
        b.off += cnt * sizeof(float);
        f->ntensors++;
    }
    if (b.off != n)
        return hcnn_error_code(HCNN_EFORMAT,
                               "%s: TENSORS section: %zu bytes after the %u tensors it counts "
                               "(expected none)",
                               path, n - b.off, count);
    return HCNN_OK;
}

int hcnn_ckpt_read(const char *path, hcnn_ckpt_file *f)
{
    memset(f, 0, sizeof *f);
    int rc = read_file(path, &f->image, &f->size);
    if (rc)
        return rc;
    rbuf b = {f->image, f->size, 0};
    char magic[8];
    uint32_t version, bom, nsec;
    int have_meta = 0, have_tensors = 0;
    if (get(&b, magic, 8) || memcmp(magic, MAGIC, 8)) {
        rc = hcnn_error_code(HCNN_EFORMAT, "%s: not an hcnn checkpoint (bad magic)", path);
        goto fail;
    }
    if (get(&b, &version, 4) || get(&b, &bom, 4) || get(&b, &nsec, 4)) {
        rc = hcnn_error_code(HCNN_EFORMAT, "%s: truncated header", path);
        goto fail;
    }
    if (version != HCNN_CKPT_VERSION || bom != BOM) {
        rc = hcnn_error_code(HCNN_EFORMAT,
                             "%s: checkpoint version %u (byte order %08x), expected version %u",
                             path, version, bom, HCNN_CKPT_VERSION);
        goto fail;
    }
    for (uint32_t s = 0; s < nsec; s++) {
        uint32_t kind, zero, crc = 0;
        uint64_t len;
        if (get(&b, &kind, 4) || get(&b, &zero, 4) || get(&b, &len, 8) || len > b.n - b.off ||
            b.n - b.off - len < 4) {
            rc = hcnn_error_code(HCNN_EFORMAT, "%s: section %u truncated", path, s);
            goto fail;
        }
        const unsigned char *payload = b.p + b.off;
        b.off += len;
        get(&b, &crc, 4);
        uint32_t c = hcnn_crc32(0, payload, len);
        if (c != crc) {
            rc = hcnn_error_code(HCNN_EFORMAT,
                                 "%s: section %u (kind %u) is corrupt: CRC32 %08x, stored %08x",
                                 path, s, kind, c, crc);
            goto fail;
        }
        if (kind == SEC_META && !have_meta) {
            if ((rc = parse_meta(path, payload, len, &f->meta)))
                goto fail;
            have_meta = 1;
        } else if (kind == SEC_TENSORS && !have_tensors) {
            if ((rc = index_tensors(path, payload, len, f)))
                goto fail;
            have_tensors = 1;
        }
    }
    if (!have_meta || !have_tensors) {
        rc = hcnn_error_code(HCNN_EFORMAT, "%s: missing %s section", path,
                             have_meta ? "TENSORS" : "META");
        goto fail;
    }
    return HCNN_OK;
fail:
    hcnn_ckpt_close(f);
    return rc;
}

void hcnn_ckpt_close(hcnn_ckpt_file *f)
{
    free(f->image);
    free(f->tensors);
    memset(f, 0, sizeof *f);
}

/* Every value finite; a batch-norm running variance not negative. */
static int check_values(const char *path, const hcnn_ckpt_tensor *c, const hcnn_tensor_info *t)
{
    const int variance = hcnn_tensor_is_variance(t);
    for (size_t i = 0; i < c->count; i++) {
        float v;
        memcpy(&v, c->data + i, sizeof v); /* unaligned in the file image */
        if (!isfinite(v) || (variance && v < 0.0f))
            return hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s (%s), element %zu is %g "
                                   "(expected a finite%s value)",
                                   path, c->name, hcnn_ckpt_role_name(c->role), i, (double)v,
                                   variance ? ", non-negative" : "");
    }
    return HCNN_OK;
}

int hcnn_ckpt_load(const char *path, hcnn_net *net, float *momentum, hcnn_ckpt_meta *meta)
{
    unsigned char *seen = NULL;
    hcnn_ckpt_file f;
    int rc = hcnn_ckpt_read(path, &f);
    if (rc)
        return rc;
    *meta = f.meta;
    if (f.meta.model_hash != net->model_hash) {
        rc = hcnn_error_code(HCNN_EFORMAT,
                             "%s: written for model '%s' (hash %016" PRIx64
                             "), which differs from the configured model (hash %016" PRIx64 ")",
                             path, f.meta.model, f.meta.model_hash, net->model_hash);
        goto out;
    }
    /* validate everything first, so that a bad file changes nothing */
    int model_tensors = 0, momentum_tensors = 0;
    /* seen[i]: tensor i of the model, seen[ntensors + i]: its momentum */
    seen = calloc(2 * (size_t)net->ntensors + 1, 1);
    if (!seen) {
        rc = hcnn_error_code(HCNN_ENOMEM, "cannot allocate the tensor table to check %s", path);
        goto out;
    }
    for (int k = 0; k < f.ntensors; k++) {
        const hcnn_ckpt_tensor *c = &f.tensors[k];
        const hcnn_tensor_info *t =
            hcnn_net_find_tensor(net, c->name, strlen(c->name), c->role == ROLE_STATE);
        if (!t) {
            rc = hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s is not part of the configured model",
                                 path, c->name);
            goto out;
        }
        int same = t->ndim == c->ndim && t->count == c->count;
        for (int d = 0; same && d < c->ndim; d++)
            same = t->dims[d] == c->dims[d];
        if (!same) {
            rc = hcnn_error_code(HCNN_EFORMAT,
                                 "%s: tensor %s has shape [%d,%d,%d,%d] (%d dims), the model "
                                 "expects [%d,%d,%d,%d] (%d dims)",
                                 path, c->name, c->dims[0], c->dims[1], c->dims[2], c->dims[3],
                                 c->ndim, t->dims[0], t->dims[1], t->dims[2], t->dims[3], t->ndim);
            goto out;
        }
        if (c->role == ROLE_MOMENTUM && t->is_state) {
            rc = hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s: momentum of a batch-norm statistic",
                                 path, c->name);
            goto out;
        }
        unsigned char *once = &seen[(size_t)(t - net->tensors) +
                                    (c->role == ROLE_MOMENTUM ? (size_t)net->ntensors : 0)];
        if (*once) {
            rc = hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s (%s) appears twice", path, c->name,
                                 hcnn_ckpt_role_name(c->role));
            goto out;
        }
        *once = 1;
        if ((rc = check_values(path, c, t)) != HCNN_OK)
            goto out;
        model_tensors += c->role != ROLE_MOMENTUM;
        momentum_tensors += c->role == ROLE_MOMENTUM;
    }
    for (int i = 0; i < net->ntensors; i++)
        if (!seen[i]) {
            rc = hcnn_error_code(HCNN_EFORMAT,
                                 "%s: holds %d model tensors, the configured model has %d: "
                                 "%s is missing",
                                 path, model_tensors, net->ntensors, net->tensors[i].name);
            goto out;
        }
    for (int i = 0; momentum_tensors > 0 && i < net->ntensors; i++)
        if (!net->tensors[i].is_state && !seen[net->ntensors + i]) {
            rc = hcnn_error_code(HCNN_EFORMAT,
                                 "%s: has momentum for %d tensors but not for %s (expected all "
                                 "parameters or none)",
                                 path, momentum_tensors, net->tensors[i].name);
            goto out;
        }
    for (int k = 0; k < f.ntensors; k++) {
        const hcnn_ckpt_tensor *c = &f.tensors[k];
        const hcnn_tensor_info *t =
            hcnn_net_find_tensor(net, c->name, strlen(c->name), c->role == ROLE_STATE);
        float *dst = c->role == ROLE_PARAM   ? net->params + t->offset
                     : c->role == ROLE_STATE ? net->state + t->offset
                     : momentum              ? momentum + t->offset
                                             : NULL;
        if (dst) /* c->data is unaligned in the file image: upload copies bytes */
            net->be->upload(dst, c->data, c->count * sizeof(float));
    }
out:
    free(seen);
    hcnn_ckpt_close(&f);
    return rc;
}
