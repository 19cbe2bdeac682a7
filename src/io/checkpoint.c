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

/* The file is streamed from the caller's buffers through hcnn_afile: the
 * section sizes are known before a byte is written and the CRCs are taken
 * as the bytes go, so a write allocates nothing (an image of the whole
 * file, 2x the model for ResNet-18's 89 MB, used to be built first: under
 * a memory limit the run trained and then could not checkpoint). */
typedef struct wstream {
    hcnn_afile f;
    uint32_t crc;   /* of the section being written */
    int rc;
} wstream;

static void put(wstream *w, const void *data, size_t n)
{
    if (w->rc)
        return;
    w->crc = hcnn_crc32(w->crc, data, n);
    w->rc = hcnn_afile_write(&w->f, data, n);
}
static void put_u8(wstream *w, uint8_t v) { put(w, &v, 1); }
static void put_u16(wstream *w, uint16_t v) { put(w, &v, 2); }
static void put_u32(wstream *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(wstream *w, uint64_t v) { put(w, &v, 8); }

/* Section header: kind, zero, payload size; the payload's CRC starts here. */
static void begin_section(wstream *w, uint32_t kind, uint64_t nbytes)
{
    put_u32(w, kind);
    put_u32(w, 0);
    put_u64(w, nbytes);
    w->crc = 0;
}
static void end_section(wstream *w)
{
    const uint32_t crc = w->crc;
    put_u32(w, crc);
}

static size_t tensor_bytes(const char *name, const hcnn_tensor_info *t)
{
    return 2 + strlen(name) + 1 + 1 + 4 * (size_t)t->ndim + 8 + t->count * sizeof(float);
}

static void put_tensor(wstream *w, const char *name, int role, const hcnn_tensor_info *t,
                       const float *data)
{
    size_t len = strlen(name);
    put_u16(w, (uint16_t)len);
    put(w, name, len);
    put_u8(w, (uint8_t)role);
    put_u8(w, (uint8_t)t->ndim);
    for (int d = 0; d < t->ndim; d++)
        put_u32(w, (uint32_t)t->dims[d]);
    put_u64(w, t->count);
    put(w, data, t->count * sizeof(float));
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
    be->download(be, h, net->params, sizeof(float) * np);
    be->download(be, h + np, net->state, sizeof(float) * ns);
    if (momentum)
        be->download(be, h + np + ns, momentum, sizeof(float) * np);
    const int rc = hcnn_ckpt_save_buffers(path, net, h, h + np, momentum ? h + np + ns : NULL,
                                          meta);
    hcnn_free(h);
    return rc;
}

/* The META text: every field of hcnn_ckpt_meta, the model hash in both
 * versions. */
static int meta_text(const hcnn_net *net, const hcnn_ckpt_meta *m, char *text, size_t cap)
{
    return snprintf(text, cap,
                    "model_hash=%016" PRIx64 "\nmodel_hash_version=2\nmodel_hash_v1=%016" PRIx64
                    "\nmodel=%s\nepoch=%ld\nbatch=%ld\nstep=%ld\n"
                    "seed=%" PRIu64 "\nbatch_size=%d\nlr=%.17g\nloss_sum=%.17g\n"
                    "correct=%.17g\nseen=%.17g\nrun_id=%s\nparent_run=%s\nparent_step=%ld\n"
                    "slurm_job=%s\ndataset=%s\ntrain_samples=%ld\nwritten=%.6f\n",
                    net->model_hash, net->model_hash_v1, m->model, m->epoch, m->batch, m->step,
                    m->seed, m->batch_size, m->lr, m->loss_sum, m->correct, m->seen, m->run_id,
                    m->parent_run, m->parent_step, m->slurm_job, m->dataset, m->train_samples,
                    m->written);
}

/* the META text's buffer: its most bytes */
#define META_MAX 2048

uint64_t hcnn_ckpt_file_bytes(const hcnn_net *net, int with_momentum)
{
    uint64_t nbytes = 4;
    for (int i = 0; i < net->ntensors; i++) {
        const hcnn_tensor_info *t = &net->tensors[i];
        nbytes += (with_momentum && !t->is_state ? 2 : 1) * tensor_bytes(t->name, t);
    }
    /* magic, version, byte order, sections; each section 16 bytes of
     * header and a CRC */
    return sizeof MAGIC + 12 + (16 + META_MAX + 4) + (16 + nbytes + 4);
}

int hcnn_ckpt_save_buffers(const char *path, const hcnn_net *net, const float *params,
                           const float *state, const float *momentum, const hcnn_ckpt_meta *meta)
{
    char text[META_MAX];
    const int len = meta_text(net, meta, text, sizeof text);
    if (len < 0 || (size_t)len >= sizeof text)
        return hcnn_error_code(HCNN_EFORMAT, "%s: the META text does not fit %zu bytes", path,
                               sizeof text);
    uint32_t count = 0;
    uint64_t nbytes = 4;
    for (int i = 0; i < net->ntensors; i++) {
        const hcnn_tensor_info *t = &net->tensors[i];
        const int with_momentum = momentum && !t->is_state;
        count += with_momentum ? 2u : 1u;
        nbytes += (with_momentum ? 2 : 1) * tensor_bytes(t->name, t);
    }
    wstream w = {0};
    if ((w.rc = hcnn_afile_open(&w.f, path)))
        return w.rc;
    put(&w, MAGIC, sizeof MAGIC);
    put_u32(&w, HCNN_CKPT_VERSION);
    put_u32(&w, BOM);
    put_u32(&w, 2);
    begin_section(&w, SEC_META, (uint64_t)len);
    put(&w, text, (size_t)len);
    end_section(&w);
    begin_section(&w, SEC_TENSORS, nbytes);
    put_u32(&w, count);
    for (int i = 0; i < net->ntensors; i++) {
        const hcnn_tensor_info *t = &net->tensors[i];
        put_tensor(&w, t->name, t->is_state ? ROLE_STATE : ROLE_PARAM, t,
                   (t->is_state ? state : params) + t->offset);
    }
    for (int i = 0; momentum && i < net->ntensors; i++) {
        const hcnn_tensor_info *t = &net->tensors[i];
        if (!t->is_state)
            put_tensor(&w, t->name, ROLE_MOMENTUM, t, momentum + t->offset);
    }
    end_section(&w);
    if (w.rc) /* hcnn_afile_write removed the temporary file and said why */
        return w.rc;
    return hcnn_afile_commit(&w.f);
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
    int fd; /* a FIFO blocked fopen here (eval, diff, export, --resume): refused */
    int rc = hcnn_open_regular(path, "checkpoint", HCNN_EIO, &fd);
    if (rc)
        return rc;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return hcnn_error_code(HCNN_ENOMEM, "cannot read checkpoint %s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
        fclose(f);
        return hcnn_error_code(HCNN_EIO, "cannot read checkpoint %s: %s", path, strerror(errno));
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

/* parse_meta and its helpers: an error message unless quiet (a directory
 * listing skips what it cannot read; a file the user named is reported) */
#define META_ERROR(quiet, ...) ((quiet) ? HCNN_EFORMAT : hcnn_error_code(HCNN_EFORMAT, __VA_ARGS__))

/* One META value: the whole text a number in [lo, hi] (a file whose CRCs
 * are valid can still claim step 2^63-1 or epoch -5). */
static int meta_long(int quiet, const char *path, const char *key, const char *v, long lo, long hi,
                     long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return META_ERROR(quiet, "%s: META %s=%s: expected an integer in [%ld, %ld]",
                               path, key, v, lo, hi);
    *out = x;
    return HCNN_OK;
}

static int meta_double(int quiet, const char *path, const char *key, const char *v, double lo, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < lo)
        return META_ERROR(quiet, "%s: META %s=%s: expected a finite number >= %g", path,
                               key, v, lo);
    *out = x;
    return HCNN_OK;
}

static int meta_u64(int quiet, const char *path, const char *key, const char *v, int base, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, base);
    if (errno || end == v || *end || *v == '-' || *v == '+' || *v == ' ')
        return META_ERROR(quiet, "%s: META %s=%s: expected an unsigned %s integer",
                               path, key, v, base == 16 ? "hexadecimal" : "decimal");
    *out = (uint64_t)x;
    return HCNN_OK;
}

/* A META text value into dst: shorter than cap, of the characters an
 * identity may hold (letters, digits and "-_.:"; other text is refused,
 * as a name that could carry a newline or a path would be). */
static int meta_ident(int quiet, const char *path, const char *key, const char *v, char *dst, size_t cap)
{
    const size_t n = strlen(v);
    int ok = n < cap;
    for (size_t i = 0; ok && i < n; i++) {
        const unsigned char ch = (unsigned char)v[i];
        ok = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
             ch == '-' || ch == '_' || ch == '.' || ch == ':';
    }
    if (!ok)
        return META_ERROR(quiet,
                               "%s: META %s=%s: expected at most %zu letters, digits or -_.:",
                               path, key, v, cap - 1);
    memcpy(dst, v, n + 1);
    return HCNN_OK;
}

static int parse_meta(int quiet, const char *path, const unsigned char *p, size_t n, hcnn_ckpt_meta *m)
{
    char text[4096];
    if (n >= sizeof text)
        return META_ERROR(quiet, "%s: META section too large (%zu bytes)", path, n);
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
            rc = meta_u64(quiet, path, line, v, 16, &m->model_hash), have_hash = 1;
        else if (!strcmp(line, "model"))
            snprintf(m->model, sizeof m->model, "%s", v);
        else if (!strcmp(line, "epoch"))
            rc = meta_long(quiet, path, line, v, 0, HCNN_MAX_EPOCHS, &m->epoch);
        else if (!strcmp(line, "step"))
            rc = meta_long(quiet, path, line, v, 0, (long)HCNN_MAX_STEPS, &m->step);
        else if (!strcmp(line, "seed"))
            rc = meta_u64(quiet, path, line, v, 10, &m->seed);
        else if (!strcmp(line, "batch"))
            rc = meta_long(quiet, path, line, v, 0, (long)HCNN_MAX_STEPS, &m->batch);
        else if (!strcmp(line, "batch_size")) {
            rc = meta_long(quiet, path, line, v, 0, HCNN_MAX_BATCH, &batch_size);
            m->batch_size = (int)batch_size;
        } else if (!strcmp(line, "lr"))
            rc = meta_double(quiet, path, line, v, 0.0, &m->lr);
        else if (!strcmp(line, "loss_sum"))
            rc = meta_double(quiet, path, line, v, 0.0, &m->loss_sum);
        else if (!strcmp(line, "correct"))
            rc = meta_double(quiet, path, line, v, 0.0, &m->correct);
        else if (!strcmp(line, "seen"))
            rc = meta_double(quiet, path, line, v, 0.0, &m->seen);
        else if (!strcmp(line, "model_hash_version")) {
            long version = 0;
            rc = meta_long(quiet, path, line, v, 1, 2, &version);
            m->hash_version = (int)version;
        } else if (!strcmp(line, "model_hash_v1"))
            rc = meta_u64(quiet, path, line, v, 16, &m->model_hash_v1);
        else if (!strcmp(line, "run_id"))
            rc = meta_ident(quiet, path, line, v, m->run_id, sizeof m->run_id);
        else if (!strcmp(line, "parent_run"))
            rc = meta_ident(quiet, path, line, v, m->parent_run, sizeof m->parent_run);
        else if (!strcmp(line, "parent_step"))
            rc = meta_long(quiet, path, line, v, 0, (long)HCNN_MAX_STEPS, &m->parent_step);
        else if (!strcmp(line, "slurm_job"))
            rc = meta_ident(quiet, path, line, v, m->slurm_job, sizeof m->slurm_job);
        else if (!strcmp(line, "dataset"))
            rc = meta_ident(quiet, path, line, v, m->dataset, sizeof m->dataset);
        else if (!strcmp(line, "train_samples"))
            rc = meta_long(quiet, path, line, v, 0, LONG_MAX, &m->train_samples);
        else if (!strcmp(line, "written"))
            rc = meta_double(quiet, path, line, v, 0.0, &m->written);
        if (rc)
            return rc;
    }
    if (!have_hash)
        return META_ERROR(quiet, "%s: META section has no model_hash", path);
    if (m->hash_version == 0) { /* written before version 2: its hash is version 1 */
        m->hash_version = 1;
        m->model_hash_v1 = m->model_hash;
    }
    if (m->batch > m->step || m->correct > m->seen)
        return META_ERROR(quiet,
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
    uint32_t content_crc = 0;
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
        if (kind != SEC_META)
            content_crc = hcnn_crc32(content_crc, &crc, sizeof crc);
        if (kind == SEC_META && !have_meta) {
            if ((rc = parse_meta(0, path, payload, len, &f->meta)))
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
    f->meta.content_crc = content_crc;
    return HCNN_OK;
fail:
    hcnn_ckpt_close(f);
    return rc;
}

int hcnn_ckpt_read_meta(const char *path, hcnn_ckpt_meta *meta, int quiet)
{
    memset(meta, 0, sizeof *meta);
    int fd = -1;
    if (!quiet) { /* the message names what stands at path (a FIFO, a directory) */
        const int rc = hcnn_open_regular(path, "checkpoint", HCNN_EIO, &fd);
        if (rc)
            return rc;
    } else {
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            if (fd >= 0)
                close(fd);
            return HCNN_EIO;
        }
    }
    /* header (20 bytes), META's section header (16), its text, its CRC */
    unsigned char buf[20 + 16 + 4096 + 4];
    const ssize_t got = read(fd, buf, sizeof buf);
    close(fd);
    uint32_t version = 0, bom = 0, kind = 0, crc = 0;
    uint64_t len = 0;
    if (got >= 36) {
        memcpy(&version, buf + 8, 4), memcpy(&bom, buf + 12, 4);
        memcpy(&kind, buf + 20, 4), memcpy(&len, buf + 28, 8);
    }
    if (got < 36 || memcmp(buf, MAGIC, sizeof MAGIC) || version != HCNN_CKPT_VERSION ||
        bom != BOM || kind != SEC_META || len > 4096 || (size_t)got < 36 + len + 4)
        return quiet ? HCNN_EFORMAT
                     : hcnn_error_code(HCNN_EFORMAT,
                                       "%s: not an hcnn checkpoint of version %u with its META "
                                       "section first",
                                       path, HCNN_CKPT_VERSION);
    memcpy(&crc, buf + 36 + len, 4);
    if (hcnn_crc32(0, buf + 36, (size_t)len) != crc)
        return quiet ? HCNN_EFORMAT
                     : hcnn_error_code(HCNN_EFORMAT, "%s: META section is corrupt (CRC32)", path);
    return parse_meta(quiet, path, buf + 36, (size_t)len, meta);
}

int hcnn_ckpt_meta_matches_model(const hcnn_ckpt_meta *meta, const hcnn_net *net)
{
    return meta->hash_version >= 2 ? meta->model_hash == net->model_hash
                                   : meta->model_hash_v1 == net->model_hash_v1;
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
    if (!hcnn_ckpt_meta_matches_model(&f.meta, net)) {
        const int v2 = f.meta.hash_version >= 2;
        rc = hcnn_error_code(HCNN_EFORMAT,
                             "%s: written for model '%s' (hash %016" PRIx64
                             "%s), which differs from the configured model (hash %016" PRIx64
                             ")",
                             path, f.meta.model, v2 ? f.meta.model_hash : f.meta.model_hash_v1,
                             v2 ? "" : ", version 1", v2 ? net->model_hash : net->model_hash_v1);
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
            net->be->upload(net->be, dst, c->data, c->count * sizeof(float));
    }
out:
    free(seen);
    hcnn_ckpt_close(&f);
    return rc;
}
