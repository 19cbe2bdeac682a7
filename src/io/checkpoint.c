/* Checkpoint writer and reader (format in include/hcnn/checkpoint.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "hcnn/checkpoint.h"
#include "hcnn/common.h"

enum { SEC_META = 1, SEC_TENSORS = 2 };
enum { ROLE_PARAM = 0, ROLE_STATE = 1, ROLE_MOMENTUM = 2 };
static const char MAGIC[8] = {'H', 'C', 'N', 'N', 'C', 'K', 'P', 'T'};
#define BOM 0x01020304u

int hcnn_mkdir_p(const char *dir)
{
    char buf[HCNN_PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return hcnn_error_code(HCNN_EIO, "%s: path too long", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return hcnn_error_code(HCNN_EIO, "cannot create directory %s: %s", buf,
                                   strerror(errno));
        *p = '/';
    }
    if (buf[0] && mkdir(buf, 0777) != 0 && errno != EEXIST)
        return hcnn_error_code(HCNN_EIO, "cannot create directory %s: %s", buf, strerror(errno));
    return HCNN_OK;
}

int hcnn_mkdir_parent(const char *path)
{
    char buf[HCNN_PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return hcnn_error_code(HCNN_EIO, "%s: path too long", path);
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf)
        return HCNN_OK;
    *slash = '\0';
    return hcnn_mkdir_p(buf);
}

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
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t off = 0; off < payload->n;) { /* crc32 takes uInt lengths */
        size_t chunk = payload->n - off > (1u << 30) ? (1u << 30) : payload->n - off;
        crc = crc32(crc, payload->p + off, (uInt)chunk);
        off += chunk;
    }
    put_u32(file, (uint32_t)crc);
}

static int write_atomically(const char *path, const void *data, size_t n)
{
    char tmp[HCNN_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return hcnn_error_code(HCNN_EIO, "cannot create %s: %s", tmp, strerror(errno));
    const unsigned char *p = data;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, p + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return hcnn_error_code(HCNN_EIO, "cannot write %s: %s", tmp, strerror(e));
        }
        done += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        unlink(tmp);
        return hcnn_error_code(HCNN_EIO, "cannot flush %s: %s", tmp, strerror(errno));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return hcnn_error_code(HCNN_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(e));
    }
    /* make the rename itself durable */
    char dir[HCNN_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return HCNN_OK;
}

int hcnn_ckpt_save(const char *path, const hcnn_net *net, const float *momentum,
                   const hcnn_ckpt_meta *meta)
{
    wbuf file = {0}, sec = {0};
    char text[1024];
    int len = snprintf(text, sizeof text,
                       "model_hash=%016" PRIx64 "\nmodel=%s\nepoch=%ld\nstep=%ld\nseed=%" PRIu64
                       "\n",
                       net->model_hash, meta->model, meta->epoch, meta->step, meta->seed);
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
                   (t->is_state ? net->state : net->params) + t->offset);
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
        rc = write_atomically(path, file.p, file.n);
    free(file.p);
    free(sec.p);
    return rc;
}

/* ---- reading ---------------------------------------------------------- */

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
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
        fclose(f);
        return hcnn_error_code(HCNN_EIO, "cannot stat %s", path);
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
        return hcnn_error_code(HCNN_EIO, "cannot read %s", path);
    }
    return HCNN_OK;
}

static int parse_meta(const char *path, const unsigned char *p, size_t n, hcnn_ckpt_meta *m,
                      uint64_t *hash)
{
    char text[4096];
    if (n >= sizeof text)
        return hcnn_error_code(HCNN_EFORMAT, "%s: META section too large (%zu bytes)", path, n);
    memcpy(text, p, n);
    text[n] = '\0';
    int have_hash = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        const char *v = eq + 1;
        if (!strcmp(line, "model_hash"))
            *hash = strtoull(v, NULL, 16), have_hash = 1;
        else if (!strcmp(line, "model"))
            snprintf(m->model, sizeof m->model, "%s", v);
        else if (!strcmp(line, "epoch"))
            m->epoch = strtol(v, NULL, 10);
        else if (!strcmp(line, "step"))
            m->step = strtol(v, NULL, 10);
        else if (!strcmp(line, "seed"))
            m->seed = strtoull(v, NULL, 10);
    }
    if (!have_hash)
        return hcnn_error_code(HCNN_EFORMAT, "%s: META section has no model_hash", path);
    return HCNN_OK;
}

static const hcnn_tensor_info *find_tensor(const hcnn_net *net, const char *name, int is_state)
{
    for (int i = 0; i < net->ntensors; i++)
        if (net->tensors[i].is_state == is_state && !strcmp(net->tensors[i].name, name))
            return &net->tensors[i];
    return NULL;
}

/* Parse TENSORS; with apply == 0 only validate (so a bad file changes
 * nothing), with apply == 1 copy the data. */
static int parse_tensors(const char *path, const unsigned char *p, size_t n, hcnn_net *net,
                         float *momentum, int apply)
{
    rbuf b = {p, n, 0};
    uint32_t count;
    if (get(&b, &count, 4))
        return hcnn_error_code(HCNN_EFORMAT, "%s: TENSORS section truncated", path);
    int seen_params = 0;
    for (uint32_t k = 0; k < count; k++) {
        uint16_t len;
        char name[HCNN_TENSOR_NAME_MAX];
        uint8_t role, ndim;
        uint64_t cnt;
        if (get(&b, &len, 2) || len >= sizeof name || get(&b, name, len))
            return hcnn_error_code(HCNN_EFORMAT, "%s: tensor %u: bad name", path, k);
        name[len] = '\0';
        if (get(&b, &role, 1) || get(&b, &ndim, 1) || ndim > 4 || role > ROLE_MOMENTUM)
            return hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s: bad header", path, name);
        int dims[4] = {1, 1, 1, 1};
        for (int d = 0; d < ndim; d++) {
            uint32_t v;
            if (get(&b, &v, 4))
                return hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s truncated", path, name);
            dims[d] = (int)v;
        }
        if (get(&b, &cnt, 8) || cnt > (b.n - b.off) / sizeof(float))
            return hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s: data truncated", path, name);
        const hcnn_tensor_info *t = find_tensor(net, name, role == ROLE_STATE);
        if (!t)
            return hcnn_error_code(HCNN_EFORMAT,
                                   "%s: tensor %s is not part of the configured model", path,
                                   name);
        int same = t->ndim == ndim && t->count == cnt;
        for (int d = 0; same && d < ndim; d++)
            same = t->dims[d] == dims[d];
        if (!same)
            return hcnn_error_code(HCNN_EFORMAT,
                                   "%s: tensor %s has shape [%d,%d,%d,%d] (%d dims), the model "
                                   "expects [%d,%d,%d,%d] (%d dims)",
                                   path, name, dims[0], dims[1], dims[2], dims[3], ndim,
                                   t->dims[0], t->dims[1], t->dims[2], t->dims[3], t->ndim);
        const void *src = b.p + b.off;
        b.off += cnt * sizeof(float);
        if (role != ROLE_MOMENTUM)
            seen_params++;
        if (!apply)
            continue;
        if (role == ROLE_PARAM)
            memcpy(net->params + t->offset, src, cnt * sizeof(float));
        else if (role == ROLE_STATE)
            memcpy(net->state + t->offset, src, cnt * sizeof(float));
        else if (momentum)
            memcpy(momentum + t->offset, src, cnt * sizeof(float));
    }
    if (seen_params != net->ntensors)
        return hcnn_error_code(HCNN_EFORMAT,
                               "%s: holds %d model tensors, the configured model has %d", path,
                               seen_params, net->ntensors);
    return HCNN_OK;
}

int hcnn_ckpt_load(const char *path, hcnn_net *net, float *momentum, hcnn_ckpt_meta *meta)
{
    unsigned char *data = NULL;
    size_t n = 0;
    int rc = read_file(path, &data, &n);
    if (rc)
        return rc;
    rbuf b = {data, n, 0};
    char magic[8];
    uint32_t version, bom, nsec;
    const unsigned char *tensors = NULL;
    size_t tensors_n = 0;
    uint64_t hash = 0;
    int have_meta = 0;
    memset(meta, 0, sizeof *meta);
    if (get(&b, magic, 8) || memcmp(magic, MAGIC, 8)) {
        rc = hcnn_error_code(HCNN_EFORMAT, "%s: not an hcnn checkpoint (bad magic)", path);
        goto out;
    }
    if (get(&b, &version, 4) || get(&b, &bom, 4) || get(&b, &nsec, 4)) {
        rc = hcnn_error_code(HCNN_EFORMAT, "%s: truncated header", path);
        goto out;
    }
    if (version != HCNN_CKPT_VERSION || bom != BOM) {
        rc = hcnn_error_code(HCNN_EFORMAT,
                             "%s: checkpoint version %u (byte order %08x), expected version %u",
                             path, version, bom, HCNN_CKPT_VERSION);
        goto out;
    }
    for (uint32_t s = 0; s < nsec; s++) {
        uint32_t kind, zero, crc = 0;
        uint64_t len;
        if (get(&b, &kind, 4) || get(&b, &zero, 4) || get(&b, &len, 8) || len > b.n - b.off ||
            b.n - b.off - len < 4) {
            rc = hcnn_error_code(HCNN_EFORMAT, "%s: section %u truncated", path, s);
            goto out;
        }
        const unsigned char *payload = b.p + b.off;
        b.off += len;
        get(&b, &crc, 4);
        uLong c = crc32(0L, Z_NULL, 0);
        for (uint64_t off = 0; off < len;) {
            uint64_t chunk = len - off > (1u << 30) ? (1u << 30) : len - off;
            c = crc32(c, payload + off, (uInt)chunk);
            off += chunk;
        }
        if ((uint32_t)c != crc) {
            rc = hcnn_error_code(HCNN_EFORMAT,
                                 "%s: section %u (kind %u) is corrupt: CRC32 %08x, stored %08x",
                                 path, s, kind, (unsigned)c, crc);
            goto out;
        }
        if (kind == SEC_META) {
            rc = parse_meta(path, payload, len, meta, &hash);
            if (rc)
                goto out;
            have_meta = 1;
        } else if (kind == SEC_TENSORS) {
            tensors = payload, tensors_n = len;
        }
    }
    if (!have_meta || !tensors) {
        rc = hcnn_error_code(HCNN_EFORMAT, "%s: missing %s section", path,
                             have_meta ? "TENSORS" : "META");
        goto out;
    }
    if (hash != net->model_hash) {
        rc = hcnn_error_code(HCNN_EFORMAT,
                             "%s: written for model '%s' (hash %016" PRIx64
                             "), which differs from the configured model (hash %016" PRIx64 ")",
                             path, meta->model, hash, net->model_hash);
        goto out;
    }
    meta->model_hash = hash;
    rc = parse_tensors(path, tensors, tensors_n, net, momentum, 0);
    if (!rc)
        rc = parse_tensors(path, tensors, tensors_n, net, momentum, 1);
out:
    free(data);
    return rc;
}
