/* IDX reader (MNIST, Fashion-MNIST): raw or gzip-compressed files.
 *
 * One code path serves both (idx_in below): compression is detected by
 * content, not by the file name, and bytes after the data are refused
 * whether they follow a raw file's data or the end of a gzip stream.  The
 * header is never trusted for allocation: the payload buffer grows with the
 * bytes actually read (at most doubling), so a lying header in a small file
 * cannot make us allocate gigabytes. */
#define _POSIX_C_SOURCE 200809L
#include "hcnn/data.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "hcnn/common.h"
#include "hcnn/files.h"

#define IDX_UBYTE 0x08
#define IDX_MAX_BYTES ((uint64_t)1 << 40) /* sanity bound on a payload */
#define IDX_FIRST_CHUNK ((size_t)1 << 24)
#define IDX_DRAIN_MAX ((uint64_t)1 << 28) /* bytes read past the payload to tell corruption */

/* The file's bytes, decompressed if it is gzip'd (detected by its first
 * two bytes, 1f 8b, as zlib's gzread does).  Our own inflate loop rather
 * than gzread: gzread silently ignores whatever follows the last gzip
 * member, and trailing bytes must be refused as they are in a raw file.
 * Concatenated gzip members (valid gzip) are read one after another. */
typedef struct idx_in {
    FILE *f;
    const char *path;
    int gz;               /* gzip content */
    int z_ready;          /* inflateInit2 done */
    int member_end;       /* the current gzip member is complete */
    z_stream z;
    unsigned char in[1u << 17];
} idx_in;

/* Refill in->in keeping the unread bytes; returns 0 or -1 (reported). */
static int in_fill(idx_in *in, int *code)
{
    if (in->z.avail_in > 0 && in->z.next_in != in->in)
        memmove(in->in, in->z.next_in, in->z.avail_in);
    in->z.next_in = in->in;
    size_t got = fread(in->in + in->z.avail_in, 1, sizeof in->in - in->z.avail_in, in->f);
    if (got == 0 && ferror(in->f)) {
        *code = hcnn_error_code(HCNN_EIO, "%s: cannot read: %s", in->path, strerror(errno));
        return -1;
    }
    in->z.avail_in += (uInt)got;
    return 0;
}

/* Read up to len bytes into buf (fewer only at the end of the data);
 * returns the count, or -1 after reporting an error in *code. */
static long long in_read(idx_in *in, uint8_t *buf, size_t len, int *code)
{
    if (!in->gz) { /* what in_open read ahead, then the file */
        size_t got = in->z.avail_in < len ? in->z.avail_in : len;
        if (got)
            memcpy(buf, in->z.next_in, got);
        in->z.next_in += got, in->z.avail_in -= (uInt)got;
        if (got < len)
            got += fread(buf + got, 1, len - got, in->f);
        if (got < len && ferror(in->f)) {
            *code = hcnn_error_code(HCNN_EIO, "%s: cannot read: %s", in->path, strerror(errno));
            return -1;
        }
        return (long long)got;
    }
    size_t got = 0;
    while (got < len) {
        if (in->z.avail_in < 2 && !feof(in->f) && in_fill(in, code))
            return -1;
        if (in->member_end) {
            if (in->z.avail_in == 0)
                break; /* the end of the last member: the end of the data */
            if (in->z.avail_in < 2 || in->z.next_in[0] != 0x1f || in->z.next_in[1] != 0x8b) {
                *code = hcnn_error_code(HCNN_EFORMAT,
                                        "%s: trailing data after the end of the gzip stream "
                                        "(expected the end of the file or another gzip member)",
                                        in->path);
                return -1;
            }
            inflateReset(&in->z); /* another member follows */
            in->member_end = 0;
        }
        size_t chunk = len - got < ((size_t)1 << 30) ? len - got : (size_t)1 << 30;
        in->z.next_out = buf + got;
        in->z.avail_out = (uInt)chunk;
        int r = inflate(&in->z, Z_NO_FLUSH);
        got += chunk - in->z.avail_out;
        if (r == Z_STREAM_END) {
            in->member_end = 1;
        } else if (r == Z_BUF_ERROR) { /* no progress: more input needed */
            if (in->z.avail_in == 0 && feof(in->f)) { /* the file ends inside a member */
                *code = hcnn_error_code(HCNN_EFORMAT,
                                        "%s: truncated: the gzip stream ends unexpectedly",
                                        in->path);
                return -1;
            }
        } else if (r == Z_MEM_ERROR) {
            *code = hcnn_error_code(HCNN_ENOMEM, "%s: out of memory while decompressing",
                                    in->path);
            return -1;
        } else if (r != Z_OK) {
            *code = hcnn_error_code(HCNN_EFORMAT,
                                    "%s: the gzip stream is corrupt (zlib: %s): the file is "
                                    "damaged, fetch it again",
                                    in->path, in->z.msg ? in->z.msg : "data error");
            return -1;
        }
    }
    return (long long)got;
}

/* Opens a regular file only: a FIFO given as a data file would block the
 * run forever (hcnn_open_regular). */
static int in_open(idx_in *in, const char *path, const char *what)
{
    memset(in, 0, offsetof(idx_in, in));
    in->path = path;
    int fd;
    int code = hcnn_open_regular(path, what, HCNN_EIO, &fd);
    if (code)
        return code;
    errno = 0;
    in->f = fdopen(fd, "rb");
    if (!in->f) {
        close(fd);
        return hcnn_error_code(HCNN_EIO, "%s: cannot open: %s", path,
                               errno ? strerror(errno) : "out of memory");
    }
    if (in_fill(in, &code))
        return code;
    in->gz = in->z.avail_in >= 2 && in->in[0] == 0x1f && in->in[1] == 0x8b;
    if (in->gz) {
        if (inflateInit2(&in->z, 15 + 16) != Z_OK) /* gzip wrapper only */
            return hcnn_error_code(HCNN_ENOMEM, "%s: out of memory for decompression", path);
        in->z_ready = 1;
    }
    return HCNN_OK;
}

static void in_close(idx_in *in)
{
    if (in->z_ready)
        inflateEnd(&in->z);
    if (in->f)
        fclose(in->f);
}

/* Whether data follows the payload: 1, 0, or -1 (reported).  In a gzip
 * file the rest of the stream is read first: a stream damaged in the
 * middle often inflates to more bytes than the header announced, and its
 * real fault (zlib's data error, the CRC) shows only further on; it must
 * not be reported as trailing data.  Read at most IDX_DRAIN_MAX bytes. */
static int in_extra(idx_in *in, int *code)
{
    uint8_t buf[4096];
    long long got = in_read(in, buf, 1, code);
    if (got <= 0 || !in->gz)
        return got < 0 ? -1 : (int)got;
    for (uint64_t drained = 0; drained < IDX_DRAIN_MAX; drained += (uint64_t)got)
        if ((got = in_read(in, buf, sizeof buf, code)) <= 0)
            return got < 0 ? -1 : 1;
    return 1;
}

/* Read an unsigned-byte IDX file with `ndims` dimensions.  On success
 * *data holds exactly dims[0]*...*dims[ndims-1] bytes (hcnn_free it). */
static int idx_read(const char *path, int ndims, const char *what, uint32_t dims[3], uint8_t **data)
{
    *data = NULL;
    idx_in *f = malloc(sizeof *f);
    if (!f)
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate a read buffer for %s", path);
    int code = in_open(f, path, ndims == 3 ? "IDX image file" : "IDX label file");
    uint8_t *buf = NULL;
    if (code != HCNN_OK)
        goto out;
    uint8_t hdr[16];
    size_t hdr_len = 4 + 4 * (size_t)ndims;
    long long got = in_read(f, hdr, hdr_len, &code);
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
        got = in_read(f, buf + have, cap - have, &code);
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
    if ((got = in_extra(f, &code)) < 0)
        goto out;
    if (got > 0) {
        code = hcnn_error_code(HCNN_EFORMAT,
                               "%s: trailing data after the %llu bytes announced by the header", path,
                               (unsigned long long)total);
        goto out;
    }

out:
    in_close(f);
    free(f);
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
