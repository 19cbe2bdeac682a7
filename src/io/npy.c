/* The NumPy .npy format (numpy/lib/format.py), written in version 1.0,
 * read in 1.0, 2.0 and 3.0 (src/io/npy.h): "\x93NUMPY", major and minor
 * version bytes, the header length (little-endian uint16 for 1.0, uint32
 * for 2.0 and 3.0), then the header, a Python dict literal
 * {'descr': '<f4', 'fortran_order': False, 'shape': (6, 1, 5, 5), }
 * padded with spaces and ending in '\n', then the raw array data.
 *
 * Everything read from a file is untrusted: the header parser works on a
 * length-bounded byte buffer (never on NUL-terminated text), does not
 * recurse, and the data size is checked against the file size before any
 * data is read.  Integers are encoded and decoded byte by byte, so files
 * are little-endian whatever the host's byte order. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hcnn/common.h"
#include "hcnn/files.h"
#include "npy.h"

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

/* Python's repr of a shape tuple: "()", "(6,)", "(6, 1, 5, 5)". */
void hcnn_npy_shape_text(char *buf, size_t cap, int ndim, const long long *dims)
{
    size_t o = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", dims[d]);
    if (o < cap)
        snprintf(buf + o, cap - o, "%s)", ndim == 1 ? "," : "");
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
    hcnn_npy_shape_text(shape, sizeof shape, ndim, dims);
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

int hcnn_npy_write(const char *path, hcnn_npy_type kind, int ndim, const int *idims,
                   const void *src, size_t count)
{
    unsigned char hdr[512];
    long long dims[4] = {0};
    for (int d = 0; d < ndim && d < 4; d++)
        dims[d] = idims[d];
    const size_t hl =
        ndim <= 4 ? npy_header(hdr, sizeof hdr, kind == HCNN_NPY_F32 ? "<f4" : "<i8", ndim, dims)
                  : 0;
    if (hl == 0)
        return hcnn_error_code(HCNN_EFORMAT, "%s: shape too large for a .npy header", path);
    unsigned char *chunk = malloc(CHUNK);
    if (!chunk)
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate %d bytes to write %s", CHUNK, path);
    hcnn_afile a;
    int rc = hcnn_afile_open(&a, path);
    if (!rc)
        rc = hcnn_afile_write(&a, hdr, hl);
    /* count native items (float or int64_t; src may be unaligned),
     * converted to little-endian through chunk */
    const size_t isz = kind == HCNN_NPY_F32 ? 4 : 8, per = CHUNK / isz;
    const unsigned char *s = src;
    for (size_t i = 0; i < count && !rc; i += per) {
        const size_t n = count - i < per ? count - i : per;
        for (size_t k = 0; k < n; k++) {
            if (kind == HCNN_NPY_F32) {
                uint32_t u;
                memcpy(&u, s + (i + k) * 4, 4);
                put_le32(chunk + k * 4, u);
            } else {
                uint64_t u;
                memcpy(&u, s + (i + k) * 8, 8);
                put_le64(chunk + k * 8, u);
            }
        }
        rc = hcnn_afile_write(&a, chunk, n * isz);
    }
    free(chunk);
    return rc ? rc : hcnn_afile_commit(&a);
}

/* ---- reading: the header parser --------------------------------------- */

typedef struct npy_hdr {
    char descr[32]; /* printable copy, "..." appended if cut */
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

static int read_file(const char *path, const char *name, const char *owner, int ndim,
                     const int *dims, size_t count, float *dst, unsigned char *hdr,
                     unsigned char *chunk);

int hcnn_npy_read(const char *path, const char *name, const char *owner, int ndim, const int *dims,
                  size_t count, float *dst)
{
    unsigned char *buf = malloc(NPY_HEADER_MAX + CHUNK);
    if (!buf)
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate %d bytes to read %s",
                               NPY_HEADER_MAX + CHUNK, path);
    const int rc = read_file(path, name, owner, ndim, dims, count, dst, buf, buf + NPY_HEADER_MAX);
    free(buf);
    return rc;
}

static int read_file(const char *path, const char *name, const char *owner, int ndim,
                     const int *dims, size_t count, float *dst, unsigned char *hdr,
                     unsigned char *chunk)
{
    int rc = HCNN_OK;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT)
        return hcnn_error_code(HCNN_EIO, "%s: no such file: tensor %s of %s is missing", path,
                               name, owner);
    int fd; /* a FIFO blocked the open here: refused, as anything but a regular file */
    if ((rc = hcnn_open_regular(path, ".npy file", HCNN_EIO, &fd)))
        return rc;
    unsigned char pre[12];
    size_t got;
    npy_hdr h;
    if (fstat(fd, &st) != 0) {
        rc = hcnn_error_code(HCNN_EIO, "cannot read %s: %s", path, strerror(errno));
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
                             "%s: header of %llu bytes is larger than the %d bytes supported", path,
                             (unsigned long long)hlen, NPY_HEADER_MAX);
        goto out;
    }
    if (size < prelen + hlen) {
        rc = hcnn_error_code(HCNN_EFORMAT,
                             "%s: truncated: the header claims %llu bytes, the file has %llu "
                             "bytes after the preamble",
                             path, (unsigned long long)hlen, (unsigned long long)(size - prelen));
        goto out;
    }
    if (read_at(fd, hdr, (size_t)hlen, prelen, &got) || got != hlen) {
        rc = hcnn_error_code(HCNN_EIO, "cannot read the header of %s", path);
        goto out;
    }
    size_t where = 0;
    const char *err = parse_header(hdr, (size_t)hlen, &h, &where);
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
    int same = h.ndim == ndim;
    for (int d = 0; same && d < h.ndim; d++)
        same = h.dims[d] == dims[d];
    char found[NPY_MAX_DIMS * 24], want[128];
    long long wd[4] = {0};
    for (int d = 0; d < ndim && d < 4; d++)
        wd[d] = dims[d];
    hcnn_npy_shape_text(want, sizeof want, ndim, wd);
    if (!same) {
        hcnn_npy_shape_text(found, sizeof found, h.ndim, h.dims);
        rc = hcnn_error_code(HCNN_EFORMAT, "%s: shape %s found, %s expects %s for %s", path, found,
                             owner, want, name);
        goto out;
    }
    /* exactly the data: a short file is truncated, a longer one is not an
     * array of this shape (or was written by something we do not know) */
    const uint64_t need = (uint64_t)count * isz, have = size - prelen - hlen;
    if (have != need) {
        rc = hcnn_error_code(
            HCNN_EFORMAT,
            have < need ? "%s: truncated: %llu data bytes, shape %s of %s needs %llu"
                        : "%s: %llu data bytes, shape %s of %s needs only %llu",
            path, (unsigned long long)have, want, h.descr, (unsigned long long)need);
        goto out;
    }
    const size_t per = CHUNK / isz;
    const uint64_t data_off = prelen + hlen;
    for (size_t i = 0; i < count; i += per) {
        size_t n = count - i < per ? count - i : per;
        if (read_at(fd, chunk, n * isz, data_off + (uint64_t)i * isz, &got) || got != n * isz) {
            rc = hcnn_error_code(HCNN_EIO, "cannot read the data of %s", path);
            goto out;
        }
        for (size_t k = 0; k < n; k++) {
            if (isz == 4) {
                uint32_t u = get_le32(chunk + 4 * k);
                float fv;
                memcpy(&fv, &u, 4);
                if (!isfinite(fv)) {
                    rc = hcnn_error_code(HCNN_EFORMAT,
                                         "%s: element %zu of %s is %g (expected finite values)",
                                         path, i + k, name, (double)fv);
                    goto out;
                }
                dst[i + k] = fv;
            } else {
                uint64_t u = get_le64(chunk + 8 * k);
                double v;
                memcpy(&v, &u, 8);
                if (!isfinite(v)) {
                    rc = hcnn_error_code(HCNN_EFORMAT,
                                         "%s: element %zu of %s is %g (expected finite values)",
                                         path, i + k, name, v);
                    goto out;
                }
                float fv = (float)v;
                /* a finite double beyond float range would silently become inf */
                if (!isfinite(fv)) {
                    rc = hcnn_error_code(HCNN_EFORMAT,
                                         "%s: element %zu (%g) is outside the float32 range", path,
                                         i + k, v);
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
