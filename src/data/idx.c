/* IDX reader (MNIST, Fashion-MNIST): raw or gzip-compressed files.
 *
 * zlib's gzread reads plain files transparently, so one code path serves
 * both and compression is detected by content, not by the file name.  The
 * header is never trusted for allocation: the payload buffer grows with the
 * bytes actually read (at most doubling), so a lying header in a small file
 * cannot make us allocate gigabytes. */
#define _POSIX_C_SOURCE 200809L
#include "hcnn/data.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "hcnn/common.h"

#define IDX_UBYTE 0x08
#define IDX_MAX_BYTES ((uint64_t)1 << 40) /* sanity bound on a payload */
#define IDX_FIRST_CHUNK ((size_t)1 << 24)

/* gzread into buf, retrying short reads; returns bytes read or -1 (with
 * the error reported) on a read/decompression error. */
static long long gz_read_full(gzFile f, const char *path, uint8_t *buf, size_t len, int *code)
{
    size_t got = 0;
    while (got < len) {
        size_t chunk = len - got;
        if (chunk > (size_t)1 << 30)
            chunk = (size_t)1 << 30;
        int r = gzread(f, buf + got, (unsigned)chunk);
        if (r < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            size_t plen = strlen(path); /* zlib prefixes "<path>: " */
            if (strncmp(msg, path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0)
                msg += plen + 2;
            *code = zerr == Z_ERRNO ? HCNN_EIO : HCNN_EFORMAT;
            hcnn_error_code(*code, "%s: cannot read: %s", path,
                            zerr == Z_ERRNO ? strerror(errno) : msg);
            return -1;
        }
        if (r == 0) {
            int zerr;
            gzerror(f, &zerr);
            if (zerr == Z_BUF_ERROR) { /* end of file inside a gzip stream */
                *code = hcnn_error_code(HCNN_EFORMAT, "%s: truncated: the gzip stream ends unexpectedly",
                                        path);
                return -1;
            }
            break;
        }
        got += (size_t)r;
    }
    return (long long)got;
}

/* Read an unsigned-byte IDX file with `ndims` dimensions.  On success
 * *data holds exactly dims[0]*...*dims[ndims-1] bytes (hcnn_free it). */
static int idx_read(const char *path, int ndims, const char *what, uint32_t dims[3], uint8_t **data)
{
    *data = NULL;
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f)
        return hcnn_error_code(HCNN_EIO, "%s: cannot open: %s", path,
                               errno ? strerror(errno) : "out of memory");
    gzbuffer(f, 1u << 17);

    int code = HCNN_OK;
    uint8_t *buf = NULL;
    uint8_t hdr[16];
    size_t hdr_len = 4 + 4 * (size_t)ndims;
    long long got = gz_read_full(f, path, hdr, hdr_len, &code);
    if (got < 0)
        goto out;
    if (got == 0) {
        code = hcnn_error_code(HCNN_EFORMAT, "%s: file is empty (expected an IDX %s file)", path, what);
        goto out;
    }
    if (got >= 4) {
        uint32_t magic = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
        uint32_t want = (uint32_t)IDX_UBYTE << 8 | (uint32_t)ndims;
        if (magic != want) {
            code = hcnn_error_code(HCNN_EFORMAT,
                                   "%s: bad magic number 0x%08x (expected 0x%08x for an IDX %s file)",
                                   path, magic, want, what);
            goto out;
        }
    }
    if ((size_t)got < hdr_len) {
        code = hcnn_error_code(HCNN_EFORMAT, "%s: truncated header: %lld bytes (expected %zu)", path,
                               got, hdr_len);
        goto out;
    }

    /* dimensions: each must fit an int, the product must stay sane */
    uint64_t total = 1;
    for (int d = 0; d < ndims; d++) {
        const uint8_t *p = hdr + 4 + 4 * d;
        dims[d] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (dims[d] == 0 || dims[d] > INT_MAX) {
            code = hcnn_error_code(HCNN_EFORMAT, "%s: dimension %d is %u (expected 1..%d)", path, d,
                                   dims[d], INT_MAX);
            goto out;
        }
        if (dims[d] > IDX_MAX_BYTES / total || total * dims[d] > SIZE_MAX / 2) {
            code = hcnn_error_code(HCNN_EFORMAT, "%s: header announces more than %llu bytes of data",
                                   path, (unsigned long long)IDX_MAX_BYTES);
            goto out;
        }
        total *= dims[d]; /* checked above: no overflow */
    }
    if (ndims == 3 && (uint64_t)dims[1] * dims[2] > INT_MAX) {
        code = hcnn_error_code(HCNN_EFORMAT, "%s: image size %ux%u is too large", path, dims[1], dims[2]);
        goto out;
    }

    /* payload: grow the buffer with the data actually present */
    size_t cap = total < IDX_FIRST_CHUNK ? (size_t)total : IDX_FIRST_CHUNK;
    size_t have = 0;
    buf = hcnn_alloc(cap, path);
    if (!buf) {
        code = HCNN_ENOMEM;
        goto out;
    }
    for (;;) {
        got = gz_read_full(f, path, buf + have, cap - have, &code);
        if (got < 0)
            goto out;
        have += (size_t)got;
        if (have < cap || cap == total)
            break;
        size_t ncap = cap * 2 < total ? cap * 2 : (size_t)total;
        uint8_t *nbuf = hcnn_alloc(ncap, path);
        if (!nbuf) {
            code = HCNN_ENOMEM;
            goto out;
        }
        memcpy(nbuf, buf, have);
        hcnn_free(buf);
        buf = nbuf;
        cap = ncap;
    }
    if (have < total) {
        code = hcnn_error_code(HCNN_EFORMAT,
                               "%s: truncated: %zu bytes of %s data after the header (expected %llu)",
                               path, have, what, (unsigned long long)total);
        goto out;
    }
    uint8_t extra;
    got = gz_read_full(f, path, &extra, 1, &code);
    if (got < 0)
        goto out;
    if (got > 0) {
        code = hcnn_error_code(HCNN_EFORMAT,
                               "%s: trailing data after the %llu bytes announced by the header", path,
                               (unsigned long long)total);
        goto out;
    }

out:
    gzclose(f);
    if (code != HCNN_OK)
        hcnn_free(buf);
    else
        *data = buf;
    return code;
}

int hcnn_idx_load(hcnn_dataset *ds, const char *images_path, const char *labels_path, int classes)
{
    memset(ds, 0, sizeof *ds);
    if (classes < 1 || classes > 256)
        return hcnn_error_code(HCNN_EINVAL, "%s: %d classes requested (expected 1..256)", labels_path,
                               classes);

    uint32_t idims[3], ldims[3];
    uint8_t *images = NULL, *labels = NULL;
    int code = idx_read(images_path, 3, "image", idims, &images);
    if (code == HCNN_OK)
        code = idx_read(labels_path, 1, "label", ldims, &labels);
    if (code == HCNN_OK && idims[0] != ldims[0])
        code = hcnn_error_code(HCNN_EFORMAT, "%s: %u labels, but %s has %u images (expected equal counts)",
                               labels_path, ldims[0], images_path, idims[0]);
    for (uint32_t i = 0; code == HCNN_OK && i < ldims[0]; i++)
        if (labels[i] >= classes)
            code = hcnn_error_code(HCNN_EFORMAT,
                                   "%s: label %u at index %u is out of range (expected < %d)",
                                   labels_path, labels[i], i, classes);
    if (code != HCNN_OK) {
        hcnn_free(images);
        hcnn_free(labels);
        return code;
    }

    snprintf(ds->name, sizeof ds->name, "idx");
    snprintf(ds->source, sizeof ds->source, "%s", images_path);
    ds->n = (int)idims[0];
    ds->c = 1;
    ds->h = (int)idims[1];
    ds->w = (int)idims[2];
    ds->classes = classes;
    ds->images = images;
    ds->labels = labels;
    for (int ch = 0; ch < 3; ch++) { /* identity normalisation until the caller sets it */
        ds->mean[ch] = 0.0f;
        ds->std[ch] = 1.0f;
    }
    return HCNN_OK;
}
