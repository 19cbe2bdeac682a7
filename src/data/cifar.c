/* CIFAR-10 binary batches: records of 1 label byte followed by 3072 pixel
 * bytes (1024 R, 1024 G, 1024 B, each 32x32 row-major), i.e. already the
 * CHW layout we keep in memory.  The file size tells the record count, so
 * everything is validated before the single allocation. */
#define _POSIX_C_SOURCE 200809L
#include "hcnn/data.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hcnn/common.h"
#include "hcnn/files.h"

#define CIFAR_SIDE 32
#define CIFAR_PIXELS (3 * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_CLASSES 10

#define CIFAR_WHAT "CIFAR-10 batch file"

/* Size of a regular file in bytes, or an error code (a FIFO or a device
 * is refused by what it is: reading one would block or never end). */
static int file_size(const char *path, long long *size)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return hcnn_error_code(HCNN_EIO, "cannot open %s '%s': %s", CIFAR_WHAT, path,
                               strerror(errno));
    if (!S_ISREG(st.st_mode))
        return hcnn_error_code(HCNN_EIO, "%s '%s' is %s (expected a regular file)", CIFAR_WHAT,
                               path, hcnn_file_kind(st.st_mode));
    *size = (long long)st.st_size;
    return HCNN_OK;
}

/* Read `nrec` records of `path` into labels/images; checks every label.
 * Opened as a regular file only: it may have been replaced since pass 1. */
static int read_records(const char *path, long long nrec, uint8_t *labels, uint8_t *images)
{
    int fd;
    int code = hcnn_open_regular(path, CIFAR_WHAT, HCNN_EIO, &fd);
    if (code)
        return code;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        code = hcnn_error_code(HCNN_EIO, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return code;
    }
    for (long long i = 0; i < nrec && code == HCNN_OK; i++) {
        if (fread(labels + i, 1, 1, f) != 1 || fread(images + i * CIFAR_PIXELS, 1, CIFAR_PIXELS, f) != CIFAR_PIXELS)
            code = hcnn_error_code(ferror(f) ? HCNN_EIO : HCNN_EFORMAT,
                                   "%s: cannot read record %lld of %lld: %s", path, i, nrec,
                                   ferror(f) ? strerror(errno) : "file shrank while reading");
        else if (labels[i] >= CIFAR_CLASSES)
            code = hcnn_error_code(HCNN_EFORMAT,
                                   "%s: label %u at index %lld is out of range (expected < %d)", path,
                                   labels[i], i, CIFAR_CLASSES);
    }
    fclose(f);
    return code;
}

int hcnn_cifar10_load(hcnn_dataset *ds, const char *const *files, int nfiles)
{
    memset(ds, 0, sizeof *ds);
    if (nfiles < 1)
        return hcnn_error_code(HCNN_EINVAL, "CIFAR-10: no batch files given");

    /* pass 1: sizes -> record counts */
    long long total = 0;
    for (int i = 0; i < nfiles; i++) {
        long long size;
        int code = file_size(files[i], &size);
        if (code != HCNN_OK)
            return code;
        if (size == 0 || size % CIFAR_RECORD != 0)
            return hcnn_error_code(HCNN_EFORMAT,
                                   "%s: size %lld bytes is not a positive multiple of the %d-byte "
                                   "CIFAR-10 record (1 label + 3072 pixels)",
                                   files[i], size, CIFAR_RECORD);
        total += size / CIFAR_RECORD;
        if (total > INT_MAX)
            return hcnn_error_code(HCNN_EFORMAT, "%s: more than %d CIFAR-10 records in total", files[i],
                                   INT_MAX);
    }

    /* pass 2: read */
    uint8_t *labels = hcnn_alloc((size_t)total, "CIFAR-10 labels");
    uint8_t *images = labels ? hcnn_alloc((size_t)total * CIFAR_PIXELS, "CIFAR-10 images") : NULL;
    if (!images) {
        hcnn_free(labels);
        return HCNN_ENOMEM;
    }
    long long at = 0;
    for (int i = 0; i < nfiles; i++) {
        long long size;
        int code = file_size(files[i], &size);
        long long nrec = size / CIFAR_RECORD;
        if (code == HCNN_OK && at + nrec > total) /* grew since pass 1: stay in bounds */
            code = hcnn_error_code(HCNN_EFORMAT, "%s: file changed while reading", files[i]);
        if (code == HCNN_OK)
            code = read_records(files[i], nrec, labels + at, images + at * CIFAR_PIXELS);
        if (code != HCNN_OK) {
            hcnn_free(labels);
            hcnn_free(images);
            return code;
        }
        at += nrec;
    }

    static const float mean[3] = {0.4914f, 0.4822f, 0.4465f};
    static const float std[3] = {0.2470f, 0.2435f, 0.2616f};
    snprintf(ds->name, sizeof ds->name, "cifar10");
    snprintf(ds->source, sizeof ds->source, "%s", files[0]);
    ds->n = (int)at;
    ds->c = 3;
    ds->h = ds->w = CIFAR_SIDE;
    ds->classes = CIFAR_CLASSES;
    ds->images = images;
    ds->labels = labels;
    memcpy(ds->mean, mean, sizeof mean);
    memcpy(ds->std, std, sizeof std);
    ds->augment_default = 1;
    return HCNN_OK;
}
