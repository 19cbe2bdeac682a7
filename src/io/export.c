/* Checkpoint <-> NumPy .npy export and import (layout in
 * include/hcnn/export.h).
 *
 * The .npy format (NumPy's numpy/lib/format.py): "\x93NUMPY", major and
 * minor version bytes, the header length (little-endian uint16 for 1.0,
 * uint32 for 2.0 and 3.0), then the header: a Python dict literal
 * {'descr': '<f4', 'fortran_order': False, 'shape': (6, 1, 5, 5), }
 * padded with spaces and ending in '\n', then the raw array data.
 *
 * Everything read from a file is untrusted: the header parser works on a
 * length-bounded byte buffer (never on NUL-terminated text), does not
 * recurse, and the data size is checked against the file size before any
 * data is read.  Integers are encoded and decoded byte by byte, so files
 * are little-endian whatever the host's byte order. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hcnn/backend.h"
#include "hcnn/checkpoint.h"
#include "hcnn/common.h"
#include "hcnn/export.h"
#include "hcnn/files.h"
#include "hcnn/net.h"

enum { ROLE_PARAM = 0, ROLE_STATE = 1 };

static const char NPY_MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
/* numpy aligns the data to 64 bytes (ARRAY_ALIGN) so it can be mmap'ed */
#define NPY_ALIGN 64
/* A bound on the header before it is read; our headers are < 256 bytes and
 * numpy's own loader refuses headers over 10000 bytes by default. */
#define NPY_HEADER_MAX 65536
/* numpy's NPY_MAXDIMS (32 in 1.x, 64 in 2.x): more cannot come from numpy */
#define NPY_MAX_DIMS 64
/* bytes converted per read/write call; a multiple of 8 (the largest item) */
#define CHUNK (64 * 1024)
/* dir + '/' + tensor name + ".num_batches_tracked.npy" + ".tmp.<pid>" */
#define PATHBUF (HCNN_PATH_MAX + HCNN_TENSOR_NAME_MAX + 64)

/* ---- little-endian encoding ------------------------------------------- */

static void put_le16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
}
static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_le16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* ---- names, shapes, paths --------------------------------------------- */

/* Tensor names become file names: allow only what hcnn and PyTorch use
 * ([A-Za-z0-9_.-], not starting with '.'), so a crafted checkpoint cannot
 * write outside the directory or break the space-separated manifest. */
static int safe_name(const char *s)
{
    if (!s[0] || s[0] == '.')
        return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

static int ends_with(const char *s, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);
    return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

/* Python's repr of a shape tuple: "()", "(6,)", "(6, 1, 5, 5)". */
static void fmt_tuple(char *buf, size_t cap, int ndim, const long long *dims)
{
    size_t o = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", dims[d]);
    if (o < cap)
        snprintf(buf + o, cap - o, "%s)", ndim == 1 ? "," : "");
}

static void int_dims(long long *out, int ndim, const int *dims)
{
    for (int d = 0; d < ndim; d++)
        out[d] = dims[d];
}

static int join_path(char *buf, const char *dir, const char *name, const char *suffix)
{
    int n = snprintf(buf, PATHBUF, "%s/%s%s", dir, name, suffix);
    if (n < 0 || n >= PATHBUF - 32) /* leave room for the temporary suffix */
        return hcnn_error_code(HCNN_EIO, "%s/%s%s: path too long", dir, name, suffix);
    return HCNN_OK;
}

/* ---- writing ---------------------------------------------------------- */

/* Build the .npy 1.0 preamble and header exactly as numpy's _wrap_header
 * does (1 to 64 spaces of padding, then '\n'), so our files are byte for
 * byte what np.save writes for the same array.  Returns the total length,
 * a multiple of NPY_ALIGN. */
static size_t npy_header(unsigned char *out, size_t cap, const char *descr, int ndim,
                         const long long *dims)
{
    char shape[NPY_MAX_DIMS * 24], dict[NPY_MAX_DIMS * 24 + 96];
    fmt_tuple(shape, sizeof shape, ndim, dims);
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                      descr, shape);
    size_t hlen = (size_t)dl + 1; /* with the final '\n' */
    size_t pad = NPY_ALIGN - (sizeof NPY_MAGIC + 4 + hlen) % NPY_ALIGN;
    size_t total = sizeof NPY_MAGIC + 4 + hlen + pad;
    if (total > cap || hlen + pad > 65535)
        return 0; /* cannot happen for ndim <= 4; guards the buffer */
    memcpy(out, NPY_MAGIC, sizeof NPY_MAGIC);
    out[6] = 1, out[7] = 0;
    put_le16(out + 8, (uint16_t)(hlen + pad));
    memcpy(out + 10, dict, (size_t)dl);
    memset(out + 10 + dl, ' ', pad);
    out[total - 1] = '\n';
    return total;
}

typedef enum { ITEM_F32, ITEM_I64 } item_kind;

/* Write one .npy file holding count native items (float or int64_t; src
 * may be unaligned) converted to little-endian through chunk[CHUNK]. */
static int write_npy(const char *path, item_kind kind, int ndim, const long long *dims,
                     const void *src, size_t count, unsigned char *chunk)
{
    unsigned char hdr[512];
    size_t hl = npy_header(hdr, sizeof hdr, kind == ITEM_F32 ? "<f4" : "<i8", ndim, dims);
    if (hl == 0)
        return hcnn_error_code(HCNN_EFORMAT, "%s: shape too large for a .npy header", path);
    hcnn_afile a;
    int rc = hcnn_afile_open(&a, path);
    if (rc || (rc = hcnn_afile_write(&a, hdr, hl)))
        return rc;
    const size_t isz = kind == ITEM_F32 ? 4 : 8, per = CHUNK / isz;
    const unsigned char *s = src;
    for (size_t i = 0; i < count; i += per) {
        size_t n = count - i < per ? count - i : per;
        for (size_t k = 0; k < n; k++) {
            if (kind == ITEM_F32) {
                uint32_t u;
                memcpy(&u, s + (i + k) * 4, 4);
                put_le32(chunk + k * 4, u);
            } else {
                uint64_t u;
                memcpy(&u, s + (i + k) * 8, 8);
                put_le64(chunk + k * 8, u);
            }
        }
        if ((rc = hcnn_afile_write(&a, chunk, n * isz)))
            return rc;
    }
    return hcnn_afile_commit(&a);
}

/* Growable text buffer for the manifest; a failed allocation is remembered
 * and reported once at the end. */
typedef struct tbuf {
    char *p;
    size_t n, cap;
    int failed;
} tbuf;

static void tb_printf(tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tb_printf(tbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->failed = 1;
            return;
        }
        if (b->p && (size_t)w < b->cap - b->n) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = b->cap ? b->cap : 1024;
        while (cap - b->n <= (size_t)w)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q, b->cap = cap;
    }
}

/* Manifest shape: "6x1x5x5", "6", or "scalar". */
static void manifest_line(tbuf *b, const char *name, const char *dtype, int ndim, const int *dims)
{
    tb_printf(b, "%s %s ", name, dtype);
    if (ndim == 0)
        tb_printf(b, "scalar");
    for (int d = 0; d < ndim; d++)
        tb_printf(b, "%s%d", d ? "x" : "", dims[d]);
    tb_printf(b, "\n");
}

/* If checkpoint tensor k is the last batch-norm statistic of its layer
 * (a layer that has a running_mean), write the layer prefix to prefix and
 * return 1: num_batches_tracked goes right after it, where PyTorch's
 * state_dict has it (weight, bias, running_mean, running_var, num_...). */
static int ends_bn_layer(const hcnn_ckpt_file *f, int k, char *prefix, size_t cap)
{
    const char *name = f->tensors[k].name;
    const char *dot = strrchr(name, '.');
    if (f->tensors[k].role != ROLE_STATE || !dot || (size_t)(dot - name) >= cap)
        return 0;
    size_t pl = (size_t)(dot - name);
    memcpy(prefix, name, pl);
    prefix[pl] = '\0';
    int has_mean = 0;
    for (int j = 0; j < f->ntensors; j++) {
        const hcnn_ckpt_tensor *t = &f->tensors[j];
        if (t->role != ROLE_STATE || strncmp(t->name, prefix, pl) || t->name[pl] != '.' ||
            strchr(t->name + pl + 1, '.'))
            continue; /* not a statistic of this layer */
        if (j > k)
            return 0;
        has_mean |= !strcmp(t->name + pl + 1, "running_mean");
    }
    return has_mean;
}

int hcnn_export_npy(const char *ckpt_path, const char *dir)
{
    hcnn_ckpt_file f;
    int rc = hcnn_ckpt_read(ckpt_path, &f);
    if (rc)
        return rc;
    unsigned char *chunk = NULL;
    tbuf manifest = {0};
    char path[PATHBUF], prefix[HCNN_TENSOR_NAME_MAX];

    /* validate every name first, so a bad checkpoint writes nothing */
    for (int k = 0; k < f.ntensors; k++) {
        const hcnn_ckpt_tensor *t = &f.tensors[k];
        if (t->role != ROLE_PARAM && t->role != ROLE_STATE)
            continue;
        if (!safe_name(t->name)) {
            rc = hcnn_error_code(HCNN_EFORMAT,
                                 "%s: tensor name '%s' cannot be used as a file name "
                                 "(expected [A-Za-z0-9_.-], not starting with '.')",
                                 ckpt_path, t->name);
            goto out;
        }
        for (int j = 0; j < k; j++)
            if ((f.tensors[j].role == ROLE_PARAM || f.tensors[j].role == ROLE_STATE) &&
                !strcmp(f.tensors[j].name, t->name)) {
                rc = hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s appears twice", ckpt_path,
                                     t->name);
                goto out;
            }
        for (int d = 0; d < t->ndim; d++)
            if (t->dims[d] < 0) {
                rc = hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s has a negative dimension",
                                     ckpt_path, t->name);
                goto out;
            }
    }
    if ((rc = hcnn_mkdir_p(dir)))
        goto out;
    chunk = malloc(CHUNK);
    if (!chunk) {
        rc = hcnn_error_code(HCNN_ENOMEM, "cannot allocate %d bytes to export %s", CHUNK,
                             ckpt_path);
        goto out;
    }
    const int64_t step = f.meta.step;
    for (int k = 0; k < f.ntensors; k++) {
        const hcnn_ckpt_tensor *t = &f.tensors[k];
        if (t->role != ROLE_PARAM && t->role != ROLE_STATE)
            continue; /* momentum is optimiser state, not part of the model */
        long long dims[4] = {0};
        int_dims(dims, t->ndim, t->dims);
        if ((rc = join_path(path, dir, t->name, ".npy")) ||
            (rc = write_npy(path, ITEM_F32, t->ndim, dims, t->data, t->count, chunk)))
            goto out;
        manifest_line(&manifest, t->name, "float32", t->ndim, t->dims);
        if (ends_bn_layer(&f, k, prefix, sizeof prefix)) {
            if ((rc = join_path(path, dir, prefix, ".num_batches_tracked.npy")) ||
                (rc = write_npy(path, ITEM_I64, 0, NULL, &step, 1, chunk)))
                goto out;
            tb_printf(&manifest, "%s.num_batches_tracked int64 scalar\n", prefix);
        }
    }
    if (manifest.failed) {
        rc = hcnn_error_code(HCNN_ENOMEM, "cannot allocate the manifest of %s", dir);
        goto out;
    }
    /* the manifest last: its presence marks a complete export */
    if ((rc = join_path(path, dir, "manifest.txt", "")) ||
        (rc = hcnn_write_file(path, manifest.p ? manifest.p : "", manifest.n)))
        goto out;
out:
    free(chunk);
    free(manifest.p);
    hcnn_ckpt_close(&f);
    return rc;
}

/* ---- reading: the header parser --------------------------------------- */

typedef struct npy_hdr {
    char descr[32];      /* printable copy, "..." appended if cut */
    int fortran;
    int ndim;
    long long dims[NPY_MAX_DIMS];
} npy_hdr;

typedef struct pcur {
    const unsigned char *p;
    size_t n, i;
} pcur;

static int peek(const pcur *c) { return c->i < c->n ? c->p[c->i] : -1; }

static void skip_ws(pcur *c)
{
    while (c->i < c->n && c->p[c->i] && strchr(" \t\r\n\f\v", c->p[c->i]))
        c->i++;
}

/* A quoted string without escapes (numpy writes none).  Copies at most
 * cap - 1 bytes, non-printable ones as '?'; *cut is set if it was longer. */
static int parse_str(pcur *c, char *out, size_t cap, int *cut)
{
    int q = peek(c);
    if (q != '\'' && q != '"')
        return -1;
    size_t o = 0;
    *cut = 0;
    for (c->i++; c->i < c->n; c->i++) {
        unsigned char ch = c->p[c->i];
        if (ch == q) {
            c->i++;
            out[o] = '\0';
            return 0;
        }
        if (ch == '\\' || ch == '\n')
            return -1;
        if (o + 1 < cap)
            out[o++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
        else
            *cut = 1;
    }
    return -1; /* unterminated */
}

/* The identifier word, not followed by more identifier characters. */
static int parse_word(pcur *c, const char *word)
{
    size_t n = strlen(word);
    if (c->n - c->i < n || memcmp(c->p + c->i, word, n))
        return -1;
    if (c->i + n < c->n) {
        unsigned char ch = c->p[c->i + n];
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
            ch == '_')
            return -1;
    }
    c->i += n;
    return 0;
}

/* A non-negative decimal integer; Python 2 wrote shapes as (3L, 4L). */
static const char *parse_dim(pcur *c, long long *v)
{
    if (peek(c) < '0' || peek(c) > '9')
        return "the shape holds something other than a non-negative integer";
    *v = 0;
    while (peek(c) >= '0' && peek(c) <= '9') {
        int d = peek(c) - '0';
        if (*v > (LLONG_MAX / 4 - d) / 10) /* /4: products stay far from overflow checks */
            return "a dimension of the shape is too large";
        *v = *v * 10 + d;
        c->i++;
    }
    if (peek(c) == 'L' || peek(c) == 'l')
        c->i++;
    return NULL;
}

static const char *parse_shape(pcur *c, npy_hdr *h)
{
    if (peek(c) != '(')
        return "'shape' is not a tuple";
    c->i++;
    int trailing_comma = 0;
    h->ndim = 0;
    for (;;) {
        skip_ws(c);
        if (peek(c) == ')') {
            c->i++;
            break;
        }
        if (h->ndim == NPY_MAX_DIMS)
            return "the shape has more than 64 dimensions";
        const char *err = parse_dim(c, &h->dims[h->ndim++]);
        if (err)
            return err;
        skip_ws(c);
        trailing_comma = peek(c) == ',';
        if (trailing_comma)
            c->i++;
        else if (peek(c) != ')')
            return "expected ',' or ')' in the shape";
    }
    if (h->ndim == 1 && !trailing_comma)
        return "'shape' (n) is a number, not a tuple (n,)";
    return NULL;
}

/* Parse the header dict; returns NULL or a description of the problem
 * (with *where the byte offset within the header). */
static const char *parse_header(const unsigned char *p, size_t n, npy_hdr *h, size_t *where)
{
    enum { K_DESCR = 1, K_FORTRAN = 2, K_SHAPE = 4 };
    pcur c = {p, n, 0};
    const char *err = NULL;
    int seen = 0, cut;
    memset(h, 0, sizeof *h);
    skip_ws(&c);
    if (peek(&c) != '{') {
        err = "not a dictionary";
        goto fail;
    }
    c.i++;
    for (;;) {
        char key[16];
        int bit;
        skip_ws(&c);
        if (peek(&c) == '}') {
            c.i++;
            break;
        }
        if (parse_str(&c, key, sizeof key, &cut)) {
            err = "expected a quoted key or '}'";
            goto fail;
        }
        skip_ws(&c);
        if (peek(&c) != ':') {
            err = "expected ':' after a key";
            goto fail;
        }
        c.i++;
        skip_ws(&c);
        if (!cut && !strcmp(key, "descr")) {
            bit = K_DESCR;
            if (peek(&c) != '\'' && peek(&c) != '"') {
                err = "'descr' is not a dtype string (structured dtypes are not supported)";
                goto fail;
            }
            if (parse_str(&c, h->descr, sizeof h->descr - 3, &cut)) {
                err = "unterminated or escaped 'descr' string";
                goto fail;
            }
            if (cut)
                strcat(h->descr, "...");
        } else if (!cut && !strcmp(key, "fortran_order")) {
            bit = K_FORTRAN;
            if (!parse_word(&c, "True"))
                h->fortran = 1;
            else if (!parse_word(&c, "False"))
                h->fortran = 0;
            else {
                err = "'fortran_order' is not True or False";
                goto fail;
            }
        } else if (!cut && !strcmp(key, "shape")) {
            bit = K_SHAPE;
            if ((err = parse_shape(&c, h)))
                goto fail;
        } else {
            err = "unknown key (expected 'descr', 'fortran_order' and 'shape')";
            goto fail;
        }
        if (seen & bit) {
            err = "duplicate key";
            goto fail;
        }
        seen |= bit;
        skip_ws(&c);
        if (peek(&c) == ',')
            c.i++;
        else if (peek(&c) != '}') {
            err = "expected ',' or '}' after a value";
            goto fail;
        }
    }
    skip_ws(&c);
    if (c.i != c.n) {
        err = "unexpected bytes after the dictionary";
        goto fail;
    }
    if (seen != (K_DESCR | K_FORTRAN | K_SHAPE)) {
        err = !(seen & K_DESCR)     ? "no 'descr' key"
              : !(seen & K_FORTRAN) ? "no 'fortran_order' key"
                                    : "no 'shape' key";
        goto fail;
    }
    return NULL;
fail:
    *where = c.i;
    return err;
}

/* ---- reading: files ---------------------------------------------------- */

/* pread until n bytes or end of file; *got is what was read. */
static int read_at(int fd, void *buf, size_t n, uint64_t off, size_t *got)
{
    unsigned char *p = buf;
    *got = 0;
    while (*got < n) {
        ssize_t r = pread(fd, p + *got, n - *got, (off_t)(off + *got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return 0;
}

typedef struct import_ctx {
    const char *dir;
    const hcnn_config *cfg;
    unsigned char *hdr;   /* NPY_HEADER_MAX bytes */
    unsigned char *chunk; /* CHUNK bytes */
} import_ctx;

/* Check dir/<t->name>.npy and fill dst (t->count floats) from it. */
static int read_npy(const import_ctx *x, const hcnn_tensor_info *t, float *dst)
{
    char path[PATHBUF];
    int rc = join_path(path, x->dir, t->name, ".npy");
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return hcnn_error_code(HCNN_EIO,
                                   "%s: no such file: tensor %s of the model configured in %s "
                                   "is missing",
                                   path, t->name, x->cfg->path);
        return hcnn_error_code(HCNN_EIO, "cannot open %s: %s", path, strerror(errno));
    }
    struct stat st;
    unsigned char pre[12];
    size_t got;
    npy_hdr h;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = hcnn_error_code(HCNN_EIO, "%s: not a regular file", path);
        goto out;
    }
    const uint64_t size = (uint64_t)st.st_size;
    if (read_at(fd, pre, sizeof pre, 0, &got)) {
        rc = hcnn_error_code(HCNN_EIO, "cannot read %s: %s", path, strerror(errno));
        goto out;
    }
    if (got >= sizeof NPY_MAGIC ? memcmp(pre, NPY_MAGIC, sizeof NPY_MAGIC) != 0
                                : memcmp(pre, NPY_MAGIC, got) != 0) {
        rc = hcnn_error_code(HCNN_EFORMAT, "%s: not a NumPy .npy file (bad magic)", path);
        goto out;
    }
    if (got < 10) {
        rc = hcnn_error_code(HCNN_EFORMAT, "%s: truncated: %zu bytes, shorter than a .npy preamble",
                             path, got);
        goto out;
    }
    const unsigned major = pre[6], minor = pre[7];
    uint64_t prelen, hlen;
    if (major == 1 && minor == 0)
        prelen = 10, hlen = get_le16(pre + 8);
    else if ((major == 2 || major == 3) && minor == 0 && got >= 12)
        prelen = 12, hlen = get_le32(pre + 8);
    else if (major == 2 || major == 3) {
        rc = hcnn_error_code(HCNN_EFORMAT, "%s: truncated in the .npy preamble", path);
        goto out;
    } else {
        rc = hcnn_error_code(HCNN_EFORMAT,
                             "%s: .npy format version %u.%u is not supported (1.0, 2.0 and "
                             "3.0 are)",
                             path, major, minor);
        goto out;
    }
    if (hlen > NPY_HEADER_MAX) {
        rc = hcnn_error_code(HCNN_EFORMAT,
                             "%s: header of %llu bytes is larger than the %d bytes supported",
                             path, (unsigned long long)hlen, NPY_HEADER_MAX);
        goto out;
    }
    if (size < prelen + hlen) {
        rc = hcnn_error_code(HCNN_EFORMAT,
                             "%s: truncated: the header claims %llu bytes, the file has %llu "
                             "bytes after the preamble",
                             path, (unsigned long long)hlen, (unsigned long long)(size - prelen));
        goto out;
    }
    if (read_at(fd, x->hdr, (size_t)hlen, prelen, &got) || got != hlen) {
        rc = hcnn_error_code(HCNN_EIO, "cannot read the header of %s", path);
        goto out;
    }
    size_t where = 0;
    const char *err = parse_header(x->hdr, (size_t)hlen, &h, &where);
    if (err) {
        rc = hcnn_error_code(HCNN_EFORMAT, "%s: malformed .npy header at byte %zu: %s", path,
                             (size_t)prelen + where, err);
        goto out;
    }
    size_t isz;
    if (!strcmp(h.descr, "<f4"))
        isz = 4;
    else if (!strcmp(h.descr, "<f8"))
        isz = 8;
    else {
        rc = hcnn_error_code(HCNN_EFORMAT,
                             "%s: dtype '%s' is not supported (expected '<f4', or '<f8' which "
                             "is converted to float32)",
                             path, h.descr);
        goto out;
    }
    if (h.fortran) {
        rc = hcnn_error_code(HCNN_EFORMAT,
                             "%s: fortran_order is True; only C-order arrays are read "
                             "(save np.ascontiguousarray(a))",
                             path);
        goto out;
    }
    int same = h.ndim == t->ndim;
    for (int d = 0; same && d < h.ndim; d++)
        same = h.dims[d] == t->dims[d];
    char found[NPY_MAX_DIMS * 24], want[128];
    long long wd[4] = {0};
    int_dims(wd, t->ndim, t->dims);
    fmt_tuple(want, sizeof want, t->ndim, wd);
    if (!same) {
        fmt_tuple(found, sizeof found, h.ndim, h.dims);
        rc = hcnn_error_code(HCNN_EFORMAT,
                             "%s: shape %s found, the model configured in %s expects %s for %s",
                             path, found, x->cfg->path, want, t->name);
        goto out;
    }
    /* exactly the data: a short file is truncated, a longer one is not an
     * array of this shape (or was written by something we do not know) */
    const uint64_t need = (uint64_t)t->count * isz, have = size - prelen - hlen;
    if (have != need) {
        rc = hcnn_error_code(HCNN_EFORMAT,
                             have < need ? "%s: truncated: %llu data bytes, shape %s of %s needs %llu"
                                         : "%s: %llu data bytes, shape %s of %s needs only %llu",
                             path, (unsigned long long)have, want, h.descr,
                             (unsigned long long)need);
        goto out;
    }
    const size_t per = CHUNK / isz;
    const uint64_t data_off = prelen + hlen;
    for (size_t i = 0; i < t->count; i += per) {
        size_t n = t->count - i < per ? t->count - i : per;
        if (read_at(fd, x->chunk, n * isz, data_off + (uint64_t)i * isz, &got) ||
            got != n * isz) {
            rc = hcnn_error_code(HCNN_EIO, "cannot read the data of %s", path);
            goto out;
        }
        for (size_t k = 0; k < n; k++) {
            if (isz == 4) {
                uint32_t u = get_le32(x->chunk + 4 * k);
                memcpy(&dst[i + k], &u, 4);
            } else {
                uint64_t u = get_le64(x->chunk + 8 * k);
                double v;
                memcpy(&v, &u, 8);
                float fv = (float)v;
                /* a finite double beyond float range would silently become inf */
                if (isfinite(v) && !isfinite(fv)) {
                    rc = hcnn_error_code(HCNN_EFORMAT,
                                         "%s: element %zu (%g) is outside the float32 range",
                                         path, i + k, v);
                    goto out;
                }
                dst[i + k] = fv;
            }
        }
    }
out:
    close(fd);
    return rc;
}

/* Every entry of dir must belong to the model: a file the model does not
 * read is most likely the sign of a different architecture (or config),
 * which would otherwise go unnoticed.  Names the alphabetically first
 * offender, so the message does not depend on readdir's order. */
static int check_entries(const char *dir, const hcnn_net *net, const char *cfg_path)
{
    DIR *d = opendir(dir);
    if (!d)
        return hcnn_error_code(HCNN_EIO, "cannot open directory %s: %s", dir, strerror(errno));
    char first[512] = "";
    int nbad = 0, first_npy = 0;
    struct dirent *e;
    for (errno = 0; (e = readdir(d)) != NULL; errno = 0) {
        const char *s = e->d_name;
        size_t len = strlen(s);
        if (!strcmp(s, ".") || !strcmp(s, "..") || !strcmp(s, "manifest.txt") ||
            ends_with(s, len, ".num_batches_tracked.npy"))
            continue;
        if (ends_with(s, len, ".npy") && hcnn_net_find_tensor(net, s, len - 4, -1))
            continue;
        if (nbad++ == 0 || strcmp(s, first) < 0) {
            snprintf(first, sizeof first, "%s", s);
            first_npy = ends_with(s, len, ".npy");
        }
    }
    int e_read = errno;
    closedir(d);
    if (e_read)
        return hcnn_error_code(HCNN_EIO, "cannot list directory %s: %s", dir, strerror(e_read));
    if (!nbad)
        return HCNN_OK;
    char more[64] = "";
    if (nbad > 1)
        snprintf(more, sizeof more, " (and %d more such file%s)", nbad - 1, nbad > 2 ? "s" : "");
    if (first_npy)
        return hcnn_error_code(HCNN_EFORMAT,
                               "%s/%s: tensor %.*s is not part of the model configured in %s%s",
                               dir, first, (int)(strlen(first) - 4), first, cfg_path, more);
    return hcnn_error_code(HCNN_EFORMAT,
                           "%s/%s is not part of the model configured in %s: the directory may "
                           "hold only the model's <tensor>.npy files, *.num_batches_tracked.npy "
                           "and manifest.txt%s",
                           dir, first, cfg_path, more);
}

int hcnn_import_npy(const char *dir, const hcnn_config *cfg, const char *out_ckpt)
{
    hcnn_net net;
    int rc = hcnn_net_create(&net, &cfg->model, hcnn_backend_cpu(), cfg->path);
    if (rc)
        return rc;
    import_ctx x = {.dir = dir, .cfg = cfg};
    float *params = NULL;
    for (int i = 0; i < net.ntensors; i++)
        if (!safe_name(net.tensors[i].name)) { /* config names are [A-Za-z0-9_.] already */
            rc = hcnn_error_code(HCNN_EINVAL, "%s: tensor name '%s' cannot be used as a file name",
                                 cfg->path, net.tensors[i].name);
            goto out;
        }
    if ((rc = check_entries(dir, &net, cfg->path)))
        goto out;
    x.hdr = malloc(NPY_HEADER_MAX + CHUNK);
    if (!x.hdr) {
        rc = hcnn_error_code(HCNN_ENOMEM, "cannot allocate %d bytes to import %s",
                             NPY_HEADER_MAX + CHUNK, dir);
        goto out;
    }
    x.chunk = x.hdr + NPY_HEADER_MAX;
    /* host buffers laid out like the network's; a fresh optimiser: zero
     * momentum, so training can start from the checkpoint */
    params = hcnn_calloc(sizeof(float) * (2 * net.nparams + net.nstate + 1), "imported model");
    if (!params) {
        rc = HCNN_ENOMEM;
        goto out;
    }
    float *momentum = params + net.nparams, *state = momentum + net.nparams;
    for (int i = 0; i < net.ntensors; i++) {
        const hcnn_tensor_info *t = &net.tensors[i];
        if ((rc = read_npy(&x, t, (t->is_state ? state : params) + t->offset)))
            goto out;
    }
    hcnn_ckpt_meta meta = {.model_hash = net.model_hash, .epoch = 0, .step = 0,
                           .seed = cfg->seed};
    snprintf(meta.model, sizeof meta.model, "%s", cfg->model.name);
    if ((rc = hcnn_mkdir_parent(out_ckpt)))
        goto out;
    rc = hcnn_ckpt_save_buffers(out_ckpt, &net, params, state, momentum, &meta);
out:
    hcnn_free(params);
    free(x.hdr);
    hcnn_net_free(&net);
    return rc;
}
